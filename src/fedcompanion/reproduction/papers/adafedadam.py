"""AdaFedAdam (Ju et al., IEEE TMLCN 2024): each claim's kind and place in the paper
(:mod:`fedcompanion.reproduction.papers`; the extract we hold numbers no section or figure, so places are named by their
subject). Setting A is the authors' (5 clients, Dirichlet(0.05), full participation, 200 rounds: their code); setting B
(100 clients) is ours. Where a claim was tested in both, its word comes from setting A."""
import numpy as np

_AUTHORS = ("A",)  # the setting named "A (...)": the authors' own experiment

CLAIMS = {
    "adafedadam.dmop.proportional": dict(
        kind="identity", where="the DMOP formulation: its gradient is proportional to (2)'s",
        says="The gradient F(x^t, t) of the DMOP formulation is proportional to the gradient of the alpha-Fair "
             "Federated Learning ((2))."),
    "adafedadam.dmop.alpha_fair": dict(
        kind="theorem", where="the DMOP formulation: its solution solves the alpha-fair problem, (p, "
               "alpha)-proportionally fair",
        says="Thus, with first-order optimization methods, the solution of the DMOP formulation is also the solution "
             "of the alpha-fairness function, which has been proved to enjoy (p, alpha)-Proportional Fairness "
             "([20])."),
    "adafedadam.dmop.scale": dict(
        kind="mechanism", where="alpha-fair FL: the gradient's decreasing scale",
        says="It is noticeable that the gradient grad F(x^t) has decreasing scales due to the factor F^alpha(x^t). "
             "[...] Moreover, the DMOP formulation of Fair Federated Learning does not have the problem of "
             "decreasing gradient scales in the alpha-fairness function"),
    "adafedadam.theorem1": dict(
        kind="theorem", where="Theorem 1 (N-AccAdam)",
        says="However, the computation cost of N-AccAdam is linear to N but the speedup S is sublinear to N. Thus, "
             "with a fixed computation budget, the convergence rate of N-AccAdam is slower than Adam with the same "
             "hyperparameters."),
    "adafedadam.one_step_is_adam": dict(
        kind="identity", where="AdaFedAdam with one local step: minibatch Adam",
        says="When the client optimizers are fixed as SGD and 1 step is performed locally, the federated training is "
             "identical to minibatch Adam"),
    "adafedadam.faster": dict(
        kind="performance", where="introduction and experiments: faster than FedAvg and FedAdam", own=_AUTHORS,
        says="Better empirical performance of AdaFedAdam can be expected. (The experiments section, which states the "
             "comparison with FedAvg and FedAdam, is not in our extract.)"),
    "adafedadam.fair_baselines": dict(
        kind="performance", where="introduction: equivalent fairness, improved convergence", own=_AUTHORS,
        says="Compared with other FedAvg-based algorithms for fairness control, AdaFedAdam offer equivalent fairness "
             "guarantee with improved convergence properties."),
    "adafedadam.fednova": dict(
        kind="performance", where="FedNova's normalisation and the experiments", own=_AUTHORS,
        says="we argue that the inconsistency still exists in FedNova if only normalizing local updates with number "
             "of steps regardless of differences of L_k-smoothness constant of local objectives."),
    "adafedadam.robust": dict(
        kind="performance", where="introduction: little fine-tuning of the server optimiser",
        says="The proposed methods AdaFedAdam minimizes the efforts of fine-tuning by adapting default "
             "hyperparameters of Adam in centralized settings to federated training."),
    "adafedadam.alpha_front": dict(
        kind="performance", where="alpha-fair FL: larger alpha, more uniform performance", own=_AUTHORS,
        says="Setting larger values for alpha indicates greater demand for fair/uniform performances across clients "
             "at a cost of convergence ([20])"),
    "adafedadam.fednova_smoothness": dict(
        kind="mechanism", where="FedNova's normalisation over-weights small L-constants",
        says="In such cases, normalizing local updates with number of local SGD steps implicitly over-weights "
             "updates from objectives with smaller L-constants when computing pseudo-gradients."),
    "adafedadam.minimax_limit": dict(
        kind="theorem", where="alpha-fair FL: the minimax limit",
        says="The problem reduces to the federated optimization without fairness control if setting alpha = 0, and "
             "it restores the minimax approach for multi-objective optimization ([21]) if setting alpha a "
             "sufficiently large value."),
    "adafedadam.theorem2": dict(
        kind="theorem", where="Theorem 2 (convex objectives)",
        says="The convergence guarantee of AdaFedAdam for convex functions is proved as follows. [...] By "
             "normalizing local updates to the same l2-norm of local gradients, the convergence of AdaFedAdam can be "
             "guaranteed."),
    "adafedadam.cifar10": dict(
        kind="performance", where="experiments: CIFAR-10",
        says="(The CIFAR-10 experiments are not in our extract; the paper reports them among its experiments.)"),
    "adafedadam.ablation": dict(
        kind="performance", where="AdaFedAdam's three improvements over FedAdam (the ablation is ours)",
        says="AdaFedAdam has 3 improvements over standard FedAdam: (the list and any ablation are not in our "
             "extract; the ablation is ours)"),
    "adafedadam.biased_pseudo_gradients": dict(
        kind="performance", where="FedAdam's biased pseudo-gradients: lower convergence and more unfairness",
        says="The biased pseudo-gradients lead to even lower convergence and increase the unfairness of FedAdam."),
}


def proportional_fairness_gap(weights, losses_star, losses_other, alpha: float) -> float:
    r"""How far a model x falls below a candidate x* in the (p, alpha)-proportional fairness sense, relative:

    .. math:: \frac{\sum_k p_k F_k(x^*)^\alpha\,(F_k(x) - F_k(x^*))}{\sum_k p_k F_k(x^*)^{\alpha+1}}

    (``losses_star`` the F_k(x*), ``losses_other`` the F_k(x)). x* is (p, alpha)-proportionally fair when this is
    >= 0 for every x: no model lowers the losses' F_k(x*)^alpha-weighted sum. With convex F_k it holds at the
    minimiser of the alpha-fair objective sum_k p_k F_k^(alpha+1) / (alpha+1), whose first-order condition is
    sum_k p_k F_k(x*)^alpha grad F_k(x*) = 0 (then F_k(x) - F_k(x*) >= <grad F_k(x*), x - x*>)."""
    p, star, other = (np.asarray(v, dtype=float) for v in (weights, losses_star, losses_other))
    return float(p @ (star**alpha * (other - star)) / (p @ star ** (alpha + 1)))
