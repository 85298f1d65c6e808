"""The global random streams (torch's, on the CPU and each GPU), forked where a draw must leave them as they were."""
import torch


def outside_the_stream(*devices):
    """The global random streams forked: draws made inside leave them as they were. The CPU's, and those of
    the GPUs among ``devices`` (a GPU not named is not touched: forking it would start CUDA there)."""
    return torch.random.fork_rng(devices=sorted({d.index or 0 for d in devices if d.type == "cuda"}))
