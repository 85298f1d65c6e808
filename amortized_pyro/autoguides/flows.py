"""Normalizing flows on q(z_n) (Rezende & Mohamed 2015): K transforms after a family's Gaussian factor,

    u_n = f_K ∘ … ∘ f_1(v_n),   v_n ~ N(μ_n, diag σ_n²),   log q(u_n) = log N(v_n; μ_n, σ_n) − Σ_k log |det ∂f_k|

in the flat unconstrained layout of the local sites (:mod:`.structure`). Each f_k is Zuko's masked
autoregressive transform (affine, Zuko's MADE hyper-network; Pyro's own flow development has moved to Zuko,
pyro-ppl/pyro #3297), applied in the direction Zuko evaluates in one pass, so that a draw and its density
cost one pass each: an inverse autoregressive flow (Kingma et al. 2016), the direction a guide needs (it
scores only its own draws). Conditional on the encoder's features for the amortized family (their context),
unconditional for the free ones. The hyper-networks' last layers start at zero: every f_k starts as the
identity, so a flow guide starts as its Gaussian guide, exactly. Drawn in Pyro through its ``ZukoToPyro``
bridge.
"""
import torch
from torch import nn
from torch.func import functional_call

import pyro
import pyro.distributions as dist
from pyro.distributions.util import sum_rightmost
import zuko
from pyro.contrib.zuko import ZukoToPyro

from amortized_pyro.local.flows import RowFlow

DEFAULT_FLOW_WIDTH = 64
LOCAL_FLOW = "_local_flow"  # a guide's auxiliary site of the flat local vector u_n where a flow draws it


class FlowDistribution(ZukoToPyro):
    """Pyro's ``ZukoToPyro`` with torch's ``rsample`` and ``sample`` as well, both drawing through its ``__call__``
    (which caches the draw's density): hand-written for a missing feature, since Pyro 1.9's bridge has neither,
    and Pyro's initialization strategies and ``Predictive`` call ``fn.sample()``."""

    def rsample(self, sample_shape=torch.Size()):
        return self(sample_shape)

    def sample(self, sample_shape=torch.Size()):
        with torch.no_grad():
            return self(sample_shape)

    def expand(self, *args, **kwargs):
        return FlowDistribution(self.dist.expand(*args, **kwargs))


class LocalFlow(nn.Module):
    """K masked autoregressive transforms on vectors of ``size``, conditioned on a context of ``context``
    features (0: none), each with a hyper-network of two hidden layers of ``width``, the variables' order
    reversed from one transform to the next; each starts as the identity (last layer zero)."""

    def __init__(self, size, transforms, context=0, width=DEFAULT_FLOW_WIDTH):
        super().__init__()
        order = torch.arange(size)
        self.transforms = nn.ModuleList(
            zuko.flows.MaskedAutoregressiveTransform(size, context, order=order.flip(0) if k % 2 else order,
                                                     hidden_features=(width, width)) for k in range(transforms))
        with torch.no_grad():
            for transform in self.transforms:
                transform.hyper[-1].weight.zero_()
                transform.hyper[-1].bias.zero_()

    def forward(self, v, context=None):
        """(u, log |det ∂u/∂v|): v [..., size] through every transform; the log-determinant [...]."""
        ladj = 0
        for transform in self.transforms:
            v, step = transform(context).call_and_ladj(v)
            ladj = ladj + step
        return v, ladj

    push = forward

    def row_flow(self, rows, context=None):
        """These transforms with parameters of their own per row, each row starting at this flow's (the gap's
        flow-family q*, :class:`~amortized_pyro.local.flows.RowFlow`), for ``rows`` rows with ``context``
        [rows, F] (or None): row n is then exactly this flow at context n; its identity: the last layers zeroed."""
        names, shapes = zip(*[(name, p.shape) for name, p in self.named_parameters()])
        sizes = [shape.numel() for shape in shapes]

        def apply(flat, v, c):
            params = {name: part.reshape(shape) for name, part, shape in zip(names, flat.split(sizes), shapes)}
            return functional_call(self, params, (v, c))

        flat = torch.cat([p.detach().reshape(-1) for p in self.parameters()])
        last = {id(p) for transform in self.transforms for p in transform.hyper[-1].parameters()}
        identity = torch.cat([p.detach().reshape(-1) * (id(p) not in last) for p in self.parameters()])
        return RowFlow(apply, flat.expand(rows, -1).clone(), None if context is None else context.detach(), identity)

    def distribution(self, loc, scale, context=None):
        """q(u) as a Pyro distribution: the Gaussian factor N(loc, scale) [..., size] pushed through the
        transforms (event dim 1); its draws scored from their own pass (Pyro's ZukoToPyro caches it)."""
        base = dist.Normal(loc, scale).to_event(1)
        parts = [transform(context) for transform in self.transforms]
        # Zuko's NormalizingFlow maps samples to the base: our f is its inverse, f^-1 = (f_K ∘ … ∘ f_1)^-1
        inverse = zuko.transforms.ComposedTransform(*parts).inv
        return FlowDistribution(zuko.distributions.NormalizingFlow(inverse, base))


def flow_draws(structure, local_flow, loc, scale, context):
    """A guide's local sites where a flow draws u_n (one auxiliary site, as Pyro's AutoContinuous draws its latent
    vector), inside the data plate of ``structure``: each site a Delta at its block of u_n, mapped to its support,
    carrying the log-Jacobian of that map as its density, so that the sites' log q add up to q(z_n)'s."""
    at_plate = structure.at_plate_dim  # the auxiliary site's datapoints at the plate's dim
    context = None if context is None else at_plate(context, 1)
    u = pyro.sample(LOCAL_FLOW, local_flow.distribution(at_plate(loc, 1), at_plate(scale, 1), context),
                    infer={"is_auxiliary": True})
    draws = {}
    for site in structure.locals:  # u's leading dims as Pyro's plates made them (particles included)
        value = u[..., site.start:site.stop].reshape(u.shape[:-1] + site.unconstrained_shape)
        event_dim = len(site.unconstrained_shape)
        if site.is_real:
            draws[site.name] = pyro.sample(site.name, dist.Delta(value, event_dim=event_dim))
            continue
        constrained = site.transform(value)
        jacobian = site.transform.log_abs_det_jacobian(value, constrained)
        batch = value.dim() - event_dim
        draws[site.name] = pyro.sample(site.name, dist.Delta(
            constrained, log_density=-sum_rightmost(jacobian, jacobian.dim() - batch), event_dim=len(site.event_shape)))
    return draws
