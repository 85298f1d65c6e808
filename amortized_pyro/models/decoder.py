"""The generative model p(θ) p(z) p(x | z, θ) of a Bayesian VAE-like decoder.

    θ_j ~ Normal(0, prior_scale)                    every weight and bias of the decoder Ω
    z_n ~ Normal(0, I_{z_dim})                       n = 1..N
    x_n ~ Normal(Ω(z_n; θ), obs_scale² I_{x_dim})    likelihood "normal" (pixels in [0, 1])
    x_n ~ Bernoulli(sigmoid(Ω(z_n; θ)))              likelihood "bernoulli" (binary pixels)

The conditional model (``n_classes`` K > 0: a CVAE, :mod:`amortized_pyro.models.conditional`) reads each image
with its label as one row [x_n, one-hot(c_n)]: Ω reads [z_n, one-hot(c_n)] and p(z_n | c_n) is N(0, I) or learned.

Ω is a 2-hidden-layer MLP, z_dim → H → H → x_dim with LeakyReLU(0.2) (``decoder="mlp"``), or a
convolutional net (``decoder="conv"``): :mod:`amortized_pyro.models.networks`. The local sites live in
``pyro.plate("data", N, subsample=idx)``, so a minibatch of B observations is scaled by N/B and the
minibatch ELBO is an unbiased estimate of the full-data ELBO, with the θ terms counted once. With
``local_terms="all"`` (the authors' code) z_1..N sit in an unsubsampled plate ``latents``: every step
scores all N latents, unscaled, and only the minibatch's likelihood, scaled by N/B (still unbiased).

KL warm-up: with a ``kl_scale`` β (a 0-dim tensor), the latent sites θ and z sit under
``poutine.scale(β)`` in the model, and the guide's builders read it and scale theirs alike, so the objective becomes
E_q[log p(x | z, θ)] − β [KL(q(θ) ‖ p(θ)) + Σ_n KL(q(z_n) ‖ p(z_n))], the ELBO at β = 1.
"""
import contextlib
import math

import torch

import pyro
import pyro.distributions as dist
from pyro import poutine

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.models.conditional import (CLASS_PRIORS, DECODER_LABELS, class_prior, one_hot, prior_shapes,
                                               with_labels)
from amortized_pyro.models.local_posterior import ModelPosterior
from amortized_pyro.models.modules import LocalModule
from amortized_pyro.models.networks import DECODERS, LEAKY_SLOPE, default_image_shape, hidden
from amortized_pyro.support.batching import rows_of

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class FixedScaleNormal(dist.Normal):
    """Normal(loc, scale²) with one number ``scale`` for every element.

    The same density as ``dist.Normal(loc, scale)``, log N(v | m, s²) = −(v − m)² / 2s² − log s − ½ log 2π,
    but computed without materialising the broadcast scale: torch's Normal squares and logs it elementwise,
    which for the 1,000 × 784 likelihood costs as much as the residual itself. The scale tensor is filled on
    ``loc``'s device (``new_full``), not copied from a Python float as torch's Normal would: on CUDA that copy
    waited for the GPU at every site of every step (10 host syncs a step, counted by bench/cuda_syncs.py).
    """

    def __init__(self, loc, scale, validate_args=None):
        self.fixed_scale = float(scale)
        super().__init__(loc, loc.new_full((), self.fixed_scale), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return FixedScaleNormal(self.loc.expand(batch_shape), self.fixed_scale, validate_args=False)

    def log_prob(self, value):
        if dist.is_validation_enabled():  # torch's own formula, with its checks of the value
            return super().log_prob(value)
        return (value - self.loc).square().mul(-0.5 / self.fixed_scale ** 2).sub(math.log(self.fixed_scale)
                                                                                  + HALF_LOG_2PI)


GRAM = ("gram.WtW", "gram.Wt(x-b)", "gram.|x-b|2")


def without_data_dim(value, event_shape):
    """Drop the size-1 ``data`` plate dimension that a global site gets under vectorized particles.

    With ``Trace_ELBO(vectorize_particles=True)`` a global site has batch shape [P, 1]; the decoder wants
    [P]. Without particles the value is returned as it is.
    """
    batch_dims = value.dim() - len(event_shape)
    if batch_dims == 0:
        return value
    return value.reshape(value.shape[: batch_dims - 1] + tuple(event_shape))


LIKELIHOODS = ("normal", "bernoulli")
DECODER_PRIORS = ("normal", "none")
LOCAL_TERMS = ("minibatch", "all")


def data_plate(n_obs, idx):
    """``pyro.plate("data", N, subsample=idx)`` for a minibatch's indices idx [B], its terms scaled by N/B.

    Seeds packed as replicas (:mod:`amortized_pyro.inference.replicas`, an outer plate around model and guide) each
    take their own minibatch, idx [R, B]; a plate holds one subsample, so its indices are then the
    minibatch's positions 0..B−1 (the same scale N/B), and the images' indices are idx itself."""
    positions = idx if idx.dim() == 1 else torch.arange(idx.shape[-1], device=idx.device)
    return pyro.plate("data", n_obs, subsample=positions)


def kl_scaled(kl_scale):
    """``poutine.scale(kl_scale)`` around the latent sites, or nothing where there is no warm-up."""
    return contextlib.nullcontext() if kl_scale is None else poutine.scale(scale=kl_scale)


class BayesianDecoderModel(LocalModule):
    """The Pyro model ``model(x, idx, kl_scale=None)``: x is a minibatch [B, x_dim], idx its indices [B]
    among N (replicas: [R, B, x_dim] and [R, B], see :func:`data_plate`), kl_scale an optional warm-up weight β of the latent sites (see the module docstring). It has
    no parameters: every weight of the decoder is a latent variable. With ``decoder_prior="none"`` the decoder's
    sites carry no prior (their log-density masked out: a flat prior), so that a point-mass q(θ)
    (:class:`~amortized_pyro.models.q_theta.QThetaPoint`) makes θ a point estimate and the ELBO a standard VAE's,
    E_q(z)[log p(x | z, θ)] − KL(q(z) ‖ p(z)), with the same sites, guides and gap machinery.

    With ``n_classes`` K > 0 the model is conditional: x is the rows [x_n, one-hot(c_n)] [B, x_dim + K]
    (:meth:`inputs`), the decoder reads [z_n, one-hot(c_n)], and p(z_n | c_n) is N(0, I) (``class_prior="standard"``)
    or N(M e_c, diag exp(S e_c)²) with M, S two more global sites (``"learned"``, :mod:`~amortized_pyro.models.conditional`)."""

    def __init__(self, n_obs, x_dim=784, z_dim=64, hidden=256, prior_scale=1.0, obs_scale=1.0,
                 likelihood="normal", local_terms="minibatch", slope=LEAKY_SLOPE, decoder_prior="normal",
                 decoder="mlp", image_shape=None, n_classes=0, class_prior="standard", decoder_label="input"):
        super().__init__()
        if class_prior not in CLASS_PRIORS or (class_prior == "learned" and not n_classes):
            raise AmortizedPyroError("class_prior must be one of %s (learned: a conditional model, n_classes > 0); "
                                     "got %r with %d classes" % (", ".join(CLASS_PRIORS), class_prior, n_classes))
        every_layer = decoder_label == "every-layer"
        if decoder_label not in DECODER_LABELS or (every_layer and (not n_classes or decoder != "mlp")):
            raise AmortizedPyroError("decoder_label must be one of %s (every-layer: a conditional model's MLP "
                                     "decoder); got %r" % (", ".join(DECODER_LABELS), decoder_label))
        label_again = {"label": n_classes} if every_layer else {}  # e_c read again by the later layers
        self.decoder_prior = decoder_prior
        self.image_shape = tuple(image_shape) if image_shape is not None else default_image_shape(x_dim)
        if math.prod(self.image_shape) != x_dim:
            raise AmortizedPyroError("images of shape %s have %d pixels, not x_dim = %d"
                                     % ("×".join(map(str, self.image_shape)), math.prod(self.image_shape), x_dim))
        # Ω: networks.DECODERS
        self.network = DECODERS[decoder](z_dim + n_classes, hidden, self.image_shape, **label_again)
        self.slope = slope  # the decoder's LeakyReLU slope (1: a linear decoder, whose gaps have closed forms)
        self.local_terms = local_terms
        self.n_obs = n_obs
        self.x_dim = x_dim
        self.z_dim = z_dim
        self.n_classes, self.class_prior = n_classes, class_prior
        self.input_dim = x_dim + n_classes  # the width of the rows the model reads
        self.shapes = dict(self.network.shapes, **(prior_shapes(z_dim, n_classes) if class_prior == "learned" else {}))
        self.prior_scale = prior_scale
        self.obs_scale = obs_scale
        self.likelihood = likelihood

    def observation(self, out):
        """p(x | z, θ) given the decoder's output ``out`` = Ω(z; θ), one event per image."""
        if self.likelihood == "bernoulli":
            return dist.Bernoulli(logits=out).to_event(1)
        return FixedScaleNormal(out, self.obs_scale).to_event(1)

    def inputs(self, x, labels=None):
        """The rows the model reads for images x [B, x_dim] and their int64 ``labels`` [B]: [x, one-hot(c)] where
        the model is conditional, x itself where not."""
        if not self.n_classes:
            return x
        if labels is None:
            if len(x):
                raise AmortizedPyroError("this conditional model needs each image's class label, and these images "
                                         "have none")
            return x.new_zeros(0, self.input_dim)
        return with_labels(x, one_hot(labels, self.n_classes, x))

    def split(self, x):
        """(images [..., x_dim], one-hot labels [..., K] or None) of the rows x the model reads."""
        return (x[..., :self.x_dim], x[..., self.x_dim:]) if self.n_classes else (x, None)

    def decoder_input(self, z, codes):
        """What Ω reads: z, or [z, one-hot(c)] for one-hot labels ``codes`` [..., B, K] (z's leading dimensions
        broadcast)."""
        return z if codes is None else with_labels(z, codes)

    def log_prior_z(self, z, codes, theta):
        """log p(z_n | c_n) per image: N(0, I) in closed form, or the learned N(μ_c, diag σ_c²)."""
        if self.class_prior == "standard":
            return -0.5 * z.square().sum(-1) - z.shape[-1] * HALF_LOG_2PI
        loc, log_scale = class_prior(codes.expand(z.shape[:-1] + codes.shape[-1:]), theta)
        return (-0.5 * ((z - loc) * torch.exp(-log_scale)).square() - log_scale).sum(-1) - z.shape[-1] * HALF_LOG_2PI

    def local_log_joint(self, x, z, theta):
        """log p(x_n | z_n, θ) + log p(z_n) per image (with c_n where conditional), for the rows x the model reads,
        latents z [..., n, z_dim] and weights θ (with the terms of :meth:`with_gram`, for the images x they were
        made for: the same value, cheaper)."""
        x, codes = self.split(x)
        prior = self.log_prior_z(z, codes, theta)
        z = self.decoder_input(z, codes)
        if GRAM[0] not in theta:
            return self.observation(self.network(z, theta, self.slope)).log_prob(x) + prior
        # ‖x − W h − b‖² = ‖x − b‖² − 2 (Wᵀ(x − b))ᵀ h + hᵀ (WᵀW) h, with the draws' rows batched
        h = hidden(z, theta, self.slope)  # [M, S, n, H]
        gram, linear, offset = (theta[name] for name in GRAM)  # [M, H, H], [M, n, H], [M, n]
        hg = torch.bmm(h.reshape(gram.shape[0], -1, gram.shape[-1]), gram).reshape(h.shape)
        square = offset.unsqueeze(1) + ((hg - 2 * linear.unsqueeze(1)) * h).sum(-1)  # one product with h, not two
        return -0.5 / self.obs_scale ** 2 * square - x.shape[-1] * (math.log(self.obs_scale) + HALF_LOG_2PI) + prior

    def local_posterior(self, guide, args, kwargs, seen=True, stacked=True):
        """The gap's protocol (:mod:`amortized_pyro.autoguides.gap`) for the call ``model(x, idx, ...)``: its
        hand-written log joint (:class:`~amortized_pyro.models.local_posterior.ModelPosterior`, which takes θ
        stacked or not, so ``stacked`` changes nothing); ``seen`` False (or idx None): images the guide never saw."""
        x = args[0] if args else kwargs["x"]
        idx = args[1] if len(args) > 1 else kwargs.get("idx")
        return ModelPosterior(self, guide, x, idx if seen else None)

    @torch.no_grad()
    def with_gram(self, draws, x):
        """The gap's θ draws (:class:`~amortized_pyro.local.draws.Draws`, site → [M, ...]) with the terms that make
        the normal likelihood of the images x cost H² per z draw instead of H·x_dim (WᵀW, and per image Wᵀ(x −
        b) and ‖x − b‖² of the last layer), or as they are for the Bernoulli likelihood. Hand-written for
        speed: the last layer is 72% of the decoder's arithmetic at the reference size, and the gap's θ and x
        stay fixed for thousands of steps (BENCHMARKS.md)."""
        values, x = draws.values, self.split(x)[0]
        if self.likelihood != "normal" or not values or not self.network.linear_head:
            return draws
        weight, bias = values["decoder.w3"], values["decoder.b3"]  # [M, x_dim, H], [M, x_dim]
        residual = x - bias.unsqueeze(1)  # [M, n, x_dim]
        terms = (weight.transpose(-1, -2) @ weight, residual @ weight, residual.square().sum(-1))
        return draws.with_values(dict(values, **dict(zip(GRAM, terms))), per_image=GRAM[1:])

    def observation_mean(self, out):
        """E[x | z, θ]: Ω itself (normal) or sigmoid(Ω) (bernoulli), the image a reconstruction shows."""
        return torch.sigmoid(out) if self.likelihood == "bernoulli" else out

    def mean_image(self, z, theta, codes=None):
        """E[x | z, θ] for latents z and weights θ (and one-hot labels ``codes`` [..., B, K] where conditional:
        :meth:`split` of the rows): the image the decoder makes of z."""
        return self.observation_mean(self.network(self.decoder_input(z, codes), theta, self.slope))

    def sample_decoder(self, zero):
        """Draw θ ~ p(θ) at the ``decoder.*`` sites (and the learned prior's ``prior.*``); returns site → tensor
        ready for :func:`decode`. Inside
        an outer plate at dim −2 (particles, replicas: batch shape [P, 1]) each tensor is [P, *shape]."""
        theta = {}
        no_prior = self.decoder_prior == "none"  # the sites' log p(θ) counted as 0
        with poutine.mask(mask=False) if no_prior else contextlib.nullcontext():
            for name, shape in self.shapes.items():
                prior = FixedScaleNormal(zero.expand(shape), self.prior_scale).to_event(len(shape))
                theta[name] = without_data_dim(pyro.sample(name, prior), shape)
        return theta

    def prior_z(self, zero, codes=None, theta=None):
        """p(z_n | c_n), one event per image: N(0, I_{z_dim}), or the learned N(μ_c, diag σ_c²) of one-hot labels
        ``codes`` [..., B, K] at the global values ``theta``."""
        if self.class_prior == "standard":
            return FixedScaleNormal(zero.expand([self.z_dim]), 1.0).to_event(1)
        loc, log_scale = class_prior(codes, theta)
        return dist.Normal(loc, log_scale.exp()).to_event(1)

    def forward(self, x, idx, kl_scale=None, x_all=None):
        zero = x.new_zeros(())
        with kl_scaled(kl_scale):
            theta = self.sample_decoder(zero)
        x, codes = self.split(x)
        if self.local_terms == "all":  # every image's z, unscaled; the minibatch's feed the likelihood
            with pyro.plate("latents", self.n_obs, device=x.device), kl_scaled(kl_scale):
                z = rows_of(pyro.sample("z", self.prior_z(zero, self.split(x_all)[1], theta)), idx)
        with data_plate(self.n_obs, idx):
            if self.local_terms != "all":
                with kl_scaled(kl_scale):
                    z = pyro.sample("z", self.prior_z(zero, codes, theta))
            pyro.sample("x", self.observation(self.network(self.decoder_input(z, codes), theta, self.slope)), obs=x)
