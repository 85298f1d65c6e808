"""A training step copies nothing from the host to the run's device (issue 51).

On CUDA a tensor made from Python data on the device (``torch.tensor(0.5, device=...)``, which torch's Normal does
with a float scale) is a host-to-device copy that waits for the GPU: bench/cuda_syncs.py counted 10 such syncs a
step on an H200 before ``FixedScaleNormal`` filled its scale on the device. The CPU cannot wait for itself, so
here the copies are caught where they are asked for: every factory of a tensor from Python data
(``torch.tensor``, ``as_tensor``, ``scalar_tensor``, ``Tensor.new_tensor``) called during training epochs with the
run's device, except two that are on the CPU whatever the run's device: torch's Adam's step counters
(torch/optim) and Pyro's ``_Subsample`` (its plate's device defaults to the CPU).
"""
import traceback

import pytest
from torch.overrides import TorchFunctionMode

from amortized_pyro import FitConfig, fit

FACTORIES = {"tensor", "as_tensor", "scalar_tensor", "new_tensor"}
ON_THE_CPU_ANYWAY = ("torch/optim/", "pyro/poutine/subsample_messenger.py")


class HostCopies(TorchFunctionMode):
    """Records where each tensor is made from Python data on the CPU device (the run's, in these tests)."""

    def __init__(self):
        super().__init__()
        self.places = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in FACTORIES:
            stack = traceback.extract_stack()[:-1]
            if not any(part in frame.filename for frame in stack[-3:] for part in ON_THE_CPU_ANYWAY):
                self.places.append(" < ".join("%s:%d" % (f.filename.rsplit("/", 2)[-1], f.lineno)
                                              for f in reversed(stack[-4:])))
        return func(*args, **kwargs)


def copies_per_epoch(guide, epochs):
    config = FitConfig(dataset="mnist-sample", n_obs=200, n_test=20, batch_size=50, hidden=16, z_dim=4, width=8,
                       predictive_draws=2, device="cpu", checkpoint_every="1h", eval_every=1000)
    spy = HostCopies()
    with spy:
        fit(config, guide=guide, epochs=epochs, progress=False, log=lambda *a: None)
    return spy.places


@pytest.mark.parametrize("guide", ["amortized", "per-datapoint", "shared", "semi-amortized"])
def test_training_epochs_make_no_tensor_from_python_data(guide):
    # the set-up, the one evaluation at the end and the write-out are the same for 1 and 3 epochs: the difference
    # is two epochs of steps (4 steps each)
    short, long = copies_per_epoch(guide, 1), copies_per_epoch(guide, 3)
    extra = list(long)
    for place in short:
        extra.remove(place)
    assert not extra, "tensors made from Python data in the steps: %s" % sorted(set(extra))
