"""The factors q(u_n) = N(μ_n, diag σ_n²) of the four families, as modules: ``factor(x, idx, theta, generator)``
→ (μ, σ) [B, size] for the datapoints ``idx`` with data ``x`` [B, ...]. The guide builders (:mod:`.families`)
size them from a model's trace; the package's own guides are those builders.

    AmortizedFactor       (μ_n, link⁻¹ σ_n) = heads(body(x_n))                     A-VI
    SemiAmortizedFactor   the amortized factor refined by Adam on the local ELBO   SA-VI (Kim et al. 2018)
    IterativeFactor       the amortized factor updated T times by a network of     iterative amortized inference
                          the local ELBO's gradient                                (Marino et al. 2018)
    FreeFactor            free (μ_n, log σ_n) per datapoint (rows = N), or one row for all   F-VI, constant-VI
"""
import math

import torch
from torch import nn

from amortized_pyro.errors import GuideError
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.partial import refine_worst
from amortized_pyro.local.optimize import local_objective, noise_of, refine

# the encoders' home is .encoders; these three stay importable from here for guides pickled before it was
from amortized_pyro.autoguides.encoders import ConvBody, Encoder, Standardize  # noqa: F401

REFINE_GRADS = ("straight-through", "unrolled")
FREE_INITS = ("prior", "random")


def held(theta):
    """θ held fixed in a factor's steps: its values detached (site → tensor, or the gap's
    :class:`~amortized_pyro.local.draws.Draws`)."""
    return theta.detached() if isinstance(theta, Draws) else {k: v.detach() for k, v in theta.items()}


class AmortizedFactor(nn.Module):
    """A-VI: (μ_n, σ_n) = encoder(x_n), an :class:`~.encoders.Encoder`."""

    can_infer_unseen = True

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    @property
    def size(self):
        """The length of the factor's vector u_n."""
        return self.encoder.loc.out_features

    def forward(self, x, idx, theta=None, generator=None):
        return self.encoder(x)


class SemiAmortizedFactor(AmortizedFactor):
    """SA-VI (Kim et al. 2018): the encoder's (μ_0, log σ_0) refined by ``steps`` steps of ``optimizer`` (Adam,
    or Kim et al.'s SGD with momentum on clipped gradients: ``"sgd-momentum"``; learning rate ``lr``, one draw of z each, from ``generator``) on the local ELBO at ``theta`` (the θ the guide has just
    drawn; when evaluating, E_q[θ] or the gap's :class:`~amortized_pyro.local.draws.Draws`: their mean
    objective), by
    :func:`amortized_pyro.local.optimize.refine`, with ``log_joint(x, z, θ)`` the model's per-datapoint local
    log joint (given at construction, or per call). The refined factor's values are used. Gradients reach the
    encoder (``grad``) ``straight-through``: μ = μ_0 + stop_grad(μ_k − μ_0) (likewise log σ), as if the steps
    were the identity; or ``unrolled``: through every step, as Kim et al. do. θ is held fixed in both: q(θ)
    gets the gradient at the refined factor only. A training step costs about (1 + steps) decoder passes
    straight-through, more unrolled (BENCHMARKS.md).

    ``share`` < 1 refines only the ⌈share · B⌉ datapoints of each batch with the highest ``score`` from
    ``score_draws`` draws of the encoder's factor (:mod:`amortized_pyro.local.partial`); the others keep the
    encoder's factor. With a log joint that reads the data (``rows_of_data``: the call's ``x`` rows, θ's
    per-image terms) the steps then cost that share of the decoder passes; one that reads the model's own
    arguments runs the model on the whole batch at each step. The encoder's gradient passes every row as ``grad``
    says (straight-through: an unrefined row's as A-VI's)."""

    def __init__(self, encoder, steps, lr, log_joint=None, grad="straight-through", optimizer="adam", share=1.0,
                 score="spread", score_draws=8):
        super().__init__(encoder)
        self.steps, self.lr, self.log_joint, self.grad, self.optimizer = steps, lr, log_joint, grad, optimizer
        self.share, self.score, self.score_draws = share, score, score_draws

    def forward(self, x, idx, theta=None, generator=None, log_joint=None, particles=1, rows_of_data=False):
        """(μ, σ) [B, size], or [particles, B, size] refined at each of θ's ``particles`` (vectorized
        particles: θ's values carry a leading dimension of that size)."""
        loc0, scale0 = self.encoder(x)
        if not self.steps or theta is None:
            return loc0, scale0
        theta, unrolled = held(theta), self.grad == "unrolled"
        if self.share < 1:
            if particles > 1:
                raise GuideError("refining a share of the datapoints takes one particle (vectorized particles: %d)"
                                 % particles)
            loc, log_scale = refine_worst(
                log_joint or self.log_joint, x, loc0, scale0, theta, self.share, self.score, self.score_draws,
                generator, lambda joint, x_rows, loc, log_scale, theta_rows: refine(
                    joint, x_rows, loc, log_scale, theta_rows, self.lr, self.steps, 1, generator, unrolled,
                    optimizer=self.optimizer), rows_of_data)
            return self._through(loc0, scale0, loc, log_scale)
        if particles > 1:
            loc0, scale0 = loc0.expand((particles,) + loc0.shape), scale0.expand((particles,) + scale0.shape)
        loc, log_scale = refine(log_joint or self.log_joint, x, loc0, scale0.log(), theta, self.lr, self.steps, 1,
                                generator, unrolled, optimizer=self.optimizer)
        return self._through(loc0, scale0, loc, log_scale)

    def _through(self, loc0, scale0, loc, log_scale):
        """The refined factor with the encoder's gradient as ``grad`` says."""
        if self.grad == "unrolled":
            return loc, log_scale.exp()
        return loc0 + (loc - loc0).detach(), scale0 * (log_scale.exp() / scale0).detach()


GRADIENT_CUT = 10.0  # p of Andrychowicz et al.'s preprocessing: magnitudes below e^-p kept linear
LOG_SCALE_RANGE = (-7.5, 2.5)  # Marino et al.'s clamp of log σ² to [-15, 5], on log σ


def encode_gradient(grad, p=GRADIENT_CUT):
    """A gradient as Marino et al. (2018) feed theirs to the inference network, by log magnitude and sign, in
    Andrychowicz et al. (2016)'s form: (log|g| / p, sign g) where |g| >= e^-p, else (-1, e^p g); every entry
    becomes two numbers of order one whatever its scale (log|g| / p grows only logarithmically: a local ELBO's
    gradient spans orders of magnitude across images and iterations). [..., size] → [..., 2 size]."""
    large = grad.abs() >= math.exp(-p)
    magnitude = torch.where(large, grad.abs().clamp_min(math.exp(-p)).log() / p, -torch.ones_like(grad))
    return torch.cat([magnitude, torch.where(large, grad.sign(), grad * math.exp(p))], -1)


class IterativeFactor(AmortizedFactor):
    """Iterative amortized inference (Marino, Yue & Mandt 2018): λ = (μ, log σ) starts at the encoder's
    output λ_0 and is updated ``iterations`` times,

        g_t = ∇_λ L_n(λ_t; θ)                              one z draw per image, θ held (detached)
        (Δ_t, γ_t) = update(h_n, λ_t, enc(g_t))            h_n the encoder's features, enc :func:`encode_gradient`
        λ_{t+1} = γ_t ⊙ stop_grad(λ_t) + (1 − γ_t) ⊙ Δ_t    their gated ("highway") update, γ_t in (0, 1)

    with log σ clamped to :data:`LOG_SCALE_RANGE` as they clamp log σ². ``update`` is an ELU network
    (``layers`` × ``width``; ELU as theirs). Each λ_{t+1} depends on the update's parameters through its own
    step only (stop_grad, as their code detaches λ_t): trained on every iteration's ELBO, iteration t's
    objective L_n(λ_t) trains the step that made λ_t. :meth:`iterate` returns those objectives; the guide adds
    them to its training objective with value zero (their gradient only). ``iterations=0`` is A-VI exactly."""

    def __init__(self, encoder, iterations, width, layers=2, log_joint=None):
        super().__init__(encoder)
        self.iterations, self.log_joint = iterations, log_joint
        size, features = encoder.loc.out_features, encoder.loc.in_features
        sizes = [features + 6 * size] + [width] * max(1, layers)
        self.update = nn.Sequential(*[m for d_in, d_out in zip(sizes, sizes[1:]) for m in (nn.Linear(d_in, d_out),
                                                                                           nn.ELU())],
                                    nn.Linear(width, 4 * size))

    def forward(self, x, idx, theta=None, generator=None, log_joint=None, particles=1):
        loc, scale, _ = self.iterate(x, theta, generator, log_joint, particles)
        return loc, scale

    def iterate(self, x, theta=None, generator=None, log_joint=None, particles=1):
        """(μ_T, σ_T, Σ_t L_n(λ_t) for t < T or None): [B, size] twice and [B], or led by ``particles`` (θ's
        values then carry a leading dimension of that size); the objectives only where gradients are on."""
        h = self.encoder.body(x)
        if not self.iterations or theta is None:  # the amortized factor itself (σ not through log and back)
            return (*self.encoder.heads(h), None)
        loc, log_scale = self.encoder.loc(h), self.encoder.log_scale_of(h)
        if particles > 1:
            loc, log_scale, h = (t.expand((particles,) + t.shape) for t in (loc, log_scale, h))
        theta = held(theta)
        training, objectives, noise = torch.is_grad_enabled(), 0, noise_of(theta, generator)
        with torch.enable_grad():
            for _ in range(self.iterations):
                if not training:  # evaluation: the gradient input still needs a graph at λ_t
                    loc, log_scale = loc.detach().requires_grad_(), log_scale.detach().requires_grad_()
                objective = local_objective(log_joint or self.log_joint, x, loc, log_scale, theta, 1, noise)
                grads = torch.autograd.grad(objective.sum(), (loc, log_scale), retain_graph=training)
                objectives = objectives + objective
                inputs = torch.cat([h, loc.detach(), log_scale.detach()] + [encode_gradient(g) for g in grads], -1)
                delta_loc, delta_log_scale, gate_loc, gate_log_scale = self.update(inputs).chunk(4, -1)
                gate_loc, gate_log_scale = gate_loc.sigmoid(), gate_log_scale.sigmoid()
                loc = gate_loc * loc.detach() + (1 - gate_loc) * delta_loc
                log_scale = (gate_log_scale * log_scale.detach() + (1 - gate_log_scale) * delta_log_scale).clamp(
                    *LOG_SCALE_RANGE)
        if not training:
            return loc.detach(), log_scale.detach().exp(), None
        return loc, log_scale.exp(), objectives


class FreeFactor(nn.Module):
    """Free parameters (μ, log σ): one row per datapoint, picked out by idx (F-VI, ``rows=N``), or one row
    for every datapoint (constant-VI, ``rows=None``). Only the rows in use are exponentiated. ``init``:
    "prior" (μ = ``init_loc`` [rows or 1, size], 0 where None; log σ = log ``init_scale``) or "random" (the studies' code: per-datapoint μ ~ N(0, 1),
    log σ ~ N(0, 1) − 1; shared μ, log σ ~ N(0, 1)), drawn from a CPU generator seeded with ``seed`` so
    that every device starts alike."""

    def __init__(self, rows, size, init="prior", seed=0, init_scale=1.0, device=None, init_loc=None):
        super().__init__()
        self.per_datapoint = rows is not None
        self.can_infer_unseen = not self.per_datapoint
        self.size = size
        shape = (size,) if rows is None else (rows, size)
        loc = torch.zeros(shape) if init_loc is None else init_loc.detach().cpu().expand(shape).clone()
        log_scale = torch.full(shape, math.log(init_scale))
        if init == "random":
            generator = torch.Generator().manual_seed(seed)
            loc = torch.randn(shape, generator=generator)
            log_scale = torch.randn(shape, generator=generator) - (1.0 if self.per_datapoint else 0.0)
        self.loc, self.log_scale = nn.Parameter(loc.to(device)), nn.Parameter(log_scale.to(device))

    def forward(self, x, idx, theta=None, generator=None):
        if self.per_datapoint:
            return self.loc[idx], self.log_scale[idx].exp()
        batch = idx.shape[:1] + self.loc.shape
        return self.loc.expand(batch), self.log_scale.exp().expand(batch)
