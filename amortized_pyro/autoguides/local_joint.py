"""The per-datapoint log joint of any model, read off a Pyro trace, in the guides' unconstrained space:

    log p(x_n, z_n | θ) + log |det ∂z_n/∂u_n|,    z_n = T(u_n)  (T: each local site's ``biject_to(support)``)

summed over every site inside the data plate (the local latents and the observations there), kept per plate element,
and over the observations in a plate of their own that each depend on one datapoint (the radon layout: per-group
intercepts in plate "groups", observations in plate "obs" indexed by their group), each added to its datapoint's
term (which datapoint, read off the model once per call: :mod:`.stray`). Sites outside the plate (θ, global
observations) do not depend on z_n: left out. Every term is unscaled: the plate's N/B, and any ``poutine.scale`` of
the model's (a KL warm-up, tempering), are left out, so the gap is that of the untempered per-datapoint ELBO. With
the Jacobian term a Gaussian q(u_n) scores as an ELBO of its pushforward q(z_n), so the per-datapoint optimizers of
:mod:`amortized_pyro.local.optimize` and the estimators of :mod:`amortized_pyro.local.gaps` work unchanged on any
model.

**Never a prior draw.** Every site the guide covers is conditioned in the trace; a latent site left (one the
guide was not built on; a discrete site enumerated for TraceEnum_ELBO, which sums it out) would count at a draw
of its prior: refused in one line. The gap's entry points (``steady=True``) also run the model twice at the same
values once per call and refuse a log joint that differs: a draw no trace shows (a site hidden by
``poutine.block``, torch's own random numbers, dropout in training mode).

**Draws.** The estimators evaluate many draws (θ draws × z draws, or particles) at once: ``draws="stacked"``
runs the model once with the draws as one batch dimension left of all its plates, which needs a model that is
*broadcast-safe* over leading dimensions (as Pyro's vectorized particles need). ``"one-at-a-time"`` runs the
model once per draw on plain values (locals [B, …], the draw's own θ), the results stacked: any model that runs
on its own batch works, at one model call per draw. ``"auto"`` (the default) runs stacked until a stacked call
raises, then says so once (a :class:`NotBroadcastSafe` warning) and runs one at a time from then on, for that
model and guide structure.
"""
import math
import warnings
import weakref

import torch

from pyro import poutine
from pyro.poutine.util import site_is_subsample

from amortized_pyro.autoguides.stray import masked_log_prob, scattered, stray_rows
from amortized_pyro.errors import AmortizedPyroError, GuideError

DRAWS = ("auto", "stacked", "one-at-a-time")
_UNSAFE = {}  # id(structure) → (a weak reference to it, the models whose stacked call failed with it)


class NotBroadcastSafe(UserWarning):
    """The model failed on draws stacked left of its plates: its log joint is evaluated one draw at a time."""


def check_draws(draws):
    """``draws`` if it is one of :data:`DRAWS`; else one line of :class:`~amortized_pyro.errors.GuideError`."""
    if draws not in DRAWS:
        raise GuideError("draws must be one of %s; got %r" % (", ".join(map(repr, DRAWS)), draws))
    return draws


def _known_unsafe(model, structure):
    entry = _UNSAFE.get(id(structure))
    return entry is not None and entry[0]() is structure and any(m == model for m in entry[1])


def _remember_unsafe(model, structure):
    key, entry = id(structure), _UNSAFE.get(id(structure))
    if entry is None or entry[0]() is not structure:
        try:  # the entry goes with the structure
            ref = weakref.ref(structure, lambda _, table=_UNSAFE, key=key: table.pop(key, None))
        except TypeError:  # a structure without weak references: kept
            ref = (lambda: structure)
        entry = _UNSAFE[key] = (ref, [])
    entry[1].append(model)


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
    :param str draws: how the leading draws of u reach the model (module docstring): ``"auto"``, ``"stacked"``
        or ``"one-at-a-time"``.
    :param bool observed: the log-likelihood alone, log p(x_n | z_n, θ) (the observed sites; no prior term,
        no Jacobian): the per-datapoint log-likelihood that PSIS-LOO reads (:mod:`.inference_data`).
    :param bool steady: at the first call, run the model twice at the same values and refuse a log joint that
        differs (module docstring), and, at the first call of several draws, check two of them stacked against
        one at a time (a model that broadcasts the draws into its own dimensions gives other numbers, no error:
        then one at a time, with a :class:`NotBroadcastSafe` warning): a few model calls per instance, which the
        gap's entry points and the refining builders' first call spend.
    """

    def __init__(self, model, structure, args, kwargs=None, indices=None, stacked=False, draws="auto",
                 observed=False, steady=False):
        self.model, self.structure, self.args, self.kwargs = model, structure, args, dict(kwargs or {})
        self.indices, self.stacked, self.draws = indices, stacked, check_draws(draws)
        self.observed, self.steady, self.check_stacking = observed, steady, steady
        self.latent_names = {site.name for site in structure.locals} | set(structure.globals)
        self.stray_rows = None  # observed site → the datapoint each observation depends on (-1: none), per call

    def __call__(self, x, u, theta):
        lead, batch = u.shape[:-2], u.shape[-2]
        draws = math.prod(lead)
        # the leading dimensions of u become one batch dimension of ``draws`` left of all the model's plates
        # (no plate: a guide's particle plate may hold that dim while SA-VI refines inside the guide)
        flat = u.reshape((draws, batch, self.structure.size))
        if self.stray_rows is None:  # once per call's datapoints, at the first draw
            plain = {name: self._one_draw(name, value, 0, draws) for name, value in theta.items()}
            self.stray_rows = stray_rows(lambda u: self._trace(u, plain, None)[0], self.structure, batch,
                                         self._device(plain)) if self.structure.stray_observations else {}
            if self.steady:
                self._refuse_hidden_draws(flat[0].detach(), plain)
        if self.draws == "one-at-a-time" or (self.draws == "auto" and _known_unsafe(self.model, self.structure)):
            return self._one_at_a_time(flat, theta, lead)
        globals_ = {name: self._with_draws(name, value, lead) for name, value in theta.items()}
        if self.draws == "stacked":
            return self._run(flat, globals_, draws).reshape(lead + (batch,))
        try:
            stacked = self._run(flat, globals_, draws).reshape(lead + (batch,))
        except (AmortizedPyroError, torch.OutOfMemoryError):
            raise
        except Exception as error:  # noqa: BLE001 (any error of the model's on stacked draws)
            failure = "%s: %s" % (type(error).__name__, (str(error).strip().splitlines() or [""])[0][:200])
        else:
            failure = self._stacking_differs(flat, theta, stacked) if self.check_stacking and draws > 1 else None
            if failure is None:
                return stacked
        _remember_unsafe(self.model, self.structure)
        cost = "about %d times slower here" % draws if draws > 1 else "one draw here; the gap's estimators pass many"
        warnings.warn("the model is not broadcast-safe over draws (%s); evaluating the draws one at a time (one model "
                      "call per draw: %s; draws='one-at-a-time' skips the stacked attempt)" % (failure, cost),
                      NotBroadcastSafe, stacklevel=2)
        return self._one_at_a_time(flat, theta, lead)

    def _stacking_differs(self, flat, theta, stacked):
        """What differs where the first two draws stacked give other log joints than the same draws one at a time
        (a model that broadcasts the draws into its own dimensions: other numbers, no error); else None. Once per
        instance (``steady``: the gap's entry points)."""
        self.check_stacking, draws, batch = False, flat.shape[0], flat.shape[1]
        plain = torch.stack([self._run(flat[i], {name: self._one_draw(name, value, i, draws)
                                                 for name, value in theta.items()}, None)[0] for i in range(2)])
        first = stacked.reshape(draws, batch)[:2]
        if torch.allclose(first, plain, rtol=1e-4, atol=1e-3, equal_nan=True):
            return None
        return ("its log joints of the same draws stacked differ from one at a time by up to %.3g nats"
                % (first - plain).abs().nan_to_num(float("inf")).max().item())

    def _one_at_a_time(self, flat, theta, lead):
        """The draws of flat [D, B, size] one model call each, on plain values: [*lead, B]."""
        draws, batch = flat.shape[:2]
        rows = [self._run(flat[i], {name: self._one_draw(name, value, i, draws) for name, value in theta.items()},
                          None)[0] for i in range(draws)]
        return torch.stack(rows).reshape(lead + (batch,))

    def _run(self, u, globals_, draws):
        """One model call: u [draws, B, size] stacked left of the plates, or [B, size] (``draws`` None) plain;
        ``globals_`` the global values as the call takes them. Returns [draws or 1, B]."""
        trace, log_det = self._trace(u, globals_, draws)
        return (0.0 if self.observed else log_det) + self._per_datapoint(trace, 1 if draws is None else draws,
                                                                          u.shape[-2])

    def _device(self, theta):
        """Where the call's datapoints are: the plate's indices' device (as the data's), else θ's."""
        if self.indices is not None:
            return self.indices.device
        return next((v.device for v in theta.values()), torch.device("cpu"))

    def _refuse_hidden_draws(self, u, theta):
        """One line of :class:`GuideError` where two model calls at the same values u [B, size] and ``theta``
        give log joints that differ: the model draws what its trace does not show (module docstring)."""
        with torch.no_grad():
            first, second = self._run(u, theta, None), self._run(u, theta, None)
        if not torch.allclose(first, second, rtol=1e-5, atol=1e-4, equal_nan=True):
            raise GuideError("the model's log joint at the same values changes from call to call (by up to %.3g "
                             "nats): it draws what its trace does not show (a site hidden by poutine.block, torch's "
                             "own random numbers, dropout in training mode), which the log joint would hold at a "
                             "draw; give a model whose every draw is a site the guide covers or one summed out by "
                             "hand" % (first - second).abs().nan_to_num(float("inf")).max().item())

    def _trace(self, u, globals_, draws):
        """The model's trace at local values u (see :meth:`_run`) and the Jacobian's log-determinant [rows, B]."""
        structure, batch, rows = self.structure, u.shape[-2], 1 if draws is None else draws
        values, data, log_det = structure.split(u), dict(globals_), 0.0
        for site in structure.locals:
            value = values[site.name]
            if not site.is_real:
                constrained = site.transform(value)
                jacobian = site.transform.log_abs_det_jacobian(value, constrained)
                log_det = log_det + jacobian.reshape(rows, batch, -1).sum(-1)
                value = constrained
            data[site.name] = value
        if self.indices is not None:
            data[structure.plate] = self.indices
        with poutine.block():
            trace = poutine.trace(poutine.condition(self.model, data=data)).get_trace(*self.args, **self.kwargs)
        structure.refuse_uncovered(trace)
        return trace, log_det

    def _particles(self, name, value, draws):
        """Whether a global value (not ``stacked``) carries a leading particle dimension; one line of
        :class:`~amortized_pyro.errors.GuideError` where its size is neither 1 nor ``draws``."""
        batch_dims = value.dim() - self.structure.globals[name]
        if batch_dims > self.structure.max_plate_nesting:
            if value.shape[0] not in (1, draws):
                raise GuideError("the global site %r carries %d particles against %d local draws: refine or "
                                         "measure one θ at a time" % (name, value.shape[0], draws))
            return True
        return False

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
        self._particles(name, value, draws)
        return value

    def _one_draw(self, name, value, i, draws):
        """The global value of draw ``i`` of ``draws`` as a plain call takes it: ``stacked``, θ_m of the draw's
        m (its own shape); a particle's row, the particle layout's leading 1s dropped; else ``value``."""
        if self.stacked:
            return value[i // (draws // value.shape[0])]
        if not self._particles(name, value, draws):
            return value
        value = value[i if value.shape[0] == draws else 0]
        while value.dim() > self.structure.globals[name] and value.shape[0] == 1:
            value = value[0]
        return value

    def _per_datapoint(self, trace, draws, batch):
        """Σ over the sites in the data plate of log p, kept per (draw, datapoint): [draws, B]."""
        structure, total = self.structure, torch.zeros(())
        nesting = structure.max_plate_nesting + 1
        for site in trace.nodes.values():
            if site["type"] != "sample" or site_is_subsample(site):
                continue
            if self.observed and site["name"] in self.latent_names:  # conditioned here, latent in the model
                continue
            if structure.plate not in [frame.name for frame in site["cond_indep_stack"]]:
                continue
            log_p = masked_log_prob(site)  # unscaled: the plate's N/B (and any poutine.scale) left out
            log_p = log_p.reshape((1,) * (nesting - log_p.dim()) + tuple(log_p.shape))
            keep = (0, nesting + structure.dim)  # the draws' dim and the plate's
            others = [d for d in range(nesting) if d not in keep]
            log_p = log_p.sum(others) if others else log_p
            total = total + log_p.expand(draws, batch)
        for name, rows in (self.stray_rows or {}).items():  # observations in a plate of their own: to their row
            total = total + scattered(trace.nodes[name], rows, draws, batch, structure.max_plate_nesting + 1)
        return total
