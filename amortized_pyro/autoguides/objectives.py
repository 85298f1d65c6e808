"""How q's draws are scored: the true density (``elbo``) or as both studies' code scores them (``reference``)."""
import math

import torch
from torch.distributions.utils import _standard_normal

import pyro.distributions as dist

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

OBJECTIVES = ("elbo", "reference")


class ReferenceNormal(dist.Normal):
    """Normal(loc, scale) for drawing, scored as both studies' code scores q (their ``log_q`` takes variances
    and is given standard deviations):

        log q(v) = log N(v | loc, variance = scale) = −½ log(2π s) − (v − m)² / 2s,

    so at v = m + s ε, −log q = ½ log s + ½ s ε² + const instead of log s + ½ ε² + const. Not a density of
    the draws: an objective scored with it is not an ELBO (``--objective reference``)."""

    def log_prob(self, value):
        return dist.Normal(self.loc, self.scale.sqrt()).log_prob(value)


class DrawnNormal(dist.Normal):
    """Normal(loc, scale) that scores its own reparameterized draw v = m + s ε by its noise,

        log q(v) = −½ ε² − log s − ½ log 2π,    ε held (not differentiated),

    the density at v to rounding, and the same gradient as Trace_ELBO's: the total derivative of log N(m + s ε |
    m, s) is 0 in m and −1/s in s, which the closed form gives directly, without recomputing (v − m) / s and its
    backward over every decoder weight (issue 70: the lean yardstick's step scores q(θ) so). Any other value is
    scored by torch's formula. The draw is torch's Normal's, number for number (its ``_standard_normal``)."""

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        eps = _standard_normal(shape, dtype=self.loc.dtype, device=self.loc.device)
        value = self.loc + eps * self.scale
        self._drawn = (value, eps)
        return value

    def log_prob(self, value):
        drawn = getattr(self, "_drawn", None)
        if drawn is None or value is not drawn[0]:
            return super().log_prob(value)
        return drawn[1].square().mul(-0.5).sub(self.scale.log()).sub(HALF_LOG_2PI)


def q_normal(objective):
    """The Normal that scores q's draws: the true one (``elbo``: :class:`DrawnNormal`) or the studies'
    (``reference``)."""
    return ReferenceNormal if objective == "reference" else DrawnNormal
