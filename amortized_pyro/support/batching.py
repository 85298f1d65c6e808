"""Minibatches and rows: one epoch's minibatch indices (every training loop's), and the rows of tensors that
carry leading batch dimensions (vectorized particles, seeds packed as replicas)."""
import torch


def minibatches(n, batch_size, device, generator=None, blocks=False):
    """One epoch's minibatch indices over ``n`` datapoints: a fresh random order (from ``generator``, by
    default the global stream) split into batches of ``batch_size`` (the last may be smaller), or, with
    ``blocks``, fixed consecutive blocks in order (the reference authors' code)."""
    order = torch.arange(n, device=device) if blocks else torch.randperm(n, device=device, generator=generator)
    return order.split(min(batch_size, n))



def rows_of(values, idx):
    """The rows idx [..., B] of ``values`` [..., N, D] (leading dimensions: particles or replicas)."""
    idx = idx.expand(values.shape[:-2] + idx.shape[-1:])
    return values.gather(-2, idx.unsqueeze(-1).expand(idx.shape + values.shape[-1:]))
