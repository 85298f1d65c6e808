"""What the instruments read of a guide builder (the gap, the capacity sweep, the package's evaluation), in one
place: Pyro's autoguide contract (``median``, ``quantiles``) and this small protocol, which
:class:`~amortized_pyro.autoguides.base.AutoLocalGuide` provides to every family:

    indices_of(*args, **kwargs)               the call's datapoints among the plate's full size
    local_factor(indices, args, kwargs, θ)    the family's (μ, σ) [B, size] there (a family's hook, in base)
    push(v, indices, args, kwargs)            values of the Gaussian factor through the flow (as they are without)
    row_flow(indices, args, kwargs)           the flow with parameters of its own per datapoint, or None
    check_gaussian(what)                      refuse in one line what takes a Gaussian factor, on a flow guide
    can_infer_unseen                          whether it has a factor for datapoints it was not trained on
    global_mean(), global_sample(generator), global_is_point()     q(θ): its median, a keyed draw, a point mass?
    refinement_draws(generator)               SA-VI's and IA-VI's z draws from ``generator`` for a while

and ``structure`` (:class:`~amortized_pyro.autoguides.structure.Structure`) and ``flow`` (the local flow, or None).
"""
import contextlib
from operator import attrgetter

import torch

from pyro import poutine

from amortized_pyro.autoguides.posterior import local_median, local_quantiles
from amortized_pyro.errors import GuideError


class Measured:
    """The protocol of the module docstring (a mixin of :class:`~amortized_pyro.autoguides.base.AutoLocalGuide`)."""

    def median(self, *args, **kwargs):
        """site → the median of q: the global sites' as the global part gives them (AutoNormal's), the local
        sites' for the datapoints of this call (:func:`~.posterior.local_median`; a flow's by sampling)."""
        if self.prototype_trace is None:
            with torch.no_grad():
                self(*args, **kwargs)
        return {**self.global_mean(), **local_median(self, args, kwargs)}

    @torch.no_grad()
    def quantiles(self, quantiles, *args, **kwargs):
        """site → the ``quantiles`` (a list of numbers in (0, 1)) of q, each [len(quantiles), *site's shape]: the
        global sites' as AutoNormal gives them (a point mass's: its value, repeated), the local sites' for the
        datapoints of this call (:func:`~.posterior.local_quantiles`; a flow's by sampling)."""
        if self.prototype_trace is None:
            self(*args, **kwargs)
        if self.q_theta is None:
            found = {}
        elif hasattr(self.q_theta, "quantiles"):
            found = self.q_theta.quantiles(quantiles, *args, **kwargs)
        else:  # a point mass (AutoDelta) or a module of one's own without quantiles: its median, repeated
            found = {name: value.expand((len(quantiles),) + value.shape) for name, value in self.global_mean().items()}
        return {**found, **local_quantiles(self, quantiles, args, kwargs)}

    def check_gaussian(self, what):
        """Refuse ``what`` in one line for a flow guide (something that takes a Gaussian factor)."""
        if self.local_flow is not None:
            raise GuideError("%s takes a Gaussian q(z_n); this guide has a flow (flow=%d): measure it with "
                                     "`gap` (q* in its own family), without refinement rows"
                                     % (what, self.flow_transforms))

    @torch.no_grad()
    def row_flow(self, indices, args, kwargs):
        """The flow after the factor of the datapoints ``indices`` of this call with parameters of its own per
        datapoint (:meth:`~.flows.LocalFlow.row_flow`: each starts as this guide's), or None without a flow."""
        if self.local_flow is None:
            return None
        return self.local_flow.row_flow(len(indices), self.flow_context(indices, args, kwargs))

    def push(self, v, indices, args, kwargs):
        """Values v [..., B, size] of the Gaussian factor through the flow (as they are without one): the
        plug-in point f(μ_n) and the predictive draws of a flow guide."""
        return v if self.local_flow is None else self.local_flow.push(v, self.flow_context(indices, args, kwargs))[0]

    @property
    def can_infer_unseen(self):
        """Whether the family has a factor for datapoints it was not trained on (not per-datapoint)."""
        return self.q_z.can_infer_unseen

    @torch.no_grad()
    def global_mean(self):
        """The median of q(θ) (its mean in unconstrained space), site → tensor; {} without global sites."""
        return {} if self.q_theta is None else self.q_theta.median()

    def global_is_point(self):
        """Whether q(θ) is a point mass (``global_guide="delta"``, a guide object whose ``is_point()`` says so, or
        no global latent site at all: one empty θ): every draw is then its median."""
        own_point = self.global_kind == "own" and getattr(self.q_theta, "is_point", lambda: False)()
        return self.q_theta is None or self.global_kind == "delta" or own_point

    @torch.no_grad()
    def global_sample(self, generator=None):
        """One θ ~ q(θ) drawn from ``generator`` (the global stream where None), site → tensor. For
        ``global_guide="delta"`` its point estimate."""
        if self.q_theta is None or self.global_kind == "delta":
            return self.global_mean()
        if self.global_kind == "own":
            return self.q_theta.sample(generator)
        part, draws = self.q_theta, {}
        for name, site in part.prototype_trace.iter_stochastic_nodes():
            # AutoNormal keeps each site's parameters as the PyroModules ``locs`` and ``scales`` (its documented
            # attributes; its _get_loc_and_scale reads them so): tests/test_autoguide_contract.py's test_init_scale
            # and tests/test_autoguides.py's draws fail loudly where Pyro changes that
            loc, scale = attrgetter(name)(part.locs), attrgetter(name)(part.scales)
            eps = torch.randn(loc.shape, generator=generator, device=loc.device, dtype=loc.dtype)
            draws[name] = torch.distributions.biject_to(site["fn"].support)(loc + scale * eps)
        return draws

    @contextlib.contextmanager
    def refinement_draws(self, generator):
        """Any refinement's z draws from ``generator`` for the duration (an evaluation the same every time)."""
        before, self.refine_generator = self.refine_generator, generator
        try:
            yield self
        finally:
            self.refine_generator = before

    def indices_of(self, *args, **kwargs):
        """This call's datapoints (see :meth:`_indices`) for a call of the model with these arguments."""
        if self.structure is None:
            self._setup_prototype(*args, **kwargs)
        with poutine.block():
            return self._indices(self._create_plates(*args, **kwargs), args, kwargs)
