"""Evaluating a trained guide: reconstructions and their mean squared error, three ways.

    plug-in         x̂_n = m(Ω(E_q[z_n]; E_q[θ]))                    the reference study's "reconstruction"
    predictive      x̃_n = E_q[m(Ω(z_n; θ))] ≈ (1/S) Σ_s m(Ω(z_s; θ_s)),  θ_s ~ q(θ), z_s ~ q(z_n)
    mean image      x̄ = (1/N) Σ_n x_n for every n                     what a decoder that ignores z reaches

where m is the likelihood's mean (the identity for the normal likelihood, the sigmoid for Bernoulli), and
the MSE is mean_{n,d} (x_nd − x̂_nd)². Ω is nonlinear, so the plug-in image is not the posterior mean of
the reconstruction; the predictive one estimates it with S draws (``predictive_draws``), its MSE biased
upwards by the Monte Carlo variance / S. A model whose plug-in MSE is near the mean image's does not use
z. Held-out images need q(z_n) for an image the guide never saw: the amortized and shared families have
one, the per-datapoint family has none (its test MSEs are missing; ``gap`` infers them with q(θ) frozen).
The predictive draws come from their own generator, so evaluating never changes a run's training.
"""
import math

import torch

from amortized_pyro.autoguides.gap import REFINE_SEED
from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.models.conditional import model_data

EVAL_BATCH = 10000
MSE_KEYS = ("train_plugin_mse", "test_plugin_mse", "train_predictive_mse", "test_predictive_mse")


def checked_rows(model, x):
    """``x`` where it is a tensor [n, width] of ``model``'s rows (its images, a conditional model's with their
    one-hot labels); other images are refused in one line (torch's "mat1 and mat2 shapes cannot be multiplied"
    before, issue 71). A model of another kind (no ``x_dim``) takes ``x`` as it is."""
    width = getattr(model, "x_dim", None)
    if width is None:
        return x
    width += getattr(model, "n_classes", 0) or 0
    if not torch.is_tensor(x) or x.dim() != 2 or x.shape[1] != width:
        raise AmortizedPyroError("x must be a tensor of rows of %d numbers (this model's images%s), got %s" % (
            width, ", each with its one-hot label" if width != model.x_dim else "",
            "shape [%s]" % ", ".join(map(str, x.shape)) if torch.is_tensor(x) else type(x).__name__))
    return x


@torch.no_grad()
def factor(guide, x, idx=None, theta=None):
    """(μ, σ) of q(z_n) for images x (with their training indices idx for per-datapoint), or None where the
    family has no factor for them (per-datapoint on images it was not trained on). SA-VI refines at ``theta``
    (a θ or a list of θ over which its local ELBO is averaged; default E_q[θ]) with draws from a generator of
    its own, so that an evaluation is the same every time."""
    checked_rows(getattr(guide, "model", None), x)
    if idx is None:
        if not guide.can_infer_unseen:
            return None
        idx = torch.arange(x.shape[0], device=x.device)
    theta = guide.global_mean() if theta is None else theta
    with guide.refinement_draws(torch.Generator(x.device).manual_seed(REFINE_SEED)):  # as the gap's
        return guide.local_factor(idx, (x, idx), {}, theta)


def pushed(guide, v, x, idx):
    """Values v of the Gaussian factor of images x through the guide's flow (as they are without one)."""
    idx = torch.arange(x.shape[0], device=x.device) if idx is None else idx
    return guide.push(v, idx, (x, idx), {})


@torch.no_grad()
def reconstruct(model, guide, x, idx=None):
    """The plug-in reconstruction m(Ω(E_q[z]; E_q[θ])) of images x as the model reads them (a conditional
    model's rows [x, one-hot(c)]: :meth:`~amortized_pyro.models.decoder.BayesianDecoderModel.inputs`; idx: their
    training indices, needed by per-datapoint); for a flow guide z is the flow's image f(μ) of the Gaussian's
    mean, not E_q[z]. Returns None where the guide has no q(z) for these images, or there are none."""
    if checked_rows(model, x).shape[0] == 0:
        return None
    theta = guide.global_mean()
    chunks = []
    for start in range(0, x.shape[0], EVAL_BATCH):
        rows = slice(start, start + EVAL_BATCH)
        q_z = factor(guide, x[rows], None if idx is None else idx[rows])
        if q_z is None:
            return None
        chunks.append(model.mean_image(pushed(guide, q_z[0], x[rows], None if idx is None else idx[rows]), theta,
                                       model.split(x[rows])[1]))
    return torch.cat(chunks)


@torch.no_grad()
def predict(model, guide, x, idx, draws, generator):
    """The posterior-predictive mean E_q[m(Ω(z; θ))] of images x (as the model reads them, as for
    :func:`reconstruct`) by ``draws`` Monte Carlo draws of (θ, z) from q, or None where the guide has no q(z)
    for these images, or there are none."""
    if x.shape[0] == 0:
        return None
    chunks = [slice(start, start + EVAL_BATCH) for start in range(0, x.shape[0], EVAL_BATCH)]
    factors = [factor(guide, x[rows], None if idx is None else idx[rows]) for rows in chunks]  # once, not per draw
    if any(q_z is None for q_z in factors):
        return None
    images, codes = model.split(x)
    total = torch.zeros_like(images)
    for _ in range(draws):
        theta = guide.global_sample(generator)
        for rows, (loc, scale) in zip(chunks, factors):
            z = loc + scale * torch.randn(loc.shape, generator=generator, device=x.device)
            total[rows] += model.mean_image(pushed(guide, z, x[rows], None if idx is None else idx[rows]), theta,
                                            None if codes is None else codes[rows])
    return total / draws


def mse(x, x_hat):
    """Mean squared error as a 0-dim device tensor, or None where there is nothing to compare."""
    return None if x_hat is None else (x - x_hat).pow(2).mean()


def mean_image_mse(data):
    """{"train_mse", "test_mse"} of the mean training image, the reconstruction that ignores z."""
    mean = data.train.mean(0)
    return {"%s_mse" % split: (x - mean).pow(2).mean().item() if len(x) else math.nan
            for split, x in (("train", data.train), ("test", data.test))}


def evaluate(model, guide, data, predictive_draws=0, generator=None):
    """{"train_plugin_mse", "test_plugin_mse"[, "train_predictive_mse", "test_predictive_mse"]} as floats, of
    the images of ``data`` (a conditional model reads them with their labels); NaN stands for a value the guide
    cannot produce."""
    train_idx = torch.arange(data.train.shape[0], device=data.train.device)
    inputs = model_data(model, data)
    splits = (("train", data.train, inputs.train, train_idx), ("test", data.test, inputs.test, None))
    values = {"%s_plugin_mse" % split: mse(x, reconstruct(model, guide, rows, idx)) for split, x, rows, idx in splits}
    if predictive_draws:
        values.update({"%s_predictive_mse" % split: mse(x, predict(model, guide, rows, idx, predictive_draws,
                                                                   generator))
                       for split, x, rows, idx in splits})
    return {key: math.nan if value is None else value.item() for key, value in values.items()}
