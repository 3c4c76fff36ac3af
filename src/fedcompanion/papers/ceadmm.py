"""CEADMM and ICEADMM (Zhou & Li): each claim's kind and place in the paper (:mod:`fedcompanion.papers`). Every
setting follows the authors' code (linear regression, QSAR logistic regression), so every item counts."""

CLAIMS = {
    "ceadmm.optimality": ("theorem", "Corollary 3.1"),
    "ceadmm.fl_special_case": ("identity", "Fig. 1, Algorithms 1 and 4: FL as linearised ADMM"),
    "ceadmm.fig5.fewer_rounds": ("performance", "Fig. 5(b),(e)"),
    "ceadmm.fig4.cpu_time": ("performance", "Fig. 4(c),(f)"),
    "ceadmm.theorem31": ("theorem", "Theorem 3.1"),
    "ceadmm.rate": ("theorem", "Theorem 3.3"),
    "ceadmm.nonconvex.theorem31": ("theorem", "Theorem 3.1 (no convexity assumed)"),
    "ceadmm.nonconvex.theorem32": ("theorem", "Theorem 3.2"),
    "ceadmm.nonconvex.rate": ("theorem", "Theorem 3.3 (no convexity assumed)"),
    "ceadmm.sweep.cpu_time": ("performance", "Fig. 4(c),(f), over the sizes of the authors' code"),
}
