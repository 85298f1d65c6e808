"""Evaluating a trained guide: Bayes-estimate reconstructions and their mean squared error.

The reconstruction of x_n is the decoder at the posterior means, x̂_n = Ω(E_q[z_n]; E_q[θ]), and the
reconstruction MSE is mean_{n,d} (x_nd − x̂_nd)². Held-out images need q(z_n) for an image the guide
never saw: the amortized and shared families have one, the per-datapoint family has none (its test MSE
is reported as missing until test-time inference exists).
"""
import math

import torch

from .model import decode

EVAL_BATCH = 10000


@torch.no_grad()
def reconstruct(guide, x, idx=None):
    """x̂ = Ω(E_q[z]; E_q[θ]) for images x (idx: their training indices, needed by per-datapoint).
    Returns None where the guide has no q(z) for these images."""
    theta = guide.decoder_mean()
    chunks = []
    for start in range(0, x.shape[0], EVAL_BATCH):
        rows = slice(start, start + EVAL_BATCH)
        z = guide.latent_mean(x[rows], None if idx is None else idx[rows])
        if z is None:
            return None
        chunks.append(decode(z, theta))
    return torch.cat(chunks)


def reconstruction_mse(guide, x, idx=None):
    """Mean squared reconstruction error as a 0-dim device tensor, or None (see :func:`reconstruct`)."""
    if x.shape[0] == 0:
        return None
    x_hat = reconstruct(guide, x, idx)
    return None if x_hat is None else (x - x_hat).pow(2).mean()


def evaluate(guide, data):
    """{"train_mse", "test_mse"} as floats; NaN stands for a value the guide cannot produce."""
    train_idx = torch.arange(data.train.shape[0], device=data.train.device)
    values = {"train_mse": reconstruction_mse(guide, data.train, train_idx),
              "test_mse": reconstruction_mse(guide, data.test)}
    return {key: math.nan if value is None else value.item() for key, value in values.items()}
