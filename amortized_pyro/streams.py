"""The global random streams (torch's, on the CPU and each GPU), forked where a draw must leave them as they were."""
import torch


def outside_the_stream(device=None):
    """The global random streams forked: draws made inside leave them as they were. The CPU's and ``device``'s
    where it is a GPU; every GPU's where ``device`` is None."""
    if device is None:
        return torch.random.fork_rng(devices=list(range(torch.cuda.device_count())))
    return torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])
