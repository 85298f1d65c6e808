"""The amortization gap, measured per image on a trained run (Cremer, Li & Duvenaud 2018; Kim et al. 2018),
for a model whose decoder is Bayesian: three gaps that add up. This module holds the estimator for any
model (:func:`measure_factors`, given its local log joint); :mod:`amortized_pyro.gap.measure` applies it to
the package's model and a trained run.

With q(θ) trained and frozen, for one image x_n and a Gaussian factor q(z_n) (:mod:`amortized_pyro.local.estimates`):

    L_n(q; θ)  = E_{q(z_n)}[log p(x_n | z_n, θ) + log p(z_n) − log q(z_n)],   L_n(q) = E_{q(θ)} L_n(q; θ)
    q*_n       = the best Gaussian factor for x_n under q(θ): Adam on the mean of L_n(q; θ_m) over M
                 *fitting* draws θ_1..θ_M ~ q(θ) (``theta_draws``), from the guide's factor (from the prior
                 where the guide has none for x_n), per image until its windowed stopping rule (windows
                 of 100 steps, stopped after 3 without a rise of 0.05 nats; Cremer et al.: 10, any rise),
                 best window's average iterate, its learning rate halved on its plateaus, or a cap
    q*_nm      = the best Gaussian factor for x_n at θ_m alone (Adam at θ_m, from q*_n, the same rule;
                 the M optimizations run as one batched program, each (image, draw) with its own learning
                 rate and stopping)
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
held fixed (errors over seeds and images together: :mod:`amortized_pyro.gap.pooling`). A q* stopped at the cap
makes the image's amortization gap a lower bound and its coupling gap an upper bound; a q*_m stopped at the
cap, its coupling gap a lower bound and its approximation gap an upper bound; the report counts both.
Refinement (semi-amortized inference as an evaluation): ``refine_steps`` = (0, 5, 20, …) runs that many Adam
steps (on the fitting draws, at ``refine_lr``) from the guide's factor and records the gap left, L_n(q*) −
L_n(q_k).

Every random draw has an explicit key (:mod:`amortized_pyro.local.draws`): the numbers are the same whether the
draws are batched or taken one at a time (``chunk``).
"""
import math
from dataclasses import asdict, dataclass, replace

import torch
from tqdm.auto import tqdm

from amortized_pyro.local.ais import ais_log_marginal
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.estimates import CHUNK, local_elbo, per_draw
from amortized_pyro.local.optimize import Optimum, StoppingRule, converge, refine
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
    if not guide.structure.globals:
        fit, score = [{}], [{}]
    elif settings.theta == "mean" or guide.global_is_point():
        fit, score = [guide.global_mean()], [guide.global_mean()]
    else:
        fit = [guide.global_sample(generator) for _ in range(settings.theta_draws)]
        score = [guide.global_sample(generator) for _ in range(settings.score_draws)]
    return Draws.of(fit, generator), Draws.of(score, generator)


def summarize(values):
    """{"mean", "stderr"} over images (stderr = sd / sqrt(n)), or None where there are no values. On the
    tensor itself, not :func:`~amortized_pyro.support.stats.mean_stderr`, which leaves NaN out: an image whose
    value is NaN must make the summary NaN, not vanish from it."""
    if values is None:
        return None
    n = values.numel()
    stderr = values.std().item() / math.sqrt(n) if n > 1 else math.nan
    return {"mean": values.mean().item(), "stderr": stderr}


def best_per_image(log_joint, x, draws, samples, chunk, candidates):
    """Per image the candidate :class:`~amortized_pyro.local.optimize.Optimum` (flow factors all) of highest
    L_n on ``draws`` (the fitting θ draws with z draws of their own, not the score draws, so that the choice
    does not select on the noise the reported L(q*) is estimated with), and how many images each candidate won."""
    values = torch.stack([local_elbo(log_joint, x, c.loc, c.log_scale.exp(), draws, samples, chunk, c.flow)
                          for c in candidates])
    pick = values.nan_to_num(nan=-math.inf).argmax(0)  # a NaN estimate never wins

    def chosen(tensors):
        stacked = torch.stack(tensors)
        return stacked.gather(0, pick.view(1, -1, *([1] * (stacked.dim() - 2))).expand(1, *stacked.shape[1:]))[0]

    return Optimum(chosen([c.loc for c in candidates]), chosen([c.log_scale for c in candidates]),
                   chosen([c.steps for c in candidates]), chosen([c.capped for c in candidates]),
                   candidates[0].flow.with_params(chosen([c.flow.params for c in candidates]))), \
        torch.bincount(pick, minlength=len(candidates)).tolist()


def measure_factors(log_joint, x, fit, score, factor, size, settings, refine_steps=(), progress=False,
                    compact=False, coupling=True, flow=None):
    """The gaps of the module docstring for any model: ``log_joint(x, z, θ)`` its per-image local log joint
    (z [M, S, n, size] against θ stacked [M, ...]: see :mod:`amortized_pyro.local.estimates`), ``fit`` and
    ``score`` the fitting and the fresh global draws (:func:`global_draws`), ``factor`` the guide's (μ, σ)
    [n, size] or None (then q* starts from N(0, I)); ``progress``: a progress bar per phase; ``compact``:
    images leave the optimizations once stopped, where the log joint of some images is theirs alone
    (:func:`~amortized_pyro.local.optimize.converge`); ``coupling=False``: q(θ) is a point mass, so there is
    no coupling term (no q*_m: the coupling gap and L(q*_m) are None, the approximation gap is against
    L(q*)); ``flow``: the guide's factor is ``factor`` followed by these transforms
    (:class:`~amortized_pyro.local.flows.RowFlow`, its parameters per image: the guide's own), and q* and the
    q*_m are the best members of that flow family per image (Cremer et al.'s q*_Flow); the best Gaussian
    factor is found beside them (``elbo_optimized_gaussian``; ``flow_gain``: how far the flow family's q* rises
    above it). The flow family's q* is, per image, the best on fresh z draws of three of its members: the
    optimum from the guide's factor, the optimum from the best Gaussian with identity transforms, and that
    Gaussian itself (a flow whose transforms are the identity), so that it is no worse than the Gaussian q*
    wherever one optimization from the guide's flow ends lower; the q*_m start from it. Its ``steps`` are the
    chosen member's last optimization's (the Gaussian q*'s, for the third). Returns (the result dict, q*'s
    :class:`~amortized_pyro.local.optimize.Optimum`)."""
    if flow is not None and refine_steps:
        raise ValueError("refinement rows are Adam steps on a Gaussian factor; a flow guide has none")
    rule, chunk, samples = settings.rule(), settings.chunk, settings.samples
    n = x.shape[0]
    start = factor if factor is not None else (torch.zeros(n, size, device=x.device),
                                               torch.ones(n, size, device=x.device))
    def bar(phase):
        return tqdm(desc="gap: %s (%d images)" % (phase, n), unit="step", disable=not progress, leave=False)

    lr = settings.lr if flow is None else settings.flow_lr  # q* and the q*_m, in their family
    with bar("q*") as q_bar:
        best = converge(log_joint, x, start[0], start[1].log(), fit.at("fit"), lr, rule,
                        settings.step_samples, compact=compact, chunk=chunk, bar=q_bar, flow=flow)
    gaussian = won = None
    if flow is not None:
        with bar("Gaussian q*") as g_bar:
            gaussian = converge(log_joint, x, start[0], start[1].log(), fit.at("fit"), settings.lr, rule,
                                settings.step_samples, compact=compact, chunk=chunk, bar=g_bar)
        with bar("q* from the Gaussian q*") as f_bar:
            from_gaussian = converge(log_joint, x, gaussian.loc, gaussian.log_scale, fit.at("fit"), lr, rule,
                                     settings.step_samples, compact=compact, chunk=chunk, bar=f_bar,
                                     flow=flow.at_identity())
        best, won = best_per_image(log_joint, x, fit.at("select"), samples, chunk,
                              [best, from_gaussian, replace(gaussian, flow=flow.at_identity())])
    per_theta = best
    if coupling:
        with bar("q*_m, %d θ draws" % len(fit)) as q_m_bar:
            per_theta = converge(log_joint, x, best.loc, best.log_scale, fit.at("fit-per-draw"), lr, rule,
                                 settings.step_samples, per_draw=True, compact=compact, chunk=chunk, bar=q_m_bar,
                                 flow=best.flow)
    scored = score.at("score")
    elbo_optimized = local_elbo(log_joint, x, best.loc, best.log_scale.exp(), scored, samples, chunk, best.flow)
    q_m = (per_theta.loc, per_theta.log_scale.exp())
    elbo_per_theta = per_draw(log_joint, x, *q_m, fit.at("score"), samples, "mean", chunk,
                              per_theta.flow).mean(0) if coupling else None
    log_px = per_draw(log_joint, x, *q_m, fit.at("iwae"), settings.importance_samples, "logmeanexp", chunk,
                      per_theta.flow).mean(0)
    log_px_ais = None
    if settings.ais_steps:
        with bar("AIS") as ais_bar:
            log_px_ais = ais_log_marginal(log_joint, x, *q_m, fit.at("ais"), settings.ais_steps, settings.ais_chains,
                                          settings.leapfrog, chunk, ais_bar, per_theta.flow).mean(0)
    elbo_guide = local_elbo(log_joint, x, *start, scored, samples, chunk, flow) if factor is not None else None
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
    refined = []
    for k in (refine_steps if factor is not None else ()):  # refinement starts from the guide's own factor
        if k:
            k_loc, k_log_scale = refine(log_joint, x, start[0], start[1].log(), fit.at("refine"), settings.refine_lr, k,
                                        settings.step_samples, chunk=chunk)
            left = elbo_optimized - local_elbo(log_joint, x, k_loc, k_log_scale.exp(), scored, samples, chunk)
        else:  # the guide's own factor: its gap is the amortization gap, the same estimate
            left = per_image["amortization_gap"]
        refined.append({"steps": k, "gap_left": summarize(left), "per_image": left.tolist()})
    result = {name: summarize(values) for name, values in per_image.items()}
    capped, capped_per_theta = int(best.capped.sum()), int(per_theta.capped.sum()) if coupling else 0
    result.update(settings=asdict(settings), theta_draws=len(fit), score_draws=len(score),
                  optimizer_steps=int(best.steps.max()), capped=capped,
                  mean_steps={"q*": best.steps.double().mean().item(),
                              "q*_m": per_theta.steps.double().mean().item() if coupling else None},
                  capped_per_theta=capped_per_theta, hit_cap=capped + capped_per_theta > 0,
                  capped_gaussian=None if gaussian is None else int(gaussian.capped.sum()),  # flow_gain's other side
                  q_star_from=None if won is None else dict(zip(("the guide's flow", "the Gaussian q* with identity "
                                                                 "transforms, optimized", "the Gaussian q*"), won)),
                  estimator="fresh score draws", coupling=coupling,
                  q_family="gaussian" if flow is None else "flow",
                  stderr_over="images (θ draws, z draws and the trained run held fixed)",
                  refine_steps=list(refine_steps), refinement=refined,
                  per_image={name: None if v is None else v.tolist() for name, v in per_image.items()})
    return result, best
