"""What a training process needs from its host: the device to run on, and SIGINT/SIGTERM taken between
epochs (so that a run stops at a checkpoint, not in the middle of an update)."""
import signal
import threading

import torch

from .errors import AmortizedPyroError


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


class StopSignals:
    """SIGINT and SIGTERM set ``signum``, which the loop reads after each epoch; a second one stops at once.
    Handlers are installed only in the main thread (elsewhere signals cannot be caught)."""

    def __enter__(self):
        self.signum, self.previous = None, {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
