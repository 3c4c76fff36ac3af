"""FedVRA's claims about its own update: the identities of notebooks fedvra/01 and 02, the stepsizes of fedvra/03 and
the rate of fedvra/06 (:mod:`fedcompanion.reproduction.claims`)."""
from __future__ import annotations

import numpy as np

from ..plots import mean_spread
from ..rule.item import against, identity, paired, untestable
from .from_runs import early_values, per_seed_evidence, stopped_early
from .record import Claim


def variance_reduction_claims(P, *, lemma_gaps: dict, lemma_control: float, final_ratio, participations: list,
                              runs: dict) -> list[Claim]:
    """fedvra/01: Lemma 1 (eqs. 11 and 14) to 1e-10, the measured variance reduction on MNIST and the client drift
    of the 2-D problem. ``final_ratio``: V_corrected / V_raw after the last round, by (a, participation) and seed;
    ``runs``: the 2-D problem's runs by name."""
    full, partial = (final_ratio[1.0, f"{m} of {P.mnist_clients}"] for m in participations)
    distances = {name.split(" ")[0]: float(r.metric("distance").iloc[-1]) for name, r in runs.items()
                 if "a = 0" not in name}
    control_distance = float(runs["FedVRA (a = 0, d = 1)"].metric("distance").iloc[-1])
    control_ratio = final_ratio[0.0, f"{P.mnist_clients} of {P.mnist_clients}"]
    return [
        Claim("fedvra.lemma1", "FedVRA", "Federated ADMM's local step is SGD on a corrected gradient (Lemma 1, eqs. "
              "11 and 14): the dual is a running average of local gradients", ["fedvra_client_drift"],
              [identity("2-D least squares, a = 1 and a = 0.5", "largest deviation from eqs. (11)/(14) over 4 rounds",
                        max(lemma_gaps.values()), 1e-10)],
              settings="three 2-D least-squares clients, full gradients, float64",
              controls=[identity("2-D least squares, a = 0.5 predicted with a = 1", "largest deviation from eqs. "
                                 "(11)/(14) over 4 rounds", lemma_control, 1e-10)]),
        Claim("fedvra.variance_reduction", "FedVRA", "The correction reduces client variance: the corrected local "
              "gradients are closer to the global gradient than the raw ones", ["fedvra_variance_reduction"],
              [against(f"MNIST, {m} of {P.mnist_clients} clients per round", f"V_corrected / V_raw after "
                       f"{P.mnist_rounds} rounds with a = 1 against 1 (no reduction)", "variance ratio", "lower",
                       ratio.values, 1.0, ratio.index) for m, ratio in zip(participations, (full, partial))],
              f"V_corrected / V_raw after {P.mnist_rounds} rounds with a = 1: every client each round "
              f"{mean_spread(full, 3)}, a quarter {mean_spread(partial, 3)} (a = 0: 1 by construction)",
              f"MNIST softmax regression, Dirichlet(0.1), {P.mnist_clients} clients, one local epoch of batches of 32, "
              f"lr {P.mnist_lr}, gamma {P.mnist_gamma}",
              "the paper states the lemma; this measurement is ours",
              controls=[against(f"MNIST, {P.mnist_clients} of {P.mnist_clients} clients per round", f"V_corrected / "
                                f"V_raw after {P.mnist_rounds} rounds with a = 0 (no correction) against 1",
                                "variance ratio", "lower", control_ratio.values, 1.0, control_ratio.index)]),
        Claim("fedvra.client_drift", "FedVRA", "FedVRA removes FedAvg's client drift (it converges to the optimum, "
              "FedAvg to a biased point)", ["fedvra_client_drift"],
              [identity("2-D least squares", f"FedVRA's distance to x* after {P.rounds} rounds", distances["FedVRA"],
                        1e-8),
               against("2-D least squares", f"FedAvg's distance to x* after {P.rounds} rounds, against the tolerance "
                       "1e-8", "distance", "higher", [distances["FedAvg"]], 1e-8, deterministic=True)],
              "distance to x* after {} rounds: FedAvg {:.2e}, FedVRA {:.2e}".format(P.rounds, *distances.values()),
              settings="three 2-D least-squares clients, full participation, full-gradient local steps",
              controls=[identity("2-D least squares", f"FedVRA with a = 0 (no dual update)'s distance to x* after "
                                 f"{P.rounds} rounds", control_distance, 1e-8)]),
    ]


def one_family_claims(P, *, table, mus, gaps, wrong_gaps, off_identity: float, near_scaffold: float,
                      at_scaffold: dict, to_fedavg: float, near_feddyn: float, near_fedprox: float,
                      starts: int) -> list[Claim]:
    """fedvra/02: the special cases of Fig. 1 (``table``: each other algorithm's largest difference from FedVRA),
    FedAvg as the limit gamma -> 0 (``gaps`` at ``mus``; ``wrong_gaps``: the control's) and SCAFFOLD's distance to
    the nearest FedVRA over continuous (gamma, a, d), from ``starts`` starts, with two off-grid special cases as
    controls."""
    searched = ("least squares, float64, equal weights, three federations at once: the nearest FedVRA over continuous "
                "(gamma, a, d)")
    slope = float(np.polyfit(np.log(mus), np.log(gaps), 1)[0])  # gap ~ mu^slope; a limit at rate mu: slope 1
    wrong_slope = float(np.polyfit(np.log(mus), np.log(wrong_gaps), 1)[0])
    return [
        Claim("fedvra.fig1.special_cases", "FedVRA", "FedADMM, FedProx and FedDyn are special cases of FedVRA (Fig. "
              "1)", ["fedvra_family"],
              [identity("least squares, float64", f"FedVRA against {o}", d, 1e-10)
               for o, d in zip(table["other algorithm"], table["max |difference|"])],
              settings=f"least squares, {P.num_clients} clients of unequal size, {P.clients_per_round} per round, "
              "mini-batches, Q ~ U{1..5}, float64",
              deviations="FedProx is a special case only in its unbiased server form (with unequal weights)",
              controls=[identity("least squares, float64", "FedVRA at a = 0.5, d = 1 (not a = d = 1) against "
                                 "FedADMM", off_identity, 1e-10)]),
        Claim("fedvra.fig1.fedavg_limit", "FedVRA", "FedAvg is the limit gamma -> 0", ["fedvra_family"],
              [identity("least squares, float64", "the gap to FedAvg falls as gamma^1 (|slope - 1| of log gap "
                        "against log gamma)", abs(slope - 1), 0.05)],
              f"slope {slope:.3f}; gap to FedAvg: " + ", ".join(f"mu={mu:g}: {g:.1e}" for mu, g in zip(mus, gaps))
              + f"; control (FedAvg averaging the sampled models, not the unbiased step): slope {wrong_slope:.3f}",
              controls=[identity("least squares, float64", "the gap to FedAvg averaging the sampled models (another "
                                 "algorithm) falls as gamma^1 (|slope - 1|)", abs(wrong_slope - 1), 0.05)]),
        Claim("fedvra.scaffold_not_a_case", "FedVRA", "SCAFFOLD is close to FedVRA but not a special case",
              ["fedvra_family"],
              [against(searched, "not a special case: the nearest FedVRA differs from SCAFFOLD by more than 1e-8",
                       "max |difference|", "higher", [near_scaffold], 1e-8, deterministic=True),
               against(searched, "close: the nearest FedVRA is nearer to SCAFFOLD than FedAvg is", "distance to the "
                       "nearest FedVRA / distance to FedAvg", "lower", [near_scaffold / to_fedavg], 1.0,
                       deterministic=True)],
              f"nearest FedVRA {near_scaffold:.3f} away ({', '.join(f'{k} = {v:.3g}' for k, v in at_scaffold.items())}"
              f"), FedAvg {to_fedavg:.3f}; the controls found to {near_feddyn:.1e} (FedDyn) and {near_fedprox:.1e} "
              "(FedProx)",
              f"{searched}: Nelder-Mead on the squared distance from {starts} starts within log gamma in [log 1e-3, "
              "log 100], a in [0, 3], d in [0.1, 10]; the controls are special cases off any grid",
              controls=[against(searched, f"{name} (a special case): the nearest FedVRA differs by more than 1e-8",
                                "max |difference|", "higher", [gap], 1e-8, deterministic=True)
                        for name, gap in (("FedDyn, alpha = 0.55", near_feddyn), ("FedProx, mu = 0.3", near_fedprox))]),
    ]


STEPSIZE_PAIRS = {"dual": [("a=1, d=1/p", "a=0.5, d=1/p"), ("a=0.5, d=1/p", "a=0, d=1/p")],
                  "aggregation": [("a=1, d=1/p", "a=1, d=1")]}  # (faster, slower) as the paper claims


def adaptive_stepsize_claims(P, *, per_run, spread, frame, splits: list, samplings: list, iid: str,
                             unbiased: float, biased: float, num_clients: int, active: int) -> list[Claim]:
    """fedvra/03: Fig. 2's two stepsizes (``per_run``: each run's speed, the mean accuracy over the rounds, by
    split, sampling, stepsizes and seed; ``spread``: its lists), the interaction of a with heterogeneity (the gain
    of a larger a under each non-IID split against under ``iid``) and eqs. (15)/(16) (the expectation over every
    set of ``active`` of ``num_clients`` clients, relative deviation ``unbiased`` with d = 1/p, ``biased`` with
    d = 1)."""
    tables = {(split, sampling): per_run.loc[(split, sampling)].rename_axis(["label", "seed"])
              for split in splits for sampling in samplings}
    evidence = {kind: [per_seed_evidence(t, "auc", hi, lo, "higher", f"{split}, {sampling} sampling",
                                         question=f"{hi} vs {lo}", seeds=P.seeds)
                       for (split, sampling), t in tables.items() for hi, lo in pairs]
                for kind, pairs in STEPSIZE_PAIRS.items()}

    def gains(split, hi, lo, sampling="uniform"):  # per seed, how much faster hi is than lo under split
        auc = per_run.loc[(split, sampling)].auc
        return [float(auc[hi, s] - auc[lo, s]) for s in P.seeds]

    def interaction_item(split, hi, lo):
        return paired(f"{split} against {iid}, uniform sampling", f"the gain of {hi} over {lo}: under {split} "
                      f"against under {iid}", "gain in mean accuracy", "higher", gains(split, hi, lo),
                      gains(iid, hi, lo), P.seeds)

    interaction = [interaction_item(split, hi, lo) for split in splits for hi, lo in STEPSIZE_PAIRS["dual"]]
    # its control, the claim's negation: a smaller a preferred the more non-IID the data (the test must reject it)
    interaction_control = [interaction_item(next(iter(splits)), *reversed(STEPSIZE_PAIRS["dual"][0]))]

    def stopped(kind):  # the control: the first pair's slower member stopped at half its rounds, in the faster's place
        (split, sampling), (hi, lo) = next(iter(tables)), STEPSIZE_PAIRS[kind][0]
        runs = frame[(frame.split == split) & (frame.sampling == sampling)].assign(label=lambda f: f.stepsizes)
        early = early_values(runs, "test_accuracy", lo, P.seeds, "higher", reduce=lambda s: s.mean())
        return [stopped_early(evidence[kind][0], early, hi, lo)]

    def numbers(labels):
        return "; ".join(f"{split}, {sampling}: " + ", ".join(f"{lab} {mean_spread(spread[split, sampling, lab])}"
                                                             for lab in labels)
                         for split in splits for sampling in samplings)

    settings = (f"{P.dataset}, MLP 784-200-200-10, {P.num_clients} clients, {P.clients_per_round} per round, "
                f"{P.rounds} rounds, one local epoch of batches of {P.batch_size}, lr {P.lr}, gamma {P.gamma}, "
                f"seeds {P.seeds}; speed = mean test accuracy over the evaluated rounds")
    return [
        Claim("fedvra.fig2.dual_stepsize", "FedVRA", "A larger dual stepsize a converges faster on non-IID data (Fig. "
              "2)", ["fedvra_fig2_stepsizes"], evidence["dual"],
              "mean accuracy over the rounds, " + numbers(["a=0, d=1/p", "a=0.5, d=1/p", "a=1, d=1/p"]), settings,
              "datasets, model, client counts and step sizes are ours (the paper's are not recoverable)",
              controls=stopped("dual")),
        Claim("fedvra.fig2.aggregation_stepsize", "FedVRA", "A larger aggregation stepsize d (d = 1/p: unbiased) "
              "converges faster than d = 1 (Fig. 2)", ["fedvra_fig2_stepsizes"], evidence["aggregation"],
              "mean accuracy over the rounds, " + numbers(["a=1, d=1", "a=1, d=1/p"]), settings,
              "datasets, model, client counts and step sizes are ours", controls=stopped("aggregation")),
        Claim("fedvra.a_and_heterogeneity", "FedVRA", "A relatively large dual stepsize a is preferred the more "
              "non-IID the data (Sec. II-B)", ["fedvra_fig2_stepsizes"], interaction,
              "gain in mean accuracy over the rounds, mean over the seeds: " + "; ".join(
                  f"{hi} over {lo}: " + ", ".join(f"{split} {np.mean(gains(split, hi, lo)):+.4f}" for split in
                                                 [*splits, iid]) for hi, lo in STEPSIZE_PAIRS["dual"]),
              settings + f"; the same dual stepsizes on an {iid} split, uniform sampling",
              "the paper states it without an experiment: the IID split against the two non-IID ones, and speed as "
              "the mean accuracy over the rounds, are ours", reconstruction=True, controls=interaction_control),
        Claim("fedvra.unbiased_aggregation", "FedVRA", "Under uniform sampling, d = N/m makes the expected start point "
              "the model average (unbiased); d = 1 is biased towards the old model (eqs. 15-16)", [],
              [identity("least squares, 6 clients, 2 active, float64", "E over all 15 sets of active clients of the "
                        "aggregation step with d = 1/p, against full participation's (relative)", unbiased, 1e-12)],
              f"relative deviation: d = 1/p {unbiased:.1e}; d = 1 {biased:.3f} (1 - m/N = "
              f"{1 - active / num_clients:.3f})",
              "one round from x^0 of least squares (6 clients, dimension 5, 3 full-batch local steps, gamma 1), every "
              "set of 2 active clients with probability 2/6", "the problem is ours: the identity holds for any",
              controls=[identity("least squares, 6 clients, 2 active, float64", "the same expectation with d = 1 "
                                 "(the biased choice), against full participation's (relative)", biased, 1e-12)]),
    ]


def rate_claims(P, *, slopes, path_slopes, cases: list[tuple[str, str]], variants: list[str]) -> list[Claim]:
    """fedvra/06: Theorem 1's rate as the log-log slope of the tail-average squared gradient norm against the
    horizon (``slopes``; ``path_slopes``: the whole path's), seed by seed, for ``cases`` = [(FedVRA, S = sqrt(R)):
    the claim, (FedVRA, fixed S): its control, (FedAvg, S = sqrt(R)): a comparison] and FedVRA under each of
    ``variants`` (non-uniform sampling, time-varying local work); and Table I, not testable."""
    claimed, control, compared = (f"{method}, {rule}" for method, rule in cases)
    sqrt, fixed = cases[0][1], cases[1][1]
    question = "the log-log slope of the tail-average squared gradient norm against the bound's -1/2"
    evidence = [against("QSAR logistic, FedVRA, S = sqrt(R)", question, "slope", "lower", slopes[claimed], -0.5,
                        slopes.index)]
    evidence += [against(f"QSAR logistic, FedVRA, S = sqrt(R), {variant}", question, "slope", "lower",
                         slopes[f"FedVRA, {sqrt}, {variant}"], -0.5, slopes.index) for variant in variants]
    controls = [against(f"QSAR logistic, FedVRA, {fixed}", question, "slope", "lower", slopes[control], -0.5,
                        slopes.index)]
    return [
        Claim("fedvra.theorem1.rate", "FedVRA", "With mini-batches S = sqrt(R), FedVRA converges to a stationary point "
              "at the rate O(1/R + sigma^2/sqrt(R)) (Theorem 1, Corollary 1)", ["fedvra_theorem1_rate"], evidence,
              f"tail-average slope: FedVRA with S = sqrt(R) {mean_spread(slopes[claimed], 3)}, with {fixed} "
              f"{mean_spread(slopes[control], 3)}, FedAvg with S = sqrt(R) {mean_spread(slopes[compared], 3)}"
              + "".join(f", FedVRA with S = sqrt(R) under {v} {mean_spread(slopes[f'FedVRA, {sqrt}, {v}'], 3)}"
                        for v in variants) +
              f"; whole-path slope (passed by all three): {mean_spread(path_slopes[claimed], 3)}, "
              f"{mean_spread(path_slopes[control], 3)}, {mean_spread(path_slopes[compared], 3)}",
              f"QSAR logistic (mu 1e-3, float64), {P.num_clients} clients, {P.clients_per_round} per round (uniform), "
              f"{P.local_steps} local SGD steps of {P.lr:g}, FedVRA a = 1, d = N/m, gamma 0.1; horizons {P.horizons}"
              f"; seeds {P.seeds}; and, each alone, weighted sampling (p_i proportional to the data size, d_i = 1/p_i)"
              f" and steps ~ U{{1..{2 * P.local_steps - 1}}} per client and round",
              "the paper proves the rate and measures nothing; the problem, the tail window (rounds R/2 to R-1: the "
              "bound holds from any start round) and the slope test are ours",
              reconstruction=True, controls=controls),
        Claim("fedvra.table1", "FedVRA", "FedVRA's rate holds under assumptions the compared algorithms' rates need "
              "more of (arbitrary sampling, time-varying local work, no data homogeneity) (Table I)", [],
              [untestable("the papers' theorems", "FedVRA's rate and assumptions beside those of the compared "
                          "algorithms", "Table I sets theorems side by side (rates proved in other papers under their "
                          "assumptions); no run decides which assumptions a proof needs, and our copy of the paper "
                          "lacks the table's entries. FedVRA's own rate is measured above (fedvra.theorem1.rate)")],
              "nothing measured", "", "not run: a comparison of proofs"),
    ]
