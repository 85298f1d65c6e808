"""The amortization gap, measured per image on a trained run (Cremer, Li & Duvenaud 2018; Kim et al. 2018),
for a model whose decoder is Bayesian: three gaps that add up. This module holds the estimator for any
model (:func:`measure_factors`, given its local log joint); :mod:`amortized_pyro.gap.measure` applies it to
the package's model and a trained run.

With q(θ) trained and frozen, for one image x_n and a Gaussian factor q(z_n) (:mod:`amortized_pyro.local.estimates`):

    L_n(q; θ)  = E_{q(z_n)}[log p(x_n | z_n, θ) + log p(z_n) − log q(z_n)],   L_n(q) = E_{q(θ)} L_n(q; θ)
    q*_n       = the best Gaussian factor for x_n under q(θ) that the measurement finds: the best of its
                 candidates (below), the guide's own factor (N(0, I) where the guide has none for x_n) among
                 them. The others: Adam from it on the mean of L_n(q; θ_m) over M *fitting* draws θ_1..θ_M ~ q(θ)
                 (``theta_draws``), per image until its windowed stopping rule (windows of 100 steps, stopped
                 after 3 without a rise of 0.05 nats; Cremer et al.: 10, any rise), best window's average
                 iterate, its learning rate halved on its plateaus, or a cap; and each refinement row's factor
    q*_nm      = the best Gaussian factor for x_n at θ_m alone: the better of q*_n and Adam at θ_m from it
                 (the same rule; the M optimizations run as one batched program, each (image, draw) with its
                 own learning rate and stopping)
    log p(x_n) := mean_m log p(x_n | θ_m); each log p(x_n | θ_m) by the importance-weighted bound with K
                 samples from q*_nm, and, as a second estimator, by annealed importance sampling from q*_nm
                 (:mod:`amortized_pyro.local.ais`); both are stochastic lower bounds

Every L_n(q) of a factor fitted to draws of θ (the guide's, q*'s, the refinement rows') is scored on S
*fresh* draws θ'_1..θ'_S ~ q(θ) (``score_draws``) that no optimization saw. Scored on the fitting draws, q*
would read too high (it fits their noise: by about the coupling gap / (M − 1) on a local quadratic reading),
every amortization gap too high and every coupling gap too low. The per-draw quantities q*_nm, L_n(q*_nm;
θ_m) and log p(x_n | θ_m) stay at their own θ_m. L_n(guide), L_n(q*) and the refinement rows share their z
draws (common random numbers: their differences, the gaps, have less variance than each).

    amortization gap   L_n(q*) − L_n(q_guide)                 what the encoder loses against the best factor
                                                              (SA-VI's q_guide: its encoder's factor refined by
                                                              its own steps and learning rate on the M draws)
    coupling gap       mean_m L_n(q*_nm; θ_m) − L_n(q*)       the cost of a q(z_n) that ignores θ (q(θ)q(z))
    approximation gap  log p(x_n) − mean_m L_n(q*_nm; θ_m)    the cost of the Gaussian family at each θ

so that the three add up to log p(x_n) − L_n(q_guide) (up to the Monte Carlo error of two sets of draws).
With θ fixed at E_q[θ] (``theta="mean"``) the coupling gap is zero up to optimization noise and the others
are Cremer et al.'s. The global term KL(q(θ) ‖ p(θ)) / N of the ELBO is the same for every q(z) and is left
out. Standard errors are over the images only: the θ draws, the z draws and the trained run (one seed) are
held fixed (errors over seeds and images together: :mod:`amortized_pyro.gap.pooling`). Refinement
(semi-amortized inference as an evaluation): ``refine_steps`` = (0, 5, 20, …) runs that many Adam steps (on
the fitting draws, at ``refine_lr``) from the guide's factor and records the gap left, L_n(q*) − L_n(q_k), where
q_k keeps, per image, the best on the selection draws of the guide's factor and the iterates of at most k steps
(as q* keeps its best; ``kept_steps`` says which): on a few fitting draws the steps can overfit them, and a row of
more steps would then read a larger gap left than one of fewer (constant-VI's 100 steps, in the Quickstart).

The choice. q*_n is the candidate of highest L_n on S'' *selection* draws θ''_s ~ q(θ) (``select_draws``), with
z draws of their own (the same z for every candidate); q*_nm the one of highest L_n(q; θ_m) on z draws of their
own at θ_m. Not on the fitting draws: the optimum fitted their noise and wins there even where it is worse
under q(θ) (where each draw of a wide q(θ) is another function of z: constant-VI's optimum from M = 4 draws
scored about 35 nats per image below its trained shared factor on fresh draws, docs/results.md). Not on the
score draws: the winner would be the candidate whose scoring error is highest, every gap biased up by it.
The selection draws are independent of the score draws, so L_n(q*) is an unbiased estimate of the chosen
factor's, and the amortization gap is ≥ 0 up to (i) the score draws' error of the difference L_n(q*) −
L_n(q_guide): mean zero, its standard error sd_s[L_n(q*; θ'_s) − L_n(q_guide; θ'_s)] / √S per image (S
per-draw values of common random numbers; 0 where the guide's factor wins, the two then one factor), which the
images' standard error holds; and (ii) the choice's own error: a candidate truly d < 0 below the guide's wins
with probability Φ(d / σ''), σ'' the selection estimate's standard error of the difference (≈ (i)'s at S'' =
S), so the chosen factor's expected true gap is ≥ min_d d Φ(d / σ'') ≈ −0.17 σ'' per image and candidate. A
refinement row's gap left is ≥ 0 alike. The q*_nm are ≥ q*_n at θ_m in the same sense, so the coupling gap is
≥ 0 up to the choice's error and the θ draws' Monte Carlo error of its two sets (mean_m L_n(q*; θ_m) on the
fitting draws against L_n(q*) on the fresh ones: about sd_θ L_n(q*; θ) √(1/M + 1/S), which one image's
coupling gap may show below 0). Fitted on finitely many draws, the optimum is worse than the best factor under
q(θ): the gaps err low. A capped q*: its optimization from the guide's factor (for a flow, the one that made
its winner, or that from the guide's flow where the guide's flow won) stopped at the cap, not by its rule,
whichever candidate won: a longer one might have found a better factor, so the image's amortization gap is a
lower bound and its coupling gap an upper bound; a capped q*_m, its coupling gap a lower bound and its
approximation gap an upper bound; the report counts both, and per image which candidate won
(``per_image["q_star_from"]``: the index among ``q_star_from``'s names, which count the wins).

Every random draw has an explicit key (:mod:`amortized_pyro.local.draws`): the numbers are the same whether the
draws are batched or taken one at a time (``chunk``).
"""
import math
from dataclasses import asdict, dataclass, replace

import torch
from tqdm.auto import tqdm

from amortized_pyro.local.ais import ais_log_marginal
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.estimates import CHUNK, local_elbo, per_draw, scoring_stderrs
from amortized_pyro.local.optimize import Optimum, StoppingRule, best_of, converge, kept_iterates, refine
from amortized_pyro.settings import Checked, setting

THETA_MODES = ("sample", "mean")


@dataclass
class GapSettings(Checked):
    """The Monte Carlo budget and q*'s stopping rule; recorded with every result. Each field is one option
    of the ``gap`` command (``theta_draws`` → ``--theta-draws``)."""

    importance_samples: int = setting(1000, "Importance samples K per image and θ draw for log p(x_n).", low=1)
    theta_draws: int = setting(8, "Draws M of θ ~ q(θ) that q* is fitted on (with --theta sample).", low=1)
    score_draws: int = setting(32, "Fresh draws S of θ ~ q(θ) that every L(q) of a fitted factor is scored on "
                              "(with --theta sample).", low=1)
    select_draws: int = setting(32, "Fresh draws of θ ~ q(θ) on which q* is chosen among its candidates: the "
                                "guide's factor, its optimum, the refinement rows (with --theta sample).", low=1)
    theta: str = setting("sample", "sample: draws of θ ~ q(θ); mean: θ = E_q[θ].", choices=THETA_MODES)
    samples: int = setting(100, "z draws per image and θ draw for each local ELBO.", low=1)
    lr: float = setting(5e-2, "Adam's first learning rate for q* and the q*_m (halved on plateaus).", low=0,
                       open_low=True)
    flow_lr: float = setting(1e-2, "Adam's first learning rate for q* and the q*_m in a flow family (halved on "
                             "plateaus); the best Gaussian beside them keeps --lr.", low=0, open_low=True)
    refine_lr: float = setting(1e-2, "Adam's learning rate of the refinement rows' steps.", low=0, open_low=True)
    step_samples: int = setting(8, "z draws per image (and θ draw) in each optimization step.", low=1)
    window: int = setting(100, "Stopping rule for q* and the q*_m, per image (and θ draw): windows of this many "
                         "steps ...", low=1)
    patience: int = setting(3, "... stop after this many windows without a rise (Cremer et al.: 10, with "
                           "--tolerance 0) ...", low=1)
    tolerance: float = setting(0.05, "... a rise: the window's mean objective more than this many nats above "
                              "its level at the last rise ...", low=0)
    max_steps: int = setting(2000, "... or after this many steps.", low=1)
    decay_patience: int = setting(2, "Halve a row's learning rate after this many windows and one more without "
                                 "a rise.", low=0)
    ais_steps: int = setting(1000, "Annealing steps T of the AIS estimate of log p(x_n | θ) (0: IWAE only).", low=0)
    ais_chains: int = setting(8, "AIS chains per image and θ draw.", low=1)
    leapfrog: int = setting(5, "Leapfrog steps of each AIS HMC transition.", low=1)
    chunk: int = setting(CHUNK, "Rows (θ draws × z draws × images) evaluated at once: memory only, no number "
                        "depends on it.", low=1)
    seed: int = setting(0, "Seeds the images and every draw of the evaluation: with a run's training seed added "
                       "unless --paired.", low=0)
    paired: bool = setting(False, "Measure every run on the images and draws of --seed alone, whatever its training "
                          "seed: right for comparing runs image by image; otherwise runs of different seeds get "
                          "different images and draws, and errors over seeds cover the images too.")

    def same_as(self, stored, flow=False):
        """Whether ``stored`` (a report's recorded settings) are these; ``flow_lr`` counts only for a flow
        family's report (so that reports of Gaussian guides made before it existed still match)."""
        def relevant(settings):
            return {k: v for k, v in settings.items() if flow or k != "flow_lr"}
        return relevant(stored) == relevant(asdict(self))

    def rule(self):
        return StoppingRule(self.window, self.patience, self.max_steps, self.decay_patience, self.tolerance)


@torch.no_grad()
def global_draws(guide, settings, generator):
    """(fit, score): the M draws θ_m ~ q(θ) of ``guide`` that q* is fitted on and the S fresh ones that
    every L(q) is scored on (:class:`~amortized_pyro.local.draws.Draws`, keyed from ``generator``); the median of
    q(θ) once each with ``theta="mean"`` or where q(θ) is a point mass; one empty draw each where the model has
    no global latent site."""
    fit, score = _values(guide, settings, generator, settings.theta_draws, settings.score_draws)
    return Draws.of(fit, generator), Draws.of(score, generator)


@torch.no_grad()
def selection_draws(guide, settings, generator):
    """The S'' draws θ''_s ~ q(θ) that q* is chosen on among its candidates (``select_draws``; the median once, or
    one empty draw, as in :func:`global_draws`), from ``generator`` after :func:`global_draws` has drawn from it
    (those are then the same with or without these)."""
    return Draws.of(_values(guide, settings, generator, settings.select_draws)[0], generator)


def _values(guide, settings, generator, *counts):
    """A list of global values per count: ``count`` draws of q(θ), or its median once, or one empty value."""
    if not guide.structure.globals:
        return [[{}] for _ in counts]
    if settings.theta == "mean" or guide.global_is_point():
        return [[guide.global_mean()] for _ in counts]
    return [[guide.global_sample(generator) for _ in range(count)] for count in counts]


def summarize(values):
    """{"mean", "stderr"} over images (stderr = sd / sqrt(n)), or None where there are no values. On the
    tensor itself, not :func:`~amortized_pyro.support.stats.mean_stderr`, which leaves NaN out: an image whose
    value is NaN must make the summary NaN, not vanish from it."""
    if values is None:
        return None
    n = values.numel()
    stderr = values.std().item() / math.sqrt(n) if n > 1 else math.nan
    return {"mean": values.mean().item(), "stderr": stderr}


def counted(names, choice):
    """{name: how many rows each candidate won}."""
    return dict(zip(names, torch.bincount(choice.flatten(), minlength=len(names)).tolist()))


def measure_factors(log_joint, x, fit, score, factor, size, settings, refine_steps=(), progress=False,
                    compact=False, coupling=True, flow=None, select=None, log=None):
    """The gaps of the module docstring for any model: ``log_joint(x, z, θ)`` its per-image local log joint
    (z [M, S, n, size] against θ stacked [M, ...]: see :mod:`amortized_pyro.local.estimates`), ``fit``, ``score``
    and ``select`` the fitting, the fresh and the selection global draws (:func:`global_draws`,
    :func:`selection_draws`; ``select`` None: q* is chosen on the fitting draws, with z draws of their own, which
    catches an optimum that fell below its start but not one that overfits the fitting draws), ``factor`` the
    guide's (μ, σ) [n, size] or None (then q* starts from N(0, I), a candidate in the guide's place);
    ``progress``: a progress bar per phase (without one, ``log`` where given gets a line as each phase begins);
    ``compact``: images leave the optimizations once stopped, where
    the log joint of some images is theirs alone (:func:`~amortized_pyro.local.optimize.converge`);
    ``coupling=False``: q(θ) is a point mass, so there is no coupling term (no q*_m: the coupling gap and
    L(q*_m) are None, the approximation gap is against L(q*)); ``flow``: the guide's factor is ``factor``
    followed by these transforms (:class:`~amortized_pyro.local.flows.RowFlow`, its parameters per image: the
    guide's own), and q* and the q*_m are members of that flow family (Cremer et al.'s q*_Flow); the best
    Gaussian factor is found beside them (``elbo_optimized_gaussian``; ``flow_gain``: how far the flow
    family's q* rises above it). The flow family's q* has two more candidates: the optimum from the best
    Gaussian with identity transforms, and that Gaussian itself (a flow whose transforms are the identity), so
    that it is no worse than the Gaussian q* wherever the optimization from the guide's flow ends lower.
    Returns (the result dict, q*'s :class:`~amortized_pyro.local.optimize.Optimum`)."""
    if flow is not None and refine_steps:
        raise ValueError("refinement rows are Adam steps on a Gaussian factor; a flow guide has none")
    rule, chunk, samples = settings.rule(), settings.chunk, settings.samples
    n = x.shape[0]
    start = factor if factor is not None else (torch.zeros(n, size, device=x.device),
                                               torch.ones(n, size, device=x.device))
    def bar(phase):
        if log is not None and not progress:
            log("gap: %s (%d images)" % (phase, n))
        return tqdm(desc="gap: %s (%d images)" % (phase, n), unit="step", disable=not progress, leave=False)

    lr = settings.lr if flow is None else settings.flow_lr  # q* and the q*_m, in their family
    with bar("q*") as q_bar:
        optimized = converge(log_joint, x, start[0], start[1].log(), fit.at("fit"), lr, rule,
                             settings.step_samples, compact=compact, chunk=chunk, bar=q_bar, flow=flow)
    own = ("the guide's factor" if flow is None else "the guide's flow") if factor is not None else \
        "N(0, I)" + ("" if flow is None else " with the guide's transforms")
    names = [own, own + ", optimized"]  # a factor no optimization made has the steps and cap of the one from it
    candidates = [Optimum(start[0], start[1].log(), optimized.steps, optimized.capped, flow), optimized]
    gaussian = None
    if flow is not None:
        with bar("Gaussian q*") as g_bar:
            gaussian = converge(log_joint, x, start[0], start[1].log(), fit.at("fit"), settings.lr, rule,
                                settings.step_samples, compact=compact, chunk=chunk, bar=g_bar)
        with bar("q* from the Gaussian q*") as f_bar:
            from_gaussian = converge(log_joint, x, gaussian.loc, gaussian.log_scale, fit.at("fit"), lr, rule,
                                     settings.step_samples, compact=compact, chunk=chunk, bar=f_bar,
                                     flow=flow.at_identity())
        names += ["the Gaussian q* with identity transforms, optimized", "the Gaussian q*"]
        candidates += [from_gaussian, replace(gaussian, flow=flow.at_identity())]
    rows_at = {}  # refinement steps → the candidate index of their factor
    for k in (refine_steps if factor is not None else ()):  # refinement starts from the guide's own factor
        if k:
            rows_at[k] = len(candidates)
            names.append("the guide's factor after %d refinement steps" % k)
            candidates.append(Optimum(*refine(log_joint, x, start[0], start[1].log(), fit.at("refine"),
                                              settings.refine_lr, k, settings.step_samples, chunk=chunk),
                                      optimized.steps, optimized.capped))
    best, won, chosen_on = best_of(log_joint, x, (fit if select is None else select).at("select"), samples, chunk,
                                   candidates)
    refined = kept_iterates(chosen_on, rows_at, candidates)
    per_theta, won_m = best, None
    if coupling:
        with bar("q*_m, %d θ draws" % len(fit)) as q_m_bar:
            optimized_m = converge(log_joint, x, best.loc, best.log_scale, fit.at("fit-per-draw"), lr, rule,
                                   settings.step_samples, per_draw=True, compact=compact, chunk=chunk, bar=q_m_bar,
                                   flow=best.flow)
        per_theta, won_m, _ = best_of(log_joint, x, fit.at("select"), samples, chunk, per_theta=True, candidates=[
            Optimum(best.loc, best.log_scale, optimized_m.steps, optimized_m.capped, best.flow), optimized_m])
    scored = score.at("score")
    optimized_draws = per_draw(log_joint, x, best.loc, best.log_scale.exp(), scored, samples, "mean", chunk,
                               best.flow)  # [S, n]: L_n(q*; θ'_s)
    elbo_optimized = optimized_draws.mean(0)
    q_m = (per_theta.loc, per_theta.log_scale.exp())
    per_theta_draws = per_draw(log_joint, x, *q_m, fit.at("score"), samples, "mean", chunk,
                               per_theta.flow) if coupling else None  # [M, n]: L_n(q*_m; θ_m)
    elbo_per_theta = per_theta_draws.mean(0) if coupling else None
    log_px = per_draw(log_joint, x, *q_m, fit.at("iwae"), settings.importance_samples, "logmeanexp", chunk,
                      per_theta.flow).mean(0)
    log_px_ais = None
    if settings.ais_steps:
        with bar("AIS") as ais_bar:
            log_px_ais = ais_log_marginal(log_joint, x, *q_m, fit.at("ais"), settings.ais_steps, settings.ais_chains,
                                          settings.leapfrog, chunk, ais_bar, per_theta.flow).mean(0)
    guide_draws = per_draw(log_joint, x, *start, scored, samples, "mean", chunk, flow) if factor is not None else None
    elbo_guide = guide_draws.mean(0) if factor is not None else None
    elbo_gaussian = None if gaussian is None else local_elbo(log_joint, x, gaussian.loc, gaussian.log_scale.exp(),
                                                             scored, samples, chunk)
    per_image = {"elbo_guide": elbo_guide, "elbo_optimized": elbo_optimized, "elbo_per_theta": elbo_per_theta,
                 "log_px": log_px, "log_px_ais": log_px_ais,
                 "amortization_gap": None if elbo_guide is None else elbo_optimized - elbo_guide,
                 "coupling_gap": elbo_per_theta - elbo_optimized if coupling else None,
                 "approximation_gap": log_px - (elbo_per_theta if coupling else elbo_optimized),
                 "iwae_minus_ais": None if log_px_ais is None else log_px - log_px_ais}
    if flow is not None:  # the flow family's q* beside the best Gaussian factor
        per_image.update(elbo_optimized_gaussian=elbo_gaussian, flow_gain=elbo_optimized - elbo_gaussian)
    rows = []
    for k in (refine_steps if factor is not None else ()):
        (loc, log_scale), kept = refined[k] if k else ((None, None), torch.zeros(n, dtype=torch.long))
        left = elbo_optimized - local_elbo(log_joint, x, loc, log_scale.exp(), scored, samples, chunk) if k else \
            per_image["amortization_gap"]  # 0: the same estimate
        rows.append({"steps": k, "gap_left": summarize(left), "per_image": left.tolist(), "kept_steps": kept.tolist()})
    result = {name: summarize(values) for name, values in per_image.items()}
    per_image.update(scoring_stderrs(optimized_draws, guide_draws, per_theta_draws))
    capped, capped_per_theta = int(best.capped.sum()), int(per_theta.capped.sum()) if coupling else 0
    per_image["q_star_from"] = won  # each image's winner: its index among q_star_from's names
    result.update(settings=asdict(settings), theta_draws=len(fit), score_draws=len(score),
                  select_draws=None if select is None else len(select), optimizer_steps=int(best.steps.max()),
                  capped=capped, mean_steps={"q*": best.steps.double().mean().item(),
                                             "q*_m": per_theta.steps.double().mean().item() if coupling else None},
                  capped_per_theta=capped_per_theta, hit_cap=capped + capped_per_theta > 0,
                  # rows whose q* is the guide's own factor, its optimization stopped by the cap: gap 0, unmeasured
                  kept_at_cap=int(((won == 0) & optimized.capped).sum()) if factor is not None else 0,
                  capped_gaussian=None if gaussian is None else int(gaussian.capped.sum()),  # flow_gain's other side
                  q_star_from=counted(names, won),
                  q_m_star_from=None if won_m is None else counted(["q*", "q*, optimized at θ_m"], won_m),
                  estimator="fresh score draws; q* and the q*_m the best of their candidates on %s" % (
                      "the fitting draws" if select is None else "selection draws"),
                  coupling=coupling, q_family="gaussian" if flow is None else "flow",
                  stderr_over="images (θ draws, z draws and the trained run held fixed)",
                  refine_steps=list(refine_steps), refinement=rows,
                  per_image={name: None if v is None else v.tolist() for name, v in per_image.items()})
    return result, best
