"""Settings dataclasses whose fields carry their own rules: help text, range or choices, a parser.

:class:`~amortized_pyro.runs.config.FitConfig` (what defines a run) and :class:`~amortized_pyro.local.gaps.GapSettings`
(what defines a gap measurement) are both made of :func:`setting` fields; :class:`Checked` applies the rules
to values made in Python, and the command line generates its options from the same fields
(:mod:`amortized_pyro.cli.options`), so both speak the same rules.
"""
import math
from dataclasses import field, fields

FLOAT32_MAX = 3.4028234663852886e38  # what torch's float32 tensors hold
INT64_MAX = 2 ** 63 - 1


def setting(default, help, low=None, open_low=False, high=None, open_high=False, choices=None, grid=False,
           parse=None, result=True):
    """A field with what its command-line option needs: help, range (low/high, open or closed), choices or
    a ``parse`` function that raises ValueError on bad text; ``grid`` marks the fields that ``compare``
    takes as lists instead; ``result=False`` those that cannot change a run's numbers."""
    return field(default=default, metadata=dict(help=help, low=low, open_low=open_low, high=high,
                                                 open_high=open_high, choices=choices, grid=grid, parse=parse,
                                                 result=result))


KINDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}  # said in words


def field_error(f, value):
    """What is wrong with ``value`` for field ``f`` (a line naming the field), or None."""
    return value_error(f.name, f.type, value, **f.metadata)


def value_error(name, expected, value, low=None, open_low=False, high=None, open_high=False, choices=None,
                parse=None, **_):
    """What is wrong with ``value`` for the setting ``name`` of type ``expected`` under the rules of :func:`setting`
    (a line naming it), or None."""
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        return "%s expects %s, got %r" % (name, KINDS.get(expected, "a " + expected.__name__), value)
    if choices and value not in choices:
        return "%s must be one of %s, got %r" % (name, ", ".join(choices), value)
    if parse:
        try:
            parse(value)
        except ValueError:
            return "%s: cannot read %r (%s)" % (name, value, parse.__doc__.strip().splitlines()[0])
    if expected is float and not (math.isfinite(value) and abs(value) <= FLOAT32_MAX):
        return "%s must be a finite number of at most %.3g in size (float32), got %r" % (name, FLOAT32_MAX, value)
    if expected is int and abs(value) > INT64_MAX:
        return "%s must be at most %d in size (int64), got %r" % (name, INT64_MAX, value)
    if low is not None and (value < low or (open_low and value == low)):
        return "%s must be %s %g, got %r" % (name, ">" if open_low else ">=", low, value)
    if high is not None and (value > high or (open_high and value == high)):
        return "%s must be %s %g, got %r" % (name, "<" if open_high else "<=", high, value)
    return None


def repeated(values):
    """The first value that ``values`` (a grid's list) holds twice, or None."""
    seen = []  # a list, not a set: a value need not be hashable to be refused
    for value in values:
        if value in seen:
            return value
        seen.append(value)
    return None


class Checked:
    """Mixin for a dataclass of :func:`setting` fields: :meth:`check` raises the first rule broken."""

    def check(self):
        """Every field within its range or choices (the command line's own rules); returns self."""
        from amortized_pyro.errors import InvalidSettings

        for f in fields(self):
            error = field_error(f, getattr(self, f.name))
            if error:
                raise InvalidSettings(error, [f.name])
        return self
