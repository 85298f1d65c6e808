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
import contextlib

import pyro
from pyro.nn import PyroModule
from pyro.poutine.block_messenger import BlockMessenger
from pyro.poutine.runtime import _PYRO_STACK
from pyro.poutine.trace_messenger import TraceMessenger

from amortized_pyro.errors import AmortizedPyroError

_IN_PYROS_STORE = [False]  # pyros_param_store() active: the package's modules leave their parameters to Pyro's store


@contextlib.contextmanager
def pyros_param_store():
    """While it lasts, the package's modules keep their parameters where a plain PyroModule keeps them, in Pyro's
    global param store, under their module names: what Pyro's JIT ELBOs (``JitTrace_ELBO``,
    ``JitTraceMeanField_ELBO``) need, as they look each parameter up there by name (issue 70: a ``KeyError``
    otherwise). The same tensors: the modules' ``state_dict`` and the store hold one object each; the store keeps them
    after it (``pyro.clear_param_store()`` empties it). Build and train inside it::

        with pyros_param_store():
            svi = SVI(model, guide, optim, JitTrace_ELBO())
            for batch in batches: svi.step(*batch)
    """
    before, _IN_PYROS_STORE[0] = _IN_PYROS_STORE[0], True
    try:
        yield
    finally:
        _IN_PYROS_STORE[0] = before


def _local():
    return pyro.settings.context(module_local_params=not _IN_PYROS_STORE[0])


def under_pyros_jit():
    """Whether Pyro's JIT is capturing the parameters of its first call: a param-only trace opened directly inside a
    ``poutine.block()``, as pyro/ops/jit.py's ``CompiledFunction.__call__`` opens them (Pyro 1.9.2), where it then
    looks each parameter up in its global store by name."""
    return any(isinstance(outer, BlockMessenger) and isinstance(inner, TraceMessenger) and inner.param_only
               for outer, inner in zip(_PYRO_STACK, _PYRO_STACK[1:]))


class LocalModule(PyroModule):
    """A PyroModule whose PyroParams and nn.Parameters are module-local (see the module docstring; inside
    :func:`pyros_param_store`, in Pyro's store); first in the bases of a class that is also another PyroModule (the
    package's guide, an AutoGuide)."""

    def __init__(self, *args, **kwargs):
        with _local():
            super().__init__(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        if not _IN_PYROS_STORE[0] and under_pyros_jit():  # else Pyro's KeyError naming one of our parameters
            raise AmortizedPyroError(
                "Pyro's JIT ELBOs look parameters up in Pyro's param store, and %s keeps its own: build and train it "
                "inside `with amortized_pyro.models.modules.pyros_param_store():`" % type(self).__name__)
        with _local():
            return super().__call__(*args, **kwargs)
