"""Execute the notebooks with papermill:
``python -m fedcompanion.reproduction.reproduce [--profile smoke] [--only text ...] [--parallel N] [--scheduler
ADDRESS]``.

Each notebook under ``notebooks/`` is executed into the git-ignored ``build/`` folder; its runs land in
``results/`` (cached, so an interrupted reproduction resumes: every run's files are written atomically) and its
figures in ``figures/``. ``--parallel`` notebooks run at the same time, the longest first (by the wall times
recorded last time; one at a time, in reading order), each kernel with its share of the OpenMP/BLAS threads and
its share of the cores for its sweeps' processes (``jobs``, passed to the notebooks that declare it). The default
(:func:`default_parallel`) keeps the other cores working while a notebook computes in its own kernel (one thread)
or waits for its last run. On two cores from an empty cache: two at a time with one sweep process each, 1419.5 s;
one at a time with two, 1652 s; two at a time with two each (four processes on two cores), 1667 s. No number
depends on it: every run is the cache's (one torch thread each), every notebook computes with one torch thread
(``resolve_parameters``) and has its own kernel. With ``--scheduler`` (a Dask cluster's address, or ``local``)
every notebook's sweeps submit to one cluster instead (:mod:`fedcompanion.experiments.pool`): one queue for the
whole reproduction, stored here. The wall time of each notebook and of the whole reproduction are
recorded beside the notebooks' summaries when the reproduction starts from an empty cache (a run that reads cached
results would record the time it took to read them), and the run ends by writing ``REPRODUCTION.md`` (and README's
verdict summary) from those summaries. The smoke profile writes everything under ``build/`` instead.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from ..infra.processes import remove_stale_kernel_sockets, stop_children, watch

ROOT = Path(__file__).resolve().parents[3]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")  # read as a kernel starts


def notebooks(folder: Path = ROOT / "notebooks") -> list[Path]:
    """Every notebook, in reading order (sorted paths: ``00_tour`` first, then by paper and number)."""
    return sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


# Notebooks with a make target of their own: at the paper profile `make reproduce` leaves them out (their runs would
# take it past its time budget) and `--only NAME` (the target) runs them; the smoke profile runs every notebook.
# The arena and the notebooks that use its protocol and tuned settings share `make arena`; the papers' claims that
# need more runs than the reproduction's budget leaves (the ADMM family without convexity, the m and n sweeps) have
# `make extended`; AdaFedAdam's setting A at the paper's 200 rounds has `make setting-a`.
OWN_TARGET = {"92_arena": "make arena", "06_ablation": "make arena", "07_robustness": "make arena",
              "08_stepsize_rules": "make arena", "02_beyond_convexity": "make extended",
              "09_semi_supervised": "make extended", "03_adafedadam": "make setting-a",
              "04_fairness_front": "make setting-a"}


# A part of a notebook with its own target that `make reproduce` does run, under the summary name the notebook gives
# that part, with the notebook parameters that select it: the arena's QSAR panel (every method, the whole protocol;
# the same runs and numbers as that panel of `make arena`; `arena.summary_name`), and AdaFedAdam's setting B (the
# same runs as in the whole notebooks; their setting A is `make setting-a`). Where a part's summary and its whole
# notebook's are both in `results/`, the report shows the whole
# (:func:`fedcompanion.reproduction.claims.record.load_summaries`).
PART_IN_REPRODUCE = {"92_arena": ("92_arena-qsar", {"tasks": ["qsar"]}),
                     "03_adafedadam": ("adafedadam/03_adafedadam-b", {"settings": ["B"]}),
                     "04_fairness_front": ("adafedadam/04_fairness_front-b", {"settings": ["B"]})}


def selected(only: str | list[str], profile: str, folder: Path = ROOT / "notebooks") -> list[Path]:
    """The notebooks a reproduction executes: those ``only`` names (one text or several, see :func:`names`); without
    ``only`` at the paper profile, every notebook but those of :data:`OWN_TARGET` (save the parts of
    :data:`PART_IN_REPRODUCE`)."""
    only = ([only] if only else []) if isinstance(only, str) else list(only or [])  # "" (the API's default): none
    if any(not str(text).strip("/ ") for text in only):
        raise ValueError(f"--only needs a notebook's name or folder, got {only!r} (an empty text would select all)")
    if only:
        return [nb for nb in notebooks(folder) if any(names(text, nb, folder) for text in only)]
    return [nb for nb in notebooks(folder) if profile != "paper" or nb.stem in PART_IN_REPRODUCE
            or not any(nb.stem.startswith(k) for k in OWN_TARGET)]


def names(text: str, notebook: Path, folder: Path = ROOT / "notebooks") -> bool:
    """Whether ``--only text`` names ``notebook``: its path under ``notebooks/`` (``fedvra/04``, ``fedvra``) or its
    file name (``04_against``, ``92_arena``) starts with ``text``. A folder does not name the notebooks that have a
    make target of their own (:data:`OWN_TARGET`): ``--only fedvra`` runs the FedVRA notebooks of `make reproduce`,
    ``--only fedvra/07`` runs the arena's robustness notebook."""
    text = text.strip().strip("/")
    relative = notebook.relative_to(folder).with_suffix("").as_posix()
    if not (relative.startswith(text) or notebook.stem.startswith(text)):
        return False
    return notebook.stem not in OWN_TARGET or not (folder / text).is_dir()


def part(notebook: Path, profile: str, only) -> tuple[str, dict] | None:
    """The part of ``notebook`` a reproduction runs (its summary name and parameters): at the paper profile without
    ``only`` (`make reproduce`), that of :data:`PART_IN_REPRODUCE`; else ``None``, the whole notebook."""
    return PART_IN_REPRODUCE.get(notebook.stem) if profile == "paper" and not only else None


# README's order, as path prefixes with the part each belongs to: the tour, the papers, then beyond them
READING_ORDER = {"00_tour": "Start here", "fedvra": "FedVRA", "ceadmm": "CEADMM and ICEADMM",
                 "adafedadam": "AdaFedAdam", "90_": "Beyond the papers", "91_": "Beyond the papers",
                 "92_": "Beyond the papers"}


def reading_order(paths: list[Path], folder: Path = ROOT / "notebooks") -> list[Path]:
    """``paths`` in the order a reader takes them: the tour, FedVRA, CEADMM, AdaFedAdam (each by number), then the
    notebooks beyond the papers; a notebook no prefix names comes last."""
    def key(path: Path):
        rel = path.relative_to(folder).as_posix()
        rank = next((i for i, prefix in enumerate(READING_ORDER) if rel.startswith(prefix)), len(READING_ORDER))
        return rank, rel
    return sorted(paths, key=key)


KERNEL = "fedcompanion"  # the kernel the notebooks declare; `make env` registers it inside .venv


def kernel_name() -> str:
    """The project's kernel where it is registered (``make env``), else ``python3``: the default kernel of the
    interpreter running this (a conda environment made from environment.yml, say), which has the package too."""
    from jupyter_client.kernelspec import KernelSpecManager

    return KERNEL if KERNEL in KernelSpecManager().find_kernel_specs() else "python3"


@functools.cache
def ipc_kernel_manager() -> type:
    """The kernel manager the notebooks run under: jupyter_client's, talking to the kernel over IPC sockets (files
    in the temporary folder) instead of TCP, so the kernel opens no port and prints no "Kernel is running over TCP
    without encryption" warning into every reproduction's log. Each kernel's socket files have a name of their own:
    jupyter_client's default, ``kernel-ipc-<n>`` in the working directory with n counted from 1 among the files
    there, let two kernels starting at once (two notebooks of a reproduction) take the same sockets, and each then
    read the other's messages ("Invalid Signature", "Kernel didn't respond in 60 seconds"). The name carries the
    starting process's pid (:func:`~fedcompanion.infra.processes.kernel_sockets`): a reproduction first removes the
    sockets of kernels whose launcher is gone, which a kill -9 leaves behind."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    from ..infra.processes import kernel_sockets

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self) -> str:
            return "ipc"

        @default("ip")
        def _ip_default(self) -> str:
            return kernel_sockets(tempfile.gettempdir())

        async def _async_interrupt_kernel(self) -> None:
            # jupyter_client interrupts a kernel before asking it to shut down; a finished notebook's kernel is idle,
            # and the SIGINT only made ipykernel log "KeyboardInterrupt caught in kernel" into the reproduction's log
            if not self.shutting_down:
                await super()._async_interrupt_kernel()

    return IPCKernelManager


def execute(notebook: Path, output: Path, parameters: dict, progress: bool = True) -> None:
    """Run ``notebook`` with papermill into ``output`` (cwd: the repository root)."""
    import papermill

    output.parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(
        str(notebook), str(output), parameters=parameters, cwd=str(ROOT),
        progress_bar=progress, kernel_name=kernel_name(), kernel_manager_class=ipc_kernel_manager(),
    )  # fmt: skip


def _execute_timed(notebook: Path, output: Path, parameters: dict, progress: bool, threads: int | None = None) -> float:
    if threads is not None:  # in a pool worker: the kernel it starts (and the kernel's sweeps) inherit this
        os.environ.update({name: str(threads) for name in THREAD_VARIABLES})
    tic = time.time()
    execute(notebook, output, parameters, progress)
    return time.time() - tic


def kernel_threads(parallel: int, cpus: int) -> int | None:
    """OpenMP/MKL/OpenBLAS threads for each kernel when ``parallel`` notebooks share ``cpus`` cores: its share
    (two kernels with two spinning OpenMP threads each on two cores were measured to crawl); ``None`` (the
    libraries' default) for one at a time. Torch itself computes with one thread in every notebook
    (``resolve_parameters``)."""
    return sweep_jobs(parallel, cpus) if parallel > 1 else None


def default_parallel(cpus: int) -> int:
    """Notebooks at a time unless ``--parallel`` says otherwise: one per core below four cores (measured best on
    two), else one per two cores, so that each notebook's sweeps keep two processes and the longest notebook
    (the AdaFedAdam comparison) is not left to a single one."""
    return max(1, cpus if cpus < 4 else cpus // 2)


def sweep_jobs(parallel: int, cpus: int) -> int:
    """Processes for each notebook's sweeps when ``parallel`` notebooks share ``cpus`` cores: its share of the cores
    (the same share as :func:`kernel_threads`), so that the run processes of all the notebooks together fill the
    cores without outnumbering them (no number depends on it: every run computes with one torch thread, in a worker
    or, with one job, in the kernel itself)."""
    return max(1, cpus // parallel)


def declared_parameters(notebook: Path) -> set[str]:
    """The names in the notebook's ``parameters`` cell (papermill injects what it is given, declared or not)."""
    import papermill

    return set(papermill.inspect_notebook(str(notebook)))


def notebook_parameters(notebook: Path, params: dict, jobs: int) -> dict:
    """What the notebook is executed with: ``params``, plus its sweeps' process count if it declares ``jobs``."""
    return params | ({"jobs": jobs} if "jobs" in declared_parameters(notebook) else {})


def longest_first(todo: list[Path], previous: dict[str, float], names: dict[Path, str] | None = None) -> list[Path]:
    """``todo`` ordered by the wall time each notebook (recorded under its name in ``names``, else its path) took
    last time, longest first (unknown ones first, in reading order): the schedule that keeps every worker busy to
    the end."""
    def key(nb: Path):
        seconds = previous.get((names or {}).get(nb) or str(nb.relative_to(ROOT / "notebooks").with_suffix("")))
        return (seconds is not None, -(seconds or 0.0))
    return sorted(todo, key=key)


def from_empty_cache(results: Path) -> bool:
    """Whether a reproduction into ``results`` starts from an empty cache: no run that this code made is stored
    yet (a run made by other code, whose fingerprint is not this code's, is never read: it is computed again). Only
    then are its wall times what `make reproduce` costs, and recorded."""
    from .verify import _stored, is_current

    return not any(is_current(meta) for meta in _stored(results))


def _stop_children_and_exit(signum, frame) -> None:
    """SIGTERM, SIGHUP or SIGINT of a reproduction: its pool, kernels and their sweeps stop with it, at once (a
    kernel left running would finish its notebook and write a summary after the reproduction died)."""
    stop_children()
    os._exit(128 + signum)


def _execute_all(todo, runs, params, jobs, threads, parallel, out_dir, results, cold, failed) -> None:
    """Execute the notebooks of ``todo`` in a pool of ``parallel`` processes, recording their wall times (from an
    empty cache) and the failures in ``failed``."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    from .timings import write_timings

    with ProcessPoolExecutor(parallel, mp_context=get_context("spawn")) as pool:
        futures = {}
        for nb in todo:
            rel = nb.relative_to(ROOT / "notebooks")
            name, selection = runs[nb]
            given = notebook_parameters(nb, params | selection, jobs)
            futures[pool.submit(_execute_timed, nb, out_dir / rel, given, parallel == 1, threads)] = rel, name
        print(f"executing {len(todo)} notebooks, {parallel} at a time, {jobs} sweep process(es) each "
              f"(profile={params['profile']})", flush=True)
        for k, future in enumerate(as_completed(futures), 1):
            rel, name = futures[future]
            try:
                seconds = future.result()
            except Exception as error:  # the others go on; the reproduction fails at the end
                failed.append(rel)
                print(f"[{k}/{len(todo)}] {rel} FAILED: {str(error).strip().splitlines()[-1:]}", flush=True)
                continue
            if cold:
                write_timings(results, {name: seconds})
            print(f"[{k}/{len(todo)}] {rel}{f' ({name})' if name != str(rel.with_suffix('')) else ''} done in "
                  f"{seconds:.0f} s", flush=True)


def moved_summaries(stored: dict[Path, str], results: Path) -> list[str]:
    """One line per summary that this reproduction rewrote (``stored``: each summary's text before it), naming the
    numbers that moved beyond :mod:`fedcompanion.reproduction.rule.tolerance`'s (a summary within it is never
    rewritten)."""
    from .rule.tolerance import moved

    lines = []
    for path, text in sorted(stored.items()):
        if path.exists() and path.read_text() != text:
            where = moved(json.loads(text), json.loads(path.read_text()))
            lines.append(f"{path.name}: the result moved ({', '.join(where[:4])}"
                         f"{f' and {len(where) - 4} more' if len(where) > 4 else ''})")
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m fedcompanion.reproduction.reproduce``: execute the notebooks, record their times, write the
    report."""
    from .report import write_report
    from .timings import read_timings, write_timings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=["paper", "smoke"], default="paper")
    parser.add_argument("--only", action="append", default=[],
                        help="run only the notebooks this names: a path under notebooks/ or a file name, or its "
                             "beginning (repeat it for several)")
    parser.add_argument("--refresh", action="store_true", help="ignore cached results")
    parser.add_argument("--parallel", type=int, default=None,
                        help="notebooks executed at the same time, each with its share of the cores for its sweeps "
                             "(default: one per core below 4 cores, else one per 2 cores; with --scheduler, one per "
                             "core)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="compute every notebook's runs on the Dask cluster whose scheduler is at ADDRESS "
                             "(tcp://HOST:8786), or 'local': one cluster of this machine's cores that every notebook "
                             "shares (pip install 'fedcompanion[dask]'); the results are stored here")
    args = parser.parse_args(argv)
    remove_stale_kernel_sockets(tempfile.gettempdir())  # a killed reproduction's kernels could not remove theirs
    cpus = os.cpu_count() or 1
    if args.parallel is None:
        args.parallel = cpus if args.scheduler else default_parallel(cpus)
    if args.parallel < 1:
        print(f"error: --parallel must be >= 1, got {args.parallel}", file=sys.stderr)
        return 2
    try:
        todo = selected(args.only, args.profile)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not todo:
        print(f"error: --only {' '.join(args.only)!r} matches no notebook under notebooks/", file=sys.stderr)
        return 2
    out_dir = ROOT / "build" / ("reproduce" if args.profile == "paper" else "reproduce-smoke")
    results, figures = ROOT / "results", ROOT / "figures"
    params = {"profile": args.profile, "refresh": args.refresh}
    if args.profile == "smoke":  # a smoke run must not overwrite the paper-scale results and figures
        params.update(results_dir="build/smoke-results", figures_dir="build/smoke-figures")
        results, figures = ROOT / "build" / "smoke-results", ROOT / "build" / "smoke-figures"
    parallel = min(args.parallel, len(todo))  # more workers than notebooks would only take cores from them
    runs = {nb: part(nb, args.profile, args.only) or (str(nb.relative_to(ROOT / "notebooks").with_suffix("")), {})
            for nb in todo}  # each notebook's name (its summary's, its time's) and the parameters selecting a part
    if parallel > 1:  # several at a time: longest first; one at a time: reading order
        todo = longest_first(todo, read_timings(results).get("notebooks", {}), {nb: runs[nb][0] for nb in todo})
    cold = from_empty_cache(results)  # wall times are recorded only for a reproduction from an empty cache
    before = set(results.glob("*.json"))
    stored = {path: path.read_text() for path in (results / "summaries").glob("*.json")}
    threads = kernel_threads(parallel, cpus)
    jobs = sweep_jobs(parallel, cpus)
    start, failed = time.time(), []
    watchdog = watch()  # kill -9 of this process: the watchdog stops the pool, the kernels and their sweeps
    handlers = {stop: signal.signal(stop, _stop_children_and_exit)
                for stop in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        from ..experiments.pool import shared_pool

        with shared_pool(args.scheduler, cpus) as address:
            if address:
                print(f"every notebook's runs go to the Dask scheduler at {address}", flush=True)
            _execute_all(todo, runs, params, jobs, threads, parallel, out_dir, results, cold, failed)
    finally:
        for stop, handler in handlers.items():
            signal.signal(stop, handler)
        watchdog.kill()
        watchdog.wait()
    elapsed = time.time() - start
    if failed:
        print(f"error: {len(failed)} notebook(s) failed: {', '.join(map(str, failed))} (executed copies with the "
              f"traceback in {out_dir.relative_to(ROOT)})", file=sys.stderr)
        return 1
    if cold and len(todo) == len(selected("", args.profile)):
        write_timings(results, {}, elapsed=elapsed, parallel=parallel, only={name for name, _ in runs.values()},
                      pool="local" if args.scheduler == "local" else "a Dask cluster" if args.scheduler else None)
    elif not cold:
        kept = (results / "summaries" / "_timings.json").relative_to(ROOT)
        print(f"wall times not recorded: {results.relative_to(ROOT)} held cached runs ({kept} keeps those of the "
              "last reproduction from an empty cache)")
    written = sorted(p for p in figures.glob("*") if p.stat().st_mtime >= start)
    print(f"\nwrote {len(written)} figure files to {figures}:")
    for p in written:
        print(f"  {p.relative_to(ROOT)}")
    if args.profile == "paper":
        report = write_report(results, ROOT / "REPRODUCTION.md", ROOT / "README.md")
    else:
        report = write_report(results, ROOT / "build" / "REPRODUCTION-smoke.md", readme=None)
    computed = len(set(results.glob("*.json")) - before)
    for line in moved_summaries(stored, results):
        print(line)
    print(f"{computed} run(s) computed here; {len(before)} were already in {results.relative_to(ROOT)} (read from the "
          "cache where a notebook needed them, and listed by the platform that computed them in the report)")
    ran = {k: f"; its part {name} ran here" for k, (name, _) in PART_IN_REPRODUCE.items()}
    left = [f"{k} ({v}{ran.get(k, '')})" for k, v in OWN_TARGET.items()
            if k in ran or not any(nb.stem.startswith(k) for nb in todo)]
    if left and not args.only:
        print(f"not executed here, each with its own target: {', '.join(left)}")
    print(f"total {elapsed:.0f} s elapsed; executed notebooks in {out_dir.relative_to(ROOT)}; report {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
