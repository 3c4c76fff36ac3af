"""FedVRA ("Beyond ADMM", AAAI 2023): each claim's kind and place in the paper
(:mod:`fedcompanion.reproduction.papers`). The paper leaves its datasets, client counts and learning rates open, so no
setting is the paper's own: every item counts toward a claim's word."""

CLAIMS = {
    "fedvra.lemma1": dict(
        kind="identity", where="Lemma 1, eqs. (11)-(14)",
        says="Impressively, Lemma 1 tells that the federated ADMM is actually a CVR scheme which attempts to reduce "
             "the inter-client variance."),
    "fedvra.variance_reduction": dict(
        kind="mechanism", where="Lemma 1 and the CVR discussion",
        says="the term gamma_i beta lambda^r - lambda_i^r in (11) is actually a gradient correction so that "
             "g_i(x_i^{r,t}) + gamma_i beta lambda^r - lambda_i^r approximates the global SG, which shares the same "
             "spirit as existing CVR schemes."),
    "fedvra.client_drift": dict(
        kind="mechanism", where="the CVR discussion (client drift)",
        says="Furthermore, since x_i^{r,t+1} in (11) considers the combination with the averaged past model beta "
             "sum_j omega_j gamma_j x_j^r, it can further avoid the local model from deviating from the global one."),
    "fedvra.fig1.special_cases": dict(
        kind="identity", where="Fig. 1",
        says="we show that FedVRA has an intimate relation with the aforementioned FL algorithms in the sense that "
             "they are either special instances of FedVRA or close to it."),
    "fedvra.fig1.fedavg_limit": dict(
        kind="identity", where="Fig. 1",
        says="we show that FedVRA has an intimate relation with the aforementioned FL algorithms in the sense that "
             "they are either special instances of FedVRA or close to it. (Fig. 1 itself is not in our extract.)"),
    "fedvra.scaffold_not_a_case": dict(
        kind="mechanism", where="Fig. 1 (SCAFFOLD close to, not in, the family)",
        says="we show that FedVRA has an intimate relation with the aforementioned FL algorithms in the sense that "
             "they are either special instances of FedVRA or close to it."),
    "fedvra.fig2.dual_stepsize": dict(
        kind="performance", where="Fig. 2",
        says="if gamma_i eta_i is fixed and p_i^r gamma_i eta_i Q_i^r << 1, then increasing a_i^r or d_i^r properly "
             "can potentially decrease both D_1 and D_2, thereby accelerating the convergence of FedVRA. Such "
             "property is consistent with our discussions in the previous subsection and will also be verified "
             "through numerical experiments; see Fig. 2 in Sec. V-A."),
    "fedvra.fig2.aggregation_stepsize": dict(
        kind="performance", where="Fig. 2",
        says="Thereby, choosing a larger value of d_i^r would reduce the bias of the global model and accelerate the "
             "algorithm convergence."),
    "fedvra.a_and_heterogeneity": dict(
        kind="performance", where="Sec. II-B: a larger a the more non-IID the data",
        says="Otherwise, a relative large value of a_i^r is preferred when the data distribution gets more "
             "non-i.i.d. since fresh G_i^r is more effective in reducing the inter-client variance than the old "
             "ones."),
    "fedvra.unbiased_aggregation": dict(
        kind="identity", where="eqs. (15)-(16): d = N/m and the expected start point",
        says="From (16), the starting point is the model average sum_i omega_i gamma_i x~_i^{r+1} when d_i^r = N/m, "
             "whereas when, d_i^r = 1, the starting point is a convex combination of the model average and the past "
             "global model x_0^r."),
    "fedvra.fig3.faster": dict(
        kind="performance", where="Fig. 3",
        says="In addition, numerical results suggests that FedVRA has a faster convergence behavior than SCAFFOLD; "
             "see Fig. 3 of Sec. V-A."),
    "fedvra.fig3.upload": dict(
        kind="mechanism", where="the communication cost (one vector and one scalar)",
        says="in SCAFFOLD the client needs to upload two vector variables to the server in contrast to one vector "
             "variable and one scalar in FedVRA."),
    "fedvra.two_block": dict(
        kind="performance", where="FedVRA-U (the experiment is ours)",
        says="Lastly, we extend FedVRA to solve a class of semi/un-supervised problems which involve two blocks of "
             "variables and variable constraints."),
    "fedvra.theorem1.rate": dict(
        kind="theorem", where="Theorem 1, Corollary 1",
        says="Theorem 1 shows that, if the mini-batch size S = sqrt(R), then FedVRA converges to a stationary "
             "solution in the rate O(1/R + sigma^2/sqrt(R))."),
    "fedvra.table1": dict(
        kind="theorem", where="Table I (rates and assumptions of the compared algorithms)",
        says="Since the analysis does not make any assumption on the data homogeneity and client sampling strategy, "
             "FedVRA is robust to the non-i.i.d. data distribution and can adapt to arbitrary client sampling "
             "schemes. [...] These aspects are novel when compared to the existing FL algorithms (see Table 1)."),
    "fedvra.robustness": dict(
        kind="performance", where="abstract (arbitrary sampling, time-varying local work)",
        says="FedVRA is robust to the non-i.i.d. data distribution and can adapt to arbitrary client sampling "
             "schemes. Besides, since the number of local updates Q_i^r can be different for different clients and "
             "communication rounds, FedVRA is also robust to time-varying HLU."),
    "fedvra.adaptive_stepsize_rules": dict(
        kind="performance", where="the adaptive stepsizes (the rules are ours)",
        says="The first is that the adaptive dual stepsize a_i^r enables the algorithm to have extra flexibility in "
             "dealing with client heterogeneity, which would accelerate the algorithm convergence."),
    "fedvra.two_block_semi_supervised": dict(
        kind="performance", where="FedVRA-U (the experiment is ours)",
        says="Extensive experiments based on a (semi-)supervised image classification task demonstrate the "
             "superiority of FedVRA over the existing schemes."),
    "fedvra.pseudo_labels_help": dict(
        kind="performance", where="ours (FedVRA-U's semi-supervised form)",
        says="(The paper makes no such statement: the comparison with the labelled rows alone is ours.)"),
}
