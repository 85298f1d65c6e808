"""Rows of tensors that carry leading batch dimensions (vectorized particles, seeds packed as replicas)."""


def rows_of(values, idx):
    """The rows idx [..., B] of ``values`` [..., N, D] (leading dimensions: particles or replicas)."""
    idx = idx.expand(values.shape[:-2] + idx.shape[-1:])
    return values.gather(-2, idx.unsqueeze(-1).expand(idx.shape + values.shape[-1:]))
