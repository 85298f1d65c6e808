"""The amortization gap, measured per image on a trained run (Cremer, Li & Duvenaud 2018; Kim et al. 2018),
for a model whose decoder is Bayesian.

With q(θ) trained and frozen, for one image x_n and a Gaussian factor q(z_n):

    L_n(q)   = E_{q(θ)} E_{q(z_n)}[log p(x_n | z_n, θ) + log p(z_n) − log q(z_n)]       the local ELBO
    log p(x_n) := E_{q(θ)}[log p(x_n | θ)], each log p(x_n | θ_m) estimated by the importance-weighted bound
               log (1/K) Σ_k p(x_n, z_k | θ_m) / q*(z_k), z_k ~ q*_n, averaged over the M draws θ_m
    q*_n     = the best Gaussian factor for x_n: Adam on L_n (S draws of z per step, a fresh θ ~ q(θ) per
               step) from the guide's factor (from the prior where the guide has none for x_n), until the
               mean of the objective over a window of W steps has not improved for P windows (Cremer et al.:
               W = 100, P = 10), or after a cap of T steps
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

import pyro.distributions as dist

from .errors import AmortizedPyroError
from .model import decode
from .results import display_order, label

THETA_MODES = ("sample", "mean")


@dataclass
class GapSettings:
    """The Monte Carlo budget and q*'s stopping rule; recorded with every result."""

    K: int = 1000            # importance samples per image and θ draw for log p(x_n)
    M: int = 8               # draws of θ ~ q(θ) (theta="sample")
    theta: str = "sample"    # or "mean": θ = E_q[θ]
    samples: int = 100       # z draws per image and θ draw for each L_n
    lr: float = 1e-2         # Adam's learning rate for q* and refinement
    step_samples: int = 8    # z draws per image in each optimization step
    window: int = 100        # stopping rule: windows of this many steps ...
    patience: int = 10       # ... stop after this many windows without improvement ...
    max_steps: int = 5000    # ... or after this many steps
    chunk: int = 100         # importance samples evaluated at once (memory)
    seed: int = 0

    def check(self):
        if self.theta not in THETA_MODES:
            raise AmortizedPyroError("theta must be sample or mean, got %r" % self.theta)
        for name in ("K", "M", "samples", "step_samples", "window", "patience", "max_steps", "chunk"):
            if getattr(self, name) < 1:
                raise AmortizedPyroError("%s must be >= 1, got %r" % (name, getattr(self, name)))
        if not self.lr > 0:
            raise AmortizedPyroError("lr must be > 0, got %r" % self.lr)
        return self


def theta_draws(guide, settings, generator, device):
    """The M fixed draws of θ (or E_q[θ] once) that every evaluation shares."""
    q_theta = guide.theta.params(device)
    if settings.theta == "mean":
        return [{name: loc.detach() for name, (loc, _) in q_theta.items()}]
    return [draw_theta(q_theta, generator) for _ in range(settings.M)]


def draw_theta(q_theta, generator):
    return {name: (loc + scale * torch.randn(loc.shape, generator=generator, device=loc.device)).detach()
            for name, (loc, scale) in q_theta.items()}


def log_weights(model, x, loc, scale, theta, draws, generator):
    """log p(x, z | θ) − log q(z) for ``draws`` reparameterized z ~ N(loc, scale²): [draws, n]."""
    eps = torch.randn((draws,) + tuple(loc.shape), generator=generator, device=loc.device)
    z = loc + scale * eps
    return model.local_log_joint(x, z, theta) - dist.Normal(loc, scale).log_prob(z).sum(-1)


@torch.no_grad()
def local_elbo(model, x, loc, scale, thetas, samples, generator):
    """L_n(q) per image [n]: the mean of ``samples`` draws of z for each θ in ``thetas``, averaged over θ."""
    return torch.stack([log_weights(model, x, loc, scale, theta, samples, generator).mean(0)
                        for theta in thetas]).mean(0)


@torch.no_grad()
def log_marginal(model, x, loc, scale, thetas, K, chunk, generator):
    """log p(x_n) per image [n]: the K-sample importance-weighted bound with proposal N(loc, scale²) for each
    θ in ``thetas``, averaged over θ."""
    bounds = []
    for theta in thetas:
        total = None
        for start in range(0, K, chunk):
            part = torch.logsumexp(log_weights(model, x, loc, scale, theta, min(chunk, K - start), generator), 0)
            total = part if total is None else torch.logaddexp(total, part)
        bounds.append(total - math.log(K))
    return torch.stack(bounds).mean(0)


def optimize(model, guide, x, loc, log_scale, settings, generator, steps=None):
    """Adam on L_n for every image at once from (loc, log σ); ``steps`` fixed (refinement), or until the
    stopping rule (q*). Returns (loc, σ, steps taken)."""
    loc, log_scale = loc.detach().clone().requires_grad_(), log_scale.detach().clone().requires_grad_()
    optimizer = torch.optim.Adam([loc, log_scale], lr=settings.lr)
    q_theta = {k: (m.detach(), s.detach()) for k, (m, s) in guide.theta.params(x.device).items()}
    mean_theta = {k: m for k, (m, _) in q_theta.items()}
    best, stale, window, taken = -math.inf, 0, [], 0
    while taken < (steps if steps is not None else settings.max_steps):
        theta = mean_theta if settings.theta == "mean" else draw_theta(q_theta, generator)
        objective = log_weights(model, x, loc, log_scale.exp(), theta, settings.step_samples, generator).mean(0).sum()
        optimizer.zero_grad()
        (-objective).backward()
        optimizer.step()
        taken += 1
        if steps is None:
            window.append(objective.item())
            if len(window) == settings.window:
                mean = sum(window) / len(window)
                best, stale = (mean, 0) if mean > best else (best, stale + 1)
                window = []
                if stale >= settings.patience:
                    break
    return loc.detach(), log_scale.detach().exp(), taken


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
    thetas = theta_draws(guide, settings, generator, x.device)
    with torch.no_grad():
        factor = guide.factor(x, idx)
    start = factor if factor is not None else (torch.zeros(x.shape[0], model.z_dim, device=x.device),
                                               torch.ones(x.shape[0], model.z_dim, device=x.device))
    start_loc, start_log_scale = start[0].detach(), start[1].detach().log()
    loc, scale, steps = optimize(model, guide, x, start_loc, start_log_scale, settings, generator)
    elbo_optimized = local_elbo(model, x, loc, scale, thetas, settings.samples, generator)
    log_px = log_marginal(model, x, loc, scale, thetas, settings.K, settings.chunk, generator)
    elbo_guide = local_elbo(model, x, *start, thetas, settings.samples, generator) if factor is not None else None
    per_image = {"elbo_guide": elbo_guide, "elbo_optimized": elbo_optimized, "log_px": log_px,
                 "amortization_gap": None if elbo_guide is None else elbo_optimized - elbo_guide,
                 "approximation_gap": log_px - elbo_optimized}
    refined = []
    for k in (refine_steps if factor is not None else ()):  # refinement starts from the guide's own factor
        k_loc, k_scale, _ = optimize(model, guide, x, start_loc, start_log_scale, settings, generator, steps=k) \
            if k else (start[0], start[1], 0)
        left = elbo_optimized - local_elbo(model, x, k_loc, k_scale, thetas, settings.samples, generator)
        refined.append({"steps": k, "gap_left": summarize(left), "per_image": left.tolist()})
    theta_mean = {k: m for k, m in thetas[0].items()} if settings.theta == "mean" else guide.decoder_mean()
    with torch.no_grad():
        plugin = model.observation_mean(decode(loc, {k: v.detach() for k, v in theta_mean.items()}))
    result = {name: summarize(values) for name, values in per_image.items()}
    result.update(settings=asdict(settings), optimizer_steps=steps, refine_steps=list(refine_steps), refinement=refined,
                  optimized_plugin_mse=(x - plugin).pow(2).mean().item(),
                  per_image={name: None if v is None else v.tolist() for name, v in per_image.items()})
    return result


def measure_run(run_dir, split="test", n_images=100, settings=None, refine_steps=(), device="cpu", log=print):
    """:func:`measure` on the first ``n_images`` of a finished run's training or test images; the report
    names the run, the split and the settings (see the ``gap`` command)."""
    from .runs import run_status
    from .train import load_run, prepare_data

    if run_status(run_dir) != "finished":
        raise AmortizedPyroError("%s is not a finished run (%s)" % (run_dir, run_status(run_dir)))
    result = load_run(run_dir, device)
    data = prepare_data(result.config, None, log).to(result.device)
    images = data.train if split == "train" else data.test
    if images.shape[0] == 0:
        raise AmortizedPyroError("the run has no %s images" % split)
    x = images[:n_images]
    idx = torch.arange(x.shape[0], device=x.device) if split == "train" else None
    with result.params():
        report = measure(result.model, result.guide, x, idx, settings, refine_steps)
    settings = report["settings"]
    return dict(run=str(run_dir), guide=result.config.guide, width=result.config.width, seed=result.config.seed,
                label=label(result.config.guide, result.config.width), split=split, n_images=x.shape[0],
                K=settings["K"], theta=settings["theta"], **report)


def format_reports(reports):
    """gap reports as one Markdown table: a row per configuration and split, nats per image (mean ± s.e.)."""
    def pm(value):
        return "n/a" if value is None else "%.1f ± %.1f" % (value["mean"], value["stderr"])

    lines = ["| configuration | split | images | L(guide) | L(q*) | log p(x) | amortization gap | approximation gap "
             "| gap left after 5 / 20 / 100 refinement steps | plug-in MSE with q* |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(reports, key=lambda r: (display_order(r["label"]), r["split"] != "train")):
        refined = {row["steps"]: row["gap_left"] for row in r["refinement"]} if r["elbo_guide"] else {}
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %.4f |" % (
            r["label"], r["split"], r["n_images"], pm(r["elbo_guide"]), pm(r["elbo_optimized"]), pm(r["log_px"]),
            pm(r["amortization_gap"]), pm(r["approximation_gap"]),
            " / ".join(pm(refined.get(k)) for k in (5, 20, 100)), r["optimized_plugin_mse"]))
    return "\n".join(lines)
