"""The local ELBO of one image and its per-image optimizer, for a Gaussian factor q(z_n) = N(μ_n, diag σ_n²):

    L_n(q; θ) = E_{q(z_n)}[log p(x_n | z_n, θ) + log p(z_n) − log q(z_n)]

estimated with reparameterized draws z = μ + σ ε, ε from an explicit generator. Adam runs on Σ_n L_n for
every image at once: :func:`refine` for a fixed number of steps (the semi-amortized guide's refinement, the
gap's refinement rows), :func:`converge` until each image's windowed stopping rule (the gap's q*). ``log_joint(x, z, θ)`` is the
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
    """Per image: stop when the image's mean objective over a window of ``window`` steps has not improved
    for ``patience`` windows (Cremer et al.: 100 and 10), keeping the iterate that ended its best window;
    every image stops after ``max_steps``. The learning rate halves whenever the total over the images has
    not improved for ``decay_patience`` windows (torch's ReduceLROnPlateau)."""

    window: int = 100
    patience: int = 10
    max_steps: int = 5000
    decay_patience: int = 2


@dataclass
class Optimum:
    """What :func:`converge` found: per image the best iterate (loc, log σ), the steps it took, and whether
    it was stopped by the cap rather than by the rule (its L_n is then a lower bound on the converged one)."""

    loc: torch.Tensor
    log_scale: torch.Tensor
    steps: torch.Tensor
    capped: torch.Tensor


class SmoothAdam:
    """Adam with the step m̂ / √(v̂ + ε²) in place of torch's m̂ / (√v̂ + ε), for steps that stay on the
    autograd graph (unrolled refinement). Hand-written for two failures of torch's ``Adam(differentiable=True)``
    in unrolled SA-VI (experiments/sa-vi.sh: seeds 1 and 2 diverged to NaN): (1) it differentiates √v at
    v = 0, so an exactly zero gradient entry gives 0 · ∞ = NaN (tests/test_refinement.py); (2) near zero the
    step g / √(g² + ε²) has slope 1/ε, so with ε = 1e-8 a small entry multiplies the encoder's gradient by up
    to lr/ε = 1e6 per step, which a probe by hand saw overflow. :func:`refine` therefore takes ε = lr when
    unrolled (slope at most 1 per step), which changes the step only for entries with |g| ≲ lr, and an
    unrolled guide refines so when evaluated too. Training through these steps is still unstable (README)."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, differentiable=False):
        self.params, self.lr, self.betas, self.eps, self.steps = params, lr, betas, eps, 0
        self.differentiable = differentiable  # the steps on the autograd graph (non-leaf params), as torch's flag
        self.moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]

    def step(self):
        self.steps += 1
        b1, b2 = self.betas
        m_correction, v_correction = 1 - b1 ** self.steps, 1 - b2 ** self.steps  # Adam's bias corrections
        with torch.set_grad_enabled(self.differentiable):
            for i, (param, (m, v)) in enumerate(zip(self.params, self.moments)):
                m, v = b1 * m + (1 - b1) * param.grad, b2 * v + (1 - b2) * param.grad.square()
                self.moments[i] = m, v
                param.sub_(self.lr * (m / m_correction) / (v / v_correction + self.eps ** 2).sqrt())


def _adam_on_local_elbos(log_joint, x, loc, log_scale, theta, lr, draws, generator, differentiable=False,
                         smooth=False):
    """Adam on Σ_n L_n from (loc, log σ), ``draws`` z per image and step, at ``theta``: a θ (site → tensor),
    a list of θ (the objective is the mean of L_n over them), or a function returning each step's θ. Yields
    (optimizer, each step's objective per image [n]) after each step; ``loc``, ``log_scale`` are updated in
    place. ``differentiable``: they are non-leaf tensors and every step stays on the autograd graph
    (gradients taken with ``create_graph``), so that what they end at can be differentiated with respect to
    where they started. ``smooth``: the steps are :class:`SmoothAdam`'s with ε = lr (unrolled refinement,
    in training and in evaluation alike), else torch's Adam."""
    optimizer = (SmoothAdam([loc, log_scale], lr, eps=lr, differentiable=differentiable) if smooth
                 else torch.optim.Adam([loc, log_scale], lr=lr))
    with torch.enable_grad():
        while True:
            at = theta() if callable(theta) else theta
            scale = log_scale.exp()
            objective = torch.stack([log_weights(log_joint, x, loc, scale, one, draws, generator).mean(0)
                                     for one in (at if isinstance(at, list) else [at])]).mean(0)
            loc.grad, log_scale.grad = torch.autograd.grad(-objective.sum(), [loc, log_scale],
                                                           create_graph=differentiable)
            optimizer.step()
            yield optimizer, objective.detach()


def _leaves(loc, log_scale):
    return loc.detach().clone().requires_grad_(), log_scale.detach().clone().requires_grad_()


def refine(log_joint, x, loc, log_scale, theta, lr, steps, draws=1, generator=None, unrolled=False):
    """``steps`` Adam steps on Σ_n L_n from (loc, log σ) (the semi-amortized guide, the gap's refinement
    rows); returns (loc, log σ), detached, or, ``unrolled`` and where (loc, log σ) carry gradients, still on
    the graph through every step (Kim et al. 2018's semi-amortized training). Unrolled steps are
    :class:`SmoothAdam`'s with ε = lr, with or without the graph, so that an unrolled SA-VI guide refines
    alike when trained and when evaluated."""
    graph = unrolled and torch.is_grad_enabled() and (loc.requires_grad or log_scale.requires_grad)
    loc, log_scale = (loc.clone(), log_scale.clone()) if graph else _leaves(loc, log_scale)
    for _, _ in zip(range(steps), _adam_on_local_elbos(log_joint, x, loc, log_scale, theta, lr, draws, generator,
                                                       graph, unrolled)):
        pass
    return (loc, log_scale) if graph else (loc.detach(), log_scale.detach())


def converge(log_joint, x, loc, log_scale, theta, lr, rule, draws=1, generator=None):
    """Adam on Σ_n L_n from (loc, log σ) until every image has stopped by ``rule`` (a :class:`StoppingRule`)
    or the cap; every image is optimized until the last stops, each keeps its own best iterate. One host
    sync per window. Returns an :class:`Optimum`."""
    loc, log_scale = _leaves(loc, log_scale)
    n = x.shape[0]
    best = torch.full((n,), -math.inf, dtype=loc.dtype, device=loc.device)
    stale = torch.zeros(n, dtype=torch.long, device=loc.device)
    steps = torch.full((n,), rule.max_steps, dtype=torch.long, device=loc.device)
    running = torch.ones(n, dtype=torch.bool, device=loc.device)
    best_loc, best_log_scale = loc.detach().clone(), log_scale.detach().clone()
    window = torch.zeros(n, dtype=loc.dtype, device=loc.device)
    adam = _adam_on_local_elbos(log_joint, x, loc, log_scale, theta, lr, draws, generator)
    decay = None
    for step, (optimizer, objective) in zip(range(1, rule.max_steps + 1), adam):
        if decay is None:
            decay = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5,
                                                               patience=rule.decay_patience)
        window += objective
        if step % rule.window:
            continue
        mean, window = window / rule.window, torch.zeros_like(window)
        better = running & (mean > best)
        best = torch.where(better, mean, best)
        stale = torch.where(better, 0, stale + 1)
        best_loc = torch.where(better[:, None], loc.detach(), best_loc)
        best_log_scale = torch.where(better[:, None], log_scale.detach(), best_log_scale)
        done = running & (stale >= rule.patience)
        steps = torch.where(done, step, steps)
        running = running & ~done
        total, left = torch.stack([mean.sum(), running.sum().to(mean.dtype)]).tolist()  # the window's one host sync
        decay.step(total)
        if not left:
            break
    return Optimum(best_loc, best_log_scale, steps, running)
