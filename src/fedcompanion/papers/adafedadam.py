"""AdaFedAdam (Ju et al., IEEE TMLCN 2024): each claim's kind and place in the paper (:mod:`fedcompanion.papers`;
the extract we hold numbers no section or figure, so places are named by their subject). Setting A is the authors'
(5 clients, Dirichlet(0.05), full participation, 200 rounds: their code); setting B (100 clients) is ours. Where a
claim was tested in both, its word comes from setting A."""
import numpy as np

_AUTHORS = ("A",)  # the setting named "A (...)": the authors' own experiment

CLAIMS = {
    "adafedadam.dmop.proportional": ("identity", "the DMOP formulation: its gradient is proportional to (2)'s"),
    "adafedadam.dmop.alpha_fair": ("theorem", "the DMOP formulation: its solution solves the alpha-fair problem, "
                                   "(p, alpha)-proportionally fair"),
    "adafedadam.dmop.scale": ("mechanism", "alpha-fair FL: the gradient's decreasing scale"),
    "adafedadam.theorem1": ("theorem", "Theorem 1 (N-AccAdam)"),
    "adafedadam.one_step_is_adam": ("identity", "AdaFedAdam with one local step: minibatch Adam"),
    "adafedadam.faster": ("performance", "introduction and experiments: faster than FedAvg and FedAdam", _AUTHORS),
    "adafedadam.fair_baselines": ("performance", "introduction: equivalent fairness, improved convergence",
                                  _AUTHORS),
    "adafedadam.fednova": ("performance", "FedNova's normalisation and the experiments", _AUTHORS),
    "adafedadam.robust": ("performance", "introduction: little fine-tuning of the server optimiser"),
    "adafedadam.alpha_front": ("performance", "alpha-fair FL: larger alpha, more uniform performance", _AUTHORS),
    "adafedadam.fednova_smoothness": ("mechanism", "FedNova's normalisation over-weights small L-constants"),
    "adafedadam.minimax_limit": ("theorem", "alpha-fair FL: the minimax limit"),
    "adafedadam.theorem2": ("theorem", "Theorem 2 (convex objectives)"),
    "adafedadam.cifar10": ("performance", "experiments: CIFAR-10"),
    "adafedadam.ablation": ("performance", "AdaFedAdam's three improvements over FedAdam (the ablation is ours)"),
    "adafedadam.biased_pseudo_gradients": ("performance", "FedAdam's biased pseudo-gradients: lower convergence and "
                                           "more unfairness"),
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
