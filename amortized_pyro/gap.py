"""The amortization gap, measured per image on a trained run (Cremer, Li & Duvenaud 2018; Kim et al. 2018),
for a model whose decoder is Bayesian.

With q(θ) trained and frozen, for one image x_n and a Gaussian factor q(z_n) (:mod:`amortized_pyro.local_elbo`):

    L_n(q)   = E_{q(θ)} E_{q(z_n)}[log p(x_n | z_n, θ) + log p(z_n) − log q(z_n)]       the local ELBO
    log p(x_n) := E_{q(θ)}[log p(x_n | θ)], each log p(x_n | θ_m) estimated by the importance-weighted bound
               log (1/K) Σ_k p(x_n, z_k | θ_m) / q*(z_k), z_k ~ q*_n, averaged over the M draws θ_m
    q*_n     = the best Gaussian factor for x_n: Adam on L_n (S draws of z per step, a fresh θ ~ q(θ) per
               step) from the guide's factor (from the prior where the guide has none for x_n), until the
               windowed stopping rule (Cremer et al.: windows of 100 steps, patience 10) or a cap
    amortization gap = L_n(q*) − L_n(q_guide),   approximation gap = log p(x_n) − L_n(q*)

The global term KL(q(θ) ‖ p(θ)) / N of the ELBO is the same for every q(z) and is left out. Every L_n and
log p(x_n) is evaluated on the same M draws of θ (``theta="sample"``; ``theta="mean"`` fixes θ at E_q[θ],
where all quantities are exact in the limit) with the same S draws of z per θ. All images are optimized
together, vectorized, on the run's device. Refinement (semi-amortized inference as an evaluation):
``refine_steps`` = (0, 5, 20, …) runs that many of the same Adam steps from the guide's factor and records
the gap left, L_n(q*) − L_n(q_k).
"""
import math
from dataclasses import asdict, dataclass

import torch

from .local_elbo import StoppingRule, local_elbo, log_weights, optimize
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
    chunk: int = option(100, "Importance samples evaluated at once (memory).", low=1)
    seed: int = option(0, "Seeds every draw of the evaluation.")

    def rule(self):
        return StoppingRule(self.window, self.patience, self.max_steps)


def theta_draws(q_theta, settings, generator):
    """The M fixed draws of θ (or E_q[θ] once) that every evaluation shares."""
    if settings.theta == "mean":
        return [q_theta.mean()]
    return [q_theta.sample(generator) for _ in range(settings.theta_draws)]


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


def measure(model, guide, x, idx=None, settings=None, refine_steps=()):
    """Every quantity of the module docstring for images x (idx: their training indices, for per-datapoint
    factors; None for held-out images). Returns a dict of summaries and per-image values; the guide's
    quantities are None where it has no factor for these images."""
    settings = (settings or GapSettings()).check()
    generator = torch.Generator(x.device).manual_seed(settings.seed)
    log_joint, q_theta = model.local_log_joint, guide.q_theta
    thetas = theta_draws(q_theta, settings, generator)
    factor = guide.factor(x, idx)
    start = factor if factor is not None else (torch.zeros(x.shape[0], model.z_dim, device=x.device),
                                               torch.ones(x.shape[0], model.z_dim, device=x.device))
    start_log_scale = start[1].log()
    each_step = q_theta.mean() if settings.theta == "mean" else (lambda: q_theta.sample(generator))

    def run(steps=None):
        loc, log_scale, taken = optimize(log_joint, x, start[0], start_log_scale, each_step, settings.lr,
                                         settings.step_samples, generator, steps, settings.rule())
        return loc, log_scale.exp(), taken

    loc, scale, steps = run()
    elbo_optimized = local_elbo(log_joint, x, loc, scale, thetas, settings.samples, generator)
    log_px = log_marginal(log_joint, x, loc, scale, thetas, settings.importance_samples, settings.chunk, generator)
    elbo_guide = local_elbo(log_joint, x, *start, thetas, settings.samples, generator) if factor is not None else None
    per_image = {"elbo_guide": elbo_guide, "elbo_optimized": elbo_optimized, "log_px": log_px,
                 "amortization_gap": None if elbo_guide is None else elbo_optimized - elbo_guide,
                 "approximation_gap": log_px - elbo_optimized}
    refined = []
    for k in (refine_steps if factor is not None else ()):  # refinement starts from the guide's own factor
        if k:
            k_loc, k_scale, _ = run(k)
            left = elbo_optimized - local_elbo(log_joint, x, k_loc, k_scale, thetas, settings.samples, generator)
        else:  # the guide's own factor: its gap is the amortization gap, the same estimate
            left = per_image["amortization_gap"]
        refined.append({"steps": k, "gap_left": summarize(left), "per_image": left.tolist()})
    with torch.no_grad():
        plugin = model.observation_mean(decode(loc, thetas[0] if settings.theta == "mean" else q_theta.mean()))
    result = {name: summarize(values) for name, values in per_image.items()}
    result.update(settings=asdict(settings), optimizer_steps=steps, hit_cap=steps >= settings.max_steps,
                  refine_steps=list(refine_steps), refinement=refined,
                  optimized_plugin_mse=(x - plugin).pow(2).mean().item(),
                  per_image={name: None if v is None else v.tolist() for name, v in per_image.items()})
    return result
