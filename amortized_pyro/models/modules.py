"""PyroModules that own their parameters.

Pyro keeps a ``PyroModule``'s parameters in its global param store unless ``module_local_params`` is set,
and that setting is itself global. :class:`LocalModule` turns it on only while one of our modules is
built or called (``pyro.settings.context``), so every parameter lives in the module object — its
``state_dict`` is the run's state, two fitted guides never share anything — while Pyro code of the user's
that runs outside our modules keeps Pyro's defaults.

Why a context per call and not a setting of the module: Pyro 1.9 has no per-module switch (pyro/nn/module.py reads
the process-wide ``pyro.settings.get("module_local_params")`` at every attribute access), and setting it once for the
process would change it for the user's own Pyro code too. The context restores the setting after every call; it is
not meant for two threads running Pyro at once. Its cost is part of the builder's fixed overhead per step (about
0.1-0.25 ms in all, BENCHMARKS.md, bench/builder_step.py).
"""
import pyro
from pyro.nn import PyroModule


class LocalModule(PyroModule):
    """A PyroModule whose PyroParams and nn.Parameters are module-local (see the module docstring); first in
    the bases of a class that is also another PyroModule (the package's guide, an AutoGuide)."""

    def __init__(self, *args, **kwargs):
        with pyro.settings.context(module_local_params=True):
            super().__init__(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        with pyro.settings.context(module_local_params=True):
            return super().__call__(*args, **kwargs)
