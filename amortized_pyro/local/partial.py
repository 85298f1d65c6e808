"""Refining only the worst datapoints of a batch: a score per datapoint from a few importance weights of the
encoder's factor, the share of the batch with the highest scores, and the local log joint on those rows alone.
SA-VI's ``share`` (:class:`~amortized_pyro.autoguides.factors.SemiAmortizedFactor`) uses it.

    spread   the standard deviation of log w over the draws (log w = log p(x_n, z | θ) − log q(z), z ~ q)
    khat     the Pareto shape k̂ of the weights (ArviZ's fit: :func:`~.diagnostics.pareto_khat`; needs ~100 draws)
    elbo     minus the mean of log w: the lowest local ELBO first (it ranks log p(x_n) as much as the gap)
"""
import math

import torch

from amortized_pyro.local.diagnostics import pareto_khat
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.estimates import all_log_weights, log_weights

SCORES = ("spread", "khat", "elbo")


def score_of(log_w, score):
    """Each datapoint's score [B] from log weights [S, B] (higher: refined first)."""
    if score == "spread":
        return log_w.std(0)
    if score == "elbo":
        return -log_w.mean(0)
    if score == "khat":
        return torch.as_tensor(pareto_khat(log_w.T), dtype=log_w.dtype, device=log_w.device)
    raise ValueError("score %r is not one of %s" % (score, ", ".join(SCORES)))


@torch.no_grad()
def worst_rows(log_joint, x, loc, scale, theta, share, score, draws, generator=None):
    """The rows (sorted indices into the batch) of the ⌈share · B⌉ datapoints with the highest ``score`` from
    ``draws`` draws of the factor (loc, scale) [B, size] at ``theta`` (one θ, z from ``generator``; or Draws,
    each with its own draws)."""
    if isinstance(theta, Draws):
        log_w = all_log_weights(log_joint, x, loc, scale, theta, draws).flatten(0, 1)
    else:
        log_w = log_weights(log_joint, x, loc, scale, theta, draws, generator)
    batch = loc.shape[-2]
    return torch.topk(score_of(log_w, score), max(1, math.ceil(share * batch))).indices.sort().values


class Rows:
    """A local log joint that reads the model's own arguments (one read off the trace), on the rows ``rows`` of
    its batch: z [*lead, k, size] for those rows is written into the batch's ``base`` [B, size] (the other rows
    held there: a datapoint's log joint depends on its own z_n alone), the model run on the whole batch, the
    rows' terms returned [*lead, k]. The model's cost per call is then the whole batch's. ``x`` (the rows' data,
    which sizes the optimizers' draws) is passed on: such a joint does not read it."""

    def __init__(self, joint, rows, base):
        self.joint, self.rows, self.base = joint, rows, base

    def __call__(self, x, z, theta):
        full = self.base.expand(z.shape[:-2] + self.base.shape).index_copy(-2, self.rows, z)
        return self.joint(x, full, theta)[..., self.rows]
