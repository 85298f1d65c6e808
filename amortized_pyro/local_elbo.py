"""The local ELBO of one image and its per-image optimizer, for a Gaussian factor q(z_n) = N(μ_n, diag σ_n²):

    L_n(q; θ) = E_{q(z_n)}[log p(x_n | z_n, θ) + log p(z_n) − log q(z_n)]

estimated with reparameterized draws z = μ + σ ε. θ is one global value (site → tensor; ε from an explicit
generator) or the gap's M draws (:class:`~amortized_pyro.draws.Draws`; ε from each draw's own generator),
evaluated as one batched program: z [M, S, n, size] against θ stacked [M, ...], at most ``chunk`` rows
(draws × z draws × images) at once, with the same numbers whatever the chunk. Adam runs on Σ_n L_n for
every image at once: :func:`refine` for a fixed number of steps (the semi-amortized guide's refinement, the
gap's refinement rows), :func:`converge` until each image's windowed stopping rule (the gap's q*, and with
``per_draw`` the q*_m of every draw at once). ``log_joint(x, z, θ)`` is the model's
:meth:`~amortized_pyro.model.BayesianDecoderModel.local_log_joint` (or any function that takes z [M, S, n,
size] with θ stacked [M, ...] and returns [M, S, n]).
"""
import math
from dataclasses import dataclass

import torch

import pyro.distributions as dist

from .draws import Draws

CHUNK = 2 ** 15  # rows (θ draws × z draws × images) per decoder call: about 170 MB at the reference size


def log_weights(log_joint, x, loc, scale, theta, draws, generator=None):
    """log p(x, z | θ) − log q(z) for ``draws`` reparameterized z ~ N(loc, scale²): [draws, n]."""
    eps = torch.randn((draws,) + tuple(loc.shape), generator=generator, device=loc.device)
    z = loc + scale * eps
    return log_joint(x, z, theta) - dist.Normal(loc, scale).log_prob(z).sum(-1)


def broadcast_factor(t):
    """A factor's tensor as [M or 1, 1, n, size], to broadcast against z [M, S, n, size]."""
    return (t if t.dim() == 3 else t.unsqueeze(0)).unsqueeze(1)


def draw_log_weights(log_joint, x, loc, scale, values, eps):
    """log p(x, z | θ_m) − log q(z) for z = loc + scale ε, ε [M, S, n, size], θ stacked ``values`` [M, ...],
    the factor [n, size] (one for every draw) or [M, n, size] (one per draw): [M, S, n]."""
    loc, scale = broadcast_factor(loc), broadcast_factor(scale)
    z = loc + scale * eps
    return log_joint(x, z, values) - dist.Normal(loc, scale).log_prob(z).sum(-1)


def draw_rows(t, start, stop):
    return t if t.dim() == 2 else t[start:stop]


@torch.no_grad()
def per_draw(log_joint, x, loc, scale, draws, samples, reduce="mean", chunk=CHUNK):
    """For every draw θ_m of ``draws`` and image, over ``samples`` z ~ q from θ_m's generator: the mean of the
    log weights (``reduce="mean"``: L_n(q; θ_m)) or their log-mean-exp (``"logmeanexp"``: the
    importance-weighted bound on log p(x_n | θ_m)). Returns [M, n]. The factor is [n, size] or [M, n, size]."""
    n, size = loc.shape[-2:]
    out = []
    for start, stop in draws.chunks(samples * n, chunk):
        part = draws.part(start, stop)
        eps = part.normal(part.generators(), (samples, n, size), loc.dtype)  # each draw's, whatever the chunk
        f_loc, f_scale = draw_rows(loc, start, stop), draw_rows(scale, start, stop)
        step = max(1, chunk // ((stop - start) * n))
        pieces = [draw_log_weights(log_joint, x, f_loc, f_scale, part.values, eps[:, s:s + step])
                  for s in range(0, samples, step)]
        if reduce == "mean":
            out.append(sum(w.sum(1) for w in pieces) / samples)
        else:
            out.append(torch.logsumexp(torch.stack([w.logsumexp(1) for w in pieces]), 0) - math.log(samples))
    return torch.cat(out)


def local_elbo(log_joint, x, loc, scale, draws, samples, chunk=CHUNK):
    """L_n(q) per image [n]: the mean over the draws θ_m of L_n(q; θ_m), each by ``samples`` z draws."""
    return per_draw(log_joint, x, loc, scale, draws, samples, "mean", chunk).mean(0)


@dataclass
class StoppingRule:
    """Per image: stop when the image's mean objective over a window of ``window`` steps has not improved
    for ``patience`` windows (Cremer et al.: 100 and 10), keeping its best window's *average* iterate; every
    image stops after ``max_steps``. The learning rate halves whenever the total over the images has not
    improved for ``decay_patience`` windows (torch's ReduceLROnPlateau).

    The average of a window's iterates (Polyak–Ruppert averaging) rather than its last: at a fixed learning
    rate Adam's iterates jitter around the optimum by the gradient noise of a few z draws, and their mean
    sits closer to it. On an informative run, averaged and at a first learning rate of 0.05, q* and the q*_m
    reached higher values of their own objectives in 1,500 steps than the last iterates of 3,000 steps at 0.01
    (bench/gap_optimizer.py, BENCHMARKS.md)."""

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


def _objective(log_joint, x, loc, log_scale, theta, draws, noise, per_draw_factor, chunk):
    """This step's objective, in parts (one per span of θ draws, made as they are consumed, so that one
    part's graph lives at a time): one θ: [n], z from ``noise`` (a generator). Draws: the mean over them of
    each L_n(q; θ_m) ([n] in parts that add up), or with ``per_draw_factor`` each one ([M, n]); ``noise``
    the draws' generators."""
    if not isinstance(theta, Draws):
        yield log_weights(log_joint, x, loc, log_scale.exp(), theta, draws, noise).mean(0)
        return
    n, size = loc.shape[-2:]
    for start, stop in ([(0, len(theta))] if per_draw_factor else theta.chunks(draws * n, chunk)):
        eps = theta.normal(noise[start:stop], (draws, n, size), loc.dtype)
        values = {k: v[start:stop] for k, v in theta.values.items()}
        w = draw_log_weights(log_joint, x, draw_rows(loc, start, stop), draw_rows(log_scale, start, stop).exp(),
                             values, eps).mean(1)
        yield w if per_draw_factor else w.sum(0) / len(theta)


def _adam_on_local_elbos(log_joint, x, leaves, theta, lr, draws, generator, differentiable=False, smooth=False,
                         chunk=CHUNK):
    """Adam on Σ_n L_n from each pair of ``leaves`` [(loc, log σ)], ``draws`` z per image and step, at
    ``theta``: one θ (site → tensor; z from ``generator``) or :class:`~amortized_pyro.draws.Draws` (z from
    each draw's generator; one pair: the objective is the mean of L_n over the draws; one pair per draw:
    each its own L_n(q; θ_m), with its own optimizer). Yields (optimizers, each step's objective [pairs, n])
    after each step; the leaves are updated in place. ``differentiable``: they are non-leaf tensors and every
    step stays on the autograd graph (gradients taken with ``create_graph``), so that what they end at can be
    differentiated with respect to where they started. ``smooth``: the steps are :class:`SmoothAdam`'s with
    ε = lr (unrolled refinement, in training and in evaluation alike), else torch's Adam."""
    optimizers = [SmoothAdam(list(pair), lr, eps=lr, differentiable=differentiable) if smooth
                  else torch.optim.Adam(list(pair), lr=lr) for pair in leaves]
    per_draw_factor = len(leaves) > 1
    noise = theta.generators() if isinstance(theta, Draws) else generator
    tensors = [t for pair in leaves for t in pair]
    with torch.enable_grad():
        while True:
            loc = torch.stack([pair[0] for pair in leaves]) if per_draw_factor else leaves[0][0]
            log_scale = torch.stack([pair[1] for pair in leaves]) if per_draw_factor else leaves[0][1]
            grads, objective = None, 0
            for part in _objective(log_joint, x, loc, log_scale, theta, draws, noise, per_draw_factor, chunk):
                # one backward pass per span of draws: memory bounded by the chunk
                part_grads = torch.autograd.grad(-part.sum(), tensors, create_graph=differentiable)
                grads = part_grads if grads is None else [a + b for a, b in zip(grads, part_grads)]
                objective = objective + part.detach()
            for tensor, grad in zip(tensors, grads):
                tensor.grad = grad
            for optimizer in optimizers:
                optimizer.step()
            yield optimizers, objective if per_draw_factor else objective.unsqueeze(0)


def _leaves(loc, log_scale):
    return loc.detach().clone().requires_grad_(), log_scale.detach().clone().requires_grad_()


def refine(log_joint, x, loc, log_scale, theta, lr, steps, draws=1, generator=None, unrolled=False, chunk=CHUNK):
    """``steps`` Adam steps on Σ_n L_n from (loc, log σ) at ``theta`` (one θ, or Draws: their mean
    objective) (the semi-amortized guide, the gap's refinement rows); returns (loc, log σ), detached, or,
    ``unrolled`` and where (loc, log σ) carry gradients, still on the graph through every step (Kim et al.
    2018's semi-amortized training). Unrolled steps are :class:`SmoothAdam`'s with ε = lr, with or without
    the graph, so that an unrolled SA-VI guide refines alike when trained and when evaluated."""
    graph = unrolled and torch.is_grad_enabled() and (loc.requires_grad or log_scale.requires_grad)
    loc, log_scale = (loc.clone(), log_scale.clone()) if graph else _leaves(loc, log_scale)
    for _, _ in zip(range(steps), _adam_on_local_elbos(log_joint, x, [(loc, log_scale)], theta, lr, draws,
                                                       generator, graph, unrolled, chunk)):
        pass
    return (loc, log_scale) if graph else (loc.detach(), log_scale.detach())


def converge(log_joint, x, loc, log_scale, theta, lr, rule, draws=1, generator=None, per_draw=False, chunk=CHUNK,
             bar=None):
    """Adam on Σ_n L_n from (loc, log σ) [n, size] until every image has stopped by ``rule`` (a
    :class:`StoppingRule`) or the cap; every image is optimized until the last stops, each keeps its own
    best iterate. ``per_draw`` (``theta`` Draws): one factor per draw θ_m on L_n(q; θ_m) alone (the gap's
    q*_m), all at once in spans of draws that fit the chunk, each with its own optimizer, learning-rate
    schedule and stopping per image; the Optimum's tensors then lead with the draws ([M, n, …]). One host
    sync per window. ``bar``: a tqdm progress bar, advanced by the steps of every window. Returns an
    :class:`Optimum`."""
    if not per_draw:
        if bar is not None:
            bar.reset(total=rule.max_steps)
        best = _converge(log_joint, x, [_leaves(loc, log_scale)], theta, lr, rule, draws, generator, chunk, bar)
        return Optimum(best.loc[0], best.log_scale[0], best.steps[0], best.capped[0])
    n = loc.shape[-2]
    chunks = theta.chunks(draws * n, chunk)
    if bar is not None:
        bar.reset(total=rule.max_steps * len(chunks))
    spans = [_converge(log_joint, x, [_leaves(loc, log_scale) for _ in range(stop - start)],
                       theta.part(start, stop), lr, rule, draws, None, chunk, bar)
             for start, stop in chunks]
    return Optimum(*(torch.cat([getattr(s, f) for s in spans]) for f in ("loc", "log_scale", "steps", "capped")))


def _converge(log_joint, x, leaves, theta, lr, rule, draws, generator, chunk, bar=None):
    """:func:`converge` for the pairs ``leaves``: an Optimum with a leading dimension, one row per pair."""
    shape = (len(leaves), leaves[0][0].shape[0])
    like = leaves[0][0]
    best = torch.full(shape, -math.inf, dtype=like.dtype, device=like.device)
    stale = torch.zeros(shape, dtype=torch.long, device=like.device)
    steps = torch.full(shape, rule.max_steps, dtype=torch.long, device=like.device)
    running = torch.ones(shape, dtype=torch.bool, device=like.device)
    best_loc = torch.stack([pair[0].detach() for pair in leaves])
    best_log_scale = torch.stack([pair[1].detach() for pair in leaves])
    window = torch.zeros(shape, dtype=like.dtype, device=like.device)
    sum_loc, sum_log_scale = torch.zeros_like(best_loc), torch.zeros_like(best_log_scale)  # the window's iterates
    adam = _adam_on_local_elbos(log_joint, x, leaves, theta, lr, draws, generator, chunk=chunk)
    decays = None
    for step, (optimizers, objective) in zip(range(1, rule.max_steps + 1), adam):
        if decays is None:
            decays = [torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5,
                                                                 patience=rule.decay_patience)
                      for optimizer in optimizers]
        window += objective
        sum_loc += torch.stack([p[0].detach() for p in leaves])
        sum_log_scale += torch.stack([p[1].detach() for p in leaves])
        if step % rule.window:
            continue
        mean, window = window / rule.window, torch.zeros_like(window)
        loc, log_scale = sum_loc / rule.window, sum_log_scale / rule.window
        sum_loc, sum_log_scale = torch.zeros_like(sum_loc), torch.zeros_like(sum_log_scale)
        better = running & (mean > best)
        best = torch.where(better, mean, best)
        stale = torch.where(better, 0, stale + 1)
        best_loc = torch.where(better[..., None], loc, best_loc)
        best_log_scale = torch.where(better[..., None], log_scale, best_log_scale)
        done = running & (stale >= rule.patience)
        steps = torch.where(done, step, steps)
        running = running & ~done
        totals = torch.cat([mean.sum(-1), running.sum().to(mean.dtype)[None]]).tolist()  # the window's one sync
        for decay, total in zip(decays, totals[:-1]):
            decay.step(total)
        if bar is not None:
            bar.update(rule.window if totals[-1] else rule.max_steps - step + rule.window)
        if not totals[-1]:
            break
    return Optimum(best_loc, best_log_scale, steps, running)
