"""The factors q(u_n) = N(μ_n, diag σ_n²) of the four families, as modules: ``factor(x, idx, theta, generator)``
→ (μ, σ) [B, size] for the datapoints ``idx`` with data ``x`` [B, ...]. The guide builders (:mod:`.families`)
size them from a model's trace; the package's own guides are those builders.

    AmortizedFactor       (μ_n, log σ_n) = heads(body(x_n))                        A-VI
    SemiAmortizedFactor   the amortized factor refined by Adam on the local ELBO   SA-VI (Kim et al. 2018)
    IterativeFactor       the amortized factor updated T times by a network of     iterative amortized inference
                          the local ELBO's gradient                                (Marino et al. 2018)
    FreeFactor            free (μ_n, log σ_n) per datapoint (rows = N), or one row for all   F-VI, constant-VI
"""
import math

import torch
from torch import nn
from torch.func import functional_call, vmap

from amortized_pyro.errors import GuideError
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.partial import refine_worst
from amortized_pyro.local.optimize import local_objective, noise_of, refine
from amortized_pyro.support.batching import rows_of

LEAKY_SLOPE = 0.2
REFINE_GRADS = ("straight-through", "unrolled")
FREE_INITS = ("prior", "random")


def hidden_layers(x_dim, width, layers, slope=LEAKY_SLOPE):
    """(Linear → LeakyReLU(slope)) × ``layers``: x_dim → width → … → width."""
    sizes = [x_dim] + [width] * layers
    return nn.Sequential(*[module for d_in, d_out in zip(sizes, sizes[1:])
                           for module in (nn.Linear(d_in, d_out), nn.LeakyReLU(slope))])


DEFAULT_WIDTH, DEFAULT_LAYERS = 128, 2


def default_encoder(x_dim, width=DEFAULT_WIDTH, layers=DEFAULT_LAYERS, data=None):
    """Flatten → (Linear(·, width) → LeakyReLU(0.2)) × ``layers``: features [B, width] of data [B, ...]; with
    ``data`` (a batch of it), the flattened input first read as sign(x) log(1 + |x|) standardized by that batch
    (:class:`Standardize`)."""
    steps = [nn.Flatten()] + ([] if data is None else [Standardize(data.flatten(1))])
    return nn.Sequential(*steps, hidden_layers(x_dim, width, layers))


def symlog(x):
    """sign(x) log(1 + |x|): near the identity about 0 (slope 1), log-like beyond; three elementwise passes
    (torch.asinh, alike in shape, took 780–910 µs on a batch of 128 MNIST images on this CPU, one thread, this
    170–180 µs)."""
    return torch.copysign(torch.log1p(x.abs()), x)


class Standardize(nn.Module):
    """x → (symlog x − m) / s (:func:`symlog`) with m the per-feature mean and s the overall standard deviation of
    symlog x over a batch of data [B, D], read once and held fixed (buffers; s = 1 where the batch does not vary):
    an encoder's input on the scale its initialization expects, whatever the data's. symlog is affine on binary
    pixels (nothing changes there after standardizing) and log-like on counts, so inputs of any scale stay within
    a few units: counts with library sizes over 500–20,000 standardized alone (a batch's spread is not the next's)
    put the encoder's outputs at e^±50 within 30 steps (issue 68, item 6, experiments/count_model.py), as a user's
    encoder takes log1p of counts."""

    def __init__(self, data):
        super().__init__()
        data = symlog(data.detach().to(torch.get_default_dtype()))
        spread = data.std() if data.numel() > 1 else data.new_tensor(0.0)
        self.register_buffer("mean", data.mean(0))
        self.register_buffer("scale", torch.where(spread > 0, spread, torch.ones_like(spread)))

    def forward(self, x):
        return (symlog(x) - self.mean) / self.scale


def _halved(n):
    """A convolution's output size along one axis of size n (kernel 4, stride 2, padding 1)."""
    return (n + 2 - 4) // 2 + 1


class ConvBody(nn.Module):
    """Images as rows x [..., C·H·W] (channel-first) → Conv2d(C, 32, 4, stride 2, padding 1) → LeakyReLU →
    Conv2d(32, 64, 4, 2, 1) → LeakyReLU → (Linear → LeakyReLU) × ``layers`` of ``width``: features [..., width].
    H and W need not be multiples of 4 (each convolution floors). ``extra`` inputs after the image's pixels in
    each row (a conditional model's one-hot label) join the convolutions' features before the linear layers."""

    def __init__(self, image_shape, width, layers=1, slope=LEAKY_SLOPE, extra=0):
        super().__init__()
        self.image_shape, self.pixels = tuple(image_shape), math.prod(image_shape)
        channels, height, wide = self.image_shape
        self.convolutions = nn.Sequential(nn.Conv2d(channels, 32, 4, 2, 1), nn.LeakyReLU(slope),
                                          nn.Conv2d(32, 64, 4, 2, 1), nn.LeakyReLU(slope))
        self.head = hidden_layers(64 * _halved(_halved(height)) * _halved(_halved(wide)) + extra, width, max(1, layers), slope)

    def forward(self, x):
        h = self.convolutions(x[..., :self.pixels].reshape((-1,) + self.image_shape))
        return self.head(torch.cat([h.reshape(x.shape[:-1] + (-1,)), x[..., self.pixels:]], -1))


def conv(image_shape, width, layers=1, slope=LEAKY_SLOPE, extra=0):
    """:class:`ConvBody`: a convolutional encoder body for images ``image_shape`` (C, H, W) (and ``extra`` inputs
    after each image's pixels)."""
    return ConvBody(image_shape, width, layers, slope, extra)


def mlp_body(image_shape, width, layers, slope=LEAKY_SLOPE, extra=0):
    """:func:`hidden_layers` on the flattened image (and ``extra`` inputs after its pixels): C·H·W + extra → width → … →
    width."""
    return hidden_layers(math.prod(image_shape) + extra, width, layers, slope)


ENCODERS = {"mlp": mlp_body, "conv": conv}  # encoder bodies by name: (image_shape, width, layers, slope, extra) → module


SCALE_LINKS = {  # the scale head's output o → σ, and σ → the o that gives it
    "exp": (torch.exp, math.log),  # the studies' codes and Pyro's examples/vae
    "softplus": (nn.functional.softplus, lambda scale: math.log(math.expm1(scale))),  # Pyro's AutoNormal's scales
}


class Encoder(nn.Module):
    """data → ``body`` → features [B, F] → (loc, scale) heads of size ``size``, scale = ``link``(the scale head)
    (:data:`SCALE_LINKS`: exp, or softplus, which grows σ linearly where exp grows it exponentially: on the count
    model of issue 68 the exp link's σ reached e^4 within 40 steps from a start far from the data), the scale
    head's bias shifted to give ``init_scale`` (exp and 1: torch's default initialization, unshifted)."""

    link = "exp"  # an Encoder pickled before the link was an option

    def __init__(self, body, features, size, init_scale=1.0, link="exp"):
        super().__init__()
        self.body, self.link = body, link
        self.loc = nn.Linear(features, size)
        self.log_scale = nn.Linear(features, size)  # the scale head (its name kept for saved state dicts)
        shift = SCALE_LINKS[link][1](init_scale)
        if shift:
            with torch.no_grad():
                self.log_scale.bias.add_(shift)

    def log_scale_of(self, h):
        """log σ of features ``h`` (the exp link's head output itself)."""
        out = self.log_scale(h)
        return out if self.link == "exp" else SCALE_LINKS[self.link][0](out).log()

    @torch.no_grad()
    def centre(self, features, loc, scale, spread=1.0):
        """Start each head where its outputs on the prototype call's ``features`` [B, F] average ``loc`` (μ) and
        the output that gives ``scale`` (σ), each output coordinate's root mean square over the batch before centring at most
        ``spread`` (torch's default weights, shrunk row by row where larger): the start stays tame on inputs
        of any scale (counts in the tens put torch's default σ at e^±several, issue 59), and unlike zero
        weights the body gets a gradient from the first step and its features are told apart (zero heads on a
        body whose features hardly vary across images trained Pyro's VAE 32 nats worse in 25 epochs, as issue 68
        measured)."""
        for head, target in ((self.loc, loc), (self.log_scale, SCALE_LINKS[self.link][1](scale))):
            out = features @ head.weight.T
            rms = out.pow(2).mean(0).sqrt()
            head.weight.mul_((spread / rms).clamp(max=1.0).nan_to_num(1.0).unsqueeze(-1))
            head.bias.copy_(torch.as_tensor(target).to(head.bias) - (features @ head.weight.T).mean(0))

    def forward(self, x):
        if self.loc.weight.dim() > 2:  # one encoder per replica (a pack of seeds): parameters stacked in front
            return vmap(lambda params, data: functional_call(self, params, (data,)))(dict(self.named_parameters()), x)
        h = self.body(x)
        return self.loc(h), SCALE_LINKS[self.link][0](self.log_scale(h))


class AmortizedFactor(nn.Module):
    """A-VI: (μ_n, σ_n) = encoder(x_n), an :class:`Encoder`."""

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
        if self.share < 1:
            if particles > 1:
                raise GuideError("refining a share of the datapoints takes one particle (vectorized particles: %d)"
                                 % particles)
            detach = (lambda one: {k: v.detach() for k, v in one.items()})
            theta = theta.detached() if isinstance(theta, Draws) else detach(theta)
            unrolled = self.grad == "unrolled"
            loc, log_scale = refine_worst(
                log_joint or self.log_joint, x, loc0, scale0, theta, self.share, self.score, self.score_draws,
                generator, lambda joint, x_rows, loc, log_scale, theta_rows: refine(
                    joint, x_rows, loc, log_scale, theta_rows, self.lr, self.steps, 1, generator, unrolled,
                    optimizer=self.optimizer), rows_of_data)
            return self._through(loc0, scale0, loc, log_scale)
        if particles > 1:
            loc0, scale0 = loc0.expand((particles,) + loc0.shape), scale0.expand((particles,) + scale0.shape)
        detach = (lambda one: {k: v.detach() for k, v in one.items()})
        theta = theta.detached() if isinstance(theta, Draws) else detach(theta)
        unrolled = self.grad == "unrolled"
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
        loc, log_scale = self.encoder.loc(h), self.encoder.log_scale_of(h)
        if not self.iterations or theta is None:
            return loc, log_scale.exp(), None
        if particles > 1:
            loc, log_scale, h = (t.expand((particles,) + t.shape) for t in (loc, log_scale, h))
        theta = theta.detached() if isinstance(theta, Draws) else {k: v.detach() for k, v in theta.items()}
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
            if self.loc.dim() > 2:  # one table per replica (a pack of seeds): replica r's rows idx[r]
                return rows_of(self.loc, idx), rows_of(self.log_scale, idx).exp()
            return self.loc[idx], self.log_scale[idx].exp()
        batch = self.loc.shape[:-1] + idx.shape[-1:] + self.loc.shape[-1:]
        return self.loc.unsqueeze(-2).expand(batch), self.log_scale.exp().unsqueeze(-2).expand(batch)
