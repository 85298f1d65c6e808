"""The encoder's input (issue 68, item 5): which of the model's arguments holds the plate's data, and how its rows
are the plate's datapoints, read once, at the guide's first call, from what the model observes in the plate; never
guessed from sizes where the model says otherwise, and no host sync at later calls.

Two readings: ``"batch"``, the argument's rows are this call's datapoints in the plate's order (the model gets a
minibatch, or the whole data and a plate over all of it); ``"indexed"``, its rows are all N datapoints and the plate's
indices pick the batch (``pyro.plate("data", len(x), subsample_size=B)`` on the whole data). Where the first call has
one row per datapoint and takes them all (rows = batch = N), both readings agree on it: ``"every"``, and each later
call's shapes admit only one of them.
"""
import torch
from pyro.poutine.util import site_is_subsample

from amortized_pyro.errors import GuideError

HOW = ("give encoder_input= the position of the model's argument holding the data, or a function of the model's "
       "arguments returning it")


def observed_rows(trace, plate):
    """What the model observes inside ``plate`` in ``trace``: (its observed values, one row per datapoint of the
    call, [B, -1] each; the plate's indices in that run, or None)."""
    node = trace.nodes.get(plate)
    indices = node["value"] if node is not None and site_is_subsample(node) else None
    rows = []
    for site in trace.nodes.values():
        if site["type"] != "sample" or not site["is_observed"] or site_is_subsample(site):
            continue
        frame = next((f for f in site["cond_indep_stack"] if f.name == plate), None)
        value = site["value"]
        if frame is None or not torch.is_tensor(value):
            continue
        at = frame.dim - getattr(site["fn"], "event_dim", 0)  # the plate's dimension in the value
        if value.dim() >= -at and value.shape[at] == frame.size:
            rows.append(value.movedim(at, 0).reshape(frame.size, -1))
    return rows, indices


def _observed_as(data, observed, full):
    """``"batch"``, ``"every"`` or ``"indexed"`` where one of the values ``observed`` (:func:`observed_rows`) is
    ``data`` read so; else None."""
    observed, indices = observed
    if data.dim() == 0 or not observed:
        return None
    rows, batch = data.shape[0], observed[0].shape[0]

    def seen(picked):
        flat = picked.reshape(batch, -1)
        return any(o.shape == flat.shape and torch.equal(o, flat.to(device=o.device, dtype=o.dtype)) for o in observed)
    as_is = rows == batch and seen(data)
    picked = (rows == full and indices is not None and not indices.is_floating_point()  # a plate's subsample= may
              and seen(data.index_select(0, indices.to(data.device))))  # be the data itself (pyro.contrib.cevae)
    return "every" if as_is and picked else "batch" if as_is else "indexed" if picked else None


class EncoderInput:
    """The model argument the encoder reads (``position``: an int, a keyword's name, or a function of the model's
    arguments) and its ``reading`` (see the module docstring), read from the first call."""

    def __init__(self, position, reading):
        self.position, self.reading = position, reading

    @classmethod
    def read(cls, given, args, kwargs, observed, indices, full, in_order):
        """From the first call: ``given`` (the builder's ``encoder_input``: a position, a function, or None for
        the argument the plate observes), the model's arguments, ``observed`` (:func:`observed_rows`), the plate's
        ``indices`` and full size; ``in_order()`` tells whether the plate takes every datapoint in order (called
        only where the shapes leave both readings open)."""
        if given is None:
            named = list(enumerate(args)) + list(kwargs.items())
            for position, value in named:
                if torch.is_tensor(value) and (reading := _observed_as(value, observed, full)):
                    return cls(position, reading)
            raise GuideError("no argument of the model is what the plate's sites observe (a transform of the "
                             "data, or data the model does not observe): %s" % HOW)
        found = cls(given, None)
        data = found.data(args, kwargs)
        found.reading = _observed_as(data, observed, full) or found._by_shape(data, len(indices), full,
                                                                                       in_order)
        return found

    def _by_shape(self, data, batch, full, in_order):
        rows = data.shape[0]
        if rows == full != batch:
            return "indexed"
        if rows == batch != full:
            return "batch"
        if rows == batch == full:
            if in_order():
                return "every"
            raise GuideError("the plate takes all %d datapoints in another order than its data's rows; give "
                             "encoder_input= a function of the model's arguments returning the rows in the plate's "
                             "order" % full)
        raise GuideError("the encoder's input has %d rows; the plate has %d datapoints in this batch of %d"
                         % (rows, batch, full))

    def data(self, args, kwargs):
        """The argument itself (all its rows)."""
        if callable(self.position):
            data = self.position(*args, **kwargs)
        elif isinstance(self.position, str):
            data = kwargs[self.position]
        elif self.position >= len(args):
            raise GuideError("encoder_input=%d, but the model was called with %d positional arguments"
                             % (self.position, len(args)))
        else:
            data = args[self.position]
        if not torch.is_tensor(data) or data.dim() == 0:
            raise GuideError("the encoder's input (model argument %r) is not a tensor of datapoints" % (self.position,))
        return data

    def rows(self, data, indices, full, in_order=False):
        """The rows of ``data`` that are this call's datapoints ``indices`` of ``full``, [B, ...] (one number per
        datapoint as [B, 1]; ``in_order``: the plate is known to take every datapoint in order)."""
        if data.dim() == 1:  # one number per datapoint: a column of features, [B, 1]
            data = data.unsqueeze(-1)
        rows, batch = data.shape[0], indices.shape[0]  # indices [B], or a plate's subsample=x [B, ...]
        reading = self.reading
        if reading == "every":
            reading = "indexed" if rows == full != batch else "batch"
        if reading == "indexed" and rows == full:
            return data if in_order else data.index_select(0, indices.to(data.device))
        if reading == "batch" and rows == batch:
            return data
        raise GuideError("the encoder's input (model argument %r) has %d rows; its first call read them as %s, "
                         "which needs %d here (the plate has %d datapoints in this batch of %d)"
                         % (self.position, rows, "all the datapoints, picked by the plate's indices"
                            if reading == "indexed" else "this call's datapoints", full if reading == "indexed"
                            else batch, batch, full))
