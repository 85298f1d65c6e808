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

Without Pyro's validation the read stops at the plate's subsample site instead, the plate's dim taken from the
prototype's trace: the same plate where the model's plate keeps its dim from call to call (what validation checks).

Options weighed (docs/your-model.md says the same): reading the size off the arguments by matching values
(the design this replaces) cannot be right in general; running the whole model in the guide, as Pyro's
AutoNormalMessenger does, computes the likelihood twice per step; this runs only the model's code before its
first local site (its priors' construction: bench/builder_step.py measures it) and needs the model at every
call, so a pickled guide keeps its model where the model pickles.

The guide's plate is then the model's, so its scale N/B is the model's. Where the plate is given instead (a
user's ``create_plates``, an ``AutoGuideList``'s plates), :meth:`ModelPlate.check` compares it with the model's
(under Pyro's validation, ``pyro.enable_validation``, on by default; in a list, always) and raises where they
differ. What no guide can check from inside: a ``poutine.scale`` the model applies to its local sites, which the
guide must be given alike (called under the same ``poutine.scale``, as Pyro's examples/dmm.py anneals).
"""
from dataclasses import dataclass

import torch

import pyro
from pyro import poutine
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample

from amortized_pyro.errors import GuideError

class _ReadStopped(Exception):
    """Raised inside the model where the read stops: at its first local site (that site's message, as the model's
    own handlers made it), or at the plate's subsample site where the read stops there (None)."""

    def __init__(self, msg):
        super().__init__(msg and msg["name"])
        self.msg = msg


class _ToThePlate(Messenger):
    """Runs a model up to its first local latent site of ``plate`` (``local_names``; with ``to_local_site=False``
    up to the plate's own subsample site), recording the data plate's subsample site on the way and giving every
    latent site before it the prototype's value (``values``).
    A messenger of its own, not ``poutine.escape``: it records one site and stops at another."""

    def __init__(self, plate, local_names, values, to_local_site=True):
        super().__init__()
        self.plate, self.local_names, self.values, self.subsample = plate, local_names, values, None
        self.to_local_site = to_local_site

    def _pyro_sample(self, msg):
        if site_is_subsample(msg):
            if msg["name"] == self.plate:
                self.subsample = (msg["fn"], msg["value"])
                if not self.to_local_site:
                    raise _ReadStopped(None)
            if msg["value"] is None:  # a plate that draws its minibatch: its first rows, nothing drawn
                fn = msg["fn"]
                rows = fn.size if fn.subsample_size is None else min(fn.subsample_size, fn.size)
                msg["value"] = torch.arange(rows, device=fn.device)
            return
        if msg["name"] in self.local_names:
            raise _ReadStopped(msg)
        if not msg["is_observed"] and msg["value"] is None and msg["name"] in self.values:
            msg["value"] = self.values[msg["name"]]


@dataclass
class ModelPlate:
    """The data plate of one model call, as the model made it: ``size`` (N), ``subsample_size`` (B),
    ``subsample`` (the indices the model gave, or None: every datapoint, or a minibatch the plate draws),
    ``device``, and at the first local site ``site`` (its name), the plate's ``dim`` there and the site's
    ``node`` (its mask and distribution: whether the model masks it in this call); where the read stopped at the
    plate (``node`` None), ``site`` and ``dim`` are the prototype call's."""

    size: int
    subsample_size: int
    subsample: object
    device: object
    site: str
    dim: int
    node: dict

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
        size, subsample size or dim (its scale N/B follows from the first two); ``fix``: what the user can do."""
        theirs = (plate.size, plate.subsample_size, plate.dim)
        ours = (self.size, self.subsample_size, self.dim if plate.dim is not None else None)
        if theirs != ours:
            raise GuideError("the guide's plate %r (%s) is not the model's at its site %r (%s): %s"
                             % (name, _described(*theirs), self.site, _described(*ours[:2], self.dim), fix))


def _described(size, subsample_size, dim):
    return "size %d, %d datapoints%s" % (size, subsample_size, "" if dim is None else ", dim %d" % dim)


def read_model_plate(model, structure, values, args, kwargs, to_local_site=True):
    """The :class:`ModelPlate` of the data plate ``structure.plate`` in the call ``model(*args, **kwargs)``,
    read by running the model up to its first local site (module docstring); ``values``: site → the prototype
    call's value of each latent site (replayed where the model reaches one before its plate). With
    ``to_local_site=False`` the run stops at the plate's own subsample site (its size, subsample size and indices)
    and the plate's dim and first local site are the prototype's (``structure``), the site's node left unread
    (None): the guide's call without Pyro's validation (the plate's construction and the site's distribution
    not run: 0.3 % of a VAE's step, ``bench/builder_step.py``)."""
    names = {site.name for site in structure.locals}
    reader = _ToThePlate(structure.plate, names, values, to_local_site)
    try:
        with poutine.block(), reader:
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
    if msg is None:
        return ModelPlate(fn.size, subsample_size, subsample, fn.device, structure.locals[0].name, structure.dim,
                          None)
    frame = next(f for f in msg["cond_indep_stack"] if f.name == structure.plate)
    node = {"mask": msg["mask"], "fn": msg["fn"]}
    return ModelPlate(fn.size, subsample_size, subsample, fn.device, msg["name"], frame.dim, node)
