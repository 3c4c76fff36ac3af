"""A real Flower deployment on one machine: a SuperLink and one SuperNode per client on 127.0.0.1, ``flwr run`` of
``examples/flower`` against them, every process stopped by its process group at the end, whatever happens: when
the launcher ends by itself, by SIGTERM, SIGINT or SIGHUP (its handlers stop the federation), or by kill -9 (a
watchdog process of its own stops every process group the launcher started once the launcher's pid is gone).

    python -m fedcompanion.flower.loopback --output results-flower [--experiment run.json] [--round-timeout 60]
    examples/flower/loopback.sh ...   (the same)

It runs the app of the repository's ``examples/flower`` (so from a checkout, with the package installed editable as
``make env`` does).

The experiment (an :class:`~fedcompanion.experiments.ExperimentConfig` as JSON; by default the one in
``examples/flower/pyproject.toml``) decides the number of SuperNodes: one per client of its task. Exit status: 0 when
the run's result was stored in ``--output`` (``ok`` or ``diverged``), 1 when the run ended without it (a lost
client makes a run partial, which is never stored; a failed ServerApp stores nothing, although ``flwr run`` itself
exits 0 then), 2 for a bad argument. Each process's log is in the ``--work`` folder; their last lines are printed
on failure.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..infra.processes import stop_tree, watch

APP = Path(__file__).resolve().parents[3] / "examples" / "flower"
BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Federation:
    """A SuperLink and ``nodes`` SuperNodes on 127.0.0.1, each in its own process group (so that stopping one
    stops what it started), with a Flower home of their own in ``folder`` (a connection named ``loopback``)."""

    def __init__(self, folder: Path, nodes: int):
        self.folder, self.nodes, self.groups = Path(folder), nodes, {}
        self.port = free_port()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.group_file = self.folder / "process-groups"
        self.group_file.write_text("")
        self.watchdog = None
        self.env = dict(os.environ, FLWR_HOME=str(self.folder / "flwr"), PATH=f"{BIN}:{os.environ['PATH']}")
        (self.folder / "flwr").mkdir(parents=True, exist_ok=True)
        (self.folder / "flwr" / "config.toml").write_text(
            f'[superlink]\ndefault = "loopback"\n[superlink.loopback]\naddress = "127.0.0.1:{self.port}"\n'
            "insecure = true\n")

    def _start(self, name: str, args: list) -> None:
        log = open(self.folder / f"{name}.log", "w")  # noqa: SIM115  (closed with the process)
        self.groups[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                             start_new_session=True)
        self._record(self.groups[name].pid)

    def _record(self, pgid: int) -> None:
        """Tell the watchdog about a process group (appended and flushed before anything else happens)."""
        with open(self.group_file, "a") as f:
            f.write(f"{pgid}\n")

    def __enter__(self) -> Federation:
        self.watchdog = watch(self.group_file)
        self._start("superlink", [BIN / "flower-superlink", "--insecure", "--host", "127.0.0.1", "--port",
                                  str(self.port), "--disable-runtime-dependency-installation"])
        self.wait_for("superlink", "Starting Flower SuperExec")
        for i in range(self.nodes):
            self._start(f"node{i}", [BIN / "flower-supernode", "--insecure", "--superlink",
                                     f"127.0.0.1:{self.port}", "--host", "127.0.0.1", "--port", str(free_port()),
                                     "--node-config", f"partition-id={i} num-partitions={self.nodes}"])
        return self

    def wait_for(self, name: str, text: str, count: int = 1, timeout: float = 60.0) -> None:
        """Wait until process ``name`` has logged ``text`` ``count`` times (TimeoutError after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while (self.folder / f"{name}.log").read_text().count(text) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not log {text!r} {count} times within {timeout} s")
            time.sleep(0.2)

    def kill(self, name: str) -> None:
        """Stop process ``name`` and everything it started (its process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.groups[name].pid, signal.SIGKILL)
        self.groups[name].wait(timeout=10)

    def kill_all(self) -> None:
        """Stop every process of the federation, and what each started (in process groups of their own too)."""
        stop_tree(int(line) for line in self.group_file.read_text().split())
        for name in list(self.groups):
            self.kill(name)

    def __exit__(self, *exc) -> None:
        self.kill_all()
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait(timeout=10)

    def run(self, config, output: Path, round_timeout: float = 60.0, connect_timeout: float = 120.0,
            app: Path = APP) -> subprocess.Popen:
        """Start ``flwr run`` of ``app`` for ``config`` (its results stored in ``output``); its output is piped."""
        from .core import run_config_of

        overrides = run_config_of(config, output=str(output), **{"round-timeout": round_timeout,
                                                                 "connect-timeout": connect_timeout})
        (self.folder / "run.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in overrides.items()))
        runner = subprocess.Popen([BIN / "flwr", "run", str(app), "loopback", "--run-config",
                                   str(self.folder / "run.toml"), "--stream"], env=self.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self._record(runner.pid)
        return runner

    def logs(self, lines: int = 40) -> str:
        """The last ``lines`` lines of every process's log."""
        return "\n".join(f"--- {path.name} (last lines)\n" + "\n".join(path.read_text().splitlines()[-lines:])
                         for path in sorted(self.folder.glob("*.log")))


def default_experiment(app: Path = APP) -> str:
    """The experiment JSON of the app's ``pyproject.toml`` (its ``experiment = '...'`` line; read without tomllib,
    which Python 3.10 lacks)."""
    match = re.search(r"^experiment\s*=\s*'(.*)'\s*$", (app / "pyproject.toml").read_text(), re.M)
    if match is None:
        raise OSError(f"{app / 'pyproject.toml'} has no experiment = '...' line")
    return match[1]


def _stop_on_signal(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); returns the exit status."""
    from ..experiments import ExperimentConfig, build_task, load_result
    from ..infra.logs import configure as configure_logging
    from ..validation import ConfigError

    configure_logging()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="", help="a file holding the experiment's JSON (default: the app's)")
    parser.add_argument("--output", default="results-flower", help="the results folder the run is stored in")
    parser.add_argument("--round-timeout", type=float, default=300.0, help="seconds a round waits for a client")
    parser.add_argument("--connect-timeout", type=float, default=120.0, help="seconds to wait for every SuperNode")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before the whole run is stopped")
    parser.add_argument("--nodes", type=int, default=None, help="SuperNodes to start (default: the task's clients)")
    parser.add_argument("--work", default="", help="folder for the processes' logs (default: a temporary one)")
    args = parser.parse_args(argv)
    try:
        text = Path(args.experiment).read_text() if args.experiment else default_experiment()
        config = ExperimentConfig(**json.loads(text)).validate()
        nodes = args.nodes if args.nodes is not None else build_task(config).num_clients
        if nodes < 1:
            raise ConfigError(f"--nodes must be >= 1, got {nodes}")
    except (ConfigError, OSError, json.JSONDecodeError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    output = Path(args.output).resolve()
    # unwind, so that the federation is stopped; SIGINT too, even where it was inherited ignored (a background job
    # of a non-interactive shell starts with SIGINT ignored, and Python then keeps it so)
    for stop in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(stop, _stop_on_signal)
    work = Path(args.work or tempfile.mkdtemp(prefix="fedcompanion-loopback-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"starting a SuperLink and {nodes} SuperNode(s) on 127.0.0.1 (logs in {work})", flush=True)
    with Federation(work, nodes) as federation:
        runner = federation.run(config, output, args.round_timeout, args.connect_timeout)
        try:
            log, _ = runner.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(runner.pid, signal.SIGKILL)
            log = runner.communicate()[0] + f"\n(stopped after {args.timeout:.0f} s)"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)  # anything flwr run left behind
    print(log, end="" if log.endswith("\n") else "\n")
    if (output / f"{config.hash()}.json").exists():
        status = load_result(config, output)[1]["status"]
        print(f"stored {config.label or config.hash()} in {output} (status {status})")
        return 0
    print(f"error: the run ended without a stored result (flwr run exited {runner.returncode})\n{federation.logs()}",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
