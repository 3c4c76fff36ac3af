r"""The arena: every engine algorithm on the same tasks, tuned by one protocol with one budget, compared on seeds.

None of the three papers compares its method with the other two. The arena does, on tasks none of them chose:

* **Tasks** (:data:`TASKS`): MNIST over 100 clients with Dirichlet(0.1) label skew, MNIST in shards (two labels
  per client), both with an MLP 784-128-64-10, and l2-free logistic regression on QSAR oral toxicity over 50
  Dirichlet(0.5) clients. Every client holds out 20% of its data, so every run reports its clients' accuracies.
  10 clients per round, 10 local SGD steps on mini-batches of 32 for every method.
* **Methods** (:data:`METHODS`): the registry's engine algorithms, each with its library default (the class's
  own default value, the grid's centre) for the client learning rate and for its one own hyperparameter.
* **Tuning** (:func:`fedcompanion.experiments.tune`, the protocol of every notebook): a 3 x 3 log grid one decade
  wide in both, every setting on two tuning seeds disjoint from the evaluation seeds, scored like the evaluation
  (the task's metric at the last round of a ``rounds``-long run), over the full grid at that horizon (``plan.rungs``
  = 1; more rungs: successive halving, which on MNIST took faster starters than the full grid's); a setting at
  which a tuning seed diverged, or whose next larger learning rate did, is never chosen; a choice at a grid edge
  extends that grid. So every method gets the same protocol and budget, unless an edge extends its grid.
* **Evaluation**: the tuned setting on every evaluation seed (a seed fixes the split, the sampled clients per
  round and the initial model: the methods are paired by seed). Per method and seed: the metric at the last round,
  the rounds to the task's target, the bytes each client uploads per round, and the spread (std) and worst 10% of
  the clients' accuracies at the last round. A diverged run counts as the worst value.
* **Ranking and ties**: methods in order of their mean metric, each compared with the first by the package's rule
  (:mod:`fedcompanion.reproduction.rule.item`: paired per-seed differences, their 95% t interval, not adjusted for
  the number of comparisons): an interval containing 0 is a **tie** with the best, the honest reading; a lone
  "worse" among many comparisons is weak evidence. ``fedcompanion arena`` runs it from the shell; notebook 92 shows it.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from ..experiments import ExperimentConfig, Spec, final_score, log_grid, sweep, tune
from ..validation import ConfigError, check_number, check_seeds
from .claims.from_runs import per_seed_evidence
from .claims.record import table_head
from .rule.item import t_interval


@dataclass(frozen=True)
class ArenaTask:
    """One arena task: the ``dataset`` task's arguments, its metric (``better``: higher or lower), the target for
    "rounds to target", the default client learning rate (the lr grid's centre) and a line of description."""

    name: str
    task_args: dict
    metric: str
    better: str
    target: float
    lr: float
    description: str


@dataclass(frozen=True)
class Contender:
    """One method: its registry name, its own tuned hyperparameter with the library default, fixed ones."""

    algorithm: str
    own: dict
    fixed: dict = field(default_factory=dict)


_MNIST = dict(dataset="mnist", model="mlp", hidden=[128, 64], num_clients=100, local_test_fraction=0.2)
TASKS = {
    "mnist-dirichlet": ArenaTask("mnist-dirichlet", dict(_MNIST, partition_scheme="dirichlet", alpha=0.1),
                                 "test_accuracy", "higher", 0.85, 0.05,
                                 "MNIST, 100 clients, Dirichlet(0.1) labels, MLP 784-128-64-10"),
    "mnist-shards": ArenaTask("mnist-shards", dict(_MNIST, partition_scheme="shards", shards_per_client=2),
                              "test_accuracy", "higher", 0.8, 0.05,
                              "MNIST, 100 clients, 2 label shards each, MLP 784-128-64-10"),
    "qsar": ArenaTask("qsar", dict(dataset="qsar", model="logistic", num_clients=50, partition_scheme="dirichlet",
                                   alpha=0.5, local_test_fraction=0.2),
                      "test_loss", "lower", 0.27, 0.5, "QSAR oral toxicity, 50 clients, Dirichlet(0.5), logistic"),
}

METHODS = {  # each method's own hyperparameter at the library's default (the class's default value)
    "FedAvg": Contender("fedavg", {"server_lr": 1.0}),
    "FedProx": Contender("fedprox", {"mu": 0.01}),
    "FedAvgM": Contender("fedavgm", {"server_lr": 1.0}, {"momentum": 0.9}),
    "SCAFFOLD": Contender("scaffold", {"server_lr": 1.0}, {"option": "II"}),
    "FedDyn": Contender("feddyn", {"alpha": 0.1}),
    "FedADMM": Contender("fedadmm", {"gamma": 0.1}),
    "FedVRA": Contender("fedvra", {"gamma": 0.1},
                        {"dual_stepsize": 1.0, "aggregation_stepsize": "inverse_probability"}),
    "FedAdam": Contender("fedadam", {"server_lr": 0.01}),
    "FedYogi": Contender("fedyogi", {"server_lr": 0.01}),
    "FedAdagrad": Contender("fedadagrad", {"server_lr": 0.01}),
    "FedNova": Contender("fednova", {"server_lr": 1.0}),
    "q-FedAvg": Contender("qfedavg", {"q": 1.0}),
    "FedMGDA+": Contender("fedmgda+", {"epsilon": 0.1}),
    "AdaFedAdam": Contender("adafedadam", {"server_lr": 0.001}, {"alpha": 1.0}),
}


@dataclass(frozen=True)
class Plan:
    """The budget every method gets: rounds, clients per round, local work, seeds and the tuning grid."""

    rounds: int = 30
    rungs: int = 1  # the full grid: halving took faster starters, up to 0.052 lower (docs/benchmarks.md)
    clients_per_round: int = 10
    local_steps: int = 10
    batch_size: int = 32
    eval_every: int = 5
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    tune_seeds: tuple[int, ...] = (100, 101)
    decades: float = 1.0
    points: int = 3

    def __post_init__(self):
        for name in ("rounds", "rungs", "clients_per_round", "local_steps", "batch_size", "eval_every"):
            check_number(f"arena plan {name}", getattr(self, name), low=1, integer=True)
        check_number("arena plan points", self.points, low=2, integer=True)
        check_number("arena plan decades", self.decades, low=0.0, low_open=True)
        object.__setattr__(self, "seeds", check_seeds("arena plan seeds", self.seeds, least=2))
        object.__setattr__(self, "tune_seeds", check_seeds("arena plan tune_seeds", self.tune_seeds, least=2))


def check_names(tasks, methods, contenders: dict | None = None) -> tuple[list[str], list[str]]:
    """The selection, checked against :data:`TASKS` and ``contenders`` (default :data:`METHODS`; a bad name is
    named, with the choices)."""
    for kind, names, known in (("task", tasks, TASKS), ("algorithm", methods, contenders or METHODS)):
        bad = [n for n in names if n not in known]
        if bad or not names:
            raise ConfigError(f"unknown arena {kind} {bad[0] if bad else '(none given)'!r}; choose from {list(known)}")
    return list(tasks), list(methods)


def config(task: ArenaTask, method: str, setting: dict, seed: int, rounds: int, plan: Plan,
           contenders: dict | None = None) -> ExperimentConfig:
    """The run of ``method`` (a name of ``contenders``, default :data:`METHODS`) at ``setting`` (``lr`` plus its own
    hyperparameter) on ``task``."""
    c = (contenders or METHODS)[method]
    hp = {k: v for k, v in setting.items() if k != "lr"}
    return ExperimentConfig(task="dataset", task_args=dict(task.task_args), algorithm=c.algorithm,
                            hyperparameters={**hp, **c.fixed}, rounds=rounds,
                            clients_per_round=plan.clients_per_round, lr=setting["lr"],
                            local=dict(steps=plan.local_steps, batch_size=plan.batch_size),
                            eval_every=plan.eval_every, per_client_metrics=False, eval_train=False, seed=seed,
                            label=method)


def specs(task: ArenaTask, methods: list[str], plan: Plan, contenders: dict | None = None) -> dict[str, Spec]:
    """Every method's tuning grid: ``plan.points`` values over ``plan.decades`` decades around each default."""
    out, contenders = {}, contenders or METHODS
    for m in methods:
        default = {"lr": task.lr, **contenders[m].own}
        out[m] = Spec(lambda s, seed, m=m: config(task, m, s, seed, plan.rounds, plan, contenders),
                      {k: log_grid(v, plan.decades, plan.points) for k, v in default.items()}, default,
                      source="library default, tuned")
    return out


def per_seed(frame: pd.DataFrame, task: ArenaTask, plan: Plan) -> pd.DataFrame:
    """One row per (method, seed): ``metric`` (last round), ``rounds to target``, ``upload KB`` (per client and round),
    ``client accuracy std``, ``worst-10% accuracy``, ``status``; NaN for a diverged run, but its ``diverged round``
    and ``initial metric`` (round 0: the initial model, shared by every method on a seed)."""
    rows, runs = [], frame.attrs.get("runs", pd.DataFrame(columns=["hash", "diverged_round"]))
    diverged_in = dict(zip(runs["hash"], runs["diverged_round"]))
    glob = frame[frame.client == -1]
    for (label, seed), run in glob.groupby(["label", "seed"]):
        status = run.status.iloc[0]
        wide = run.pivot_table(index="round", columns="metric", values="value").sort_index()
        row = {"method": label, "seed": int(seed), "status": status, "initial metric": float(wide[task.metric].iloc[0]),
               "diverged round": diverged_in.get(run["hash"].iloc[0]) if status != "ok" and "hash" in run else None}
        if status == "ok":
            last = wide.iloc[-1]
            hit = wide[task.metric] >= task.target if task.better == "higher" else wide[task.metric] <= task.target
            row.update({"metric": float(last[task.metric]),
                        "rounds to target": float(wide.index[hit.values][0]) if hit.any() else math.nan,
                        "upload KB": float(last["uploaded_floats"]) * 4 / 1e3  # 4 bytes a float: float32 tasks
                        / (wide.index[-1] * plan.clients_per_round),
                        "client accuracy std": float(last["client_accuracy_std"]),
                        "worst-10% accuracy": float(last["client_accuracy_worst10"])})
        rows.append(row)
    return pd.DataFrame(rows).set_index(["method", "seed"]).sort_index()


COLUMNS = {"metric": None, "client accuracy std": "lower", "worst-10% accuracy": "higher"}


def ranking(table: pd.DataFrame, task: ArenaTask, seeds) -> pd.DataFrame:
    """Methods ranked by their mean metric, each with its mean and 95% interval per column and its word against the
    column's best (``best``, ``tie`` or ``worse``, by the verdict rule on the paired per-seed differences): the
    metric's in ``against best`` (with the ``difference`` and its interval), each fairness column's in
    ``<column> against best``."""
    seeds = list(seeds)
    better = {**COLUMNS, "metric": task.better}
    worst = {c: (-math.inf if b == "higher" else math.inf) for c, b in better.items()}

    def values(method, column):
        s = table.loc[method, column] if method in table.index.get_level_values(0) else pd.Series(dtype=float)
        return [float(s.get(seed, math.nan)) if np.isfinite(s.get(seed, math.nan)) else worst[column]
                for seed in seeds]

    def order(column):  # the fewest diverged seeds first, then the mean over the seeds that finished
        sign = 1 if better[column] == "higher" else -1
        finite = {m: [x for x in values(m, column) if math.isfinite(x)] for m in methods}
        return sorted(methods, key=lambda m: (len(seeds) - len(finite[m]), -sign * _mean(finite[m] or [0.0]), m))

    methods = list(dict.fromkeys(table.index.get_level_values(0)))
    words = {"reproduces": "worse", "tie": "tie", "does not reproduce": "better"}
    rows = {m: {"method": m, "n": len(seeds), "diverged": int((table.loc[m].status != "ok").sum())} for m in methods}
    for column in better:
        ranked = order(column)
        for m in ranked:
            row, key = rows[m], "against best" if column == "metric" else f"{column} against best"
            mean, low, high = _interval(values(m, column))
            row.update({column: mean, f"{column} low": low, f"{column} high": high})
            if m == ranked[0]:
                row[key] = "best"
                continue
            e = per_seed_evidence(table, column, ranked[0], m, better[column], task.name, seeds=seeds)
            row[key] = words[e.word()]
            if column == "metric":
                s = e.stats()
                row.update({"difference": s["effect"], "difference low": s["low"], "difference high": s["high"]})
    for m in methods:
        reached = table.loc[m]["rounds to target"].dropna() if "rounds to target" in table else pd.Series([])
        rows[m].update({"reached": len(reached), "rounds to target": float(reached.mean()) if len(reached) else
                        math.nan, "upload KB": float(table.loc[m]["upload KB"].max()) if "upload KB" in table
                        else math.nan})
    out = pd.DataFrame([rows[m] for m in order("metric")])
    out.insert(0, "rank", range(1, len(out) + 1))
    return out


def _mean(v: list[float]) -> float:
    return sum(v) / len(v) if all(math.isfinite(x) for x in v) else (-math.inf if min(v) < 0 else math.inf)


def _interval(v: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95% t interval, or the mean (+-inf) three times where a run diverged."""
    return tuple(t_interval(v)[:3]) if all(math.isfinite(x) for x in v) else (_mean(v),) * 3


@dataclass
class Outcome:
    """One task's arena: the tuned settings, per-seed table, ranking, diverged runs and evaluation runs' frame."""

    task: ArenaTask
    tuned: dict
    table: pd.DataFrame
    ranking: pd.DataFrame
    diverged: list[dict]
    runs: int
    frame: pd.DataFrame = field(default=None, repr=False)

    def ties(self) -> list[str]:
        """The methods that cannot be told apart from the best (the best first)."""
        r = self.ranking
        return list(r[r["against best"].isin(["best", "tie"])].method)

    def sentence(self) -> str:
        """One line in words: who leads, who ties with it, on how many seeds."""
        ties = self.ties()
        n = int(self.ranking.n.iloc[0])
        if len(ties) == 1:
            return f"{self.task.name}: {ties[0]} is best and every other method is worse on {n} paired seeds."
        return (f"{self.task.name}: {ties[0]} has the best mean, but {', '.join(ties[1:])} cannot be told apart "
                f"from it on {n} paired seeds (tie).")

    def to_dict(self) -> dict:
        """What the summary stores (plain JSON: the ranking's rows and the tuned settings with their sources)."""
        rank = self.ranking.replace({math.inf: None, -math.inf: None}).astype(object)
        rank = rank.where(pd.notna(rank), None)
        return {"task": asdict(self.task), "ranking": rank.to_dict("records"), "ties": self.ties(),
                "sentence": self.sentence(), "diverged": self.diverged, "runs": self.runs,
                "tuned": {m: {**t.summary(), "source": "tuned"} for m, t in self.tuned.items()}}


def diverged_runs(table: pd.DataFrame, prefix: str) -> list[dict]:
    """The evaluation runs of a per-seed table (:func:`per_seed`) that diverged, as the report lists them (labelled
    ``"<prefix>: <method>"``)."""
    rounds = table.get("diverged round", pd.Series(dtype=float))
    return [{"label": f"{prefix}: {m}", "seed": int(s), "round": None if pd.isna(r := rounds.get((m, s))) else int(r),
             "role": "evaluation"} for (m, s), status in table.status.items() if status != "ok"]


def run_arena(tasks, methods, plan: Plan = Plan(), results="results", jobs: int | None = None,
              refresh: bool = False, contenders: dict[str, Contender] | None = None) -> dict[str, Outcome]:
    """Tune and evaluate ``methods`` on each of ``tasks`` (names of :data:`TASKS` and of ``contenders``, by default
    :data:`METHODS`; other contenders, e.g. one algorithm with parts of it switched off, get the same protocol)."""
    tasks, methods = check_names(tasks, methods, contenders)
    out = {}
    for name in tasks:
        task = TASKS[name]
        sign = 1.0 if task.better == "higher" else -1.0
        tuned = tune(specs(task, methods, plan, contenders), list(plan.tune_seeds),
                     lambda frame, task=task, sign=sign: sign * final_score(task.metric)(frame), results,
                     evaluation_seeds=list(plan.seeds), jobs=jobs, refresh=refresh, rungs=plan.rungs)
        finals = [config(task, m, tuned[m].setting, seed, plan.rounds, plan, contenders)
                  for m in methods for seed in plan.seeds]
        frame = sweep(finals, results, jobs=jobs, refresh=refresh)
        table = per_seed(frame, task, plan)
        diverged = diverged_runs(table, name)
        diverged += [dict(d, label=f"{name}: {d['label']}") for t in tuned.values() for d in t.diverged]
        runs = sum(len(t.scores) for t in tuned.values()) + len(finals)
        out[name] = Outcome(task, tuned, table, ranking(table, task, plan.seeds), diverged, runs, frame)
    return out


def plot(outcomes: dict[str, Outcome], column: str = "metric"):
    """One panel per task: every method's mean ``column`` with its 95% interval, ranked by the metric. Green and
    filled: the best or a tie with it (paired seeds); grey and hollow: significantly worse; the papers' methods in
    bold. The best's interval is shaded."""
    import matplotlib.pyplot as plt

    from .plots import OKABE_ITO, is_paper_method

    tied, worse = OKABE_ITO["green"], OKABE_ITO["grey"]
    fig, axes = plt.subplots(1, len(outcomes), figsize=(4.6 * len(outcomes), 0.32 * max(
        len(o.ranking) for o in outcomes.values()) + 1.6), squeeze=False)
    for ax, o in zip(axes[0], outcomes.values()):
        key = "against best" if column == "metric" else f"{column} against best"
        sign = 1 if (o.task.better if column == "metric" else COLUMNS[column]) == "higher" else -1
        r = o.ranking.assign(_key=sign * o.ranking[column]).sort_values(["_key", "method"], ascending=[True, False])
        r = r.reset_index(drop=True)  # the column's best last: at the top
        for y, row in r.iterrows():
            mean, low, high = row[column], row[f"{column} low"], row[f"{column} high"]
            if not math.isfinite(mean):
                ax.annotate("diverged", (0.02, y), xycoords=("axes fraction", "data"), va="center", fontsize=8)
                continue
            filled = row[key] in ("best", "tie")
            colour = tied if filled else worse
            ax.plot([low, high], [y, y], color=colour, lw=2.2)
            ax.plot(mean, y, "o", ms=7, color=colour, mfc=colour if filled else "white", mew=1.6)
        best = r.iloc[-1]
        if math.isfinite(best[f"{column} low"]):
            ax.axvspan(best[f"{column} low"], best[f"{column} high"], color=tied, alpha=0.12, lw=0)
        ax.set_yticks(range(len(r)), [f"{m} ({w})" for m, w in zip(r.method, r[key])], fontsize=9)
        for tick, m in zip(ax.get_yticklabels(), r.method):
            tick.set_fontweight("bold" if is_paper_method(m) else "normal")
        label = o.task.metric.replace("_", " ") if column == "metric" else column
        ax.set(xlabel=f"{label} ({o.task.better} is better)" if column == "metric" else label,
               title=f"{o.task.description}\n({int(o.ranking.n.iloc[0])} seeds, 95% t intervals; filled: a tie "
                     "with the best)")
        ax.title.set_fontsize(9)
    fig.tight_layout()
    return fig


NOTEBOOK = "92_arena"  # the notebook's summary name (and its figures' prefix) when it runs the whole arena


def summary_name(tasks, methods) -> str:
    """The name the arena notebook records its summary under: ``92_arena`` for every task and method, else a part's
    name, ``92_arena-`` with its tasks (and ``-N-methods`` for fewer methods): ``make reproduce``'s QSAR panel is
    ``92_arena-qsar``. A part never replaces the whole arena's summary, nor (:func:`figure_name`) its figures
    (:func:`fedcompanion.reproduction.report.shown_arena` chooses the one a report shows)."""
    tasks, methods = list(tasks), list(methods)
    part = ([] if sorted(tasks) == sorted(TASKS) else tasks) + \
        ([] if sorted(methods) == sorted(METHODS) else [f"{len(methods)}-methods"])
    return "-".join([NOTEBOOK, *part])


def figure_name(kind: str, summary: str) -> str:
    """The file name (no extension) of an arena figure: ``arena_ranking``, ``arena_fairness`` for the whole arena,
    with the part's suffix for a part (``arena_ranking-qsar``)."""
    return f"arena_{kind}{summary[len(NOTEBOOK):]}"


def markdown(summary: dict, name: str = NOTEBOOK) -> list[str]:
    """The report's arena section from a stored summary (``checks['arena']`` of the summary ``name``): per task its
    sentence and a ranked table with intervals, then where every hyperparameter came from."""
    part = "" if name == NOTEBOOK else f" This is a part of it, `{name}`; `make arena` runs the whole."
    lines = ["## The arena: every method on the same tasks", "",
             "Not a claim of any paper: every engine algorithm tuned by one protocol with one budget "
             "(`notebooks/92_arena.ipynb`, `fedcompanion.reproduction.arena`). Means over the evaluation seeds with "
             f"95% t intervals; *tie*: the paired difference with the best has an interval containing 0.{part}", "",
             f"![The arena's ranking](figures/{figure_name('ranking', name)}.png)", "",
             f"![The worst 10% of clients in the arena](figures/{figure_name('fairness', name)}.png)", ""]
    for o in summary.values():
        task = o["task"]
        lines += [f"### {task['description']}", "", f"* {o['sentence']}",
                  f"* {o['runs']} runs, {len(o['diverged'])} diverged.", "",
                  *table_head(["rank", "method", task["metric"], "against best", f"rounds to {task['target']:g}",
                               "upload KB / client-round", "client acc. std", "worst-10% acc.", "tuned"])]
        for r in o["ranking"]:
            tuned = o["tuned"][r["method"]]
            setting = ", ".join(f"{k} {v:g}" for k, v in tuned["value"].items())
            lines.append(f"| {r['rank']} | {r['method']} | {_cell(r, 'metric')} | {r['against best']} | "
                         f"{_num(r['rounds to target'])} ({r['reached']}/{r['n']}) | {_num(r['upload KB'])} | "
                         f"{_cell(r, 'client accuracy std')} | {_cell(r, 'worst-10% accuracy')} | {setting} |")
        lines.append("")
    return lines


def _num(x) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.4g}"


def _cell(row: dict, column: str) -> str:
    mean, low, high = row[column], row[f"{column} low"], row[f"{column} high"]
    if mean is None:
        return "diverged"
    return f"{mean:.4f} [{low:.4f}, {high:.4f}]"
