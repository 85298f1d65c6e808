"""The conditional model's pieces (a CVAE, Sohn et al. 2015): each image x_n with its class label c_n.

    p(x_n | z_n, c_n, θ) = the likelihood of Ω([z_n, one-hot(c_n)]; θ)      the decoder reads the label
                           (``decoder_label="every-layer"``: each hidden layer's output [h, e_c] too)
    q(z_n | x_n, c_n)    = the encoder of [x_n, one-hot(c_n)]                 A-VI, SA-VI, IA-VI
                           (``encoder_label=False``: q(z_n | x_n), the encoder reads the image alone)
    p(z_n | c_n)         = N(0, I)                                            ``class_prior="standard"``
                         = N(μ_c, diag σ_c²),  (μ_c, log σ_c) = (M e_c, S e_c)  ``class_prior="learned"``

where e_c = one-hot(c) and M, S [z_dim, K] are two global sites (``prior.loc``, ``prior.log_scale``): latent,
with the decoder's Normal(0, prior_scale²) prior and mean-field q(θ), where the decoder is Bayesian; point
estimates with no prior where it is not (``decoder_prior="none"``). F-VI's and constant-VI's factors are per
datapoint or shared, so they read no label.

The model and guide read an image and its label as one row, [x_n, one-hot(c_n)] (:func:`with_labels`): the
rows of a minibatch are picked by its indices, so the labels travel with them into the model, the encoder, the
local ELBO of SA-VI and of the gap, and the evaluation. An unconditional model reads x_n alone.
"""
from dataclasses import replace

import torch
import torch.nn.functional as F

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.models.networks import _layer

CLASS_PRIORS = ("standard", "learned")
DECODER_LABELS = ("input", "every-layer")  # where the decoder reads e_c: its input, or every layer's (issue 63)
PRIOR_SITES = ("prior.loc", "prior.log_scale")


def prior_shapes(z_dim, n_classes):
    """Site → shape of the learned p(z | c)'s M and S, [z_dim, K] each (torch.nn.Linear's [out, in])."""
    return {site: (z_dim, n_classes) for site in PRIOR_SITES}


def one_hot(labels, n_classes, like):
    """e_c [..., K] of the int64 ``labels`` [...], in ``like``'s dtype and device; a label outside 0..K−1 is refused
    in one line."""
    if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < n_classes:
        raise AmortizedPyroError("labels must lie in 0..%d for this model of %d classes, got %d..%d"
                                 % (n_classes - 1, n_classes, int(labels.min()), int(labels.max())))
    return F.one_hot(labels.to(like.device), n_classes).to(like.dtype)


def with_labels(x, codes):
    """The rows [x, e_c] the conditional model reads, for images x [..., B, D] and one-hot labels ``codes``
    [..., B, K]; z's leading dimensions (particles, draws) broadcast: [z, e_c] for the decoder alike."""
    return torch.cat([x, codes.expand(x.shape[:-1] + codes.shape[-1:])], -1)


def class_prior(codes, theta):
    """(μ, log σ) of p(z | c) = N(M e_c, diag exp(S e_c)²) for one-hot labels ``codes`` [..., B, K] laid out as the
    decoder's input (leading draw dimensions as :func:`~amortized_pyro.models.networks.decode` takes them) and
    global values ``theta`` holding M and S: each a linear layer of e_c without bias."""
    def layer(site):
        weight = theta[site]
        return _layer(codes, weight, weight.new_zeros(weight.shape[:-1]))
    return layer(PRIOR_SITES[0]), layer(PRIOR_SITES[1])


def model_data(model, data):
    """``data`` (a :class:`~amortized_pyro.runs.data.Data`) as ``model`` reads it: each image's row [x_n, e_c]
    where the model is conditional (the labels refused in one line where there are none), the images where
    not. Only what is handed to the model and guide: the images' own MSEs are measured on ``data``."""
    if not model.n_classes:
        return data
    train_labels, test_labels = data.labels_or_refuse("a conditional model")
    return replace(data, train=model.inputs(data.train, train_labels), test=model.inputs(data.test, test_labels))
