"""The model's own data plate at every call of a guide builder (issue 59).

A guide runs before its model, yet its local sites must sit in the plate the model makes in this call: the same
size N, the same datapoints (subsample indices, or a minibatch the plate draws), the same dim, hence the same
scale N/B. Nothing in the model's arguments says what that plate is (a batch of 64 beside a z of 64, a size
held in a closure, an int that equals N by chance), so the guide asks the model: :func:`read_model_plate` runs
the model, under ``poutine.block`` (nobody sees its sites), up to its first local latent site and stops there:

    the data plate's subsample site     its size, its subsample size and its indices where the model gives them
                                        (no index is drawn: a plate that draws its own minibatch is left to the
                                        guide's plate, whose indices the model then replays, as Pyro does)
    a latent site before it (θ)         replays the prototype call's value: nothing is sampled, and the model's
                                        code before its plate runs as it did (the guide forks the random
                                        streams around the read: a site it cannot replay, hidden from it by
                                        ``poutine.block``, draws without moving them)
    the first local site                its data plate's frame (the plate's dim): stop

The read takes the same path whatever Pyro's validation flag: it stops at the first local site, whose message
(as the model's own handlers made it; the guide's callers' handlers never see it) gives the plate's dim and the
site's scale, the plate's N/B times any ``poutine.scale`` of the model's around it (a KL warm-up, as Pyro's
examples/dmm.py anneals); the first global site it replays gives the model's scale of its global sites. The
guide gives its sites those scales, as a guide written by hand puts the model's ``poutine.scale`` in its own body
(:attr:`ModelPlate.scales`, beyond the plates' N/B, which the guide's plates give): a float or a tensor, per
datapoint too where the model gives its plate's indices (a plate that draws its own minibatch is refused there,
its rows unknown to the read). A guide called under a ``poutine.scale`` of its own while the model scales its
sites is refused in one line (it would scale them twice: the pattern these reads replace). The read sees the first of each only:
:func:`prototype_scales` refuses, at the guide's first call, a model whose local sites' scales, or whose global
sites' scales, differ then (the guide gives one scale to each part), or that scales global sites it draws only
after its first local site; scales that part only after that call are not seen.

Options weighed (docs/your-model.md says the same): reading the size off the arguments by matching values
(the design this replaces) cannot be right in general; running the whole model in the guide, as Pyro's
AutoNormalMessenger does, computes the likelihood twice per step; this runs only the model's code before its
first local site (its priors' construction: bench/builder_step.py measures it) and needs the model at every
call, so a pickled guide keeps its model where the model pickles.

The guide's plate is then the model's, so its scale N/B is the model's. Where the plate is given instead (a
user's ``create_plates``, an ``AutoGuideList``'s plates), :meth:`ModelPlate.check` compares it with the model's,
its datapoints too where the model gives its plate's indices (``subsample=idx``), and raises where they differ:
under Pyro's validation (``pyro.enable_validation``, on by default), and always where the list made the plate
itself (its own random rows). The model's scales are read then, and at every call of a model that scaled its
latent sites at the guide's first call; without validation, a model that did not scale them at that call is not
read: a scale it takes up later is not seen there.
"""
import contextlib
import math
from dataclasses import dataclass

import torch

import pyro
from pyro import poutine
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample

from amortized_pyro.errors import GuideError

class _ReadStopped(Exception):
    """Raised inside the model at its first local site: that site's message, as the model's own handlers made it."""

    def __init__(self, msg):
        super().__init__(msg["name"])
        self.msg = msg


class _ToThePlate(Messenger):
    """Runs a model up to its first local latent site of ``plate`` (``local_names``), recording the data plate's
    subsample site and the first global latent site's message on the way and giving every latent site before it
    the prototype's value (``values``).
    A messenger of its own, not ``poutine.escape``: it records sites and stops at another."""

    def __init__(self, plate, local_names, values):
        super().__init__()
        self.plate, self.local_names, self.values = plate, local_names, values
        self.subsample, self.first_global = None, None

    def _pyro_sample(self, msg):
        if site_is_subsample(msg):
            if msg["name"] == self.plate:
                self.subsample = (msg["fn"], msg["value"])
            if msg["value"] is None:  # a plate that draws its minibatch: its first rows, nothing drawn
                fn = msg["fn"]
                rows = fn.size if fn.subsample_size is None else min(fn.subsample_size, fn.size)
                msg["value"] = torch.arange(rows, device=fn.device)
            return
        if msg["name"] in self.local_names:
            raise _ReadStopped(msg)
        if not msg["is_observed"] and msg["name"] in self.values:
            if self.first_global is None:
                self.first_global = msg
            if msg["value"] is None:
                msg["value"] = self.values[msg["name"]]


@dataclass
class ModelPlate:
    """The data plate of one model call, as the model made it: ``size`` (N), ``subsample_size`` (B),
    ``subsample`` (the indices the model gave, or None: every datapoint, or a minibatch the plate draws),
    ``device``, and at the first local site ``site`` (its name), the plate's ``dim`` there, the site's ``node``
    (its mask and distribution: whether the model masks it in this call); ``scales``: the model's scale of its
    global sites and of its local sites beyond their plates' N/B (1.0 where the model adds none: poutine.scale),
    a float or a tensor each."""

    size: int
    subsample_size: int
    subsample: object
    device: object
    site: str
    dim: int
    node: dict
    scales: tuple

    @property
    def covers_all(self):
        """Whether the plate takes every datapoint, in order (``pyro.plate(name, len(x))``)."""
        return self.subsample is None and self.subsample_size >= self.size

    def plate(self, name):
        """The guide's plate for this call: the model's, at the model's dim."""
        if self.subsample is not None:
            return pyro.plate(name, self.size, subsample=self.subsample, dim=self.dim)
        return pyro.plate(name, self.size, subsample_size=min(self.subsample_size, self.size), dim=self.dim,
                          device=self.device)

    def check(self, name, plate, fix):
        """One line of :class:`GuideError` where the guide's ``plate`` (a ``pyro.plate``) is not the model's: its
        size, subsample size or dim (its scale N/B follows from the first two), or, where the model gives its
        plate's indices, its datapoints (compared on the device, a host sync, unless they are the model's very
        tensor: a ``create_plates`` that passes the model's ``idx`` on); ``fix``: what the user can do."""
        theirs = (plate.size, plate.subsample_size, plate.dim)
        ours = (self.size, self.subsample_size, self.dim if plate.dim is not None else None)
        if theirs != ours:
            raise GuideError("the guide's plate %r (%s) is not the model's at its site %r (%s): %s"
                             % (name, _described(*theirs), self.site, _described(*ours[:2], self.dim), fix))
        given = plate.indices
        if self.subsample is not None and given is not self.subsample:
            mine = torch.as_tensor(self.subsample)
            if not torch.equal(torch.as_tensor(given).to(mine.device), mine):
                raise GuideError("the guide's plate %r takes other datapoints (%s) than the model gives its plate at "
                                 "its site %r (%s): %s" % (name, _rows(given), self.site, _rows(mine), fix))


def _described(size, subsample_size, dim):
    return "size %d, %d datapoints%s" % (size, subsample_size, "" if dim is None else ", dim %d" % dim)


def _rows(indices):
    rows = torch.as_tensor(indices).tolist()
    return "rows " + ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")


def _scale_text(scale):
    if torch.is_tensor(scale) and scale.numel() > 1:
        return "a tensor of shape %s" % tuple(scale.shape)
    return "%g" % float(scale)


def beyond_plates(site):
    """A site's scale (its message's, or its trace node's) beyond its plates' N/B: the model's ``poutine.scale``."""
    scale = site["scale"]
    for frame in site["cond_indep_stack"]:
        scale = scale / ((frame.full_size or frame.size) / frame.size)  # as Pyro multiplies, plate by plate
    if isinstance(scale, float) and math.isclose(scale, 1.0, rel_tol=1e-12):  # divided in another order: rounding
        return 1.0
    return scale


@contextlib.contextmanager
def no_empty_plate():
    """A plate the model makes of no datapoints (data of 0 rows) said in one line, not Pyro's bare
    ``ZeroDivisionError: size cannot be zero`` from inside the model."""
    try:
        yield
    except ZeroDivisionError as error:
        if str(error) != "size cannot be zero":
            raise
        raise GuideError("the model made a plate of size 0 in this call (data of no rows?): there is no datapoint "
                         "to serve") from None


def scaled(scale):
    """``poutine.scale(scale)``, or nothing where ``scale`` is the float 1.0 (no handler where the model adds none)."""
    return contextlib.nullcontext() if isinstance(scale, float) and scale == 1.0 else poutine.scale(scale=scale)


def prototype_scales(trace, structure):
    """Whether the model, in the trace of the guide's first call (every site), scales its latent sites beyond
    their plates' N/B (``poutine.scale``); one line of :class:`GuideError` where its local sites' scales differ,
    or its global sites' (the guide reads the first of each at each call and gives it to all), or where it scales
    global sites it draws after its first local site (the read stops there)."""
    names = list(structure.globals), [site.name for site in structure.locals]
    scales = [[beyond_plates(trace.nodes[name]) for name in part] for part in names]
    for part, values in zip(names, scales):
        for name, value in zip(part[1:], values[1:]):
            if not bool((torch.as_tensor(value) == torch.as_tensor(values[0])).all()):  # once, at the prototype
                raise GuideError("the model scales its %s sites %r (%s) and %r (%s) differently: the guide gives "
                                 "them one scale; scale them alike, or guide them in builders of their own (an "
                                 "AutoGuideList)" % ("global" if part is names[0] else "local", part[0],
                                                     _scale_text(values[0]), name, _scale_text(value)))
    scaled_model = [bool(values) and (torch.is_tensor(values[0]) or values[0] != 1.0) for values in scales]
    order = list(trace.nodes)
    if scaled_model[0] and order.index(names[0][0]) > order.index(names[1][0]):
        raise GuideError("the model scales its global site %r (%s) but draws it after its first local site %r, "
                         "where the guide's read of each call stops: draw it before the data plate"
                         % (names[0][0], _scale_text(scales[0][0]), names[1][0]))
    return any(scaled_model)


def read_model_plate(model, structure, values, args, kwargs):
    """The :class:`ModelPlate` of the data plate ``structure.plate`` in the call ``model(*args, **kwargs)``,
    read by running the model up to its first local site (module docstring); ``values``: site → the prototype
    call's value of each latent site (replayed where the model reaches one before its plate)."""
    names = {site.name for site in structure.locals}
    reader = _ToThePlate(structure.plate, names, values)
    try:
        with poutine.block(), reader, no_empty_plate():
            model(*args, **kwargs)
    except _ReadStopped as reached:
        msg = reached.msg
    else:
        raise GuideError("the model made no local site of its plate %r in this call (its local sites: %s): the "
                         "guide cannot know the call's datapoints" % (structure.plate, ", ".join(sorted(names))))
    if reader.subsample is None:
        raise GuideError("the model's local site %r sits in no plate %r made in this call" % (msg["name"],
                                                                                          structure.plate))
    fn, subsample = reader.subsample
    subsample_size = len(subsample) if subsample is not None else (fn.size if fn.subsample_size is None
                                                                   else min(fn.subsample_size, fn.size))
    local = beyond_plates(msg)
    if torch.is_tensor(local) and local.numel() > 1 and subsample is None and subsample_size < fn.size:
        raise GuideError("the model scales its local site %r per datapoint (%s) in a plate %r that draws its own "
                         "minibatch, whose rows the guide cannot read: give the plate subsample=idx"
                         % (msg["name"], _scale_text(local), structure.plate))
    frame = next(f for f in msg["cond_indep_stack"] if f.name == structure.plate)
    node = {"mask": msg["mask"], "fn": msg["fn"]}
    scales = (1.0 if reader.first_global is None else beyond_plates(reader.first_global), local)
    return ModelPlate(fn.size, subsample_size, subsample, fn.device, msg["name"], frame.dim, node, scales)
