"""log p(x_n | θ) by annealed importance sampling (Neal 2001), the second estimator of the gap's log p(x), as
Wu et al. (2017) and Cremer et al. (2018) use it to evaluate decoders.

From a Gaussian proposal q(z_n) = N(loc, diag scale²) to the posterior p(z_n | x_n, θ), along

    f_t(z) = q(z)^{1 − β_t} · p(x_n, z | θ)^{β_t},    0 = β_0 < β_1 < … < β_T = 1    (a sigmoidal schedule)

each of C chains starts at z ~ q, adds (β_t − β_{t−1}) · (log p(x_n, z | θ) − log q(z)) to its log weight, and
then moves by one HMC transition that leaves f_t invariant: ``leapfrog`` steps of Pyro's velocity Verlet
integrator (:func:`pyro.ops.integrator.velocity_verlet`) and a Metropolis correction per chain.
log p̂(x_n | θ) = log (1/C) Σ_c exp(log w_c); E[w] = p(x_n | θ), so the estimate is a stochastic lower bound,
exact as T → ∞. The HMC mass matrix is diag(1 / scale²) of the proposal, so each dimension steps by its own
scale; each image's step size adapts between transitions towards an acceptance rate of 0.65 (as Wu et al.);
every θ draw, chain, image and step is vectorized. On an informative run (bench/ais_sweep.py, BENCHMARKS.md)
the per-dimension steps brought 200 annealing steps from 2.2 to 0.8 nats below the 5,000-step estimate, and
1,000 steps (the default) to 0.1. Hand-written around Pyro's integrator: Pyro's HMC
kernel runs one chain on one target, not an annealed path over many images at once.
"""
import math

import torch

import pyro.distributions as dist
from pyro.ops.integrator import velocity_verlet

from .local_elbo import CHUNK, broadcast_factor, draw_rows

TARGET_ACCEPT = 0.65


def sigmoid_schedule(steps, sharpness=4.0):
    """β_0 = 0 < … < β_T = 1, dense at both ends (Grosse et al. 2015)."""
    s = torch.sigmoid(sharpness * torch.linspace(-1, 1, steps + 1, dtype=torch.float64))
    return ((s - s[0]) / (s[-1] - s[0])).tolist()


def ais_log_marginal(log_joint, x, loc, scale, draws, steps, chains, leapfrog, chunk=CHUNK, bar=None):
    """log p̂(x_n | θ_m) [M, n] for every draw θ_m of ``draws`` (:class:`~amortized_pyro.draws.Draws`) by AIS
    from N(loc, scale²) ([n, size], or [M, n, size]: one proposal per draw) with ``steps`` annealing steps of
    one HMC transition (``leapfrog`` integrator steps) and ``chains`` chains per image and draw, the draws
    in spans of at most ``chunk`` rows (the same numbers whatever the chunk). ``bar``: a tqdm progress bar,
    advanced by every annealing step."""
    n = loc.shape[-2]
    out = []
    spans = draws.chunks(chains * n, chunk)
    if bar is not None:
        bar.reset(total=steps * len(spans))
    for start, stop in spans:
        log_w = ais_log_weights(log_joint, x, draw_rows(loc, start, stop), draw_rows(scale, start, stop),
                                draws.part(start, stop), steps, chains, leapfrog, bar)
        out.append(torch.logsumexp(log_w, 1) - math.log(chains))
    return torch.cat(out)


def ais_log_weights(log_joint, x, loc, scale, draws, steps, chains, leapfrog, bar=None):
    """The chains' final log weights [M, chains, n] (see :func:`ais_log_marginal`), every draw of chain and
    momentum from the draw's own generator."""
    generators = draws.generators()
    loc, scale = broadcast_factor(loc), broadcast_factor(scale)  # [M or 1, 1, n, size]
    proposal = dist.Normal(loc, scale)
    n, size = loc.shape[-2:]
    z = loc + scale * draws.normal(generators, (chains, n, size), loc.dtype)  # [M, C, n, size]
    log_w = z.new_zeros(z.shape[:-1])
    step_size = torch.full(z.shape[:-1] + (1,), 0.5, dtype=z.dtype, device=z.device)  # [M, C, n, 1], in units of scale
    betas = sigmoid_schedule(steps)

    def log_ratio(z):
        return log_joint(x, z, draws.values) - proposal.log_prob(z).sum(-1)  # [M, C, n]

    with torch.no_grad():
        for previous, beta in zip(betas[:-1], betas[1:]):
            with torch.enable_grad():  # one evaluation at z serves the weight, the start energy and its gradient
                z = z.detach().requires_grad_()
                ratio = log_ratio(z)
            log_w += (beta - previous) * ratio.detach()
            z, accepted = hmc_transition(z, ratio, beta, log_ratio, proposal, step_size, leapfrog, draws,
                                         generators)
            rate = accepted.to(z.dtype).mean(1, keepdim=True).unsqueeze(-1)  # per draw and image, over its chains
            step_size = step_size * torch.where(rate > TARGET_ACCEPT, 1.02, 0.98)
            if bar is not None:
                bar.update()
    return log_w


def hmc_transition(z, ratio, beta, log_ratio, proposal, step_size, leapfrog, draws, generators):
    """One HMC transition per chain leaving f_β(z) ∝ q(z) · (p(x, z | θ) / q(z))^β invariant: (z', accepted);
    ``ratio`` is log_ratio(z), on the autograd graph of z (its gradient starts the integrator).
    The mass matrix is diag(1 / scale²) of the proposal (momentum r ~ N(0, diag 1/scale²), velocity scale² r):
    each dimension moves by ``step_size`` × its own proposal scale, instead of one step size set by the
    narrowest dimension (BENCHMARKS.md: AIS sweep)."""
    energy = {}
    variance = proposal.scale.square()

    def potential(sites):
        energy["u"] = -(proposal.log_prob(sites["z"]).sum(-1) + beta * log_ratio(sites["z"]))  # [M, C, n]
        return energy["u"].sum()  # chains and images are independent: the gradient of the sum is each one's

    with torch.enable_grad():
        start_u = -(proposal.log_prob(z).sum(-1) + beta * ratio)
        start_grad = torch.autograd.grad(start_u.sum(), z)[0]
        r = draws.normal(generators, z.shape[1:], z.dtype) / proposal.scale
        z = z.detach()
        z_new, r_new, _, _ = velocity_verlet({"z": z}, {"z": r}, potential, lambda m: {"z": variance * m["z"]},
                                             step_size, leapfrog, z_grads={"z": start_grad})
    z_new, r_new = z_new["z"].detach(), r_new["z"].detach()
    new_u = energy["u"].detach()
    log_accept = start_u.detach() + 0.5 * (variance * r.pow(2)).sum(-1) - new_u - 0.5 * (variance * r_new.pow(2)).sum(-1)
    uniform = draws.uniform(generators, log_accept.shape[1:], z.dtype)
    accepted = torch.isfinite(log_accept) & (uniform.log() < log_accept)
    return torch.where(accepted.unsqueeze(-1), z_new, z), accepted
