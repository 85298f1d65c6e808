"""How q's draws are scored: the true density (``elbo``) or as both studies' code scores them (``reference``)."""
import pyro.distributions as dist

OBJECTIVES = ("elbo", "reference")


class ReferenceNormal(dist.Normal):
    """Normal(loc, scale) for drawing, scored as both studies' code scores q (their ``log_q`` takes variances
    and is given standard deviations):

        log q(v) = log N(v | loc, variance = scale) = −½ log(2π s) − (v − m)² / 2s,

    so at v = m + s ε, −log q = ½ log s + ½ s ε² + const instead of log s + ½ ε² + const. Not a density of
    the draws: an objective scored with it is not an ELBO (``--objective reference``)."""

    def log_prob(self, value):
        return dist.Normal(self.loc, self.scale.sqrt()).log_prob(value)


def q_normal(objective):
    """The Normal that scores q's draws: the true one (``elbo``) or the studies' (``reference``)."""
    return ReferenceNormal if objective == "reference" else dist.Normal
