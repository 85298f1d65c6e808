"""What a guide builder reads off a model's trace: the data plate, its local latent sites, the global ones.

A *local* site is a latent sample site inside the plate named ``plate`` (one value per datapoint); every other
latent site is *global*. Each local site is handled in unconstrained space (``biject_to(support)``, as
Pyro's AutoNormal does) and, per datapoint, flattened into one block of a vector u_n of size
:attr:`Structure.size`: the layout that a Gaussian factor q(u_n) = N(μ_n, diag σ_n²) and the gap's
per-datapoint optimizers work in.
"""
import contextlib
import math
from dataclasses import dataclass

import torch
from torch.distributions import biject_to

import pyro
from pyro.poutine.util import prune_subsample_sites, site_is_subsample

from amortized_pyro.errors import GuideError


@dataclass
class LocalSite:
    """One local latent site: its name, its value's event shape, the bijection from unconstrained space,
    the unconstrained event shape and its slice [start, stop) of the flat per-datapoint vector u_n."""

    name: str
    event_shape: torch.Size
    transform: torch.distributions.Transform
    unconstrained_shape: torch.Size
    start: int
    stop: int

    @property
    def is_real(self):
        """Whether the site's support is the real line: no transform (analytic KLs stay available)."""
        transform = self.transform
        while isinstance(transform, torch.distributions.transforms.IndependentTransform):
            transform = transform.base_transform
        return isinstance(transform, torch.distributions.transforms.ComposeTransform) and not transform.parts


@dataclass
class Structure:
    """The data plate (``plate``, its ``dim`` and ``full_size``), the local sites in trace order, the
    global latent sites (name → event dim), ``max_plate_nesting`` (the plates' depth, the data plate's
    included), and the observed sites in another plate than the data plate (``stray_observations``: an
    observation of the datapoints outside their plate, as the package's ``local_terms="all"`` has it, whose
    log-likelihood a per-datapoint log joint read off the trace would miss)."""

    plate: str
    dim: int
    full_size: int
    locals: list
    globals: dict
    max_plate_nesting: int
    stray_observations: tuple = ()

    @property
    def size(self):
        """The length of the flat unconstrained per-datapoint vector u_n."""
        return self.locals[-1].stop

    def refuse_uncovered(self, trace):
        """One line of :class:`GuideError` at a latent site of ``trace``, a trace of a model with every local and
        global site conditioned: a site the guide does not cover, which a log joint would count at a prior draw."""
        for name, site in trace.nodes.items():
            if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site):
                continue
            if site["fn"].support.is_discrete or site["infer"].get("enumerate"):
                raise GuideError("the model's site %r is a discrete latent site the guide does not cover: the log "
                                 "joint would hold a draw of its prior, not its sum as TraceEnum_ELBO takes it; "
                                 "measure with a model where it is summed out by hand (poutine.block draws it "
                                 "unseen)" % name)
            raise GuideError("the model's latent site %r is not one of the guide's (%s): the log joint would hold a "
                             "draw of its prior; measure with a model whose every latent site the guide covers"
                             % (name, ", ".join([local.name for local in self.locals] + sorted(self.globals))))

    def batch_shape(self, batch):
        """The shape a local value's batch takes for ``batch`` datapoints: [batch] at the plate's dim."""
        return torch.Size([batch] + [1] * (-self.dim - 1))

    def at_plate_dim(self, values, event_dims):
        """Per-datapoint values [*lead, B, *event] (``event_dims`` of them) with B moved to the plate's dim:
        [*lead, B, 1…, *event], as a site in the plate takes them (the plate at dim -1: unchanged)."""
        cut = values.dim() - event_dims
        return values.reshape(values.shape[:cut] + (1,) * (-self.dim - 1) + values.shape[cut:])

    def split(self, flat):
        """Flat [*lead, B, size] → site → its unconstrained values with the plate's dim in place and the
        leading dimensions (draws, particles) flattened into one, left of all the model's plates:
        [B, 1…, *unconstrained_shape] without lead, [L, 1…, B, 1…, *unconstrained_shape] with."""
        lead, batch = flat.shape[:-2], flat.shape[-2]
        outer = (math.prod(lead),) + (1,) * (self.max_plate_nesting + self.dim) if lead else ()
        if not lead and self.dim == -1 and len(self.locals) == 1 and self.locals[0].unconstrained_shape == (self.size,):
            return {self.locals[0].name: flat}  # already the site's shape: no slice nor view in the step's graph
        return {site.name: flat[..., site.start:site.stop].reshape(outer + self.batch_shape(batch)
                                                                     + site.unconstrained_shape)
                for site in self.locals}


def read_structure(trace, plate):
    """The :class:`Structure` of a model's trace (``poutine.trace(model).get_trace(...)``, observed sites
    included: a plate holding only observations counts in the nesting) for its plate ``plate``; one line of
    :class:`GuideError` where a guide builder cannot serve the model."""
    trace = prune_subsample_sites(trace)
    frames = {frame.name: frame for _, site in trace.iter_stochastic_nodes() for frame in site["cond_indep_stack"]}
    frames.update({frame.name: frame for site in trace.nodes.values() if site["type"] == "sample"
                   for frame in site["cond_indep_stack"]})
    if plate not in frames:
        raise GuideError("the model has no plate named %r around a sample site (its plates: %s)"
                                 % (plate, ", ".join(sorted(frames)) or "none"))
    frame = frames[plate]
    if frame.size is None or frame.size < 0:
        raise GuideError("the model's plate %r has no size: give it one, pyro.plate(%r, N)" % (plate, plate))
    local_sites, global_sites, start = [], {}, 0
    for name, site in trace.iter_stochastic_nodes():
        if plate not in [f.name for f in site["cond_indep_stack"]]:
            global_sites[name] = site["fn"].event_dim
            continue
        fn = site["fn"]
        if fn.support.is_discrete or site["infer"].get("enumerate"):
            raise GuideError("the local site %r is discrete: these guides fit continuous local latents "
                                     "only (marginalize it, or guide it separately)" % name)
        batch = fn.batch_shape
        batch = torch.Size([1] * (-frame.dim - len(batch))) + batch if len(batch) < -frame.dim else batch
        inner = batch[len(batch) + frame.dim + 1:]
        if any(size != 1 for size in batch[:len(batch) + frame.dim]) or any(size != 1 for size in inner):
            raise GuideError("the local site %r has batch shape %s: only the plate %r may index a local "
                                     "site (a nested plate, or a dimension missing .to_event?)"
                                     % (name, tuple(batch), plate))
        transform = biject_to(fn.support).with_cache()  # log q of a draw without inverting the transform
        event_shape = fn.event_shape
        unconstrained = torch.Size(transform.inv.forward_shape(event_shape))
        stop = start + max(1, math.prod(unconstrained))
        local_sites.append(LocalSite(name, event_shape, transform, unconstrained, start, stop))
        start = stop
    if not local_sites:
        raise GuideError("the model has no latent site inside its plate %r: nothing to guide locally" % plate)
    nesting = max([-f.dim for f in frames.values()] + [0])
    stray = tuple(name for name, site in trace.nodes.items() if site["type"] == "sample" and site["is_observed"]
                  and site["cond_indep_stack"] and plate not in [f.name for f in site["cond_indep_stack"]])
    return Structure(plate, frame.dim, frame.full_size or frame.size, local_sites, global_sites, nesting, stray)


def global_sites_model(trace, structure):
    """A model of the global latent sites alone, each drawn from the distribution the prototype call recorded,
    in its plates: what the global part (AutoNormal, AutoDelta) is built on, so that building it does not run
    the user's model again (their prototype needs only each site's distribution, shape and plates)."""
    sites = [(name, trace.nodes[name]["fn"], trace.nodes[name]["cond_indep_stack"]) for name in structure.globals]

    def global_sites(*args, **kwargs):
        for name, fn, frames in sites:
            with contextlib.ExitStack() as stack:
                for frame in frames:
                    stack.enter_context(pyro.plate(frame.name, frame.full_size or frame.size,
                                                   subsample_size=frame.size, dim=frame.dim))
                pyro.sample(name, fn)

    return global_sites


def local_init(trace, structure, init_loc_fn):
    """The initial μ_n of the prototype call's datapoints, [B, size], in unconstrained space: each local site's
    value by Pyro's ``init_loc_fn`` (a function of the site), mapped back by its bijection."""
    blocks = []
    for site in structure.locals:
        node = dict(trace.nodes[site.name], value=None)
        value = init_loc_fn(node).detach()
        u = site.transform.inv(value)
        blocks.append(u.reshape(-1, site.stop - site.start))
    return torch.cat(blocks, -1)
