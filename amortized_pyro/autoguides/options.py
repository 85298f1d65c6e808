"""The builders' options checked at construction, each refused in one line of
:class:`~amortized_pyro.errors.GuideError` naming the option and what it takes (a string where a module was
meant, NaN where a count was, raised torch's or Python's own error at the first call before, issue 71)."""
import math
import numbers

from amortized_pyro.errors import GuideError


def count(name, value, minimum=0):
    """``value`` where it is a whole number (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise GuideError("%s must be a whole number >= %d, got %r" % (name, minimum, value))
    return int(value)


def positive(name, value, at_most=math.inf):
    """``value`` as a float where it is a finite real number in (0, ``at_most``]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= at_most \
            or not math.isfinite(value):
        raise GuideError("%s must be a finite number > 0%s, got %r"
                         % (name, "" if at_most == math.inf else " and <= %g" % at_most, value))
    return float(value)


def switch(name, value):
    """``value`` where it is True or False (not "no" nor 0, which Python's truth would read as a choice)."""
    if not isinstance(value, bool):
        raise GuideError("%s must be True or False, got %r" % (name, value))
    return value
