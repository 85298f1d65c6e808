"""The local ELBO of one image and its per-image optimizer, for a Gaussian factor q(z_n) = N(μ_n, diag σ_n²):

    L_n(q; θ) = E_{q(z_n)}[log p(x_n | z_n, θ) + log p(z_n) − log q(z_n)]

estimated with reparameterized draws z = μ + σ ε, ε from an explicit generator. :func:`optimize` runs Adam
on Σ_n L_n for every image at once: a fixed number of steps (the semi-amortized guide's refinement, the
gap's refinement rows) or until a windowed stopping rule (the gap's q*). ``log_joint(x, z, θ)`` is the
model's :meth:`~amortized_pyro.model.BayesianDecoderModel.local_log_joint`.
"""
import math
from dataclasses import dataclass

import torch

import pyro.distributions as dist


def log_weights(log_joint, x, loc, scale, theta, draws, generator=None):
    """log p(x, z | θ) − log q(z) for ``draws`` reparameterized z ~ N(loc, scale²): [draws, n]."""
    eps = torch.randn((draws,) + tuple(loc.shape), generator=generator, device=loc.device)
    z = loc + scale * eps
    return log_joint(x, z, theta) - dist.Normal(loc, scale).log_prob(z).sum(-1)


@torch.no_grad()
def local_elbo(log_joint, x, loc, scale, thetas, samples, generator=None):
    """L_n(q) per image [n]: the mean over ``samples`` draws of z for each θ in ``thetas``, averaged over θ."""
    return torch.stack([log_weights(log_joint, x, loc, scale, theta, samples, generator).mean(0)
                        for theta in thetas]).mean(0)


@dataclass
class StoppingRule:
    """Stop when the mean objective over a window of ``window`` steps has not improved for ``patience``
    windows (Cremer et al.: 100 and 10), or after ``max_steps``."""

    window: int = 100
    patience: int = 10
    max_steps: int = 5000


def optimize(log_joint, x, loc, log_scale, theta, lr, draws=1, generator=None, steps=None, rule=None):
    """Adam (learning rate ``lr``) on Σ_n L_n from (loc, log σ), ``draws`` draws of z per image and step, at
    ``theta`` (site → tensor, or a function returning each step's θ): ``steps`` steps, or until ``rule``
    (a :class:`StoppingRule`). Returns (loc, log σ, steps taken), detached."""
    loc, log_scale = loc.detach().clone().requires_grad_(), log_scale.detach().clone().requires_grad_()
    optimizer = torch.optim.Adam([loc, log_scale], lr=lr)
    limit = steps if steps is not None else rule.max_steps
    best, stale, window, taken = -math.inf, 0, [], 0
    with torch.enable_grad():
        while taken < limit:
            at = theta() if callable(theta) else theta
            objective = log_weights(log_joint, x, loc, log_scale.exp(), at, draws, generator).mean(0).sum()
            optimizer.zero_grad()
            (-objective).backward()
            optimizer.step()
            taken += 1
            if steps is None:
                window.append(objective.detach())
                if len(window) == rule.window:
                    mean = torch.stack(window).mean().item()  # one host sync per window, not per step
                    best, stale = (mean, 0) if mean > best else (best, stale + 1)
                    window = []
                    if stale >= rule.patience:
                        break
    return loc.detach(), log_scale.detach(), taken
