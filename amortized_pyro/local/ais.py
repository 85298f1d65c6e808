"""log p(x_n | θ) by annealed importance sampling (Neal 2001), the second estimator of the gap's log p(x), as
Wu et al. (2017) and Cremer et al. (2018) use it to evaluate decoders.

From a Gaussian proposal q(z_n) = N(loc, diag scale²) to the posterior p(z_n | x_n, θ), along

    f_t(z) = q(z)^{1 − β_t} · p(x_n, z | θ)^{β_t},    0 = β_0 < β_1 < … < β_T = 1    (a sigmoidal schedule)

each of C chains starts at z ~ q, adds (β_t − β_{t−1}) · (log p(x_n, z | θ) − log q(z)) to its log weight, and
then moves by one HMC transition that leaves f_t invariant: ``leapfrog`` velocity Verlet steps (the
integrator of :func:`pyro.ops.integrator.velocity_verlet`) and a Metropolis correction per chain.
log p̂(x_n | θ) = log (1/C) Σ_c exp(log w_c); E[w] = p(x_n | θ), so the estimate is a stochastic lower bound,
exact as T → ∞. The HMC mass matrix is diag(1 / scale²) of the proposal, so each dimension steps by its own
scale; each image's step size adapts between transitions towards an acceptance rate of 0.65 (as Wu et al.);
every θ draw, chain, image and step is vectorized. On an informative run (bench/archive/ais_sweep.py, BENCHMARKS.md)
the per-dimension steps brought 200 annealing steps from 2.2 to 0.8 nats below the 5,000-step estimate, and
1,000 steps (the default) to 0.1. Hand-written: Pyro's HMC kernel runs one chain on one target, not an
annealed path over many images at once, and its integrator keeps only the gradient of the potential at one β
(see :func:`hmc_transition`).
"""
import math
from typing import NamedTuple

import torch

from amortized_pyro.local.estimates import CHUNK, broadcast_factor, draw_rows, normal_log_density
from amortized_pyro.local.flows import pulled

TARGET_ACCEPT = 0.65


def sigmoid_schedule(steps, sharpness=4.0):
    """β_0 = 0 < … < β_T = 1, dense at both ends (Grosse et al. 2015)."""
    s = torch.sigmoid(sharpness * torch.linspace(-1, 1, steps + 1, dtype=torch.float64))
    return ((s - s[0]) / (s[-1] - s[0])).tolist()


def ais_log_marginal(log_joint, x, loc, scale, draws, steps, chains, leapfrog, chunk=CHUNK, bar=None, flow=None):
    """log p̂(x_n | θ_m) [M, n] for every draw θ_m of ``draws`` (:class:`~amortized_pyro.local.draws.Draws`) by AIS
    from N(loc, scale²) ([n, size], or [M, n, size]: one proposal per draw) with ``steps`` annealing steps of
    one HMC transition (``leapfrog`` integrator steps) and ``chains`` chains per image and draw, the draws
    in spans of at most ``chunk`` rows (the same numbers whatever the chunk). ``bar``: a tqdm progress bar,
    advanced by every annealing step. ``flow``: the proposal is N(loc, scale²) pushed through its transforms
    (:class:`~amortized_pyro.local.flows.RowFlow`): the path then runs in the Gaussian's space, to the
    pulled-back posterior, whose normalizer is p(x_n | θ_m) still."""
    n = loc.shape[-2]
    out = []
    spans = draws.chunks(chains * n, chunk)
    if bar is not None:
        bar.reset(total=steps * len(spans))
    for start, stop in spans:
        log_w = ais_log_weights(pulled(log_joint, flow, start, stop), x, draw_rows(loc, start, stop), draw_rows(scale, start, stop),
                                draws.part(start, stop), steps, chains, leapfrog, bar)
        out.append(torch.logsumexp(log_w, 1) - math.log(chains))
    return torch.cat(out)


def ais_log_weights(log_joint, x, loc, scale, draws, steps, chains, leapfrog, bar=None):
    """The chains' final log weights [M, chains, n] (see :func:`ais_log_marginal`), every draw of chain and
    momentum from the draw's own generator."""
    generators = draws.generators()
    loc, scale = broadcast_factor(loc), broadcast_factor(scale)  # [M or 1, 1, n, size]
    n, size = loc.shape[-2:]
    z = loc + scale * draws.normal(generators, (chains, n, size), loc.dtype)  # [M, C, n, size]
    path = Path(log_joint, x, draws.values, loc, scale)
    point = path.at(z)
    log_w = z.new_zeros(z.shape[:-1])
    step_size = torch.full(z.shape[:-1] + (1,), 0.5, dtype=z.dtype, device=z.device)  # [M, C, n, 1], in units of scale
    betas = sigmoid_schedule(steps)
    for previous, beta in zip(betas[:-1], betas[1:]):
        log_w += (beta - previous) * (point.joint - point.log_q)
        point, accepted = hmc_transition(path, point, beta, step_size, leapfrog, draws, generators)
        rate = accepted.to(z.dtype).mean(1, keepdim=True).unsqueeze(-1)  # per draw and image, over its chains
        step_size = step_size * torch.where(rate > TARGET_ACCEPT, 1.02, 0.98)
        if bar is not None:
            bar.update()
    return log_w


class Point(NamedTuple):
    """A point z of the chains with log p(x, z | θ), its gradient in z, and log q(z): what every annealing
    step's weight, energies and integrator need there, whatever β."""

    z: torch.Tensor
    joint: torch.Tensor
    grad_joint: torch.Tensor
    log_q: torch.Tensor


class Path:
    """The annealing path f_β(z) = q(z)^{1 − β} p(x, z | θ)^β of one chunk of draws: its potential energy
    U_β = −(1 − β) log q − β log p(x, z | θ) and gradient from a :class:`Point`, log q and its gradient in
    closed form, log p(x, z | θ) by one forward and backward pass of the decoder per point."""

    def __init__(self, log_joint, x, values, loc, scale):
        self.log_joint, self.x, self.values, self.loc, self.scale = log_joint, x, values, loc, scale
        self.variance, self.log_scale = scale.square(), scale.log()

    @torch.no_grad()
    def at(self, z):
        with torch.enable_grad():
            z = z.detach().requires_grad_()
            joint = self.log_joint(self.x, z, self.values)
            grad = torch.autograd.grad(joint.sum(), z)[0]  # images and chains are independent: each its own
        log_q = normal_log_density((z.detach() - self.loc) / self.scale, self.log_scale)
        return Point(z.detach(), joint.detach(), grad, log_q)

    def energy(self, point, beta):
        return -((1 - beta) * point.log_q + beta * point.joint)

    def energy_grad(self, point, beta):
        return (1 - beta) * (point.z - self.loc) / self.variance - beta * point.grad_joint


@torch.no_grad()
def hmc_transition(path, point, beta, step_size, leapfrog, draws, generators):
    """One HMC transition per chain leaving f_β(z) ∝ q(z)^{1 − β} · p(x, z | θ)^β invariant: (the new
    :class:`Point`, accepted). ``leapfrog`` velocity Verlet steps (as :func:`pyro.ops.integrator.velocity_verlet`),
    each ending at one :meth:`Path.at`; hand-written because Pyro's integrator keeps only ∇U_β, while the next
    annealing step (another β) needs ∇log p(x, z | θ) apart: keeping it, the last point of one transition
    serves the next step's weight, energy and first gradient (one decoder pass in L + 1 fewer, BENCHMARKS.md).
    The mass matrix is diag(1 / scale²) of the proposal (momentum r ~ N(0, diag 1/scale²), velocity scale² r):
    each dimension moves by ``step_size`` × its own proposal scale, instead of one step size set by the
    narrowest dimension (BENCHMARKS.md: AIS sweep)."""
    r = draws.normal(generators, point.z.shape[1:], point.z.dtype) / path.scale
    kinetic = 0.5 * (path.variance * r.pow(2)).sum(-1)
    start_energy = path.energy(point, beta) + kinetic
    new, grad = point, path.energy_grad(point, beta)
    for _ in range(leapfrog):  # each point's gradient serves the half steps on both sides of it
        r = r - 0.5 * step_size * grad
        new = path.at(new.z + step_size * path.variance * r)
        grad = path.energy_grad(new, beta)
        r = r - 0.5 * step_size * grad
    log_accept = start_energy - path.energy(new, beta) - 0.5 * (path.variance * r.pow(2)).sum(-1)
    uniform = draws.uniform(generators, log_accept.shape[1:], point.z.dtype)
    accepted = torch.isfinite(log_accept) & (uniform.log() < log_accept)
    keep = accepted.unsqueeze(-1)
    moved = Point(torch.where(keep, new.z, point.z), torch.where(accepted, new.joint, point.joint),
                  torch.where(keep, new.grad_joint, point.grad_joint), torch.where(accepted, new.log_q, point.log_q))
    return moved, accepted
