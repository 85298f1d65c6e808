"""Flow factors for the gap's estimators: a Gaussian factor N(μ, diag σ²) followed by flow transforms whose
parameters are free per row (an image, or an image and a θ draw), so that q* and the q*_m can be the best
member of a flow family per image (Cremer et al. 2018's q*_Flow), as the Gaussian ones are of theirs.

Every estimator of :mod:`.estimates`, :mod:`.optimize` and :mod:`.ais` works in the Gaussian's space v: with
u = f(v), the local ELBO of the flow factor is the Gaussian factor's local ELBO of the *pulled-back* log joint

    log p(x_n, f(v) | θ) + log |det ∂f/∂v|,

and so are the importance weights (IWAE) and the AIS path (from N(μ, σ²) to the pulled-back posterior, whose
normalizer is p(x_n | θ) still). :meth:`RowFlow.pull` makes that log joint for each span of rows.
"""
from torch.func import vmap


class RowFlow:
    """Transforms with parameters of their own per row: ``apply(φ, v, c)`` → (f(v), log |det ∂f/∂v|) for one
    row's flat parameters φ [P], values v [..., size] and context c [F] (or None), and the rows' parameters
    ``params``: [n, P] (one per image) or [M, n, P] (one per image and θ draw), with ``context`` [n, F] per
    image or None; ``identity`` [P]: parameters with which every transform is the identity."""

    def __init__(self, apply, params, context=None, identity=None):
        self.apply, self.params, self.context, self.identity = apply, params, context, identity

    def with_params(self, params):
        return RowFlow(self.apply, params, self.context, self.identity)

    def at_identity(self):
        """The same rows with every transform the identity: the flow factor is then its Gaussian factor."""
        if self.identity is None:
            raise ValueError("this RowFlow was made without its identity parameters (RowFlow(..., identity=))")
        return self.with_params(self.identity.expand_as(self.params).clone())

    def rows(self, start, stop):
        """The draws [start, stop) of per-draw parameters ([M, n, P]); one set for every draw as it is."""
        return self if self.params.dim() == 2 else self.with_params(self.params[start:stop])

    def images(self, idx):
        """The images ``idx`` (of the context; the parameters are the caller's to index)."""
        return RowFlow(self.apply, self.params, None if self.context is None else self.context[idx], self.identity)

    def push(self, v):
        """(f(v), log |det|) for v [*lead, n, size]: each image's own transforms (and each draw's, where the
        parameters are per draw: then lead[0] is the draws')."""
        per_draw = self.params.dim() == 3
        moved = v.movedim(-2, 1 if per_draw else 0)  # [M, n, *rest, size] or [n, *lead, size]
        params, context = self.params, self.context
        if per_draw:
            draws, n = moved.shape[:2]
            moved, params = moved.flatten(0, 1), params.flatten(0, 1)
            context = None if context is None else context.repeat(draws, 1)
        in_dims = (0, 0, None if context is None else 0)
        u, log_det = vmap(self.apply, in_dims=in_dims)(params, moved, context)
        if per_draw:
            u, log_det = u.unflatten(0, (draws, n)), log_det.unflatten(0, (draws, n))
        return u.movedim(1 if per_draw else 0, -2), log_det.movedim(1 if per_draw else 0, -1)

    def pull(self, log_joint):
        """The pulled-back log joint (x, v, θ) → log p(x, f(v) | θ) + log |det ∂f/∂v|, [*lead, n]."""
        def pulled(x, v, theta):
            u, log_det = self.push(v)
            return log_joint(x, u, theta) + log_det
        return pulled


def pulled(log_joint, flow, start=None, stop=None):
    """``log_joint`` as it is (no flow), or pulled back through ``flow``'s rows [start, stop)."""
    if flow is None:
        return log_joint
    return (flow if start is None else flow.rows(start, stop)).pull(log_joint)
