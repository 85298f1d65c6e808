"""Variational families q(θ) q(z_{1..N}) of the package's model: one shared mean-field q(θ), four families for
q(z_n), each a guide builder of :mod:`amortized_pyro.autoguides` built on the model.

    q(θ)   = Π_j Normal(θ_j | m_j, s_j)                  every decoder weight and bias (q_theta.py)
    q(z_n) = Normal(z_n | μ_n, diag σ_n²), with (μ_n, σ_n) =
        amortized       encoder_φ(x_n)                 (A-VI, an MLP of width k)
        semi-amortized  encoder_φ(x_n), refined        (SA-VI, Kim et al. 2018)
        iterative       encoder_φ(x_n), then T updates (IA-VI, Marino et al. 2018)
                        by a network of the local ELBO's gradient
        per-datapoint   free parameters μ_n, σ_n       (F-VI, N × z_dim each)
        shared          one μ, σ for every n           (constant-VI)

q(θ) is the builders' global part (:class:`~amortized_pyro.models.q_theta.QThetaNormal`, flat vectors for speed);
the warm-up's ``kl_scale``, the studies' objective, the free factors' random start and each replica's factor in a
pack of seeds are what :class:`StudyGuide` adds to the builders; ``local_terms="all"`` (every image's z each step,
as the authors' code) their plate ``latents``. The per-datapoint and shared factors start at the prior
(μ = 0, σ = 1; ``qz_init="prior"``) or where the studies' code starts them (``qz_init="random"``), drawn from a
generator seeded with the run's seed. The encoder (``encoder_layers`` hidden layers of width k) starts with
PyTorch's default Linear initialisation, from the global stream. A guide's ``state_dict`` holds all its parameters
(``q_theta.loc``, ``q_theta.log_scale``, and ``q_z.loc``/``q_z.log_scale`` or ``q_z.encoder.*``).
"""
import contextlib
import re
from collections import namedtuple
from functools import partial

import torch
from torch import nn
from torch.func import functional_call, vmap

import pyro
from pyro.poutine.util import is_validation_enabled

from amortized_pyro.autoguides.encoders import ENCODERS
from amortized_pyro.autoguides.factors import FREE_INITS
from amortized_pyro.autoguides.families import AutoAmortizedNormal, AutoPerDatapointNormal, AutoSharedNormal
from amortized_pyro.autoguides.refining import AutoIterativeAmortizedNormal, AutoSemiAmortizedNormal
from amortized_pyro.autoguides.objectives import OBJECTIVES, q_normal
from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.models.conditional import PRIOR_SITES
from amortized_pyro.models.decoder import BayesianDecoderModel, data_plate
from amortized_pyro.models.guide_options import check_options
from amortized_pyro.models.networks import LEAKY_SLOPE
from amortized_pyro.models.modules import LocalModule
from amortized_pyro.models.q_theta import THETA_INIT_SCALE, QThetaNormal, QThetaPoint

Family = namedtuple("Family", "name label encoder in_studies")
FAMILIES = {f.name: f for f in (Family("amortized", "A-VI", True, True), Family("semi-amortized", "SA-VI", True, False),
                                Family("iterative", "IA-VI", True, False),
                                Family("per-datapoint", "F-VI", False, True),
                                Family("shared", "constant-VI", False, True))}
GUIDES = tuple(FAMILIES)  # the families, in display order
ENCODER_GUIDES = tuple(f.name for f in FAMILIES.values() if f.encoder)


def label(family, width=None, refine_steps=None, refine_grad="straight-through", refine_optimizer="adam",
          iterations=None, refine_share=1.0, refine_score="spread"):
    """The name a configuration goes by in tables and legends: ``A-VI k=64``, ``SA-VI k=64 r=5`` (r: its
    refinement steps, where given; `` unrolled`` where the gradient goes through them, `` momentum`` where Kim
    et al.'s SGD with momentum takes them, `` worst 25% by spread`` where only that share of each batch is refined, by that score), ``IA-VI k=64 T=5`` (T: its iterations, where given), ``F-VI``,
    ``constant-VI``."""
    f = FAMILIES[family]
    if not f.encoder:
        return f.label
    name = "%s k=%d" % (f.label, width)
    if family == "semi-amortized" and refine_steps is not None:
        name += " r=%d" % refine_steps + (" unrolled" if refine_grad == "unrolled" else "")
        name += " momentum" if refine_optimizer == "sgd-momentum" else ""
        name += " worst %g%% by %s" % (100 * refine_share, refine_score) if refine_share < 1 else ""
    if family == "iterative" and iterations is not None:
        name += " T=%d" % iterations
    return name


def config_label(config):
    """:func:`label` of a run's configuration (a FitConfig), with ``, point θ`` where the decoder is
    point-estimated (``decoder_prior="none"``) and ``, β=…`` where the KL terms are weighted (``kl_weight``)."""
    name = label(config.guide, config.width, config.refine_steps, config.refine_grad, config.refine_optimizer,
                 config.iterations, config.refine_share, config.refine_score)
    if config.decoder == "conv" or config.encoder == "conv":
        name += ", conv %s" % ("decoder and encoder" if config.decoder == config.encoder else
                               "decoder" if config.decoder == "conv" else "encoder")
    if config.flow:
        name += ", flow K=%d" % config.flow
    if config.conditional:
        name += ", conditional" + (", learned p(z | c)" if config.class_prior == "learned" else "") + (
            "" if config.encoder_label or not FAMILIES[config.guide].encoder else ", q(z | x)") + (
            ", c at every layer" if config.decoder_label == "every-layer" else "")
    if config.decoder_prior == "none":
        name += ", point θ"
    if config.kl_weight != 1:
        name += ", β=%g" % config.kl_weight
    return name


def display_order(name):
    """A label's place in tables: A-VI by width, SA-VI by width (then refinement steps, straight-through
    first), IA-VI by width (then iterations), then F-VI, then constant-VI; anything a table appends to a label
    (``, N 2500``) last."""
    labels = [f.label for f in FAMILIES.values()]
    family, width, steps, rest = re.fullmatch(r"(%s)(?: k=(\d+))?(?: [rT]=(\d+))?(.*)" % "|".join(map(re.escape, labels)),
                                              name).groups()
    return (labels.index(family), int(width or 0), int(steps or 0), rest)


class StudyGuide(LocalModule):
    """What the package's guides add to a builder of :mod:`amortized_pyro.autoguides` on the package's model, whose
    arguments are (x, idx, kl_scale, x_all); first in the bases (before the builder), module-local
    (:class:`~amortized_pyro.models.modules.LocalModule`: a run's state is its guide's ``state_dict`` whatever Pyro's
    global setting; two guides never share a parameter):

    :param str objective: ``"elbo"``, or ``"reference"``: q's draws scored as the studies' code scores them
        (standard deviations as variances, :class:`~amortized_pyro.autoguides.objectives.ReferenceNormal`; not
        an ELBO), q(θ)'s too; :meth:`scored_as` scores them otherwise for a while (the true ELBO of such a run).
    :param str qz_init: the free factors' start, ``"prior"`` or ``"random"`` (the studies' code), and ``seed`` its
        generator's seed.
    :param bool minibatch_indices: the call's datapoints are its ``idx`` argument (seeds packed as replicas: one
        minibatch per replica, [R, B], where the plate holds their positions); else the plate's indices.

    The warm-up's ``kl_scale`` (β) scales every latent site the guide draws, read off the model's own
    ``poutine.scale`` as the builders read it (:mod:`amortized_pyro.autoguides.plates`): the objective is then
    E_q[log p(x | z, θ)] − β KL(q ‖ p)."""

    def __init__(self, model, *, objective="elbo", qz_init="prior", seed=0, minibatch_indices=True, **kwargs):
        if objective not in OBJECTIVES or qz_init not in FREE_INITS or (objective != "elbo" and kwargs.get("flow")):
            raise AmortizedPyroError("objective must be one of %s (a flow takes the ELBO) and qz_init one of %s; got "
                                     "%r and %r" % (", ".join(OBJECTIVES), ", ".join(FREE_INITS), objective, qz_init))
        super().__init__(model, **kwargs)
        self.qz_init, self.qz_seed, self.minibatch_indices = qz_init, seed, minibatch_indices
        self.objective = objective
        self.q_theta.objective = objective

    def local_normal(self):
        return q_normal(self.objective)

    def known_scales(self, *args, **kwargs):
        """The warm-up's β at θ and at z (the model's ``kl_scale``), known without reading the model: the studies
        train without Pyro's validation, their plate given, and build their guides by a call without a warm-up."""
        beta = _warmup_scale(*args, **kwargs)
        return None if beta is None else (beta, beta)

    def checks_given_plate(self):
        """The studies' plate is the model's own (its ``data_plate`` of the call's ``idx``, or its ``latents``
        plate): checked under Pyro's validation only, which the studies train without (no read per step)."""
        return is_validation_enabled()

    def _indices(self, plates, args, kwargs):
        return _minibatch(*args, **kwargs) if self.minibatch_indices else super()._indices(plates, args, kwargs)

    def local_factor(self, indices, args, kwargs, theta):
        """The family's factor; in a pack of seeds (the model's idx [R, B]: :mod:`amortized_pyro.inference.replicas`
        calls the guide with every parameter stacked over R replicas in front), replica r's factor (μ, σ)
        [R, B, size] by its parameters, of its own data and datapoints ``indices[r]`` (or the ``indices`` [B] all
        share), one call vmapped over the replicas: each replica computes what its single run computes."""
        dims = _replica_dims(*args, **kwargs)
        if dims is None:
            return super().local_factor(indices, args, kwargs, theta)
        factor = self.q_z

        def replica(params, indices, *args):
            x = self.encoder_data(indices, args, kwargs) if isinstance(self, AutoAmortizedNormal) else None
            return functional_call(factor, params, (x, indices))
        return vmap(replica, in_dims=(0, 0 if indices.dim() > 1 else None) + dims)(
            dict(factor.named_parameters()), indices, *args)

    def free_start(self):
        return self.qz_init, self.qz_seed

    @contextlib.contextmanager
    def scored_as(self, objective):
        """The guide's draws, q(θ)'s and q(z)'s, scored as ``objective`` for the duration."""
        before = self.objective
        self.objective = self.q_theta.objective = objective
        try:
            yield self
        finally:
            self.objective = self.q_theta.objective = before


class AmortizedGuide(StudyGuide, AutoAmortizedNormal):
    """:class:`~amortized_pyro.autoguides.AutoAmortizedNormal` on the package's model."""


class SemiAmortizedGuide(StudyGuide, AutoSemiAmortizedNormal):
    """:class:`~amortized_pyro.autoguides.AutoSemiAmortizedNormal` on the package's model."""


class IterativeGuide(StudyGuide, AutoIterativeAmortizedNormal):
    """:class:`~amortized_pyro.autoguides.AutoIterativeAmortizedNormal` on the package's model."""


class PerDatapointGuide(StudyGuide, AutoPerDatapointNormal):
    """:class:`~amortized_pyro.autoguides.AutoPerDatapointNormal` on the package's model."""


class SharedGuide(StudyGuide, AutoSharedNormal):
    """:class:`~amortized_pyro.autoguides.AutoSharedNormal` on the package's model."""


BUILDERS = {cls.family: cls for cls in (AmortizedGuide, SemiAmortizedGuide, IterativeGuide, PerDatapointGuide,
                                        SharedGuide)}


# The model's arguments (x, idx, kl_scale, x_all) as the builders' options read them: module-level functions,
# so that a guide pickles.
def _warmup_scale(x, idx, kl_scale=None, x_all=None):
    return kl_scale


def _minibatch(x, idx, kl_scale=None, x_all=None):
    return idx  # [B], or [R, B] for a pack of seeds, whose plate holds positions (model.data_plate)


def _replica_dims(x, idx, kl_scale=None, x_all=None):
    if idx is None or idx.dim() == 1:
        return None  # one run's call
    return 0, 0, None, None if x_all is None else 0  # a pack's: images [R, B, ...], idx [R, B], x_all [R, N, ...]


def _minibatch_plate(n_obs, x, idx, kl_scale=None, x_all=None):
    return data_plate(n_obs, idx)


def _latents_plate(n_obs, x, idx, kl_scale=None, x_all=None):
    return pyro.plate("latents", n_obs, device=x.device)  # its indices gather a pack's rows on x's device


def _minibatch_images(x, idx, kl_scale=None, x_all=None):
    return x


def _every_image(x, idx, kl_scale=None, x_all=None):
    return x if x_all is None else x_all  # x: a measurement's images (see :func:`factor`)


class ImagesOnly(nn.Module):
    """A conditional model's rows [x, one-hot(c)] → the images x [..., x_dim]: an encoder of q(z | x)."""

    def __init__(self, x_dim):
        super().__init__()
        self.x_dim = x_dim

    def forward(self, rows):
        return rows[..., :self.x_dim]


def make_guide(family, model, *, width=128, init_scale=THETA_INIT_SCALE, encoder_layers=2, qz_init="prior", seed=0,
               refine_steps=0, refine_lr=1e-2, encoder_slope=LEAKY_SLOPE, objective="elbo",
               refine_grad="straight-through", encoder="mlp", refine_optimizer="adam", iterations=5, flow=0,
               encoder_label=True, refine_share=1.0, refine_score="spread"):
    """The guide builder of ``family`` ∈ GUIDES on the package's ``model`` (a
    :class:`~amortized_pyro.models.decoder.BayesianDecoderModel`), set up on the CPU (move it with ``.to(device)``):
    ``init_scale`` is q(θ)'s initial s, ``width``, ``encoder_layers`` and ``encoder_slope`` the encoder's
    (A-VI, SA-VI), ``qz_init`` and ``seed`` the free factors' start (F-VI, constant-VI), ``refine_steps``,
    ``refine_lr``, ``refine_grad``, ``refine_share`` and ``refine_score`` SA-VI's refinement (with the model's
    hand-written local log joint),
    ``iterations`` the iterative guide's T (its update network as wide and deep as the encoder), ``flow`` K
    flow transforms after the Gaussian factor (amortized, per-datapoint, shared),
    ``objective`` how q is scored, ``encoder`` the encoder's body (:data:`~amortized_pyro.autoguides.encoders.ENCODERS`:
    ``mlp`` or ``conv``, on the model's ``image_shape``; a conditional model's encoder reads [x, one-hot(c)], or x
    alone with ``encoder_label=False``). Each option is refused in one line, before anything is built, by its rule in
    :data:`~amortized_pyro.models.guide_options.RULES`, which the command line's option of its name shares."""
    given = {k: v for k, v in locals().items() if k not in ("family", "model")}  # the options, as called
    if not isinstance(family, str) or family not in FAMILIES:
        raise AmortizedPyroError("unknown guide %r: choose one of %s" % (family, ", ".join(GUIDES)))
    if not isinstance(model, BayesianDecoderModel):
        raise AmortizedPyroError("model must be the package's BayesianDecoderModel, got %s" % type(model).__name__)
    check_options(given, make_guide.__kwdefaults__)
    every = model.local_terms == "all"
    point = model.decoder_prior == "none"  # no prior on θ: a point estimate (init_scale unused)
    q_theta = QThetaPoint(model.shapes, zero=PRIOR_SITES) if point else QThetaNormal(model.shapes, init_scale)
    options = dict(plate="latents" if every else "data", init_scale=1.0, objective=objective, global_guide=q_theta,
                   create_plates=partial(_latents_plate if every else _minibatch_plate, model.n_obs),
                   minibatch_indices=not every, qz_init=qz_init, seed=seed)
    if FAMILIES[family].encoder:
        body = ENCODERS[encoder](model.image_shape, width, encoder_layers, encoder_slope,
                                 model.n_classes if encoder_label else 0)  # a conditional model's rows: [x, one-hot(c)]
        if model.n_classes and not encoder_label:  # q(z | x): the rows' images alone
            body = nn.Sequential(ImagesOnly(model.x_dim), body)
        options.update(encoder=body,
                       head_init="torch", standardize=False, scale_link="exp",  # the studies' start (and their capacity sweeps')
                       encoder_input=_every_image if every else _minibatch_images)
    if family == "semi-amortized":
        # a bound method: this guide's pickle carries the model (small, parameter-free), unlike Pyro's autoguides
        options.update(steps=refine_steps, lr=refine_lr, grad=refine_grad, local_log_joint=model.local_log_joint,
                       optimizer=refine_optimizer, share=refine_share, score=refine_score)
    if family == "iterative":
        options.update(iterations=iterations, local_log_joint=model.local_log_joint)
    if flow:
        if family in ("semi-amortized", "iterative"):
            raise AmortizedPyroError("a flow (flow=%d) goes with the amortized, per-datapoint and shared guides, not "
                                     "%s: its steps work on a Gaussian factor" % (flow, family))
        options.update(flow=flow)
    guide = BUILDERS[family](model, **options)
    x_all = torch.zeros(model.n_obs, model.input_dim) if every else None
    guide._setup_prototype(torch.zeros(1, model.input_dim), torch.zeros(1, dtype=torch.long), None, x_all)
    return guide
