"""The local ELBO of one image for a Gaussian factor q(z_n) = N(μ_n, diag σ_n²), and its Monte Carlo estimates:

    L_n(q; θ) = E_{q(z_n)}[log p(x_n | z_n, θ) + log p(z_n) − log q(z_n)]

estimated with reparameterized draws z = μ + σ ε. θ is one global value (site → tensor; ε from an explicit
generator) or the gap's M draws (:class:`~amortized_pyro.local.draws.Draws`; ε from each draw's own generator),
evaluated as one batched program: z [M, S, n, size] against θ stacked [M, ...], at most ``chunk`` rows
(draws × z draws × images) at once, with the same numbers whatever the chunk. ``log_joint(x, z, θ)`` is the
model's :meth:`~amortized_pyro.models.decoder.BayesianDecoderModel.local_log_joint` (or any function that
takes z [M, S, n, size] with θ stacked [M, ...] and returns [M, S, n]). The optimizers that run on these
estimates are in :mod:`amortized_pyro.local.optimize`.
"""
import math

import torch

from amortized_pyro.local.flows import pulled


HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
CHUNK = 2 ** 15  # rows (θ draws × z draws × images) per decoder call: about 170 MB at the reference size


def log_weights(log_joint, x, loc, scale, theta, draws, generator=None):
    """log p(x, z | θ) − log q(z) for ``draws`` reparameterized z ~ N(loc, scale²): [draws, n]."""
    eps = torch.randn((draws,) + tuple(loc.shape), generator=generator, device=loc.device)
    return weights(log_joint, x, loc, scale, theta, eps)


def weights(log_joint, x, loc, scale, theta, eps):
    """log p(x, z | θ) − log q(z) for z = loc + scale ε at one θ: [draws, n] for ε [draws, *loc.shape]."""
    return log_joint(x, loc + scale * eps, theta) - normal_log_density(eps, scale.log())


def normal_log_density(standard, log_scale):
    """log N(z; μ, diag σ²) summed over the last dimension, from z's standardized value (z − μ) / σ and log σ.
    In closed form rather than by a Normal per step: the objects' construction was 5% of a gap (BENCHMARKS.md);
    at z = μ + σ ε its value and gradients are those of ``Normal(μ, σ).log_prob(z).sum(-1)``."""
    return -0.5 * standard.square().sum(-1) - (log_scale.sum(-1) + standard.shape[-1] * HALF_LOG_2PI)


def broadcast_factor(t):
    """A factor's tensor as [M or 1, 1, n, size], to broadcast against z [M, S, n, size]."""
    return (t if t.dim() == 3 else t.unsqueeze(0)).unsqueeze(1)


def draw_log_weights(log_joint, x, loc, scale, values, eps):
    """log p(x, z | θ_m) − log q(z) for z = loc + scale ε, ε [M, S, n, size], θ stacked ``values`` [M, ...],
    the factor [n, size] (one for every draw) or [M, n, size] (one per draw): [M, S, n]."""
    loc, scale = broadcast_factor(loc), broadcast_factor(scale)
    return log_joint(x, loc + scale * eps, values) - normal_log_density(eps, scale.log())


def draw_rows(t, start, stop):
    return t if t.dim() == 2 else t[start:stop]


def _weight_pieces(log_joint, x, loc, scale, draws, samples, chunk, flow):
    """For each span of draws θ_m that fits the chunk: its log weights over ``samples`` z ~ q from each θ_m's own
    generator (the same whatever the chunk), as a list of pieces [m, s, n] along the z draws."""
    n, size = loc.shape[-2:]
    for start, stop in draws.chunks(samples * n, chunk):
        part = draws.part(start, stop)
        eps = part.normal(part.generators(), (samples, n, size), loc.dtype)  # each draw's, whatever the chunk
        f_loc, f_scale = draw_rows(loc, start, stop), draw_rows(scale, start, stop)
        step = max(1, chunk // ((stop - start) * n))
        joint = pulled(log_joint, flow, start, stop)
        yield [draw_log_weights(joint, x, f_loc, f_scale, part.values, eps[:, s:s + step])
               for s in range(0, samples, step)]


@torch.no_grad()
def per_draw(log_joint, x, loc, scale, draws, samples, reduce="mean", chunk=CHUNK, flow=None):
    """For every draw θ_m of ``draws`` and image, over ``samples`` z ~ q from θ_m's generator: the mean of the
    log weights (``reduce="mean"``: L_n(q; θ_m)) or their log-mean-exp (``"logmeanexp"``: the
    importance-weighted bound on log p(x_n | θ_m)). Returns [M, n]. The factor is [n, size] or [M, n, size],
    followed by ``flow``'s transforms where given (:class:`~amortized_pyro.local.flows.RowFlow`)."""
    out = []
    for pieces in _weight_pieces(log_joint, x, loc, scale, draws, samples, chunk, flow):
        if reduce == "mean":
            out.append(sum(w.sum(1) for w in pieces) / samples)
        else:
            out.append(torch.logsumexp(torch.stack([w.logsumexp(1) for w in pieces]), 0) - math.log(samples))
    return torch.cat(out)


@torch.no_grad()
def all_log_weights(log_joint, x, loc, scale, draws, samples, chunk=CHUNK, flow=None):
    """Every log weight log p(x_n, z | θ_m) − log q(z) of :func:`per_draw`'s draws, kept: [M, S, n] (the
    per-datapoint diagnostics' input: :mod:`amortized_pyro.local.diagnostics`); q the Gaussian factor followed by
    ``flow``'s transforms where given (the log joint pulled back through them: the same weights)."""
    return torch.cat([torch.cat(pieces, 1) for pieces in _weight_pieces(log_joint, x, loc, scale, draws, samples,
                                                                       chunk, flow)])


def local_elbo(log_joint, x, loc, scale, draws, samples, chunk=CHUNK, flow=None):
    """L_n(q) per image [n]: the mean over the draws θ_m of L_n(q; θ_m), each by ``samples`` z draws."""
    return per_draw(log_joint, x, loc, scale, draws, samples, "mean", chunk, flow).mean(0)


def scoring_stderrs(optimized, guide, per_theta):
    """Per image, the standard error that the draws' Monte Carlo noise gives each gap that is ≥ 0 in theory, from
    the per-draw values [draws, n]: the amortization gap's, over its S per-draw differences L_n(q*; θ'_s) −
    L_n(q_guide; θ'_s) on common random numbers, sd / √S; the coupling gap's, from its two independent sets,
    √(var_m L_n(q*_m; θ_m) / M + var_s L_n(q*; θ'_s) / S). A value below zero by a few of these is scoring noise;
    by many, an optimum that is not one. None where the gap is not measured or a set has one draw."""
    def variance_of_mean(values):
        return values.var(0) / values.shape[0] if values.shape[0] > 1 else None

    def root(*variances):
        return None if any(v is None for v in variances) else sum(variances).sqrt()
    return {"amortization_gap_stderr": None if guide is None else root(variance_of_mean(optimized - guide)),
            "coupling_gap_stderr": None if per_theta is None else root(variance_of_mean(per_theta),
                                                                       variance_of_mean(optimized))}
