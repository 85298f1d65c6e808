"""The global random streams (torch's on the CPU and each GPU, numpy's, python's): saved and restored with a
run's checkpoint, and forked where a draw must leave them as they were."""
import random

import numpy as np
import torch


def outside_the_stream(*devices):
    """The global random streams forked: draws made inside leave them as they were. The CPU's, and those of
    the GPUs among ``devices`` (a GPU not named is not touched: forking it would start CUDA there), except while a
    CUDA graph is being captured: PyTorch refuses to read or set a generator's state then (issue 70), and a draw
    inside a capture takes its numbers from the graph's own offsets, moving no stream an eager step reads."""
    capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    return torch.random.fork_rng(devices=[] if capturing else sorted({d.index or 0 for d in devices
                                                                       if d.type == "cuda"}))


def rng_states(device):
    """Every random state a run draws from, as tensors, numbers and strings (what a checkpoint may hold:
    :mod:`amortized_pyro.runs.tensor_files`): numpy's key as a tensor."""
    name, key, *rest = np.random.get_state()
    states = {"torch": torch.get_rng_state(), "numpy": (name, torch.from_numpy(key.astype(np.int64)), *rest),
              "python": random.getstate()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_states(states, device):
    torch.set_rng_state(states["torch"])
    name, key, *rest = states["numpy"]  # the key a tensor, or a numpy array in checkpoints written before
    np.random.set_state((name, np.asarray(key, dtype=np.uint32), *rest))
    random.setstate(states["python"])
    if device.type == "cuda" and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"], device)
