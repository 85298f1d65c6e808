"""amortized_pyro: amortized vs per-datapoint variational inference in a Bayesian deep generative model.

The public names below are imported from their layers on first use (PEP 562), so that ``import
amortized_pyro`` is cheap and ``python -m amortized_pyro`` can end a Ctrl-C during the heavy imports (torch,
Pyro) quietly; see docs/architecture.md for the layers."""
import importlib

_HOMES = {
    "AmortizedPyroError": "amortized_pyro.errors",
    "BayesianDecoderModel": "amortized_pyro.models.decoder",
    "Data": "amortized_pyro.runs.data",
    "FitConfig": "amortized_pyro.runs.config",
    "FitResult": "amortized_pyro.runs.fit",
    "GUIDES": "amortized_pyro.models.guides",
    "GapSettings": "amortized_pyro.local.gaps",
    "compare": "amortized_pyro.study.comparison",
    "fit": "amortized_pyro.runs.fit",
    "load_data": "amortized_pyro.runs.data",
    "load_run": "amortized_pyro.runs.fit",
    "make_guide": "amortized_pyro.models.guides",
    "measure_gap": "amortized_pyro.autoguides.gap",
    "measure_run": "amortized_pyro.gap.measure",
    "resume": "amortized_pyro.runs.fit",
}
__all__ = sorted(_HOMES)


def __getattr__(name):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError("module 'amortized_pyro' has no attribute %r" % name)


def __dir__():
    return sorted(list(globals()) + __all__)
