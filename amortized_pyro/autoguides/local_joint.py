"""The per-datapoint log joint of any model, read off a Pyro trace, in the guides' unconstrained space:

    log p(x_n, z_n | θ) + log |det ∂z_n/∂u_n|,    z_n = T(u_n)  (T: each local site's ``biject_to(support)``)

summed over every site inside the data plate (the local latents and the observations there), kept per
plate element. With the Jacobian term a Gaussian q(u_n) scores as an ELBO of its pushforward q(z_n), so the
per-datapoint optimizers of :mod:`amortized_pyro.local.optimize` and the estimators of :mod:`amortized_pyro.local.gaps`
work unchanged on any model. Sites outside the plate (θ, global observations) do not depend on z_n: left out.
Every term is unscaled: the plate's N/B, and any ``poutine.scale`` of the model's (a KL warm-up, tempering),
are left out, so the gap is that of the untempered per-datapoint ELBO.
"""
import math

import torch

from pyro import poutine
from pyro.poutine.util import site_is_subsample

from amortized_pyro.errors import AmortizedPyroError


class LocalJoint:
    """``log_joint(x, u, theta)`` → [*lead, B] for flat unconstrained local values u [*lead, B, size] and
    global values ``theta`` (site → tensor; a leading particle dimension of size 1 or prod(lead) allowed; or,
    ``stacked``, the gap's M draws θ_m stacked [M, ...] with u [M, S, B, size]).
    ``x`` is not read (the model's own arguments carry the data): the gap's optimizers pass it along.

    :param model: the Pyro model.
    :param structure: its :class:`~amortized_pyro.autoguides.structure.Structure`.
    :param tuple args: the model's arguments for this batch of datapoints.
    :param dict kwargs: its keyword arguments.
    :param indices: the plate's subsample indices for this batch (None: the model's own).
    :param bool stacked: the global values come as the gap's stacked draws (see :meth:`_with_draws`).
    """

    def __init__(self, model, structure, args, kwargs=None, indices=None, stacked=False):
        if structure.stray_observations:
            raise AmortizedPyroError("the observed site(s) %s sit in another plate than %r: the per-datapoint log "
                                     "joint cannot be read off the trace (give the log joint by hand)"
                                     % (", ".join(map(repr, structure.stray_observations)), structure.plate))
        self.model, self.structure, self.args, self.kwargs = model, structure, args, dict(kwargs or {})
        self.indices, self.stacked = indices, stacked

    def __call__(self, x, u, theta):
        structure = self.structure
        lead, batch = u.shape[:-2], u.shape[-2]
        draws = math.prod(lead)
        # the leading dimensions of u become one batch dimension of ``draws`` left of all the model's plates
        # (no plate: a guide's particle plate may hold that dim while SA-VI refines inside the guide)
        values, data, log_det = structure.split(u.reshape((draws, batch, structure.size))), {}, 0.0
        for site in structure.locals:
            value = values[site.name]
            if not site.is_real:
                constrained = site.transform(value)
                jacobian = site.transform.log_abs_det_jacobian(value, constrained)
                log_det = log_det + jacobian.reshape(draws, batch, -1).sum(-1)
                value = constrained
            data[site.name] = value
        for name, value in theta.items():
            data[name] = self._with_draws(name, value, lead)
        if self.indices is not None:
            data[structure.plate] = self.indices
        with poutine.block():
            trace = poutine.trace(poutine.condition(self.model, data=data)).get_trace(*self.args, **self.kwargs)
        total = log_det + self._per_datapoint(trace, draws, batch)
        return total.reshape(lead + (batch,))

    def _with_draws(self, name, value, lead):
        """A global value as the model's trace takes it for the local draws u [*lead, B, size]. ``stacked``:
        ``value`` is [M, *θ's shape], the gap's M θ draws with u [M, S, B, size]; each θ_m is repeated for
        its S z draws into Pyro's particle layout [M·S, 1…, *θ's shape]. Otherwise a leading particle
        dimension of size 1 or prod(lead) is allowed, as SA-VI's particles carry."""
        draws, nesting = math.prod(lead), self.structure.max_plate_nesting
        if self.stacked:
            own_batch = value.dim() - 1 - self.structure.globals[name]
            value = value.repeat_interleave(draws // value.shape[0], 0)
            return value.reshape((draws,) + (1,) * (nesting - own_batch) + tuple(value.shape[1:]))
        batch_dims = value.dim() - self.structure.globals[name]
        if batch_dims > nesting and value.shape[0] not in (1, draws):
            raise AmortizedPyroError("the global site %r carries %d particles against %d local draws: refine or "
                                     "measure one θ at a time" % (name, value.shape[0], draws))
        return value

    def _per_datapoint(self, trace, draws, batch):
        """Σ over the sites in the data plate of log p, kept per (draw, datapoint): [draws, B]."""
        structure, total = self.structure, torch.zeros(())
        nesting = structure.max_plate_nesting + 1
        for site in trace.nodes.values():
            if site["type"] != "sample" or site_is_subsample(site):
                continue
            if structure.plate not in [frame.name for frame in site["cond_indep_stack"]]:
                continue
            log_p = site["fn"].log_prob(site["value"])  # unscaled: the plate's N/B (and any poutine.scale) left out
            if site["mask"] is not None:  # a bool or a bool tensor: masked terms count 0, even where -inf
                log_p = torch.where(torch.as_tensor(site["mask"], device=log_p.device), log_p, torch.zeros_like(log_p))
            log_p = log_p.reshape((1,) * (nesting - log_p.dim()) + tuple(log_p.shape))
            keep = (0, nesting + structure.dim)  # the draws' dim and the plate's
            others = [d for d in range(nesting) if d not in keep]
            log_p = log_p.sum(others) if others else log_p
            total = total + log_p.expand(draws, batch)
        return total
