"""fedcompanion's algorithms on Flower: a simulation and a real (loopback) deployment reproduce the in-process
run; what crosses the wire is what the algorithm uploads; a lost SuperNode never hangs the run."""
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

from fedcompanion.experiments import ExperimentConfig, load_result, run_config  # noqa: E402
from fedcompanion.flower import run_config_of, simulate  # noqa: E402
from fedcompanion.flower.core import client_step  # noqa: E402

pytestmark = pytest.mark.flower
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ROUND_TIMEOUT = 60.0  # seconds a deployed round waits for its clients in the loopback test


def _config(algorithm, clients=4, rounds=3, m=2, **hp):
    return ExperimentConfig(task="least_squares", task_args=dict(num_clients=clients, dim=5), algorithm=algorithm,
                            hyperparameters=hp, rounds=rounds, clients_per_round=m, lr=0.05,
                            local=dict(steps=3, batch_size=8), per_client_metrics=False, seed=7, label=algorithm)


def _close(flower, in_process):
    return float((flower.params - in_process.params).norm() / in_process.params.norm()) < 1e-6


def test_simulation_reproduces_the_in_process_runs():
    """FedAvg, FedVRA and SCAFFOLD on 4 simulated SuperNodes (one simulation, Ray started once)."""
    configs = [_config("fedavg"), _config("fedvra", gamma=0.5), _config("scaffold")]
    results = simulate(configs)
    for config, flower in zip(configs, results):
        reference = run_config(config)
        assert _close(flower, reference), config.algorithm
        assert flower.metric("train_loss").tolist() == pytest.approx(reference.metric("train_loss").tolist(),
                                                                     rel=1e-9)
        # the accounting is the engine's; the bytes are what Flower serialised for the same messages
        floats = flower.metric("uploaded_floats")
        assert floats.equals(reference.metric("uploaded_floats"))
        sent = flower.metric("uploaded_bytes").iloc[-1]
        assert sent >= 8 * floats.iloc[-1], "at least the float64 payload"


def test_message_bytes_count_the_content_not_the_envelope():
    """Two messages with the same content weigh the same, whatever their run ids (random, of varying encoded
    length): the byte counts in a figure must not change from one run to the next."""
    from flwr.app import ArrayRecord, RecordDict
    from flwr.app.message.message import make_message
    from flwr.app.metadata import Metadata

    from fedcompanion.flower import message_bytes

    def message(run_id: int):
        metadata = Metadata(run_id, "", 1, 2, "", "0", 0.0, 60.0, "train")
        return make_message(metadata, RecordDict({"x": ArrayRecord(torch_state_dict={"x": torch.arange(10.0)})}))

    small, large = message(1), message(2**62 + 12345)
    assert len(small.deflate()) < len(large.deflate())  # the envelopes differ
    assert message_bytes(small) == message_bytes(large) >= 40  # the content, at least the float32 payload


def test_uploads_are_exactly_what_the_algorithm_uploads():
    """FedVRA sends one vector and one scalar; its dual stays in the client's own state."""
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    config = _config("fedvra", gamma=0.5)
    experiment = json.dumps(config.__dict__)
    x = torch.zeros(5, dtype=torch.float64)
    content = RecordDict({"broadcast": ArrayRecord(torch_state_dict={"x": x}),
                          "round": ConfigRecord({"experiment": "k", "round": 0, "steps": 3, "prob": 0.5})})
    own, uploads = client_step(experiment, 1, None, content)
    assert set(uploads) == {"delta", "a"} and uploads["delta"].shape == (5,) and uploads["a"].shape == ()
    assert set(own) == {"lam", "gamma"} and not torch.equal(own["lam"], torch.zeros(5, dtype=torch.float64))


def test_replies_are_matched_to_their_messages_not_to_their_senders():
    """The SuperLink answers for a node it has found gone, with an error reply from itself (node id 1): the server
    must attribute that reply to the lost node's message (keying replies by sender crashed the ServerApp)."""
    from types import SimpleNamespace

    from fedcompanion.flower.core import _exchange

    def reply(to, sender, error):
        return SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=to.metadata.message_id,
                                                        src_node_id=sender), error=error)

    class SuperLinkAnsweringForTheLostNode:
        def send_and_receive(self, messages, timeout):
            for k, message in enumerate(messages):  # what Grid.push_messages does
                message.metadata.message_id = f"m{k}"
            live, lost = messages
            return [reply(lost, 1, "missed its heartbeats"), reply(live, live.metadata.dst_node_id, None)]

    messages = {client: SimpleNamespace(metadata=SimpleNamespace(dst_node_id=node))
                for client, node in ((0, 5), (1, 9))}
    replies = _exchange(SuperLinkAnsweringForTheLostNode(), messages, timeout=1.0)
    assert replies[0].error is None and replies[1].error == "missed its heartbeats"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Federation:
    """A SuperLink and SuperNodes on 127.0.0.1, each in its own process group, always torn down."""

    def __init__(self, folder: Path, nodes: int):
        self.folder, self.nodes, self.groups = folder, nodes, {}
        self.port = _free_port()
        self.env = dict(os.environ, FLWR_HOME=str(folder / "flwr"), PATH=f"{BIN}:{os.environ['PATH']}")
        (folder / "flwr").mkdir()
        (folder / "flwr" / "config.toml").write_text(
            f'[superlink]\ndefault = "loopback"\n[superlink.loopback]\naddress = "127.0.0.1:{self.port}"\n'
            "insecure = true\n")

    def _start(self, name, args):
        log = open(self.folder / f"{name}.log", "w")  # noqa: SIM115  (closed with the process)
        self.groups[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                             start_new_session=True)

    def __enter__(self):
        self._start("superlink", [BIN / "flower-superlink", "--insecure", "--host", "127.0.0.1", "--port",
                                  str(self.port), "--disable-runtime-dependency-installation"])
        self.wait_for("superlink", "Starting Flower SuperExec")
        for i in range(self.nodes):
            self._start(f"node{i}", [BIN / "flower-supernode", "--insecure", "--superlink",
                                     f"127.0.0.1:{self.port}", "--host", "127.0.0.1", "--port", str(_free_port()),
                                     "--node-config", f"partition-id={i} num-partitions={self.nodes}"])
        return self

    def wait_for(self, name, text, count=1, timeout=60.0):
        deadline = time.monotonic() + timeout
        while (self.folder / f"{name}.log").read_text().count(text) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not log {text!r} {count} times within {timeout} s")
            time.sleep(0.2)

    def kill(self, name):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.groups[name].pid, signal.SIGKILL)
        self.groups[name].wait(timeout=10)

    def kill_all(self):
        for name in list(self.groups):
            self.kill(name)

    def __exit__(self, *exc):
        self.kill_all()

    def run(self, config, output: Path, round_timeout=60.0, timeout=150.0):
        overrides = run_config_of(config, output=str(output), **{"round-timeout": round_timeout})
        (self.folder / "run.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in overrides.items()))
        return subprocess.Popen([BIN / "flwr", "run", str(ROOT / "examples" / "flower"), "loopback",
                                 "--run-config", str(self.folder / "run.toml"), "--stream"],
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

    def wait_result(self, config, output: Path, runner: subprocess.Popen, timeout: float):
        """The run's saved result, or an error carrying every log when the run ends without one or times out."""
        deadline = time.monotonic() + timeout
        while not (output / f"{config.hash()}.json").exists():
            ended = runner.poll() is not None
            if ended or time.monotonic() > deadline:
                time.sleep(1.0)  # let a result written just now land
                if (output / f"{config.hash()}.json").exists():
                    break
                self.kill_all()
                logs = "\n".join(f"--- {path.name} (last lines)\n" + "\n".join(path.read_text().splitlines()[-40:])
                                  for path in sorted(self.folder.glob("*.log")))
                reason = f"flwr run exited with {runner.returncode}" if ended else f"no result within {timeout} s"
                raise AssertionError(f"{reason}\n--- flwr run\n{runner.communicate()[0]}\n{logs}")
            time.sleep(0.5)
        return load_result(config, output)


def _no_flower_processes_left(federation):
    for process in federation.groups.values():
        assert process.poll() is not None


def test_loopback_deployment_reproduces_the_in_process_run_and_survives_a_killed_node(tmp_path):
    """A SuperLink and two SuperNodes on 127.0.0.1: FedVRA for 3 rounds gives the in-process numbers; then, in a
    second run, SuperNode 1 is killed once it has received round 1: the server names it (by the round timeout or
    the SuperLink's error reply) and finishes with the other client. Every process is torn down, whatever
    happens."""
    config = _config("fedvra", clients=2, m=None, gamma=0.5)
    survivor = _config("fedavg", clients=2, m=None, rounds=3)
    with Federation(tmp_path, nodes=2) as federation:
        runner = federation.run(config, tmp_path / "out")
        history, meta = federation.wait_result(config, tmp_path / "out", runner, timeout=300)
        runner.communicate(timeout=30)
        # Every message starts a ClientApp process (about 6 s of imports here), so the round timeout leaves room
        # for a slow machine; the dead node costs one timeout (or two missed heartbeats, whichever comes first).
        seen = (tmp_path / "node1.log").read_text().count("ROUND 1]")
        runner = federation.run(survivor, tmp_path / "out", round_timeout=ROUND_TIMEOUT)
        federation.wait_for("node1", "ROUND 1]", count=seen + 1, timeout=300)  # round 0 fully answered
        federation.kill("node1")
        survived, survived_meta = federation.wait_result(survivor, tmp_path / "out", runner, timeout=400)
        log, _ = runner.communicate(timeout=30)
    _no_flower_processes_left(federation)
    reference = run_config(config)
    loss = history[(history.metric == "train_loss") & (history.client == -1)].value.tolist()
    assert meta["status"] == "ok" and loss == pytest.approx(reference.metric("train_loss").tolist(), rel=1e-9)
    assert re.search(rf"round 1: node \d+ \(client 1\) (did not answer within {ROUND_TIMEOUT:.0f} s|failed: )"
                     r".*; going on without it", log), log
    assert survived_meta["status"] == "ok" and survived["round"].max() == 3
