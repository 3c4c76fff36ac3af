"""Carry committed runs across a change of code that leaves their numbers as they were, or say which it cannot.

    python -m fedcompanion.reproduction.rekey --before REV [--results results]

A run's key holds the fingerprint of the code it executes (:mod:`fedcompanion.infra.fingerprint`), so a change to that
code (a loop moved into a function, a dispatch by type instead of by name) makes every run it touches stale, even
where no number can change. Recomputing them all costs hours; taking the new keys on trust would let a change that
*does* move numbers keep its old results. This command does neither. For every stored run that the code at ``REV``
made (its key was current there) and whose key the code as it is now computes differently, it

1. groups the runs by what decides their code path (:func:`group_of`: every name and flag of their configs, and
   each number's zero-ness);
2. recomputes each group's cheapest run twice on this machine, under ``REV`` (a git worktree of it) and under the
   code as it is now, both with the sweeps' thread count, side by side;
3. carries the runs of every group whose two histories (and statuses) are bit-identical: their files are renamed to
   the new key's hash and their record rewritten with the new key and its digest; the history, the timings and the
   platform that computed them are left as they were; each notebook's summary (``results/summaries``) then lists
   the carried runs it read under their new hashes (``runs_read``, what ``prune`` keeps), so nothing is re-executed;
4. leaves every other group's runs under their old keys (stale: ``make reproduce`` recomputes them) and says so.

It prints one line per group and exits non-zero if some group could not be carried.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from ..experiments.cache import read_history, record_digest
from ..experiments.config import key_hash
from ..infra.atomic import DamagedFile, read_json, write_atomic
from ..infra.processes import terminate_as_exit
from .claims.record import load_summaries, read_summary, summaries_dir
from .prune import JOURNAL, RUN_NAME
from .verify import ROOT, _config, _stored, compare, is_current

# run in a subprocess under either tree: the configs in argv[1] (JSON) -> argv[2]/<i>.csv.gz and statuses
_RUNNER = """
import json, sys
import torch
from fedcompanion.experiments import ExperimentConfig
from fedcompanion.experiments.runner import RUN_THREADS, run_config
torch.set_num_threads(RUN_THREADS)
statuses = []
for i, fields in enumerate(json.load(open(sys.argv[1]))):
    result = run_config(ExperimentConfig(**fields))
    result.history.to_csv(f"{sys.argv[2]}/{i}.csv.gz", index=False)
    statuses.append(result.status)
json.dump(statuses, open(f"{sys.argv[2]}/statuses.json", "w"))
"""
_CURRENT = """
import json, sys
from pathlib import Path
try:
    from fedcompanion.reproduction.verify import _stored, is_current
except ImportError:  # a tree from before the package's layers
    from fedcompanion.verify import _stored, is_current
print(json.dumps([m["_file"] for m in _stored(Path(sys.argv[1])) if is_current(m)]))
"""


def _python(src: Path, code: str, *args: str, background: bool = False):
    """``code`` run by this interpreter with the package imported from ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, "-c", code, *args]
    if background:
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    return subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout


def _path_part(value):
    """What of a config value can switch a run's code path: a number only by being zero or not (``if momentum:``), a
    list of numbers element by element like a number (per-client penalties, layer widths: their values differ from
    seed to seed, their zero-ness is what a branch can test), a mapping entry by entry, anything else (a name, a flag,
    ``None``) as it is."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return value == 0
    if isinstance(value, dict):
        return tuple((k, _path_part(v)) for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_path_part(v) for v in value)
    return repr(value)


def group_of(meta: dict) -> tuple:
    """What decides a run's code path: every field of its config but the seed and the code's and data's digests,
    each by :func:`_path_part` (so the algorithm, the task, the engine, the local solver and every other name or flag
    as it is, and each number by its zero-ness). A group's cheapest run then takes every branch its other runs take,
    as far as a name, a flag or a zero decides it (the rounds, a number, decide none)."""
    fields = {k: v for k, v in meta["config"].items() if k not in ("seed", "code", "files", "data")}
    return _path_part(fields)


def _cost(meta: dict) -> float:
    c = meta["config"]
    return c["rounds"] * (c.get("clients_per_round") or 100)


def _fields(meta: dict) -> dict:
    return {k: v for k, v in meta["config"].items() if k not in ("code", "files", "data")}


def plan(meta: dict) -> tuple[str, str, dict]:
    """(old stem, new stem, new record) of a run carried to its current key: the record rewritten with that key and
    its digest; the history, the timings and the platform that computed them as they were."""
    old = Path(meta["_file"]).stem
    key = json.loads(json.dumps(_config(meta).key(), default=list))
    record = {k: v for k, v in meta.items() if k != "_file"}
    record["config"] = key
    record["record"] = record_digest(record)
    return old, key_hash(key), record


def carry(results: Path, metas: list[dict]) -> tuple[dict[str, str], int]:
    """Carry the runs ``metas`` to their current keys, safe under a kill at any point; returns (old -> new stem, how
    many summaries changed).

    1. every run is copied to its new name (history and model, the record last), the old files kept: a kill here
       leaves copies that no summary lists, which the next rekey completes (or ``prune`` removes);
    2. the journal (``results/.rekey-journal.json``: old -> new) is written; from here :func:`finish` completes the
       move, and ``prune`` refuses to run;
    3. :func:`finish`: the summaries list the new hashes (each summary written atomically), then the old files go,
       then the journal: every hash that a summary lists names a stored run at every point."""
    renamed = {}
    for meta in metas:
        old, new, record = plan(meta)
        if not (results / f"{new}.json").is_file():
            for suffix in (".csv.gz", ".pt"):
                if (results / f"{old}{suffix}").is_file():
                    write_atomic(results / f"{new}{suffix}", (results / f"{old}{suffix}").read_bytes())
            write_atomic(results / f"{new}.json", json.dumps(record, indent=1).encode())
        if new != old:
            renamed[old] = new
    if not renamed:
        return renamed, 0
    write_atomic(results / JOURNAL, json.dumps(renamed, indent=1, sort_keys=True))
    return renamed, finish(results)


def finish(results: Path) -> int:
    """Complete an interrupted carry from its journal, if there is one (:func:`carry`, step 3): summaries first, then
    the old files of each run whose new record is stored, then the journal; returns how many summaries changed."""
    journal = results / JOURNAL
    if not journal.exists():
        return 0
    renamed = read_json(journal, "rekey journal")
    if not isinstance(renamed, dict) or not all(isinstance(k, str) and isinstance(v, str) and RUN_NAME.fullmatch(k)
                                                and RUN_NAME.fullmatch(v) for k, v in renamed.items()):
        raise DamagedFile(f"{journal}: a rekey journal maps old run hashes to new ones; this one does not")
    renamed = {old: new for old, new in renamed.items() if (results / f"{new}.json").is_file()}
    changed = follow(summaries_dir(results), renamed)
    for old in renamed:
        for suffix in (".json", ".csv.gz", ".pt"):
            (results / f"{old}{suffix}").unlink(missing_ok=True)
    journal.unlink()
    return changed


def follow(summaries: Path, renamed: dict[str, str]) -> int:
    """Rewrite every summary's ``runs_read`` with the carried runs' new hashes (``renamed``: old -> new); returns how
    many summaries changed. Every summary is read through the validated reader first: a damaged one stops it,
    named, before any is rewritten."""
    for path in sorted(summaries.glob("*.json")):
        if not path.name.startswith("_"):
            read_summary(path)
    changed = 0
    for path in sorted(summaries.glob("*.json")):
        if path.name.startswith("_"):
            continue
        data = json.loads(path.read_text())
        read = data.get("runs_read")
        if not isinstance(read, list) or not renamed.keys() & set(read):
            continue
        data["runs_read"] = sorted({renamed.get(h, h) for h in read})
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        changed += 1
    return changed


def _commit(revision: str) -> str:
    """The commit ``revision`` names in the project's repository, or ``SystemExit`` saying why not (an option-like
    text never reaches git as an option)."""
    if not revision or revision.startswith("-"):
        raise SystemExit(f"error: --before {revision!r} is not a git revision")
    try:
        found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", "--end-of-options",
                                f"{revision}^{{commit}}"], capture_output=True, text=True)
    except FileNotFoundError:
        raise SystemExit("error: rekey needs git (the old code is checked out from the repository)") from None
    if found.returncode != 0:
        raise SystemExit(f"error: --before {revision!r} is not a commit of the repository at {ROOT}")
    return found.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    """``python -m fedcompanion.reproduction.rekey --before REV`` (or ``--finish``): see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the git revision whose code made the stored runs")
    parser.add_argument("--finish", action="store_true", help="only complete an interrupted rekey (its journal)")
    parser.add_argument("--results", default=str(ROOT / "results"))
    args = parser.parse_args(argv)
    results = Path(args.results).resolve()
    try:
        load_summaries(results, superseded=True)  # every summary readable before anything moves
        changed = finish(results)
    except DamagedFile as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if changed:
        print(f"an interrupted rekey finished: {changed} summaries list their runs' new hashes")
    if args.finish:
        return 0
    if args.before is None:
        parser.error("--before REV is required (or --finish)")
    commit = _commit(args.before)
    with terminate_as_exit(), tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True,
                       capture_output=True)
        try:
            return rekey(results, tree / "src", Path(tmp))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False,
                           capture_output=True)


def rekey(results: Path, before: Path, tmp: Path) -> int:
    """The work of :func:`main` with the old code's ``src`` folder given: carry what can be carried (the module
    docstring), print a line per group, return the exit status; ``tmp`` holds the recomputed samples."""
    made_before = set(json.loads(_python(before, _CURRENT, str(results))))
    stored = [m for m in _stored(results) if m["_file"] in made_before]
    moved = [m for m in stored if not is_current(m)]
    print(f"{len(made_before)} runs current at the old code; {len(moved)} of them have another key now")
    groups: dict[tuple, list[dict]] = {}
    for meta in moved:
        groups.setdefault(group_of(meta), []).append(meta)
    samples = [min(runs, key=_cost) for runs in groups.values()]
    (tmp / "configs.json").write_text(json.dumps([_fields(m) for m in samples]))
    outputs = {}
    for name, src in (("before", before), ("now", ROOT / "src")):
        (tmp / name).mkdir()
        outputs[name] = _python(src, _RUNNER, str(tmp / "configs.json"), str(tmp / name), background=True)
    for name, process in outputs.items():
        if process.wait() != 0:
            print(f"error: recomputing the samples under the {name} code failed", file=sys.stderr)
            return 1
    statuses = {name: json.loads((tmp / name / "statuses.json").read_text()) for name in outputs}
    failed, carried = 0, []
    for i, runs in enumerate(groups.values()):
        a, b = (pd.read_csv(tmp / name / f"{i}.csv.gz") for name in ("before", "now"))
        same = compare(a, b) == 0 and statuses["before"][i] == statuses["now"][i]
        committed = read_history(results / f"{Path(samples[i]['_file']).stem}.csv.gz", samples[i]["history"])
        c = runs[0]["config"]
        label = " ".join(str(g) for g in (c["algorithm"], c["task"], c.get("task_args", {}).get("dataset"),
                                          c.get("engine")) if g is not None)
        if same:
            carried += runs
        failed += not same
        print(f"  {label:60s} {len(runs):5d} runs: {'carried' if same else 'NOT carried (numbers differ)'}"
              f"{'' if compare(committed, b) == 0 else ' (committed history from another platform)'}")
    renamed, changed = carry(results, carried)
    print(f"{len(groups) - failed} of {len(groups)} groups carried ({len(renamed)} runs renamed); {changed} summaries "
          "list their runs' new hashes")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
