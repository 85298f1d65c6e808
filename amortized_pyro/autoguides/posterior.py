"""Medians and quantiles of a guide builder's q(z_n), site by site in constrained space, as Pyro's AutoNormal
gives them for its sites: the Gaussian factor's μ_n (its median in unconstrained space) and its quantiles
μ_n + σ_n Φ⁻¹(q), each mapped by the site's bijection (monotone per coordinate for the elementwise ones: the
median and the quantiles of the site itself; for the others, as AutoNormal, the image of the unconstrained
ones). A flow has no closed form: its medians and quantiles are those of ``FLOW_DRAWS`` draws, per coordinate of
u_n, then mapped. Every draw here (a flow's, SA-VI's and IA-VI's refinement at the global median) comes from a
generator seeded with ``SEED``, so that the same guide gives the same medians and quantiles, the median the
middle of ``quantiles([q, 0.5, ...])``, and the global random stream is left as it was."""
import torch

import pyro.distributions as dist

FLOW_DRAWS = 1000
SEED = 0


def _factor(guide, args, kwargs):
    """(the call's datapoints, μ, σ [B, size]) at the global part's median (SA-VI refines there)."""
    indices = guide.indices_of(*args, **kwargs)
    theta = guide.global_mean()
    device = next(guide.parameters()).device
    with guide.refinement_draws(torch.Generator(device).manual_seed(SEED)):
        loc, scale = guide.local_factor(indices, args, kwargs, theta)
    return indices, loc, scale


def _flow_draws(guide, indices, loc, scale, args, kwargs):
    generator = torch.Generator(loc.device).manual_seed(SEED)
    eps = torch.randn((FLOW_DRAWS,) + tuple(loc.shape), device=loc.device, dtype=loc.dtype, generator=generator)
    return guide.push(loc + scale * eps, indices, args, kwargs)


def _constrained(structure, u):
    """Flat unconstrained values [B, size] → site → constrained values in the site's shape."""
    return {site.name: site.transform(value) for site, value in zip(structure.locals, structure.split(u).values())}


@torch.no_grad()
def local_median(guide, args, kwargs):
    """site → the median of q(z_n) for the datapoints of the call, [B, 1…, *event]."""
    indices, loc, scale = _factor(guide, args, kwargs)
    if guide.local_flow is not None:
        loc = _flow_draws(guide, indices, loc, scale, args, kwargs).quantile(0.5, dim=0)
    return _constrained(guide.structure, loc)


@torch.no_grad()
def local_quantiles(guide, quantiles, args, kwargs):
    """site → the quantiles ``quantiles`` of q(z_n) for the datapoints of the call, [len(quantiles), B, 1…, *event]."""
    indices, loc, scale = _factor(guide, args, kwargs)
    qs = torch.as_tensor(quantiles, dtype=loc.dtype, device=loc.device)
    if guide.local_flow is not None:
        values = _flow_draws(guide, indices, loc, scale, args, kwargs).quantile(qs, dim=0)
    else:
        values = dist.Normal(loc, scale).icdf(qs.reshape(-1, 1, 1))
    rows = [_constrained(guide.structure, row) for row in values]
    return {site.name: torch.stack([row[site.name] for row in rows]) for site in guide.structure.locals}
