"""Drawing images from a trained model: class-conditional generation (a CVAE's use, Sohn et al. 2015).

For each row r of a grid (a class c_r where the model is conditional) and each column j,

    z_rj ~ p(z | c_r)        N(0, I), or the learned N(μ_c, diag σ_c²) at θ
    x_rj = E[x | z_rj, c_r, θ] = m(Ω([z_rj, one-hot(c_r)]; θ))

with θ fixed (q(θ)'s mean, say: one decoder for the whole grid, so that rows differ by their class alone) and
the z draws from an explicit generator, so that a grid is the same every time. An unconditional model's rows
are independent draws z ~ N(0, I), one row as good as another.
"""
import torch

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.models.conditional import class_prior, one_hot


@torch.no_grad()
def draw_grid(model, theta, per_row, generator, labels=None, n_rows=None, same_z=False):
    """Images [R, per_row, x_dim] of ``model`` (a :class:`~amortized_pyro.models.decoder.BayesianDecoderModel`)
    at the global values ``theta`` (site → tensor), each row's z drawn from p(z | c) by ``generator``.

    :param int per_row: the draws of z per row (the grid's columns).
    :param torch.Generator generator: the z draws' source (on θ's device).
    :param torch.Tensor labels: int64 [R], each row's class: a conditional model's rows (None: one per class,
        0..K−1).
    :param int n_rows: an unconditional model's rows R (independent draws; no labels).
    :param bool same_z: one standard-normal draw ε per column, shared by every row (a conditional model's
        analogies: column j is the same style in every class; z = μ_c + σ_c ε under a learned p(z | c)).
    """
    if model.n_classes:
        labels = torch.arange(model.n_classes) if labels is None else labels
    elif labels is not None or n_rows is None:
        raise AmortizedPyroError("an unconditional model draws n_rows rows of independent z, without labels")
    like = next(iter(theta.values()))
    rows = len(labels) if labels is not None else n_rows
    eps = torch.randn((1 if same_z else rows, per_row, model.z_dim), generator=generator, device=like.device,
                      dtype=like.dtype).expand(rows, per_row, model.z_dim)
    if labels is None:
        return model.mean_image(eps, theta)
    codes = one_hot(labels, model.n_classes, eps)[:, None, :].expand(rows, per_row, model.n_classes)
    z = eps
    if model.class_prior == "learned":
        loc, log_scale = class_prior(codes, theta)
        z = loc + log_scale.exp() * eps
    return model.mean_image(z, theta, codes)
