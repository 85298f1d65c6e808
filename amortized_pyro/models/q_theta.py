"""q(θ): the mean-field Gaussian over every decoder weight and bias that all guides share, or a point mass.

    q(θ) = Π_j Normal(θ_j | m_j, s_j),   m_j = 0 and s_j = ``init_scale`` at the start (e^-2 in both studies)
    q(θ) = δ(θ − θ̂)                      the decoder point-estimated (a standard VAE: :class:`QThetaPoint`)

The module owns (m, log s) as plain parameters, ``loc`` and ``log_scale``. Calling it draws θ at
the model's ``decoder.*`` sample sites; :meth:`QThetaNormal.sample` is the one sampler of q(θ) outside
inference (evaluation, gap measurement), drawing from an explicit generator.
"""
import math

import torch
from torch import nn

import pyro
import pyro.distributions as dist

from amortized_pyro.autoguides.objectives import q_normal
from amortized_pyro.models.modules import LocalModule

THETA_INIT_SCALE = math.exp(-2)


class QThetaNormal(LocalModule):
    """q(θ) for the decoder tensors ``shapes`` (site name → shape, as :func:`~amortized_pyro.models.decoder.decoder_shapes`).

    (m, log s) are two flat vectors over all decoder tensors (parameters ``loc`` and ``log_scale``), as in the
    studies' code, viewed per site: one exponential for every s per step instead of one per tensor (the step
    is Python-bound at small sizes). s = exp(log s) is what Pyro's positive constraint computes, to the bit."""

    def __init__(self, shapes, init_scale=THETA_INIT_SCALE, objective="elbo"):
        super().__init__()
        self.objective = objective
        self.shapes = dict(shapes)
        size = sum(math.prod(shape) for shape in self.shapes.values())
        self.loc = nn.Parameter(torch.zeros(size))
        self.log_scale = nn.Parameter(torch.full((size,), float(init_scale)).log())

    @property
    def scale(self):
        """s, the flat vector of standard deviations."""
        return self.log_scale.exp()

    def _split(self, flat):
        """Site → the view of ``flat`` holding that site's tensor. Where (m, s) are stacked over replicas
        ([R, size], a pack of seeds), each site's view is [R, 1, *shape]: batch shape [R, 1], as an outer
        plate at dim −2 around the model's ``data`` plate wants it."""
        lead = flat.shape[:-1] + (1,) * (flat.dim() - 1)
        parts = flat.split([math.prod(shape) for shape in self.shapes.values()], -1)
        return {site: part.view(lead + tuple(shape)) for (site, shape), part in zip(self.shapes.items(), parts)}

    def params(self):
        """Site → (m, s)."""
        locs, scales = self._split(self.loc), self._split(self.scale)
        return {site: (locs[site], scales[site]) for site in self.shapes}

    def forward(self, *args, **kwargs):
        """Draw θ ~ q(θ) at the ``decoder.*`` sites, scored as ``objective`` says; returns site → draw. As the
        global part of a guide builder it is called with the model's arguments, which it does not read (the
        builder puts a warm-up's scale around it)."""
        normal = q_normal(self.objective)
        return {site: pyro.sample(site, normal(loc, scale).to_event(len(self.shapes[site])))
                for site, (loc, scale) in self.params().items()}

    def median(self):
        """E_q[θ] (q is Normal: its median), site → tensor (detached)."""
        return {site: loc.detach() for site, (loc, _) in self.params().items()}

    def sample(self, generator=None):
        """One draw θ = m + s ε, ε from ``generator`` (the global stream if None), site → tensor, detached."""
        return {site: (loc + scale * torch.randn(loc.shape, generator=generator, device=loc.device)).detach()
                for site, (loc, scale) in self.params().items()}

    def mean_scale(self):
        """s̄: the mean of s over every decoder weight and bias (a 0-dim tensor)."""
        return self.scale.detach().mean()

    def is_point(self):
        """Whether q(θ) is a point mass (every draw the same θ)."""
        return False


class QThetaPoint(QThetaNormal):
    """q(θ) = δ(θ − θ̂): the decoder point-estimated, for a model without a prior on θ (``decoder_prior="none"``:
    log p(θ) = log q(θ) = 0, so the ELBO is a standard VAE's and θ̂ its maximum-likelihood decoder). θ̂ is the
    flat parameter ``loc``, started as torch.nn.Linear (and ConvTranspose2d) start their tensors,
    U(−1/√fan_in, 1/√fan_in) with torch's fan-in (dimension 1 times the kernel's size), a bias taking the fan-in
    of the weight before it, from the global stream (all zeros would leave every hidden
    unit alike for ever). No scale: draws are θ̂ itself, so the gap's θ draws coincide and its coupling gap is
    zero by construction. The sites named in ``zero`` start at 0 instead (a learned p(z | c)'s M and S, which then
    starts as N(0, I))."""

    def __init__(self, shapes, objective="elbo", zero=()):
        LocalModule.__init__(self)
        self.objective = objective  # scores nothing here: a point mass has no scale to score as a variance
        self.shapes = dict(shapes)
        parts, fan_in = [], 1
        for site, shape in self.shapes.items():
            if site in zero:
                parts.append(torch.zeros(math.prod(shape)))
                continue
            fan_in = shape[1] * math.prod(shape[2:]) if len(shape) > 1 else fan_in  # torch's fan-in rule
            bound = 1 / math.sqrt(fan_in)
            parts.append(torch.empty(math.prod(shape)).uniform_(-bound, bound))
        self.loc = nn.Parameter(torch.cat(parts))

    @property
    def scale(self):
        return torch.zeros_like(self.loc)

    def forward(self, *args, **kwargs):
        """θ = θ̂ at the ``decoder.*`` sites (Delta sites: log q = 0); returns site → θ̂."""
        return {site: pyro.sample(site, dist.Delta(loc, event_dim=len(self.shapes[site])))
                for site, (loc, _) in self.params().items()}

    def sample(self, generator=None):
        """θ̂ (every draw of a point mass), site → tensor, detached."""
        return self.median()

    def is_point(self):
        return True
