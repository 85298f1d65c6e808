"""The device a run asks for (``auto``, ``cpu``, ``cuda``, ``cuda:N``), resolved and checked against the host."""
import torch

from amortized_pyro.errors import AmortizedPyroError


def resolve_device(spec):
    """``auto`` → CUDA when available, else CPU; ``cuda``/``cuda:N`` must exist."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise AmortizedPyroError("unknown device %r: use auto, cpu, cuda or cuda:N" % spec) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise AmortizedPyroError("device %r asked for, but CUDA is not available on this machine" % spec)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise AmortizedPyroError("device %r asked for, but only %d CUDA device(s) exist"
                                     % (spec, torch.cuda.device_count()))
    elif device.type != "cpu":
        raise AmortizedPyroError("unsupported device %r: use auto, cpu, cuda or cuda:N" % spec)
    return device
