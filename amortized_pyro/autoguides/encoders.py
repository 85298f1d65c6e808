"""The amortized families' encoders: a body (data [B, ...] → features [B, F]) and the :class:`Encoder` that puts
the (μ, σ) heads on it. The builders' default body is :func:`default_encoder` (an MLP on the input standardized
by :class:`Standardize`); the package's studies pick theirs by name from :data:`ENCODERS` (an MLP, or
:class:`ConvBody` for images).
"""
import math

import torch
from torch import nn

LEAKY_SLOPE = 0.2


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

    def heads(self, h):
        """(μ, σ) of features ``h``."""
        return self.loc(h), SCALE_LINKS[self.link][0](self.log_scale(h))

    def forward(self, x):
        return self.heads(self.body(x))
