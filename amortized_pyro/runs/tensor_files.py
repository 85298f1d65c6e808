"""A run's ``.pt`` files (checkpoint.pt, params.pt) read as data, never as code: runs are shared, so ``torch.load``
with ``weights_only=True``, whose unpickler builds tensors, numbers, strings and containers only and refuses any
other global (a crafted file's ``os.system``) before calling it. A run stores its random states as tensors for this
(:func:`~amortized_pyro.support.streams.rng_states`); checkpoints written before that hold numpy's as an array, for
which numpy's array types alone are allowed (:data:`NUMPY_ARRAY`: they build an array, and call nothing else).

A guide a user pickles whole (``torch.save(guide)``) is another thing: code, by the user's choice, which loads only
with ``weights_only=False``, from a source the user trusts (docs/python-api.md)."""
import re
import warnings

import numpy as np
import torch

from amortized_pyro.errors import AmortizedPyroError

# what pickle.dumps(array of uint32) names: numpy's array rebuilder (numpy._core.multiarray._reconstruct, by the
# module name of the numpy installed), the array type and its dtype's types
NUMPY_ARRAY = [np.zeros(0).__reduce__()[0], np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load_tensors(path, what):
    """The contents of the .pt file ``path`` (``what`` names it in a message: "params.pt in RUN"), on the CPU. A file
    that holds anything else than tensors, numbers, strings, containers and numpy arrays is refused in one line,
    unrun, and so is one that is no .pt file; a missing file raises FileNotFoundError, for the caller to say."""
    try:
        with warnings.catch_warnings(), torch.serialization.safe_globals(NUMPY_ARRAY):
            warnings.simplefilter("ignore")  # torch's note on a pickle protocol it does not write: the refusal says it
            return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:  # the weights-only unpickler runs nothing: whatever it raises, the file is at fault
        message = str(e).strip() or type(e).__name__
        called = re.search(r"GLOBAL ([\w.]+)", message)  # the weights-only unpickler names what it refused to call
        if called:
            raise AmortizedPyroError("%s holds more than tensors and numbers (it would call %s): refused unrun, as a "
                                     "run's files are data, not code (use only runs from a source you trust)"
                                     % (what, called.group(1))) from None
        if "PytorchStreamReader" in message or isinstance(e, OSError):  # torch's zip reader on a cut-off file
            raise AmortizedPyroError("cannot read %s: not a whole .pt file (truncated, or not written by "
                                     "torch.save)" % what) from None
        detail = message.split("WeightsUnpickler error:")[-1].strip() or message
        raise AmortizedPyroError("cannot read %s: %s" % (what, detail.splitlines()[0])) from None
