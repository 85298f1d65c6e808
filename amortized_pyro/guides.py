"""Variational families q(θ) q(z_{1..N}): one shared mean-field q(θ), four families for q(z_n).

    q(θ)   = Π_j Normal(θ_j | m_j, s_j)                  every decoder weight and bias (posterior.py)
    q(z_n) = Normal(z_n | μ_n, diag σ_n²), with (μ_n, σ_n) =
        amortized       encoder_φ(x_n)                 (A-VI, an MLP of width k)
        semi-amortized  encoder_φ(x_n), refined        (SA-VI, Kim et al. 2018)
        per-datapoint   free parameters μ_n, σ_n       (F-VI, N × z_dim each)
        shared          one μ, σ for every n           (constant-VI)

The per-datapoint and shared factors start at the prior (μ = 0, σ = 1; ``qz_init="prior"``) or where the
studies' code starts them (``qz_init="random"``: per-datapoint μ ~ N(0, 1), log σ ~ N(0, 1) − 1; shared
μ, log σ ~ N(0, 1)), drawn from a generator seeded with the run's seed. The encoder (``encoder_layers``
hidden layers of width k) starts with PyTorch's default Linear initialisation, from the global stream.
Every guide is a :class:`~amortized_pyro.modules.LocalModule`: its ``state_dict`` holds all its parameters
(``q_theta.loc``, ``q_theta.log_scale``, and ``q_z.loc``/``q_z.log_scale`` or
``q_z.encoder.*``). The factors q(z_n) are the guide builders' own modules
(:mod:`amortized_pyro.autoguides.factors`), sized here from the run's settings.
"""
import contextlib
import re
from collections import namedtuple
from types import SimpleNamespace

import torch
from torch.distributions import biject_to, constraints

import pyro

from .autoguides.base import AutoLocalGuide
from .autoguides.factors import AmortizedFactor, Encoder, FreeFactor, SemiAmortizedFactor, mlp
from .autoguides.structure import LocalSite, Structure
from .errors import AmortizedPyroError
from .model import LEAKY_SLOPE, data_plate, decoder_shapes, kl_scaled
from .modules import LocalModule
from .posterior import THETA_INIT_SCALE, DecoderPosterior, q_normal

QZ_INITS = ("prior", "random")


def encoder(x_dim, z_dim, width, layers=2, slope=LEAKY_SLOPE):
    """The package's encoder: x → width (→ width …, ``layers`` hidden layers, LeakyReLU of negative slope
    ``slope``) → (loc, log-scale) heads of size z_dim, from torch's default initialisation."""
    return Encoder(mlp(x_dim, width, layers, slope), width if layers else x_dim, z_dim)


class Guide(LocalModule, AutoLocalGuide):
    """The guide ``guide(x, idx, kl_scale=None, x_all=None)``: θ ~ q(θ), then z_n ~ q(z_n) inside the
    subsampled ``data`` plate (``local_terms="minibatch"``), or for all N images x_all inside the plate
    ``latents`` (``"all"``, as the model). ``q_theta`` is q(θ) (:class:`DecoderPosterior`), ``q_z`` the
    family's factor q(z_n); both are scored as ``objective`` says (:func:`~amortized_pyro.posterior.q_normal`).

    A guide builder (:class:`~amortized_pyro.autoguides.AutoLocalGuide`) whose structure is known from its
    parts rather than read off a trace, so that :func:`~amortized_pyro.autoguides.measure_gap` and every
    builder's access work on it; its own ``forward`` keeps the studies' options that the builders do not
    offer (the warm-up's ``kl_scale``, ``local_terms="all"``, the ``reference`` objective)."""

    def __init__(self, family, n_obs, q_theta, q_z, objective="elbo", local_terms="minibatch"):
        super().__init__(None, plate="data", init_scale=1.0)
        self.family, self.n_obs, self.local_terms = family, n_obs, local_terms
        self.q_theta, self.q_z = q_theta, q_z
        self.objective = q_theta.objective = objective
        z = LocalSite("z", torch.Size([q_z.size]), biject_to(constraints.real).with_cache(), torch.Size([q_z.size]),
                      0, q_z.size)
        self.structure = Structure("data", -1, n_obs, [z], {name: len(shape) for name, shape in q_theta.shapes.items()},
                                   max_plate_nesting=1)

    def _plates_of_call(self, x, idx, kl_scale=None, x_all=None):
        return [pyro.plate("data", self.n_obs, subsample=idx, dim=-1)]

    def local_factor(self, indices, args, kwargs, theta):
        return self.q_z(args[0], indices, theta, self.refine_generator)

    def global_mean(self):
        return self.q_theta.mean()

    def global_sample(self, generator=None):
        return self.q_theta.sample(generator)

    def forward(self, x, idx, kl_scale=None, x_all=None):
        theta = self.q_theta(kl_scale)
        normal = q_normal(self.objective)
        if self.local_terms == "all":
            with pyro.plate("latents", self.n_obs):
                loc, scale = self.q_z(x_all, torch.arange(self.n_obs, device=idx.device), theta)
                with kl_scaled(kl_scale):
                    pyro.sample("z", normal(loc, scale).to_event(1))
            return
        with data_plate(self.n_obs, idx):
            loc, scale = self.q_z(x, idx, theta)
            with kl_scaled(kl_scale):
                pyro.sample("z", normal(loc, scale).to_event(1))

    @contextlib.contextmanager
    def scored_as(self, objective):
        """q(θ) and q(z) scored as ``objective`` for the duration (the true ELBO of a ``reference`` run)."""
        before = self.objective
        self.objective = self.q_theta.objective = objective
        try:
            yield self
        finally:
            self.objective = self.q_theta.objective = before

    def decoder_mean(self):
        """E_q[θ], site → tensor, in the shapes :func:`amortized_pyro.model.decode` takes."""
        return self.q_theta.mean()

    @torch.no_grad()
    def factor(self, x, idx=None, theta=None):
        """(μ, σ) of q(z_n) for images x (with their training indices idx for per-datapoint), or None where
        the family has no factor for them (per-datapoint on images it was not trained on). SA-VI refines at
        ``theta`` (a θ or a list of θ over which its local ELBO is averaged; default E_q[θ]) with draws from
        a generator of its own, so that an evaluation is the same every time."""
        if idx is None:
            if not self.q_z.can_infer_unseen:
                return None
            idx = torch.arange(x.shape[0], device=x.device)
        theta = self.decoder_mean() if theta is None else theta
        return self.q_z(x, idx, theta, torch.Generator(x.device).manual_seed(0))

    def latent_mean(self, x, idx=None):
        """E_q[z_n] for images x, or None (see :meth:`factor`)."""
        factor = self.factor(x, idx)
        return None if factor is None else factor[0]


def _amortized_factor(s):
    return AmortizedFactor(encoder(s.x_dim, s.z_dim, s.width, s.encoder_layers, s.encoder_slope))


def _semi_amortized_factor(s):
    if s.log_joint is None:
        raise AmortizedPyroError("the semi-amortized guide needs the model's log_joint to refine with")
    return SemiAmortizedFactor(encoder(s.x_dim, s.z_dim, s.width, s.encoder_layers, s.encoder_slope), s.refine_steps,
                               s.refine_lr, s.log_joint, s.refine_grad)


def _free_factor(per_datapoint):
    return lambda s: FreeFactor(s.n_obs if per_datapoint else None, s.z_dim, s.qz_init, s.seed)


Family = namedtuple("Family", "name label encoder in_studies factor")  # factor: make_guide's settings → q_z
FAMILIES = {f.name: f for f in (Family("amortized", "A-VI", True, True, _amortized_factor),
                                Family("semi-amortized", "SA-VI", True, False, _semi_amortized_factor),
                                Family("per-datapoint", "F-VI", False, True, _free_factor(True)),
                                Family("shared", "constant-VI", False, True, _free_factor(False)))}
GUIDES = tuple(FAMILIES)  # the families, in display order
ENCODER_GUIDES = tuple(f.name for f in FAMILIES.values() if f.encoder)


def label(family, width=None, refine_steps=None, refine_grad="straight-through"):
    """The name a configuration goes by in tables and legends: ``A-VI k=64``, ``SA-VI k=64 r=5`` (r: its
    refinement steps, where given; `` unrolled`` where the gradient goes through them), ``F-VI``,
    ``constant-VI``."""
    f = FAMILIES[family]
    if not f.encoder:
        return f.label
    name = "%s k=%d" % (f.label, width)
    if family == "semi-amortized" and refine_steps is not None:
        name += " r=%d" % refine_steps + (" unrolled" if refine_grad == "unrolled" else "")
    return name


def config_label(config):
    """:func:`label` of a run's configuration (a FitConfig)."""
    return label(config.guide, config.width, config.refine_steps, config.refine_grad)


def display_order(name):
    """A label's place in tables: A-VI by width, SA-VI by width (then refinement steps, straight-through
    first), then F-VI, then constant-VI; anything a table appends to a label (``, N 2500``) last."""
    labels = [f.label for f in FAMILIES.values()]
    family, width, steps, rest = re.fullmatch(r"(%s)(?: k=(\d+))?(?: r=(\d+))?(.*)" % "|".join(map(re.escape, labels)),
                                              name).groups()
    return (labels.index(family), int(width or 0), int(steps or 0), rest)


def make_guide(family, n_obs, x_dim=784, z_dim=64, hidden=256, width=128, init_scale=THETA_INIT_SCALE,
               encoder_layers=2, qz_init="prior", seed=0, refine_steps=0, refine_lr=1e-2, log_joint=None,
               encoder_slope=LEAKY_SLOPE, objective="elbo", local_terms="minibatch", refine_grad="straight-through"):
    """The guide of ``family`` ∈ GUIDES, on the CPU (move it with ``.to(device)``): ``width`` and
    ``encoder_layers`` are the encoder's (A-VI, SA-VI), ``qz_init`` and ``seed`` the free factors' start
    (F-VI, constant-VI), ``refine_steps``, ``refine_lr`` and the model's ``log_joint``
    (:meth:`BayesianDecoderModel.local_log_joint`) and ``refine_grad`` SA-VI's refinement, ``encoder_slope`` the encoder's
    LeakyReLU, ``objective`` how q is scored and ``local_terms`` which z the guide draws (see :class:`Guide`).
    A FitConfig checks these values before a run; here only what would otherwise fail obscurely is refused."""
    if family not in FAMILIES:
        raise AmortizedPyroError("unknown guide %r: choose one of %s" % (family, ", ".join(GUIDES)))
    if FAMILIES[family].encoder and width < 1:
        raise AmortizedPyroError("the encoder width must be at least 1, got %r" % width)
    q_z = FAMILIES[family].factor(SimpleNamespace(
        n_obs=n_obs, x_dim=x_dim, z_dim=z_dim, width=width, encoder_layers=encoder_layers, encoder_slope=encoder_slope,
        qz_init=qz_init, seed=seed, refine_steps=refine_steps, refine_lr=refine_lr, log_joint=log_joint,
        refine_grad=refine_grad))
    q_theta = DecoderPosterior(decoder_shapes(z_dim, hidden, x_dim), init_scale)
    return Guide(family, n_obs, q_theta, q_z, objective, local_terms)
