"""The base of the guide builders: q(θ) q(z_1..N) for any model whose local latents sit in a named plate.

    q(θ)   = AutoNormal (mean-field Normal, ``global_guide="normal"``) or AutoDelta (``"delta"``: MAP) over every
             latent site outside the plate, built by Pyro on the model with the local sites hidden, or a
             module of one's own (the package's flat-vector q(θ))
    q(z_n) = Π_sites T_s(u_n,s),   u_n ~ Normal(μ_n, diag σ_n²) in each local site's unconstrained space
             (T_s = biject_to(support), as Pyro's AutoNormal), (μ_n, σ_n) given by the family

A family (:mod:`amortized_pyro.autoguides.families`) says only how (μ_n, σ_n) are made for a batch of
datapoints, by :meth:`AutoLocalGuide.local_factor`; everything else lives here once: reading the model (its
plate at each call and the model through pickling: :mod:`.following`), the sampling, the gap's access to q
(:mod:`.protocol`).
"""

import torch

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer.autoguide import AutoDelta, AutoGuide, AutoNormal
from pyro.infer.autoguide.initialization import init_to_feasible
from pyro.poutine.runtime import _PYRO_STACK
from pyro.poutine.scale_messenger import ScaleMessenger
from pyro.poutine.util import is_validation_enabled, site_is_subsample

from amortized_pyro.autoguides.flows import DEFAULT_FLOW_WIDTH, LocalFlow, flow_draws
from amortized_pyro.autoguides.following import FollowsModel
from amortized_pyro.autoguides.protocol import Measured
from amortized_pyro.autoguides.masking import check_unmasked, local_masks, masked_sites
from amortized_pyro.autoguides.options import count, positive
from amortized_pyro.autoguides.plates import no_empty_plate, prototype_scales, scaled
from amortized_pyro.autoguides.structure import global_sites_model, local_init, read_structure
from amortized_pyro.errors import GuideError
from amortized_pyro.support.streams import outside_the_stream

GLOBAL_GUIDES = {"normal": AutoNormal, "delta": AutoDelta}
DEFAULT_INIT_SCALE = 0.1  # Pyro's AutoNormal default
FAMILY_TERMS = "_family_terms"  # the guide's factor site of a family's own training terms (see factor_with_terms)


class AutoLocalGuide(Measured, FollowsModel, AutoGuide):
    """A guide built from ``model``: Pyro's AutoNormal or AutoDelta over the global latent sites, and a
    Gaussian factor per datapoint over the local ones, whose parameters the subclass provides.

    :param callable model: a Pyro model whose local latent sites sit inside ``pyro.plate(plate, N, ...)``
        (subsampled with ``subsample=idx`` or ``subsample_size=B``, or not), indexed by that plate alone (a
        local site that also varies over a nested plate is refused), and whose global latent sites sit
        outside it.
    :param str plate: the name of the data plate.
    :param callable init_loc_fn: Pyro's initialization strategy (``init_to_feasible``, the default, which is
        μ = 0 in unconstrained space; ``init_to_median``, ``init_to_sample``, ``init_to_mean``,
        ``init_to_value``, ...) for the global part and the free factors' μ_n (per-datapoint: each datapoint of
        the prototype call its own, repeated periodically over the plate's full size where it was subsampled,
        as Pyro's AutoNormal repeats; shared: their mean); an encoder's factors start around their mean
        (``head_init``, :class:`~.families.AutoAmortizedNormal`).
    :param float init_scale: the initial standard deviation, in unconstrained space, of the free factors
        (per-datapoint, shared), of an encoder's factors (their mean over the first call's datapoints) and of
        AutoNormal's global factors.
    :param global_guide: the guide of the global latent sites (unused where the model has none): ``"normal"``
        (mean-field Normal, Pyro's AutoNormal), ``"delta"`` (point estimates, AutoDelta), or a guide object of
        one's own: a module that draws every global site when called with the model's arguments and returns
        site → value, and has ``median()`` (site → value) and ``sample(generator)`` (one draw, site → value,
        detached), and ``is_point()`` where its draws are a point mass (the package's flat-vector q(θ),
        :class:`~amortized_pyro.models.q_theta.QThetaNormal`, is one).
    :param int flow: K, normalizing-flow transforms after the Gaussian factor (:mod:`.flows`: masked
        autoregressive, conditioned on the encoder's features in the amortized family, unconditional in the free
        ones; they start as the identity); 0: the Gaussian factor alone.
    :param int flow_width: the width of each transform's hyper-network (two hidden layers).
    :param callable local_mask: for a model that masks its local sites (``poutine.mask``, ``.mask(...)``: padded
        steps of a sequence), a function of the model's arguments returning the mask of this call's datapoints,
        a bool tensor [B] (every local site) or site → [B] (the sites it names), as the model computes it; the
        guide's log q of those rows is masked the same way, so they pay no entropy and do not drift, and
        SA-VI's and IA-VI's local ELBO give their coordinates a standard Normal reference instead of the
        model's (absent) terms, which bounds them. A model that masks a local site with a tensor is refused
        without it (the guide runs before the model and cannot read the mask); not with a flow.
    :param callable create_plates: as Pyro's AutoGuide: a function of the model's arguments returning the
        data plate (and others). Without it, the guide reads the model's own data plate at every call (size,
        datapoints, dim: :mod:`.plates`, by running the model up to its first local site), so that a guide
        trained on minibatches serves the whole data set, new data of any size and ``Predictive``. As a part of
        Pyro's ``AutoGuideList`` the guide takes the list's plates: give the list ``create_plates`` for data of
        another size than the first call's, or for a model that gives its plate's indices (``subsample=idx``; a
        list's plate that is not the model's, in size or rows, is refused in one line).

    The guide's sites take the scale the model gives its own (a ``poutine.scale`` inside the model, a KL warm-up:
    :mod:`.plates`), as a guide written by hand scales its body: call it under no ``poutine.scale`` of the model's.
    The whole model is run once, at the first call (the prototype), and up to its first local site at each
    call after (with ``create_plates``: under Pyro's validation, or where the model scales its sites). Pickling
    keeps the model where the guide needs it and the model pickles (a module-level function, a module); a guide
    pickled without it (a closure, a lambda) says so in one line at its first call, and ``guide.model = model``
    gives it back.
    """

    def __init__(self, model, *, plate="data", init_loc_fn=init_to_feasible, init_scale=DEFAULT_INIT_SCALE,
                 create_plates=None, global_guide="normal", local_mask=None, flow=0, flow_width=DEFAULT_FLOW_WIDTH):
        own = isinstance(global_guide, torch.nn.Module)
        if not own and global_guide not in GLOBAL_GUIDES:
            raise GuideError("global_guide must be one of %s or a guide object, got %r"
                             % (", ".join(GLOBAL_GUIDES), global_guide))
        positive("init_scale", init_scale)
        count("flow", flow)
        count("flow_width", flow_width, 1)
        if flow and local_mask is not None:
            raise GuideError("a flow takes no local_mask (the masked rows' log q cannot be masked through it)")
        if not callable(init_loc_fn):
            raise GuideError("init_loc_fn must be one of Pyro's initialization strategies (a function of a site), "
                             "got %r" % (init_loc_fn,))
        super().__init__(model, create_plates=self._plates_of_call)
        self.plate, self.init_scale, self.global_kind = plate, float(init_scale), "own" if own else global_guide
        self._user_plates, self.init_loc_fn, self.local_mask = create_plates, init_loc_fn, local_mask
        self.structure, self.init_locs, self.call_plate, self._without_model = None, None, None, None
        self.first_trace = None  # the first call's whole trace, while the guide sets itself up from it
        self.call_scales, self._scaled_model = (1.0, 1.0), False  # the model's (global, local) scales in this call
        self.q_theta = global_guide if own else None
        self.refine_generator = None  # where a family optimizes inside the guide (SA-VI): its z draws' generator
        self.flow_transforms, self.flow_width, self.local_flow = flow, flow_width, None

    # ---- reading the model --------------------------------------------------------------------------------
    def _setup_prototype(self, *args, **kwargs):
        """Run the model once (every site, observed and subsample ones too) and read off it the structure,
        AutoGuide's prototype trace and frames, the free factors' initial μ and the global part; a setup that
        fails leaves the guide as it was before (set up again at the next call)."""
        built_globals = self.q_theta is None  # a global part made by this setup goes with it if it fails
        try:
            self._set_up(args, kwargs)
        except BaseException:
            self.prototype_trace, self.structure, self._prototype_values = None, None, None
            if built_globals:
                self.q_theta = None
            raise

    def _set_up(self, args, kwargs):
        devices = [value.device for value in list(args) + list(kwargs.values()) if torch.is_tensor(value)]
        with outside_the_stream(*devices):  # the model's prototype draws leave the random streams as they were
            with no_empty_plate():
                full = poutine.block(poutine.trace(self.model).get_trace)(*args, **kwargs)  # the one model run
            self.structure = read_structure(full, self.plate)
            self._scaled_model = prototype_scales(full, self.structure)
            self.prototype_trace = full.copy()  # AutoGuide's: the latent sites only
            for name, site in list(full.nodes.items()):
                if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site):
                    self.prototype_trace.remove_node(name)
            if self.master is not None:
                self.master()._check_prototype(self.prototype_trace)
            self._prototype_frames = {frame.name: frame for _, site in self.prototype_trace.iter_stochastic_nodes()
                                      for frame in site["cond_indep_stack"]}
            for name in masked_sites(full, self.structure):
                check_unmasked(name, full.nodes[name], self.local_mask)
            with poutine.block():  # the prototype call's plates, seen by nobody
                indices = self._indices(self._create_plates(*args, **kwargs), args, kwargs)
            self.init_locs = local_init(full, self.structure, self.init_loc_fn)
            if self.structure.globals and self.q_theta is None:  # AutoNormal/AutoDelta on the recorded global sites
                part = GLOBAL_GUIDES[self.global_kind]
                options = {"init_scale": self.init_scale} if part is AutoNormal else {}
                self.q_theta = part(global_sites_model(full, self.structure), init_loc_fn=self.init_loc_fn, **options)
                with poutine.block():
                    self.q_theta._setup_prototype(*args, **kwargs)
        self.first_trace = full  # the whole first run, read by the families' setup (what the plate observes)
        try:
            self._setup_local(indices, args, kwargs, self._device(full))
        finally:
            self.first_trace = None
        if self.flow_transforms:
            if self.structure.size < 2:  # Zuko's one-variable transform has no hyper-network to start at zero
                raise GuideError("a flow needs local latents of 2 or more dimensions (here %d): on one, an "
                                 "affine flow is a Gaussian again" % self.structure.size)
            with outside_the_stream():  # leaves the stream as the Gaussian guide leaves it: one starts as the other
                self.local_flow = LocalFlow(self.structure.size, self.flow_transforms, self.flow_context_size(),
                                      self.flow_width).to(self._device(full))

    def _indices(self, plates, args, kwargs):
        """This call's datapoints among the plate's full size: the data plate's subsample indices."""
        return plates[self.plate].indices

    def _check_prototype(self, part_trace):
        """Called by the global part (Pyro's master-guide protocol): its sites must be this model's."""
        for name, _ in part_trace.iter_stochastic_nodes():
            assert name in self.prototype_trace.nodes, name

    def _device(self, trace):
        """Where the local parameters go: the device of the plate's data (its first observed site), else of
        its local values (a float prior's draws may sit on the CPU beside CUDA data: looked at last)."""
        in_plate = [site for site in trace.nodes.values() if site["type"] == "sample" and torch.is_tensor(site["value"])
                    and self.plate in [frame.name for frame in site["cond_indep_stack"]]]
        ranked = [site for site in in_plate if site["is_observed"]] + in_plate
        return ranked[0]["value"].device if ranked else torch.device("cpu")

    # ---- what a family provides ---------------------------------------------------------------------------
    def _setup_local(self, indices, args, kwargs, device):
        """Create the family's parameters, given the prototype call's plate indices (a family's hook)."""
        raise NotImplementedError

    def local_factor(self, indices, args, kwargs, theta):
        """(μ, σ), each [B, size]: the factor q(u_n) of the datapoints ``indices`` of the model's call
        (``args``, ``kwargs``), at global values ``theta`` (site → tensor; or the gap's Draws: their mean objective, as
        SA-VI refines), or None where the family has none for them (a family's hook)."""
        raise NotImplementedError

    # ---- the guide ----------------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        """Draw θ ~ q(θ) and z_n ~ q(z_n) for the datapoints of this call; returns site → value."""
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        plates = self._create_plates(*args, **kwargs)
        if any(not (isinstance(s, float) and s == 1.0) for s in self.call_scales) and any(
                isinstance(handler, ScaleMessenger) for handler in _PYRO_STACK):  # the pattern this replaced
            raise GuideError("the model scales its latent sites (poutine.scale) and the guide gives its own the same "
                             "scale: call it under no poutine.scale, which would scale them twice")
        normal = self.local_normal()
        with scaled(self.call_scales[0]):  # the model's poutine.scale, as a guide written by hand has it in its body
            result = self.q_theta(*args, **kwargs) if self.q_theta is not None else {}
        indices = self._indices(plates, args, kwargs)
        loc, scale, terms = self.factor_with_terms(indices, args, kwargs, result)
        if is_validation_enabled():  # a host sync, as Pyro's own argument checks
            self.check_finite(loc, scale)
        locs, scales = self.structure.split(loc), self.structure.split(scale)
        masks = self.site_masks(args, kwargs, loc.shape[-2])
        flow = self.local_flow  # once: a PyroModule registers a child module's parameters at each access
        with plates[self.plate], scaled(self.call_scales[1]):  # the model's poutine.scale beyond the plate's N/B
            if flow is not None:
                result.update(flow_draws(self.structure, flow, loc, scale, self.flow_context(indices, args, kwargs)))
            for site in self.structure.locals if flow is None else ():
                base = normal(locs[site.name], scales[site.name]).to_event(len(site.unconstrained_shape))
                q = base if site.is_real else dist.TransformedDistribution(base, site.transform)
                result[site.name] = pyro.sample(site.name, q if masks.get(site.name) is None
                                                else q.mask(masks[site.name]))
        # value 0, gradient theirs: the ELBO's value is left as it is; at the plate's dim, unscaled by a warm-up:
        # IA-VI's iterations climb the untempered local ELBO, as SA-VI's steps do
        if terms is not None:
            with plates[self.plate]:
                terms = self._terms_at_plate(terms, result)
                pyro.factor(FAMILY_TERMS, terms.detach() - terms, has_rsample=True)
        return result

    def _terms_at_plate(self, terms, draws):
        """A family's terms [B] or [P, B] (P particles of θ) as a site of the data plate takes them: B at the
        plate's dim, P where Pyro's particle plate put θ's draws (read off their batch dims: the ELBO's plates)."""
        if terms.dim() == 1:
            return self.structure.at_plate_dim(terms, 0)
        depth = max(value.dim() - self.structure.globals[name] for name, value in draws.items()
                    if name in self.structure.globals)
        return terms.reshape(terms.shape[:1] + (1,) * (depth - 1 + self.structure.dim)
                             + self.structure.batch_shape(terms.shape[-1]))

    def check_finite(self, loc, scale):
        """One line of :class:`GuideError` where the factor (μ, σ) [..., B, size] is not finite (σ: positive),
        naming the first local site and how many datapoints it is so for."""
        bad = ~(torch.isfinite(loc) & torch.isfinite(scale) & (scale > 0))
        if bad.any():
            rows = bad.reshape(-1, bad.shape[-2], bad.shape[-1]).any(0)
            site = next(s for s in self.structure.locals if rows[:, s.start:s.stop].any())
            raise GuideError("the guide's factor of the local site %r is not finite for %d of %d datapoints: try "
                             "encoder_input= a transform of the data (log1p of counts), a smaller learning rate or "
                             "init_scale" % (site.name, int(rows.any(-1).sum()), rows.shape[0]))

    def site_masks(self, args, kwargs, batch):
        """site → the call's mask [B, 1…] of the sites ``local_mask`` masks ({} without it)."""
        if self.local_mask is None:
            return {}
        return local_masks(self.local_mask(*args, **kwargs), self.structure, batch)[0]

    def coordinate_mask(self, args, kwargs, batch):
        """The call's mask of the flat layout's coordinates [B, size] (True: kept), or None without ``local_mask``."""
        if self.local_mask is None:
            return None
        return local_masks(self.local_mask(*args, **kwargs), self.structure, batch)[1]

    def local_normal(self):
        """The Normal that draws and scores u_n given (μ_n, σ_n) (a hook: the package's studies score theirs as
        their code does, :class:`~amortized_pyro.autoguides.objectives.ReferenceNormal`)."""
        return dist.Normal

    def flow_context_size(self):
        """The features a flow's transforms are conditioned on (a family's hook; here none: unconditional)."""
        return 0

    def flow_context(self, indices, args, kwargs):
        """Those features for the datapoints ``indices`` of this call, [B, F], or None (a family's hook)."""
        return None

    def factor_with_terms(self, indices, args, kwargs, theta):
        """(μ, σ, terms): :meth:`local_factor`'s factor and per-datapoint terms [B] that the family adds to its
        training objective for their gradient alone (iterative amortized inference: every iteration's local
        ELBO), or None (a family's hook; here none)."""
        loc, scale = self.local_factor(indices, args, kwargs, theta)
        return loc, scale, None
