"""Refining only the worst datapoints of a batch: a score per datapoint from a few importance weights of the
encoder's factor, the share of the batch with the highest scores, and the local log joint on those rows alone.
SA-VI's ``share`` (:class:`~amortized_pyro.autoguides.factors.SemiAmortizedFactor`) uses it.

    spread   the standard deviation of log w over the draws (log w = log p(x_n, z | θ) − log q(z), z ~ q)
    khat     the Pareto shape k̂ of the weights (ArviZ's fit: :func:`~.diagnostics.pareto_khat`; at most 20 draws
             give every datapoint k̂ = ∞, so it takes at least :data:`KHAT_DRAWS`)
    elbo     minus the mean of log w: the lowest local ELBO first (it ranks log p(x_n) as much as the gap)

Each score is taken at each global draw θ_m on its own z draws, then averaged over the draws (pooled over θ, the
weights would carry log p(x_n | θ)'s spread over q(θ) too).
"""
import math

import torch

from amortized_pyro.errors import GuideError
from amortized_pyro.local.diagnostics import KHAT_DRAWS, pareto_khat
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.estimates import all_log_weights, log_weights

SCORES = ("spread", "khat", "elbo")
DEFAULT_DRAWS = {"spread": 8, "elbo": 8, "khat": 100}  # z draws per datapoint (and θ draw) for each score


def score_of(log_w, score):
    """Each datapoint's score [B] from log weights [S, B] (higher: refined first)."""
    if score == "spread":
        return log_w.std(0)
    if score == "elbo":
        return -log_w.mean(0)
    if score == "khat":
        return torch.as_tensor(pareto_khat(log_w.T), dtype=log_w.dtype, device=log_w.device)
    raise ValueError("score %r is not one of %s" % (score, ", ".join(SCORES)))


def check_score(score, draws):
    """One line of :class:`~amortized_pyro.errors.GuideError` where ``score`` is unknown or ``draws`` too few for it."""
    if score not in SCORES or draws < (KHAT_DRAWS if score == "khat" else 2):
        raise GuideError("a refined share's score must be one of %s with at least 2 draws (khat: %d); got %r with "
                         "%r" % (", ".join(SCORES), KHAT_DRAWS, score, draws))


@torch.no_grad()
def worst_rows(log_joint, x, loc, scale, theta, share, score, draws, generator=None):
    """The rows (sorted indices into the batch) of the ⌈share · B⌉ datapoints with the highest ``score`` from
    ``draws`` draws of the factor (loc, scale) [B, size] at ``theta`` (one θ, z from ``generator``; or Draws,
    each with its own draws, the score averaged over them)."""
    if isinstance(theta, Draws):
        scores = torch.stack([score_of(w, score) for w in all_log_weights(log_joint, x, loc, scale, theta, draws)])
        scores = scores.mean(0)
    else:
        scores = score_of(log_weights(log_joint, x, loc, scale, theta, draws, generator), score)
    batch = loc.shape[-2]
    return torch.topk(scores, max(1, math.ceil(share * batch))).indices.sort().values


def refine_worst(log_joint, x, loc0, scale0, theta, share, score, draws, generator, refined, rows_of_data=False):
    """The factor (loc0, scale0) [B, size] with its ⌈share · B⌉ worst rows (:func:`worst_rows`) replaced by
    ``refined(joint, x_rows, loc_rows, log_scale_rows, theta_rows)`` → (loc, log σ) and the others as they are:
    (loc [B, size], log σ [B, size]), each row's gradient as ``refined`` leaves it (the caller applies its rule
    to all rows alike). ``rows_of_data``: ``log_joint`` reads the data it is given (the rows' ``x`` and θ's
    per-image terms are passed); otherwise :class:`Rows` runs it on the whole batch."""
    rows = worst_rows(log_joint, x, loc0.detach(), scale0.detach(), theta, share, score, draws, generator)
    if rows_of_data:
        joint, theta_rows = log_joint, (theta.images(rows) if isinstance(theta, Draws) else theta)
    else:
        joint, theta_rows = Rows(log_joint, rows, loc0.detach(), x), theta
    loc, log_scale = refined(joint, x[rows], loc0[rows], scale0[rows].log(), theta_rows)
    return loc0.index_copy(-2, rows, loc), scale0.log().index_copy(-2, rows, log_scale)


class Rows:
    """A local log joint of the whole batch (``data``, B rows: one read off the model's trace, or one that masks
    coordinates per row) on the rows ``rows`` of it: z [*lead, k, size] for those rows is written into the batch's
    ``base`` [B, size] (the other rows held there: a datapoint's log joint depends on its own z_n alone), the joint
    run on the whole batch, the rows' terms returned [*lead, k]. Its cost per call is the whole batch's. The ``x``
    it is called with (the rows' data, which sizes the optimizers' draws) is not read: ``data`` is."""

    def __init__(self, joint, rows, base, data):
        self.joint, self.rows, self.base, self.data = joint, rows, base, data

    def __call__(self, x, z, theta):
        full = self.base.expand(z.shape[:-2] + self.base.shape).index_copy(-2, self.rows, z)
        return self.joint(self.data, full, theta)[..., self.rows]
