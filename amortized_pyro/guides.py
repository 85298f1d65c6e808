"""Variational families q(θ) q(z_{1..N}): one shared mean-field q(θ), three families for q(z_n).

    q(θ)   = Π_j Normal(θ_j | m_j, s_j)                  every decoder weight and bias
    q(z_n) = Normal(z_n | μ_n, diag σ_n²), with (μ_n, σ_n) =
        amortized       encoder_φ(x_n)                 (A-VI, an MLP of width k)
        per-datapoint   free parameters μ_n, σ_n       (F-VI, N × z_dim each)
        shared          one μ, σ for every n           (constant-VI)

Initialisation: m_j = 0 and s_j = ``init_scale`` (e^-2 in both studies' code) for q(θ). The per-datapoint
and shared factors start at the prior (μ = 0, σ = 1; ``qz_init="prior"``) or where the studies' code
starts them (``qz_init="random"``: per-datapoint μ ~ N(0, 1), log σ ~ N(0, 1) − 1; shared μ, log σ ~
N(0, 1)), drawn from a generator seeded with the run's seed. The encoder (``encoder_layers`` hidden layers
of width k: 1 in the reference study's code, 2 in its authors' original) starts with PyTorch's default
Linear initialisation, so its σ starts near 1. Parameter names: ``decoder.w1.loc``, ``decoder.w1.scale``, …,
``z.loc``/``z.log_scale`` (per-datapoint [N, z_dim], shared [z_dim]; σ = exp(log σ), exponentiated only
for the rows in use) and ``encoder$$$…`` (amortized, via ``pyro.module``).
"""
import math

import torch
from torch import nn
from torch.distributions import constraints

import pyro
import pyro.distributions as dist

from .model import LEAKY_SLOPE, decoder_shapes, kl_scaled

GUIDES = ("amortized", "per-datapoint", "shared")
QZ_INITS = ("prior", "random")
THETA_INIT_SCALE = math.exp(-2)


class DecoderPosterior:
    """q(θ): an independent Normal for every decoder weight and bias."""

    def __init__(self, shapes, init_scale=THETA_INIT_SCALE):
        self.shapes = shapes
        self.init_scale = init_scale

    def params(self, device):
        """Site → (loc, scale), created in Pyro's param store on first use."""
        return {
            name: (
                pyro.param(name + ".loc", lambda shape=shape: torch.zeros(shape, device=device)),
                pyro.param(name + ".scale", lambda shape=shape: torch.full(shape, self.init_scale, device=device),
                           constraint=constraints.positive),
            )
            for name, shape in self.shapes.items()
        }

    def __call__(self, device, kl_scale=None):
        with kl_scaled(kl_scale):
            for name, (loc, scale) in self.params(device).items():
                pyro.sample(name, dist.Normal(loc, scale).to_event(loc.dim()))

    def mean(self, device):
        """E_q[θ], site → tensor, for the Bayes estimate of the decoder."""
        return {name: loc for name, (loc, _) in self.params(device).items()}


class Encoder(nn.Module):
    """x → width (→ width …, ``layers`` hidden layers, LeakyReLU 0.2) → (loc, log-scale) heads of size z_dim."""

    def __init__(self, x_dim, z_dim, width, layers=2):
        super().__init__()
        sizes = [x_dim] + [width] * layers
        self.body = nn.Sequential(*[module for d_in, d_out in zip(sizes, sizes[1:])
                                    for module in (nn.Linear(d_in, d_out), nn.LeakyReLU(LEAKY_SLOPE))])
        self.loc = nn.Linear(width, z_dim)
        self.log_scale = nn.Linear(width, z_dim)

    def forward(self, x):
        h = self.body(x)
        return self.loc(h), self.log_scale(h).exp()


class AmortizedFactor:
    """A-VI: (μ_n, σ_n) = encoder_φ(x_n)."""

    can_infer_unseen = True

    def __init__(self, x_dim, z_dim, width, device, layers=2):
        self.encoder = Encoder(x_dim, z_dim, width, layers).to(device)

    def __call__(self, x, idx):
        return pyro.module("encoder", self.encoder, update_module_params=True)(x)


class FreeFactor:
    """Free parameters (μ, log σ): one row per training observation, picked out by idx (F-VI, ``rows=N``),
    or one row for every observation (constant-VI, ``rows=None``). Only the rows in use are exponentiated.
    ``init`` is "prior" (μ = 0, log σ = 0) or "random" (the studies' code, see the module docstring)."""

    def __init__(self, rows, z_dim, device, init="prior", seed=0):
        self.shape = (z_dim,) if rows is None else (rows, z_dim)
        self.per_datapoint = rows is not None
        self.can_infer_unseen = not self.per_datapoint
        self.device = device
        self.init = init
        self.seed = seed

    def initial_values(self):
        """(μ, log σ) to start from; random draws come from their own generator, on the CPU, so that the
        start is the same on every device and leaves the global random stream alone."""
        if self.init == "prior":
            return torch.zeros(self.shape), torch.zeros(self.shape)
        generator = torch.Generator().manual_seed(self.seed)
        loc = torch.randn(self.shape, generator=generator)
        log_scale = torch.randn(self.shape, generator=generator) - (1.0 if self.per_datapoint else 0.0)
        return loc, log_scale

    def __call__(self, x, idx):
        if "z.loc" not in pyro.get_param_store():
            loc, log_scale = self.initial_values()
            pyro.param("z.loc", loc.to(self.device))
            pyro.param("z.log_scale", log_scale.to(self.device))
        loc, log_scale = pyro.param("z.loc"), pyro.param("z.log_scale")
        if self.per_datapoint:
            return loc[idx], log_scale[idx].exp()
        batch = (idx.shape[0],) + self.shape
        return loc.expand(batch), log_scale.exp().expand(batch)


class Guide:
    """The guide ``guide(x, idx)``: θ ~ q(θ), then z_n ~ q(z_n) inside the subsampled ``data`` plate."""

    def __init__(self, name, n_obs, theta_posterior, local_factor, device):
        self.name = name
        self.n_obs = n_obs
        self.theta = theta_posterior
        self.local = local_factor
        self.device = device

    def __call__(self, x, idx, kl_scale=None):
        self.theta(self.device, kl_scale)
        with pyro.plate("data", self.n_obs, subsample=idx):
            loc, scale = self.local(x, idx)
            with kl_scaled(kl_scale):
                pyro.sample("z", dist.Normal(loc, scale).to_event(1))

    def decoder_mean(self):
        """E_q[θ] as site → tensor, in the shapes :func:`amortized_pyro.model.decode` takes."""
        return self.theta.mean(self.device)

    def factor(self, x, idx=None):
        """(μ, σ) of q(z_n) for images x (with their training indices idx for per-datapoint), or None where
        the family has no factor for them (per-datapoint on images it was not trained on)."""
        if idx is None:
            if not self.local.can_infer_unseen:
                return None
            idx = torch.arange(x.shape[0], device=x.device)
        return self.local(x, idx)

    def latent_mean(self, x, idx=None):
        """E_q[z_n] for images x, or None (see :meth:`factor`)."""
        factor = self.factor(x, idx)
        return None if factor is None else factor[0]


def make_guide(name, n_obs, x_dim=784, z_dim=64, hidden=256, width=128, init_scale=THETA_INIT_SCALE,
               device="cpu", encoder_layers=2, qz_init="prior", seed=0):
    """Build the guide ``name`` ∈ {amortized, per-datapoint, shared}; ``width`` and ``encoder_layers`` are
    the encoder's (A-VI), ``qz_init`` and ``seed`` the free factors' start (F-VI, constant-VI); each is
    checked by the rules of the FitConfig field of that name."""
    from .config import check_values  # config builds its fields from this module's names

    for field, value in (("guide", name), ("width", width), ("encoder_layers", encoder_layers), ("qz_init", qz_init)):
        check_values(field, [value])
    if name == "amortized":
        local = AmortizedFactor(x_dim, z_dim, width, device, encoder_layers)
    else:
        local = FreeFactor(n_obs if name == "per-datapoint" else None, z_dim, device, qz_init, seed)
    return Guide(name, n_obs, DecoderPosterior(decoder_shapes(z_dim, hidden, x_dim), init_scale), local, device)
