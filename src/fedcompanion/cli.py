"""The ``fedcompanion`` command line: run experiments from a YAML file, list what exists, rebuild the report.

    fedcompanion run config.yaml [--results results] [--jobs 2] [--refresh]
    fedcompanion list
    fedcompanion report [--results results] [--output REPRODUCTION.md] [--readme README.md]
    fedcompanion arena [--tasks qsar ...] [--algorithms FedAvg FedVRA ...] [--seeds 0 1 2 3 4] [--figure arena.png]

A config file holds one experiment (the fields of :class:`~fedcompanion.experiments.ExperimentConfig`), or a sweep::

    base:                      # fields shared by every run
      task: dataset
      task_args: {dataset: mnist, num_clients: 50, partition_scheme: dirichlet, alpha: 0.1}
      rounds: 50
    grid:                      # every combination of these values (dotted keys reach into dicts)
      algorithm: [fedavg, fedvra]
      lr: [0.05, 0.1]
      seed: [0, 1]

or ``experiments:`` with a list of experiments. Unknown keys are errors that name the key and list the allowed ones.
Any of these may add ``plugins:``, a list of Python files (relative to the YAML file) or module names imported first,
so that the models, losses, samplings, tasks or algorithms they register can be named by the experiments (a sweep's
worker processes import them too).
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib
import inspect
import itertools
import re
import sys
from pathlib import Path

from .infra.atomic import DamagedFile
from .infra.logs import configure as configure_logging
from .validation import ConfigError

TOP_KEYS = ("base", "grid", "experiments")
PLUGINS = "plugins"  # the files or modules whose registrations a file's experiments name, imported first


def import_plugins(data, folder: Path):
    """Import the document's ``plugins`` (each a ``.py`` file, relative to ``folder``, whose folder joins
    ``sys.path`` so that worker processes import it by name too; or a module name) and return the document without
    that key."""
    if not isinstance(data, dict) or PLUGINS not in data:
        return data
    plugins = data[PLUGINS]
    if not isinstance(plugins, list) or not all(isinstance(p, str) and p for p in plugins):
        raise ConfigError(f"'{PLUGINS}' must be a list of Python files or module names, got {plugins!r}")
    for plugin in plugins:
        name = plugin
        if plugin.endswith(".py"):
            file = (folder / plugin).resolve()
            if not file.is_file():
                raise ConfigError(f"plugin {plugin!r}: there is no file {file}")
            if str(file.parent) not in sys.path:
                sys.path.insert(0, str(file.parent))
            name = file.stem
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ConfigError(f"plugin {plugin!r} cannot be imported: {exc}") from None
    return {k: v for k, v in data.items() if k != PLUGINS}


def _fields() -> list[str]:
    from .experiments import ExperimentConfig

    return [f.name for f in dataclasses.fields(ExperimentConfig)]


def _check_keys(entry: dict, where: str) -> None:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a mapping of experiment fields, got {type(entry).__name__}")
    unknown = sorted(set(entry) - set(_fields()))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} in {where}; allowed keys: {_fields()}")


def _set(entry: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    target = entry
    for key in path:
        target = target.setdefault(key, {})
        if not isinstance(target, dict):
            raise ConfigError(f"grid key {dotted!r}: {key!r} is not a mapping")
    target[last] = value


def configs_from(data, source: str = "the config file") -> list:
    """The experiment configs a parsed YAML document describes (validated)."""
    from .experiments import ExperimentConfig

    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{source} must be a mapping: one experiment, or 'base' and 'grid', or 'experiments'")
    entries: list[dict]
    if any(k in data for k in TOP_KEYS):
        unknown = sorted(set(data) - set(TOP_KEYS))
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r} at the top of {source}; allowed keys: {list(TOP_KEYS)} "
                              "(or the fields of one experiment)")
        if "experiments" in data:
            if not isinstance(data["experiments"], list):
                raise ConfigError(f"'experiments' in {source} must be a list")
            entries = [dict(e) if isinstance(e, dict) else e for e in data["experiments"]]
        else:
            base = data.get("base", {})
            _check_keys(base, f"'base' of {source}")
            grid = data.get("grid", {})
            if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
                raise ConfigError(f"'grid' of {source} must map keys to non-empty lists of values")
            for key in grid:
                if key.split(".")[0] not in _fields():
                    raise ConfigError(f"unknown grid key {key!r} in {source}; allowed keys: {_fields()} (dotted keys "
                                      "such as task_args.alpha reach into dicts)")
            entries = []
            for combo in itertools.product(*grid.values()):
                entry = copy.deepcopy(base)
                for key, value in zip(grid, combo):
                    _set(entry, key, value)
                if "label" not in entry:
                    entry["label"] = ", ".join(f"{k}={v}" for k, v in zip(grid, combo))
                entries.append(entry)
    else:
        entries = [data]
    configs = []
    for k, entry in enumerate(entries):
        _check_keys(entry, f"experiment {k} of {source}")
        configs.append(ExperimentConfig(**entry).validate())
    return configs


MAX_YAML_DEPTH = 32  # nesting an experiment file may use (a sweep of grids of settings needs about 4)


def load_configs(path: Path) -> list:
    """The experiments of a YAML file (one, a sweep, or a list), its ``plugins`` imported first; refuses aliases and
    documents nested deeper than :data:`MAX_YAML_DEPTH`, naming the file."""
    import yaml

    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    try:
        depth = 0
        for event in yaml.parse(text):  # the event stream: no recursion, however deep the document
            if isinstance(event, yaml.AliasEvent):
                raise ConfigError(f"{path} uses a YAML alias (*name); write each value out (aliases can nest into "
                                  "a document that no machine can hold)")
            depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
            if depth > MAX_YAML_DEPTH:
                raise ConfigError(f"{path} nests lists or mappings more than {MAX_YAML_DEPTH} deep (line "
                                  f"{event.start_mark.line + 1}); an experiment needs about 4")
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    return configs_from(import_plugins(data, path.parent), str(path))


def cmd_run(args) -> int:
    """``fedcompanion run``: a YAML experiment or sweep, run (cached), then one line per run."""
    from .experiments import sweep

    configs = load_configs(Path(args.config))
    frame = sweep(configs, args.results, jobs=args.jobs, refresh=args.refresh, progress=True, on_failure="warn")
    runs = frame.attrs["runs"]
    glob = frame[frame.client == -1]
    last = glob.sort_values("round").groupby(["hash", "metric"]).tail(1)
    table = last.pivot_table(index="hash", columns="metric", values="value")
    keep = [c for c in ("train_loss", "test_loss", "test_accuracy", "client_accuracy_std", "objective_y") if c in table]
    summary = runs.set_index("hash")[["label", "seed", "status"]].join(table[keep])
    print(f"\n{len(configs)} run(s); results in {args.results}")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0 if not (runs.status == "failed").any() else 1


def _signature(fn, skip=()) -> str:
    parts = []
    for name, p in inspect.signature(fn).parameters.items():
        if name in skip or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        parts.append(name if p.default is inspect.Parameter.empty else f"{name}={p.default!r}")
    return ", ".join(parts)


def cmd_list(args) -> int:
    """``fedcompanion list``: algorithms, tasks, partitioners, datasets, metrics, models and engines."""
    from .algorithms import REGISTRY, Algorithm
    from .data.loaders import LOADERS
    from .data.partition import PARTITIONS, partition_parameters
    from .engine import ENGINES
    from .experiments import METRICS, TASKS
    from .models import MODELS

    print("algorithms (fc.make(name, ...)):")
    for name, cls in sorted(REGISTRY.items()):
        kind = "" if issubclass(cls, Algorithm) else "  [full-batch: every client, every iteration]"
        print(f"  {name:12s} {_signature(cls)}{kind}")
    print("\ntasks (ExperimentConfig(task=name, task_args={...})):")
    for name, builder in TASKS.items():
        print(f"  {name:14s} {_signature(builder, skip=('seed', 'dtype', 'device'))}")
    print("\npartitioners (task_args partition_scheme, with their keywords):")
    for name in PARTITIONS:
        keys = [f"{k}={v!r}" for k, v in partition_parameters(name).items()]
        print(f"  {name:10s} {', '.join(keys) or '-'}")
    print(f"\ndatasets (task_args dataset): {', '.join(LOADERS)}")
    print(f"\nextra metrics (ExperimentConfig(metrics=[...])): {', '.join(METRICS)}")
    print(f"\nmodels (task_args model): {', '.join(MODELS)}")
    print(f"\nengines (ExperimentConfig(engine=...)): {', '.join(ENGINES)}")
    return 0


def cmd_report(args) -> int:
    """``fedcompanion report``: REPRODUCTION.md (and README's claims table) from the summaries; exit 2 without any."""
    from .reproduction.report import NoSummaries, write_report

    try:
        path = write_report(Path(args.results), Path(args.output), Path(args.readme) if args.readme else None)
    except NoSummaries as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def cmd_arena(args) -> int:
    """``fedcompanion arena``: the selected methods on the selected tasks, tuned alike, ranked with ties."""
    from .reproduction import arena

    plan = arena.Plan(rounds=args.rounds, rungs=args.rungs, seeds=tuple(args.seeds),
                      tune_seeds=tuple(args.tune_seeds))
    outcomes = arena.run_arena(args.tasks, args.algorithms, plan, args.results, jobs=args.jobs, refresh=args.refresh)
    for o in outcomes.values():
        shown = o.ranking[["rank", "method", "metric", "metric low", "metric high", "against best", "diverged"]]
        print(f"\n{o.task.description}: {o.task.metric} ({o.task.better} is better), {plan.rounds} rounds")
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        print(o.sentence())
    if args.figure:
        fig = arena.plot(outcomes)
        fig.savefig(args.figure, bbox_inches="tight")
        print(f"\nwrote {args.figure}")
    return 0


def _root() -> Path:
    from .reproduction.report import ROOT

    return ROOT


def main(argv: list[str] | None = None) -> int:
    """The command line's entry point; a ConfigError exits 2 with its message."""
    configure_logging()
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda m: m.group(1).split(".")[-1],  # the help is plain text, not RST
                  __doc__.replace("``", "").replace("::", ":"))
    parser = argparse.ArgumentParser(prog="fedcompanion", description=text.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one experiment or a sweep from a YAML file",
                         description="Run one experiment or a sweep from a YAML file; print its table.",
                         epilog=text[text.index("A config file"):] + "\nExample: fedcompanion run examples/sweep.yaml",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("config", help="a YAML file: one experiment, a sweep (base and grid) or a list (experiments)")
    run.add_argument("--results", default="results", help="results cache folder (default: results)")
    run.add_argument("--jobs", type=int, default=None, help="parallel processes (default: CPU count)")
    run.add_argument("--refresh", action="store_true", help="ignore cached results")
    sub.add_parser("list", help="algorithms, tasks and partitioners with their hyperparameters and defaults")
    report = sub.add_parser("report", help="rebuild REPRODUCTION.md (and README's claims table) from the results")
    report.add_argument("--results", default="results")
    report.add_argument("--output", default=str(_root() / "REPRODUCTION.md"), help="the report to write")
    report.add_argument("--readme", default=str(_root() / "README.md"),
                        help="the README whose claims table is replaced ('' for none)")
    from .reproduction.arena import METHODS, TASKS

    ring = sub.add_parser("arena", help="every method on the same tasks under one tuning protocol (notebook 92)")
    ring.add_argument("--tasks", nargs="+", default=list(TASKS), help=f"from {list(TASKS)} (default: all)")
    ring.add_argument("--algorithms", nargs="+", default=list(METHODS), help=f"from {list(METHODS)} (default: all)")
    ring.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4], help="evaluation seeds")
    ring.add_argument("--tune-seeds", nargs="+", type=int, default=[100, 101], help="tuning seeds (disjoint)")
    ring.add_argument("--rounds", type=int, default=30)
    ring.add_argument("--rungs", type=int, default=1, help="successive-halving rungs of the tuning (1: full grid)")
    ring.add_argument("--results", default="results")
    ring.add_argument("--jobs", type=int, default=None, help="parallel processes (default: CPU count)")
    ring.add_argument("--refresh", action="store_true", help="ignore cached results")
    ring.add_argument("--figure", default="", help="write the ranked chart here (PNG or PDF)")
    args = parser.parse_args(argv)
    try:
        return {"run": cmd_run, "list": cmd_list, "report": cmd_report, "arena": cmd_arena}[args.command](args)
    except (ConfigError, DamagedFile) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
