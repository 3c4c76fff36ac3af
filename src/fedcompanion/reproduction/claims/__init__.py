"""Each notebook's claims, built by the package: the evidence its verdicts are computed from.

A notebook computes (runs, identities, searches) and shows; the function here named after it turns what it
computed into the :class:`~fedcompanion.reproduction.claims.record.Claim`\\ s it records, with their items, controls,
numbers and settings, so that an audit reads three papers' evidence in this folder, beside the declarations of
:mod:`fedcompanion.reproduction.papers` (the paper's sentence, the claim's kind, the paper's own settings), not in 17
notebooks.

* :mod:`.fedvra`: FedVRA's identities, stepsizes and rate (notebooks fedvra/01, 02, 03, 06);
* :mod:`.fedvra_comparisons`: FedVRA against other methods (fedvra/04, 05, 07, 08, 09);
* :mod:`.ceadmm`: CEADMM and ICEADMM (ceadmm/01, 02);
* :mod:`.adafedadam`: AdaFedAdam's experiments (adafedadam/03, 04, 06);
* :mod:`.adafedadam_analysis`: what AdaFedAdam's paper derives and argues (adafedadam/01, 02, 05).

Each function takes the notebook's parameters ``P`` and, by keyword, the tables and numbers the notebook computed;
it returns the claims (or, where a notebook shows items before its claims, the items), and computes nothing but the
evidence: no run starts here.
"""
from __future__ import annotations

from ..rule.claim import words
from .record import Claim


def show(claims: list[Claim]) -> None:
    """Print each claim's items with their words within the claim (Holm-adjusted: :meth:`Claim.items`)."""
    for claim in claims:
        for word, item in claim.items():
            print(f"{claim.id}: {word}: {item.describe()}")


def show_items(items: list) -> None:
    """Print items on their own, each with its word within the list
    (:func:`fedcompanion.reproduction.rule.claim.words`)."""
    for word, item in zip(words(items), items):
        print(f"{word}: {item.describe()}")
