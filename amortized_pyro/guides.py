"""Variational families q(θ) q(z_{1..N}): one shared mean-field q(θ), three families for q(z_n).

    q(θ)   = Π_j Normal(θ_j | m_j, s_j)                  every decoder weight and bias
    q(z_n) = Normal(z_n | μ_n, diag σ_n²), with (μ_n, σ_n) =
        amortized       encoder_φ(x_n)                 (A-VI, an MLP of width k)
        semi-amortized  encoder_φ(x_n), refined        (SA-VI, Kim et al. 2018: see SemiAmortizedFactor)
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

from .errors import AmortizedPyroError
from .model import LEAKY_SLOPE, decoder_shapes, kl_scaled

GUIDES = ("amortized", "semi-amortized", "per-datapoint", "shared")
ENCODER_GUIDES = ("amortized", "semi-amortized")
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
        """Draw θ ~ q(θ) at the ``decoder.*`` sites; returns the draw (site → tensor)."""
        with kl_scaled(kl_scale):
            return {name: pyro.sample(name, dist.Normal(loc, scale).to_event(loc.dim()))
                    for name, (loc, scale) in self.params(device).items()}

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

    def __call__(self, x, idx, theta=None, generator=None):
        return pyro.module("encoder", self.encoder, update_module_params=True)(x)


class SemiAmortizedFactor(AmortizedFactor):
    """SA-VI (Kim et al. 2018): the encoder's (μ_0, log σ_0) refined by ``steps`` Adam steps (learning rate
    ``lr``, one draw of z each) on the local ELBO log p(x_n | z, θ) + log p(z) − log q(z) at the θ the guide
    has just drawn (E_q[θ] when evaluating). The refined factor's values are used; gradients reach the
    encoder straight through, μ = μ_0 + stop_grad(μ_k − μ_0) (likewise log σ), not through the steps
    themselves (Kim et al. differentiate through them, with second-order terms). A training step costs
    about (1 + steps) decoder passes."""

    can_infer_unseen = True

    def __init__(self, x_dim, z_dim, width, device, layers, steps, lr, log_joint):
        super().__init__(x_dim, z_dim, width, device, layers)
        self.steps, self.lr, self.log_joint = steps, lr, log_joint

    def __call__(self, x, idx, theta=None, generator=None):
        loc0, scale0 = super().__call__(x, idx)
        if not self.steps or theta is None:
            return loc0, scale0
        loc, log_scale = refine(self.log_joint, x, {k: v.detach() for k, v in theta.items()}, loc0.detach(),
                                scale0.detach().log(), self.steps, self.lr, generator)
        return loc0 + (loc - loc0).detach(), scale0 * (log_scale.exp() / scale0).detach()


def refine(log_joint, x, theta, loc, log_scale, steps, lr, generator=None):
    """``steps`` Adam steps on Σ_n [log_joint(x_n, z_n, θ) − log q(z_n)], z_n ~ N(loc_n, exp(log_scale_n)²)
    drawn from ``generator`` (the global stream if None); returns the refined (loc, log_scale), detached."""
    loc, log_scale = loc.clone().requires_grad_(), log_scale.clone().requires_grad_()
    optimizer = torch.optim.Adam([loc, log_scale], lr=lr)
    with torch.enable_grad():
        for _ in range(steps):
            scale = log_scale.exp()
            z = loc + scale * torch.randn(loc.shape, generator=generator, device=loc.device)
            objective = (log_joint(x, z, theta) - dist.Normal(loc, scale).log_prob(z).sum(-1)).sum()
            optimizer.zero_grad()
            (-objective).backward()
            optimizer.step()
    return loc.detach(), log_scale.detach()


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

    def __call__(self, x, idx, theta=None, generator=None):
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
        theta = self.theta(self.device, kl_scale)
        with pyro.plate("data", self.n_obs, subsample=idx):
            loc, scale = self.local(x, idx, theta)
            with kl_scaled(kl_scale):
                pyro.sample("z", dist.Normal(loc, scale).to_event(1))

    def decoder_mean(self):
        """E_q[θ] as site → tensor, in the shapes :func:`amortized_pyro.model.decode` takes."""
        return self.theta.mean(self.device)

    def factor(self, x, idx=None):
        """(μ, σ) of q(z_n) for images x (with their training indices idx for per-datapoint), or None where
        the family has no factor for them (per-datapoint on images it was not trained on). SA-VI refines at
        E_q[θ] with draws from a generator of its own, so that an evaluation is the same every time."""
        if idx is None:
            if not self.local.can_infer_unseen:
                return None
            idx = torch.arange(x.shape[0], device=x.device)
        return self.local(x, idx, self.decoder_mean(), torch.Generator(x.device).manual_seed(0))

    def latent_mean(self, x, idx=None):
        """E_q[z_n] for images x, or None (see :meth:`factor`)."""
        factor = self.factor(x, idx)
        return None if factor is None else factor[0]


def make_guide(name, n_obs, x_dim=784, z_dim=64, hidden=256, width=128, init_scale=THETA_INIT_SCALE,
               device="cpu", encoder_layers=2, qz_init="prior", seed=0, refine_steps=0, refine_lr=1e-2,
               log_joint=None):
    """Build the guide ``name`` ∈ GUIDES; ``width`` and ``encoder_layers`` are the encoder's (A-VI, SA-VI),
    ``qz_init`` and ``seed`` the free factors' start (F-VI, constant-VI), ``refine_steps``, ``refine_lr``
    and the model's ``log_joint`` (:meth:`BayesianDecoderModel.local_log_joint`) SA-VI's refinement; each
    is checked by the rules of the FitConfig field of that name."""
    from .config import check_values  # config builds its fields from this module's names

    for field, value in (("guide", name), ("width", width), ("encoder_layers", encoder_layers), ("qz_init", qz_init)):
        check_values(field, [value])
    if name == "amortized":
        local = AmortizedFactor(x_dim, z_dim, width, device, encoder_layers)
    elif name == "semi-amortized":
        check_values("refine_steps", [refine_steps])
        if log_joint is None:
            raise AmortizedPyroError("the semi-amortized guide needs the model's log_joint to refine with")
        local = SemiAmortizedFactor(x_dim, z_dim, width, device, encoder_layers, refine_steps, refine_lr, log_joint)
    else:
        local = FreeFactor(n_obs if name == "per-datapoint" else None, z_dim, device, qz_init, seed)
    return Guide(name, n_obs, DecoderPosterior(decoder_shapes(z_dim, hidden, x_dim), init_scale), local, device)
