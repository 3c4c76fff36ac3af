"""FedVRA ("Beyond ADMM", AAAI 2023): each claim's kind and place in the paper (:mod:`fedcompanion.papers`). The
paper leaves its datasets, client counts and learning rates open, so no setting is the paper's own: every item
counts toward a claim's word."""

CLAIMS = {
    "fedvra.lemma1": ("identity", "Lemma 1, eqs. (11)-(14)"),
    "fedvra.variance_reduction": ("mechanism", "Lemma 1 and the CVR discussion"),
    "fedvra.client_drift": ("mechanism", "the CVR discussion (client drift)"),
    "fedvra.fig1.special_cases": ("identity", "Fig. 1"),
    "fedvra.fig1.fedavg_limit": ("identity", "Fig. 1"),
    "fedvra.scaffold_not_a_case": ("mechanism", "Fig. 1 (SCAFFOLD close to, not in, the family)"),
    "fedvra.fig2.dual_stepsize": ("performance", "Fig. 2"),
    "fedvra.fig2.aggregation_stepsize": ("performance", "Fig. 2"),
    "fedvra.a_and_heterogeneity": ("performance", "Sec. II-B: a larger a the more non-IID the data"),
    "fedvra.unbiased_aggregation": ("identity", "eqs. (15)-(16): d = N/m and the expected start point"),
    "fedvra.fig3.faster": ("performance", "Fig. 3"),
    "fedvra.fig3.upload": ("mechanism", "the communication cost (one vector and one scalar)"),
    "fedvra.two_block": ("performance", "FedVRA-U (the experiment is ours)"),
    "fedvra.theorem1.rate": ("theorem", "Theorem 1, Corollary 1"),
    "fedvra.table1": ("theorem", "Table I (rates and assumptions of the compared algorithms)"),
    "fedvra.robustness": ("performance", "abstract (arbitrary sampling, time-varying local work)"),
    "fedvra.adaptive_stepsize_rules": ("performance", "the adaptive stepsizes (the rules are ours)"),
    "fedvra.two_block_semi_supervised": ("performance", "FedVRA-U (the experiment is ours)"),
    "fedvra.pseudo_labels_help": ("performance", "ours (FedVRA-U's semi-supervised form)"),
}
