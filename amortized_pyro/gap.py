"""The amortization gap, measured per image on a trained run (Cremer, Li & Duvenaud 2018; Kim et al. 2018),
for a model whose decoder is Bayesian: three gaps that add up.

With q(θ) trained and frozen, M draws θ_m ~ q(θ) shared by every quantity, for one image x_n and a Gaussian
factor q(z_n) (:mod:`amortized_pyro.local_elbo`):

    L_n(q; θ)  = E_{q(z_n)}[log p(x_n | z_n, θ) + log p(z_n) − log q(z_n)],   L_n(q) = mean_m L_n(q; θ_m)
    q*_n       = the best Gaussian factor for x_n under q(θ): Adam on L_n (on the same M draws θ_m) from
                 the guide's factor (from the prior where the guide has none for x_n), per image until its
                 windowed stopping rule (Cremer et al.: windows of 100 steps, patience 10), best iterate,
                 learning rate halved on plateaus, or a cap
    q*_nm      = the best Gaussian factor for x_n at θ_m alone (Adam at θ_m, from q*_n, the same rule)
    log p(x_n) := mean_m log p(x_n | θ_m); each log p(x_n | θ_m) by the importance-weighted bound with K
                 samples from q*_nm, and, as a second estimator, by annealed importance sampling from q*_nm
                 (:mod:`amortized_pyro.ais`); both are stochastic lower bounds

    amortization gap   L_n(q*) − L_n(q_guide)                 what the encoder loses against the best factor
                                                              (SA-VI's q_guide: its encoder's factor refined by
                                                              its own steps and learning rate on L_n(q))
    coupling gap       mean_m L_n(q*_nm; θ_m) − L_n(q*)       the cost of a q(z_n) that ignores θ (q(θ)q(z))
    approximation gap  log p(x_n) − mean_m L_n(q*_nm; θ_m)    the cost of the Gaussian family at each θ

so that the three add up to log p(x_n) − L_n(q_guide). With θ fixed at E_q[θ] (``theta="mean"``) the
coupling gap is zero up to optimization noise and the others are Cremer et al.'s. The global term
KL(q(θ) ‖ p(θ)) / N of the ELBO is the same for every q(z) and is left out. Standard errors are over the
images only: the θ draws, the z draws and the trained run (one seed) are held fixed. A q* stopped at the cap
makes the image's amortization gap a lower bound and its coupling gap an upper bound; a q*_m stopped at the
cap, its coupling gap a lower bound and its approximation gap an upper bound; the report counts both. Refinement (semi-amortized inference as an evaluation): ``refine_steps`` = (0, 5, 20, …) runs that
many of q*'s Adam steps from the guide's factor and records the gap left, L_n(q*) − L_n(q_k).
"""
import math
from dataclasses import asdict, dataclass

import torch

import pyro

from .ais import ais_log_marginal
from .evaluation import factor
from .local_elbo import StoppingRule, converge, local_elbo, log_weights, refine
from .model import decode
from .settings import Checked, option

THETA_MODES = ("sample", "mean")


@dataclass
class GapSettings(Checked):
    """The Monte Carlo budget and q*'s stopping rule; recorded with every result. Each field is one option
    of the ``gap`` command (``theta_draws`` → ``--theta-draws``)."""

    importance_samples: int = option(1000, "Importance samples K per image and θ draw for log p(x_n).", low=1)
    theta_draws: int = option(8, "Draws M of θ ~ q(θ) shared by every quantity (with --theta sample).", low=1)
    theta: str = option("sample", "sample: M draws of θ ~ q(θ); mean: θ = E_q[θ].", choices=THETA_MODES)
    samples: int = option(100, "z draws per image and θ draw for each local ELBO.", low=1)
    lr: float = option(1e-2, "Adam's learning rate for q* and refinement.", low=0, open_low=True)
    step_samples: int = option(8, "z draws per image in each optimization step.", low=1)
    window: int = option(100, "Stopping rule for q*: windows of this many steps ...", low=1)
    patience: int = option(10, "... stop after this many windows without improvement ...", low=1)
    max_steps: int = option(5000, "... or after this many steps.", low=1)
    decay_patience: int = option(2, "Halve the learning rate when the total over the images has not improved "
                                 "for this many windows.", low=1)
    ais_steps: int = option(200, "Annealing steps T of the AIS estimate of log p(x_n | θ) (0: IWAE only).", low=0)
    ais_chains: int = option(8, "AIS chains per image and θ draw.", low=1)
    leapfrog: int = option(5, "Leapfrog steps of each AIS HMC transition.", low=1)
    chunk: int = option(100, "Importance samples evaluated at once (memory).", low=1)
    seed: int = option(0, "Seeds every draw of the evaluation.")

    def rule(self):
        return StoppingRule(self.window, self.patience, self.max_steps, self.decay_patience)


def theta_draws(guide, settings, generator):
    """The M fixed draws of θ ~ q(θ) of ``guide`` (or its median once) that every evaluation shares."""
    if settings.theta == "mean":
        return [guide.global_mean()]
    return [guide.global_sample(generator) for _ in range(settings.theta_draws)]


@torch.no_grad()
def log_marginal(log_joint, x, loc, scale, thetas, K, chunk, generator):
    """log p(x_n) per image [n]: the K-sample importance-weighted bound with proposal N(loc, scale²) for each
    θ in ``thetas``, averaged over θ."""
    bounds = []
    for theta in thetas:
        total = None
        for start in range(0, K, chunk):
            part = torch.logsumexp(log_weights(log_joint, x, loc, scale, theta, min(chunk, K - start), generator), 0)
            total = part if total is None else torch.logaddexp(total, part)
        bounds.append(total - math.log(K))
    return torch.stack(bounds).mean(0)


def summarize(values):
    """{"mean", "stderr"} over images (stderr = sd / sqrt(n)), or None where there are no values."""
    if values is None:
        return None
    n = values.numel()
    stderr = values.std().item() / math.sqrt(n) if n > 1 else math.nan
    return {"mean": values.mean().item(), "stderr": stderr}


@pyro.validation_enabled(False)  # argument checks of every Normal built in the loops: 9% of a gap (BENCHMARKS.md)
def measure(model, guide, x, idx=None, settings=None, refine_steps=()):
    """Every quantity of the module docstring for images x (idx: their training indices, for per-datapoint
    factors; None for held-out images) of the package's model and guide. Returns a dict of summaries and
    per-image values; the guide's quantities are None where it has no factor for these images."""
    settings = (settings or GapSettings()).check()
    generator = torch.Generator(x.device).manual_seed(settings.seed)
    thetas = theta_draws(guide, settings, generator)
    q_z = factor(guide, x, idx, thetas)  # SA-VI: refined by its own steps on L_n(q) over the same draws
    result, best = measure_factors(model.local_log_joint, x, thetas, q_z, model.z_dim, settings, generator,
                                   refine_steps)
    with torch.no_grad():
        theta = thetas[0] if settings.theta == "mean" else guide.global_mean()
        plugin = model.observation_mean(decode(best.loc, theta))
    result["optimized_plugin_mse"] = (x - plugin).pow(2).mean().item()
    return result


def measure_factors(log_joint, x, thetas, factor, size, settings, generator, refine_steps=()):
    """The gaps of the module docstring for any model: ``log_joint(x, z, θ)`` its per-image local log joint
    (z [..., n, size]), ``thetas`` the fixed global draws, ``factor`` the guide's (μ, σ) [n, size] or None
    (then q* starts from N(0, I)), ``generator`` every further draw. Returns (the result dict, q*'s
    :class:`~amortized_pyro.local_elbo.Optimum`)."""
    rule = settings.rule()
    start = factor if factor is not None else (torch.zeros(x.shape[0], size, device=x.device),
                                               torch.ones(x.shape[0], size, device=x.device))
    best = converge(log_joint, x, start[0], start[1].log(), thetas, settings.lr, rule, settings.step_samples,
                    generator)
    scale = best.log_scale.exp()
    elbo_optimized = local_elbo(log_joint, x, best.loc, scale, thetas, settings.samples, generator)
    per_theta = [converge(log_joint, x, best.loc, best.log_scale, theta, settings.lr, rule, settings.step_samples,
                          generator) for theta in thetas]
    elbo_per_theta, log_px, log_px_ais = [], [], []
    for theta, q in zip(thetas, per_theta):
        q_scale = q.log_scale.exp()
        elbo_per_theta.append(local_elbo(log_joint, x, q.loc, q_scale, [theta], settings.samples, generator))
        log_px.append(log_marginal(log_joint, x, q.loc, q_scale, [theta], settings.importance_samples,
                                   settings.chunk, generator))
        if settings.ais_steps:
            log_px_ais.append(ais_log_marginal(log_joint, x, q.loc, q_scale, theta, settings.ais_steps,
                                               settings.ais_chains, settings.leapfrog, generator))
    elbo_per_theta, log_px = torch.stack(elbo_per_theta).mean(0), torch.stack(log_px).mean(0)
    log_px_ais = torch.stack(log_px_ais).mean(0) if log_px_ais else None
    elbo_guide = local_elbo(log_joint, x, *start, thetas, settings.samples, generator) if factor is not None else None
    per_image = {"elbo_guide": elbo_guide, "elbo_optimized": elbo_optimized, "elbo_per_theta": elbo_per_theta,
                 "log_px": log_px, "log_px_ais": log_px_ais,
                 "amortization_gap": None if elbo_guide is None else elbo_optimized - elbo_guide,
                 "coupling_gap": elbo_per_theta - elbo_optimized, "approximation_gap": log_px - elbo_per_theta,
                 "iwae_minus_ais": None if log_px_ais is None else log_px - log_px_ais}
    refined = []
    for k in (refine_steps if factor is not None else ()):  # refinement starts from the guide's own factor
        if k:
            k_loc, k_log_scale = refine(log_joint, x, start[0], start[1].log(), thetas, settings.lr, k,
                                        settings.step_samples, generator)
            left = elbo_optimized - local_elbo(log_joint, x, k_loc, k_log_scale.exp(), thetas, settings.samples,
                                               generator)
        else:  # the guide's own factor: its gap is the amortization gap, the same estimate
            left = per_image["amortization_gap"]
        refined.append({"steps": k, "gap_left": summarize(left), "per_image": left.tolist()})
    result = {name: summarize(values) for name, values in per_image.items()}
    capped, capped_per_theta = int(best.capped.sum()), sum(int(q.capped.sum()) for q in per_theta)
    result.update(settings=asdict(settings), optimizer_steps=int(best.steps.max()), capped=capped,
                  capped_per_theta=capped_per_theta, hit_cap=capped + capped_per_theta > 0,
                  stderr_over="images (θ draws, z draws and the trained run held fixed)",
                  refine_steps=list(refine_steps), refinement=refined,
                  per_image={name: None if v is None else v.tolist() for name, v in per_image.items()})
    return result, best
