"""The rules of :func:`~amortized_pyro.models.guides.make_guide`'s options, in one home: the fields of
:class:`~amortized_pyro.runs.config.FitConfig` of the same names take them (``setting(..., **RULES[name])``), so a
guide made in Python and a run's configuration refuse the same values in the same words."""
from amortized_pyro.autoguides.encoders import ENCODERS
from amortized_pyro.autoguides.factors import FREE_INITS, REFINE_GRADS
from amortized_pyro.autoguides.objectives import OBJECTIVES
from amortized_pyro.errors import InvalidSettings
from amortized_pyro.local.optimize import REFINE_OPTIMIZERS
from amortized_pyro.local.partial import SCORES
from amortized_pyro.settings import value_error

RULES = {
    "width": dict(low=1), "encoder_layers": dict(low=1), "encoder_slope": dict(low=0),
    "encoder": dict(choices=tuple(ENCODERS)), "encoder_label": {}, "init_scale": dict(low=0, open_low=True), "qz_init": dict(choices=FREE_INITS),
    "seed": dict(low=0, high=2 ** 32 - 1), "objective": dict(choices=OBJECTIVES), "flow": dict(low=0),
    "iterations": dict(low=0), "refine_steps": dict(low=0), "refine_lr": dict(low=0, open_low=True),
    "refine_grad": dict(choices=REFINE_GRADS), "refine_optimizer": dict(choices=REFINE_OPTIMIZERS),
    "refine_share": dict(low=0, high=1, open_low=True), "refine_score": dict(choices=SCORES),
}


def check_options(options, defaults):
    """Refuse (:class:`InvalidSettings`, one line) the first of ``options`` ({name: value given}) that breaks its
    rule, of the kind of its default in ``defaults``; returns ``options``."""
    for name, value in options.items():
        error = value_error(name, type(defaults[name]), value, **RULES[name])
        if error:
            raise InvalidSettings(error, [name])
    return options
