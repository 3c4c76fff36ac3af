"""What the package declares about each paper's claims, beside the evidence the notebooks store: what kind of
statement a claim is, where the paper makes it, which of its settings are the paper's own, and the margin of
practical relevance of each metric. The verdict rule reads these when a summary is read (:mod:`..decision`), so a
declaration changes words without recomputing a run.

* ``kind``: ``performance`` (a method against others on a metric: the papers' comparative claims and our extensions
  of them), or ``identity``, ``theorem`` and ``mechanism`` (an exact identity, a theorem's statement, a structural
  fact about an update rule): the headline counts the two groups apart.
* ``says``: the paper's own sentence, quoted from the text we hold (its mathematics in plain ASCII; ``[...]`` marks a
  cut, and a parenthesis says what our extract lacks), so that an audit reads the claim beside what it tests.
* ``own``: the settings that are the paper's own (the authors' experiment); a claim's word comes from those items,
  and its other items are reported as "in our settings". Empty: the paper gives no setting of its own (FedVRA's
  datasets are open) or every setting is the authors' (CEADMM's): every item counts.
"""
from __future__ import annotations

from dataclasses import dataclass

from .adafedadam import CLAIMS as _ADAFEDADAM
from .ceadmm import CLAIMS as _CEADMM
from .fedvra import CLAIMS as _FEDVRA

KINDS = ("performance", "identity", "theorem", "mechanism")


@dataclass(frozen=True)
class Declared:
    """One claim as the package declares it: ``kind`` (``KINDS``), ``where`` (its place in the paper, or ``ours``
    for an extension the paper does not make), ``says`` (the paper's sentence) and ``own`` (the names of the settings
    that are the paper's own)."""

    kind: str
    where: str
    says: str
    own: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"a claim's kind is one of {KINDS}, got {self.kind!r}")
        if not self.where.strip() or not self.says.strip():
            raise ValueError("a claim declares its place in the paper (where) and the paper's sentence (says)")

    def is_own(self, setting: str) -> bool:
        """Whether an item's ``setting`` is one of the paper's own, named ``NAME`` or ``NAME (details)`` (every
        setting is, where none is declared)."""
        return not self.own or any(setting == o or setting.startswith(f"{o} (") for o in self.own)


DECLARED: dict[str, Declared] = {cid: Declared(**d) for cid, d in {**_FEDVRA, **_CEADMM, **_ADAFEDADAM}.items()}

# The margin of practical relevance of each paired metric, in the metric's units, and why: a difference inside it is
# one no reader would act on, so an interval inside +-margin says "equivalent" (two one-sided tests at 5%) and a
# wider one containing 0 says "inconclusive". The project's non-inferiority margins (one accuracy point) set the
# scale for accuracies; a loss's margin is a few per cent of the losses reached.
MARGINS: dict[str, tuple[float, str]] = {
    **{metric: (0.01, "one accuracy point") for metric in (
        "test_accuracy", "mean accuracy", "client_accuracy_worst10", "final worst-10% accuracy",
        "best accuracy over the grid", "accuracy lost over the grid", "change in test_accuracy",
        "test_accuracy under the perturbation", "clustering_accuracy", "auc")},
    **{metric: (0.01, "one point of the spread of client accuracies") for metric in (
        "client_accuracy_std", "client accuracy std", "final std of accuracies")},
    **{metric: (0.01, "0.01 nats, 3-7% of the losses these runs reach (0.14 to 0.3)") for metric in (
        "mean loss over rounds", "test_loss")},
    "log10 (F - F*)": (0.1, "a tenth of a decade of the optimality gap (26%)"),
    "relative distance of the final model to x*": (0.01, "1% of the distance from the start"),
    "max_k I_k minus the minimax value": (0.01, "0.01 in the inverse training rates, which start at 1"),
    "clustering_objective": (1.0, "1 in an objective near 440 (0.2%)"),
    "communication rounds to a relative gap below 1e-08": (1.0, "one communication round"),
}


def declared(claim_id: str) -> Declared | None:
    """The declaration of ``claim_id``, if the package has one."""
    return DECLARED.get(claim_id)


def margin(metric: str) -> float | None:
    """The declared margin of practical relevance of ``metric`` (``None``: none declared)."""
    entry = MARGINS.get(metric)
    return None if entry is None else entry[0]
