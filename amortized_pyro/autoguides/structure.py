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
from pyro.poutine.util import prune_subsample_sites

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

    def batch_shape(self, batch):
        """The shape a local value's batch takes for ``batch`` datapoints: [batch] at the plate's dim."""
        return torch.Size([batch] + [1] * (-self.dim - 1))

    def split(self, flat):
        """Flat [*lead, B, size] → site → its unconstrained values with the plate's dim in place and the
        leading dimensions (draws, particles) flattened into one, left of all the model's plates:
        [B, 1…, *unconstrained_shape] without lead, [L, 1…, B, 1…, *unconstrained_shape] with."""
        lead, batch = flat.shape[:-2], flat.shape[-2]
        outer = (math.prod(lead),) + (1,) * (self.max_plate_nesting + self.dim) if lead else ()
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


@dataclass(frozen=True)
class PlateRecipe:
    """How a call's data plate follows from the model's arguments, read once off the prototype call (so that
    no call runs the model to find its plate, and a guide unpickled without its model still knows it):

    - ``indices_from``: the plate's subsample indices are this argument (a position or a keyword), as in
      ``pyro.plate(name, N, subsample=idx)``;
    - otherwise, where ``subsample_size`` < ``size``, the plate draws its own minibatch (``subsample_size=B``):
      the guide's plate draws it, and the model's plate takes the guide's indices (Pyro's replay);
    - otherwise the plate covers every datapoint, ``pyro.plate(name, len(x))``.

    ``size_from`` / ``subsample_size_from``: the argument whose rows (a tensor) or value (an int) the plate's
    size / subsample size was at the prototype call, so that it follows a call on other data (None: fixed)."""

    size: int
    subsample_size: int
    dim: int
    device: object = None
    indices_from: object = None
    size_from: object = None
    subsample_size_from: object = None

    def covers_all(self):
        """Whether the plate takes every datapoint, in order (``pyro.plate(name, len(x))``)."""
        return self.indices_from is None and self.subsample_size >= self.size

    def plate(self, name, args, kwargs):
        """The data plate of a call with these arguments, as the model makes it."""
        size = _read(self.size_from, args, kwargs, self.size)
        if self.indices_from is not None:
            return pyro.plate(name, size, subsample=_value(self.indices_from, args, kwargs), dim=self.dim)
        subsample_size = _read(self.subsample_size_from, args, kwargs, self.subsample_size)
        if subsample_size < size:
            return pyro.plate(name, size, subsample_size=subsample_size, dim=self.dim, device=self.device)
        return pyro.plate(name, size, dim=self.dim, device=self.device)


def _value(key, args, kwargs):
    return args[key] if isinstance(key, int) else kwargs[key]


def _read(key, args, kwargs, default):
    """The size an argument stands for: a tensor's rows, an int itself; ``default`` where key is None."""
    if key is None:
        return default
    value = _value(key, args, kwargs)
    return value.shape[0] if torch.is_tensor(value) else int(value)


def _arguments(args, kwargs):
    return list(enumerate(args)) + list(kwargs.items())


def plate_recipe(trace, plate, args, kwargs, prefer=None):
    """The :class:`PlateRecipe` of the data plate ``plate`` in a model's trace made with these arguments
    (``prefer``: the argument whose rows to read the size from when several match, e.g. the encoder's)."""
    site = trace.nodes[plate]  # the plate's subsample site: its indices and sizes (Pyro records every plate so)
    indices, size = site["value"], site["fn"].size
    subsample_size = site["fn"].subsample_size or len(indices)
    pairs = _arguments(args, kwargs)
    indices_from = next((key for key, value in pairs if value is indices), None)
    if indices_from is None and subsample_size < size:
        indices_from = next((key for key, value in pairs if torch.is_tensor(value) and value.dim() == 1
                             and not value.is_floating_point() and value.shape == indices.shape
                             and torch.equal(value.to(indices.device), indices)), None)

    def matching(n):
        rows = [key for key, value in pairs if torch.is_tensor(value) and value.dim() > 0 and value.shape[0] == n]
        ints = [key for key, value in pairs if isinstance(value, int) and not isinstance(value, bool) and value == n]
        return prefer if prefer in rows else next(iter(rows + ints), None)

    whole = indices_from is None and subsample_size >= size
    return PlateRecipe(size, subsample_size, _frame_dim(trace, plate), str(indices.device), indices_from,
                       size_from=matching(size) if whole or indices_from is None else None,
                       subsample_size_from=None if whole or indices_from is not None else matching(subsample_size))


def _frame_dim(trace, plate):
    """The data plate's dim, from a site inside it."""
    return next(frame.dim for node in trace.nodes.values() if node["type"] == "sample"
                for frame in node["cond_indep_stack"] if frame.name == plate)


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
