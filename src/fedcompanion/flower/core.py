"""The Flower adapter: messages, the client's step, the server's loop, simulation."""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import logging.handlers
import os
import time
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from ..algorithms import make
from ..driver import Recorder, Schedule, client_work, initial_state, run_rounds
from ..engine import LocalWork
from ..experiments import METRICS, ExperimentConfig, build_task
from ..infra.logs import LOGGER
from ..infra.logs import configure as configure_logging
from ..infra.processes import descendants, stop_tree
from ..protocol import ActiveClients, RoundInfo, RunResult, State, Watch, floats
from ..validation import ConfigError

log = logging.getLogger(f"{LOGGER}.flower")
STATE_KEY = "fedcompanion"  # the client's own state in Flower's context.state


# ------------------------------------------------------------------ configs and messages
def run_config_of(config: ExperimentConfig, **extra) -> dict:
    """The Flower run config carrying an experiment (``experiment``: its JSON) and extra keys."""
    return {"experiment": json.dumps(dataclasses.asdict(config)), **extra}


def config_from_run_config(run_config) -> ExperimentConfig:
    """The ExperimentConfig carried by a Flower run config's ``experiment`` entry (validated)."""
    if "experiment" not in run_config:
        raise ConfigError("the Flower run config has no 'experiment' entry (the experiment's JSON)")
    return ExperimentConfig(**json.loads(run_config["experiment"])).validate()


def message_bytes(message: Message) -> int:
    """Bytes Flower serialises for a message's content: every object of its tree (records, arrays, chunks) but
    the envelope, whose metadata (random run and group ids, timestamps) changes size from one run to the next."""
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values() if obj is not message)


def _record(tensors: dict[str, torch.Tensor]) -> ArrayRecord:
    return ArrayRecord(torch_state_dict={k: v.detach().cpu().contiguous() for k, v in tensors.items()})


def _tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return dict(record.to_torch_state_dict())


@functools.lru_cache(maxsize=2)
def _setup(experiment_json: str):
    """(config, task, algorithm, local work, initial state) of an experiment, built once per process."""
    config = ExperimentConfig(**json.loads(experiment_json)).validate()
    task = build_task(config)
    algorithm = make(config.algorithm, **config.hyperparameters)
    local = LocalWork(**config.local)
    x0 = algorithm.initial_model(task, config.seed)
    return config, task, algorithm, local, x0


# ------------------------------------------------------------------ the client
def client_step(experiment_json: str, partition: int, own: dict | None, content: RecordDict):
    """A client's round: returns (its new own state, its uploads). ``own`` is None on its first round."""
    config, task, algorithm, local, x0 = _setup(experiment_json)
    if own is None:  # the client computes its initial part itself (the same code, the same seed)
        own = initial_state(task, algorithm, x0, local).client(partition)
    received = _tensors(content["broadcast"])
    r, steps, prob = (content["round"][k] for k in ("round", "steps", "prob"))
    probs = torch.zeros(task.num_clients, dtype=task.dtype)
    probs[partition] = prob  # the server sends this client's own inclusion probability only
    me = torch.tensor([partition])
    info = RoundInfo(int(r), me, probs, torch.tensor([int(steps)]), config.lr, task.weights.to(task.dtype))
    clients = ActiveClients({name: {partition: value} for name, value in own.items()}, [partition])
    new, uploads, _ = client_work(task, algorithm, received, clients, info, engine=config.engine, seed=config.seed,
                                  local=local)
    own = {**own, **{name: values[0] for name, values in new.items()}}
    return own, {name: values[0] for name, values in uploads.items()}


def client_app() -> ClientApp:
    """The ClientApp: each SuperNode is the client whose index is its ``partition-id`` node config. The server
    announces each experiment (its config) in a query message; the node keeps it, and its own part of the
    algorithm's state, in ``context.state``, keyed by the experiment's hash."""
    app = ClientApp()

    @app.query()
    def query(message: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        experiment, key = message.content["experiment"]["json"], message.content["experiment"]["key"]
        _, task, *_ = _setup(experiment)
        if not 0 <= partition < task.num_clients:
            raise ConfigError(f"partition-id {partition} is outside the task's {task.num_clients} clients")
        context.state[f"experiment-{key}"] = ConfigRecord({"json": experiment})
        reply = ConfigRecord({"partition-id": partition, "num-examples": int(task.client_sizes[partition])})
        return Message(RecordDict({"node": reply}), reply_to=message)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        key = message.content["round"]["experiment"]
        experiment = context.state[f"experiment-{key}"]["json"]
        stored = context.state.get(f"state-{key}")
        own, uploads = client_step(experiment, partition, None if stored is None else _tensors(stored),
                                   message.content)
        if own:
            context.state[f"state-{key}"] = _record(own)  # stays on this node, never sent
        return Message(RecordDict({"uploads": _record(uploads)}), reply_to=message)

    return app


# ------------------------------------------------------------------ the server
def _exchange(grid: Grid, messages: dict, timeout: float) -> dict:
    """Send ``{key: message}`` and return ``{key: reply}`` for the replies that came within ``timeout`` s.
    Replies are matched to the message they answer, never to their sender: the error reply for a node the
    SuperLink has found gone comes from the SuperLink itself."""
    sent = list(messages.items())
    replies = grid.send_and_receive([message for _, message in sent], timeout=timeout)
    key_of = {message.metadata.message_id: key for key, message in sent}
    return {key_of[reply.metadata.reply_to_message_id]: reply for reply in replies}


def _partitions(grid: Grid, num_clients: int, timeout: float, experiment: str, key: str) -> dict[int, int]:
    """Announce the experiment to every connected node (waiting up to ``timeout`` s for all N) and map
    partition-id -> node id from their answers."""
    deadline = time.monotonic() + timeout
    while len(list(grid.get_node_ids())) < num_clients:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(list(grid.get_node_ids()))} of the task's {num_clients} clients "
                               f"connected within {timeout:.0f} s")
        time.sleep(0.5)
    announcement = RecordDict({"experiment": ConfigRecord({"json": experiment, "key": key})})
    queries = {node: Message(announcement, dst_node_id=node, message_type=MessageType.QUERY)
               for node in grid.get_node_ids()}
    mapping = {}
    for node, reply in _exchange(grid, queries, timeout).items():
        if reply.has_error():
            raise RuntimeError(f"node {node} failed to report its partition: {reply.error.reason}")
        mapping[int(reply.content["node"]["partition-id"])] = node
    missing = sorted(set(range(num_clients)) - set(mapping))
    if missing:
        raise RuntimeError(f"no node holds partitions {missing} (each SuperNode needs a distinct partition-id)")
    return mapping


def serve(grid: Grid, config: ExperimentConfig, *, round_timeout: float = 300.0, connect_timeout: float = 120.0,
          evaluate: bool = True) -> RunResult:
    """The ServerApp's loop for one experiment; returns what ``fc.run`` returns, with the bytes Flower
    serialised (``uploaded_bytes``, ``downloaded_bytes``) beside the floats counted from the messages.

    A client that does not answer within ``round_timeout`` seconds (or answers with an error) is named in a
    warning and left out of that round and of later ones; the run goes on with the others, and stops with an
    error naming the lost nodes once none is left. Such a run is not the config's run: its status is ``partial``,
    its history counts the lost clients (``clients_lost``, at every evaluation) and it is never stored in a cache.
    A round in which no client answers (or none was sampled) runs the server step on no uploads, as in-process (an
    algorithm whose server step has terms without client sums, such as FedVRA's -beta lambda, still takes them)."""
    config = config.validate()
    experiment = json.dumps(dataclasses.asdict(config))
    _, task, algorithm, local, x0 = _setup(experiment)
    schedule = Schedule(task, config.sampling, config.clients_per_round, local, config.seed, config.lr)
    initial = initial_state(task, algorithm, x0, local)
    server = initial.server
    extra = {name: METRICS[name](task, config) for name in config.metrics}
    recorder = Recorder(task, extra, config.per_client_metrics, config.eval_train)
    comm = {"uploaded_floats": 0, "downloaded_floats": 0, "uploaded_bytes": 0, "downloaded_bytes": 0,
            "clients_lost": 0}
    start = time.perf_counter()
    nodes = _partitions(grid, task.num_clients, connect_timeout, experiment, config.hash())
    lost: dict[int, str] = {}

    def play(r: int) -> Watch:
        nonlocal server
        info = schedule.info(r)
        received = algorithm.broadcast(State(server))
        record = _record(received)
        messages = {}
        for k, i in enumerate(info.clients.tolist()):
            if i in lost:
                continue
            round_record = ConfigRecord({"experiment": config.hash(), "round": r, "steps": int(info.steps[k]),
                                         "prob": float(info.probs[i])})
            content = RecordDict({"broadcast": record, "round": round_record})
            messages[i] = Message(content, dst_node_id=nodes[i], message_type=MessageType.TRAIN, group_id=str(r))
        uploads_by_client = {}
        for i, reply in _exchange(grid, messages, round_timeout).items():
            if reply.has_error():
                lost[i] = f"node {nodes[i]} (client {i}) failed: {reply.error.reason}"
                continue
            uploads_by_client[i] = _tensors(reply.content["uploads"])
            comm["uploaded_bytes"] += message_bytes(reply)
        for i in sorted(set(messages) - set(uploads_by_client) - set(lost)):
            lost[i] = f"node {nodes[i]} (client {i}) did not answer within {round_timeout:.0f} s"
        for i in sorted(set(messages) & set(lost)):
            log.warning("round %d: %s; going on without it", r, lost[i])
        comm["downloaded_bytes"] += sum(message_bytes(messages[i]) for i in messages)
        comm["clients_lost"] = len(lost)
        if len(lost) == task.num_clients:
            raise RuntimeError("every client is lost: " + "; ".join(lost.values()))
        answered = sorted(uploads_by_client)
        keep = [k for k, i in enumerate(info.clients.tolist()) if i in uploads_by_client]
        info = dataclasses.replace(info, clients=torch.tensor(answered, dtype=torch.long), steps=info.steps[keep])
        if answered:
            uploads = {name: torch.stack([uploads_by_client[i][name] for i in answered]).to(task.device)
                       for name in uploads_by_client[answered[0]]}
        else:  # an empty round's uploads (no rows), made here as in-process: the server step still runs
            nobody = State(server, initial.clients).active(info.clients)
            uploads = client_work(task, algorithm, received, nobody, info, engine=config.engine, seed=config.seed,
                                  local=local)[1]
        server = algorithm.server_update(server, info, uploads)
        comm["uploaded_floats"] += floats(uploads)
        comm["downloaded_floats"] += len(messages) * floats(received)
        return algorithm.watch(task, State(server))  # (the server's part only: the clients' is theirs)

    def evaluated(r: int, compute_time: float) -> float | None:
        if not evaluate:  # the seconds alone
            recorder.timing.append((r, compute_time))
            return None
        return recorder.evaluate(r, server.x, comm, compute_time)

    status, diverged_round = run_rounds(config.rounds, play, evaluated, eval_every=config.eval_every,
                                        evaluate_start=evaluate, divergence_factor=config.divergence_factor,
                                        tol=config.tol, name=algorithm.name)
    if lost and status == "ok":
        status = "partial"
        log.warning("%s: %d client(s) lost (%s): the run is partial", config.label or config.hash(), len(lost),
                    "; ".join(lost.values()))
    return recorder.result(server.x, status, diverged_round, time.perf_counter() - start)


def server_app(configs: list[ExperimentConfig] | None = None, sink: list | None = None,
               evaluate: bool = True) -> ServerApp:
    """The ServerApp: runs each experiment of ``configs`` in turn on the connected nodes (with ``configs`` None,
    the one in the run config's ``experiment`` entry: ``flwr run``). Results are appended to ``sink`` and, if
    the run config has an ``output`` folder, stored in the results cache there
    (:func:`fedcompanion.experiments.store`)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        configure_logging()
        timeout = float(context.run_config.get("round-timeout", 300.0))
        connect = float(context.run_config.get("connect-timeout", 120.0))
        output = context.run_config.get("output", "")
        for config in configs or [config_from_run_config(context.run_config)]:
            result = serve(grid, config, round_timeout=timeout, connect_timeout=connect, evaluate=evaluate)
            if sink is not None:
                sink.append(result)
            if output and result.status == "partial":
                log.warning("not stored in %s: %s lost clients, so it is not the run its config describes", output,
                            config.label or config.hash())
            elif output:
                from ..experiments import store

                store(config, result, Path(output))
                log.info("stored the results of %s in %s", config.label or config.hash(), output)

    return app


def simulate(configs: ExperimentConfig | list[ExperimentConfig], *, evaluate: bool = True,
             cpus_per_client: float = 1.0, verbose: bool = False):
    """Run one experiment (or several, one after another, on one simulated federation: Ray starts once) on
    Flower's simulation engine, one virtual SuperNode per client; returns the ``RunResult`` (or the list)."""
    from flwr.simulation import run_simulation

    single = isinstance(configs, ExperimentConfig)
    configs = [c.validate() for c in ([configs] if single else configs)]
    sizes = {_setup(json.dumps(dataclasses.asdict(c)))[1].num_clients for c in configs}
    if len(sizes) != 1:
        raise ConfigError(f"experiments simulated together need the same number of clients, got {sorted(sizes)}")
    # no GPU is asked for: take Ray's coming behaviour for num_gpus=0 now, and not its FutureWarning on every run
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    nodes = sizes.pop()

    def once(sink: list) -> None:
        run_simulation(server_app=server_app(configs, sink, evaluate), client_app=client_app(), num_supernodes=nodes,
                       backend_config={"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0},
                                       "init_args": {"include_dashboard": False}},
                       verbose_logging=verbose)

    sink = until_results(once)
    if len(sink) != len(configs):
        raise RuntimeError("the Flower simulation ended without every result (see the log above)")
    return sink[0] if single else sink


START_ATTEMPTS = 3  # Ray waits a fixed 30 s for its node to start: a busy laptop can miss it


def until_results(once, attempts: int = START_ATTEMPTS) -> list:
    """``once(sink)`` (one simulation, appending its results to ``sink``) again, with a new sink, up to ``attempts``
    times, while it ends with nothing in the sink: Ray's start-up timed out on a busy machine, and Flower either logs
    the error and returns or raises it ("Simulation Runtime crashed"). A simulation that gave some results before it
    ended or failed ran after Ray started: it is not run again, and its error, if any, is raised. Flower's log of an
    attempt that is started again is dropped (its tracebacks of Ray's start-up, the builder's paths in them, would
    otherwise show in a notebook's page); our warning says why it was started again. The processes a failed attempt
    left running (a node that timed out is not stopped by Ray: its GCS server and monitors ran on, taking the CPU the
    next attempt's start-up needed) are stopped before the next one."""
    flwr_log = logging.getLogger("flwr")
    for attempt in range(1, attempts + 1):
        sink: list = []
        error = None
        running = descendants([os.getpid()])
        held = logging.handlers.BufferingHandler(capacity=1 << 30)  # Flower's log of this attempt, shown if it counts
        handlers, propagate = flwr_log.handlers, flwr_log.propagate
        flwr_log.handlers, flwr_log.propagate = [held], False
        try:
            once(sink)
        except Exception as raised:
            error = raised
        finally:
            flwr_log.handlers, flwr_log.propagate = handlers, propagate
        if sink or attempt == attempts:
            for record in held.buffer:
                flwr_log.handle(record)
            if error is not None:
                raise error
            return sink
        why = ("it returned nothing" if error is None
               else f"it failed before any result ({type(error).__name__}: {error})")
        import ray

        if ray.is_initialized():
            ray.shutdown()
        stop_tree(descendants([os.getpid()]) - running)
        logging.getLogger(__name__).warning("the Flower simulation is started again, %s (Ray's start-up timed out on "
                                            "a busy machine?): attempt %d of %d", why, attempt + 1, attempts)
    raise ValueError(f"attempts must be at least 1, got {attempts}")
