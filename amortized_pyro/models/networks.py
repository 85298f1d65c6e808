"""The decoder networks Ω(z; θ) whose every weight and bias is a latent site θ (``decoder.*``), in a registry:

    mlp    z_dim → H → H → x_dim, LeakyReLU between (the reference study's decoder)
    conv   z_dim → C0·h·w (Linear), then two transposed convolutions (kernel 4, stride 2, padding 1):
           C0 × h × w → C1 × 2h × 2w → C × 4h × 4w, LeakyReLU between; C0 = H/4, C1 = H/8 channels for
           --hidden H, the image C × 4h × 4w (28 × 28 and 32 × 32 both; its rows flattened channel-first)

Each takes the weights θ (site → tensor) with or without a leading draw dimension P (particles, replicas,
the gap's θ draws; see :func:`decode`). Where weights carry P, the convolutions run as one grouped
convolution over the P draws (groups = P; bench/archive/conv_batching.py measures it against torch.func.vmap).
"""
import math

import torch
import torch.nn.functional as F

from amortized_pyro.autoguides.encoders import LEAKY_SLOPE  # the package's one LeakyReLU slope (the studies' 0.2)
from amortized_pyro.errors import AmortizedPyroError


def default_image_shape(x_dim):
    """The (C, H, W) of images known only by their x_dim pixels: one square channel where x_dim is a square
    number (784: 1 × 28 × 28), else one row of x_dim."""
    side = math.isqrt(x_dim)
    return (1, side, side) if side * side == x_dim else (1, 1, x_dim)


def decoder_shapes(z_dim, hidden, x_dim, label=0):
    """Site name → shape of every weight and bias of the MLP decoder (torch.nn.Linear's [out, in] convention);
    ``label`` K > 0: the input's last K entries (a conditional model's one-hot label) read again by the second
    and third layers, each layer's input [h, e_c] (issue 63: the label at every layer)."""
    return {
        "decoder.w1": (hidden, z_dim),
        "decoder.b1": (hidden,),
        "decoder.w2": (hidden, hidden + label),
        "decoder.b2": (hidden,),
        "decoder.w3": (x_dim, hidden + label),
        "decoder.b3": (x_dim,),
    }


def _layer(h, weight, bias):
    """h W^T + b, for weights with or without a leading draw dimension (see :func:`decode`)."""
    if weight.dim() == 2:
        return F.linear(h, weight, bias)
    if weight.dim() == 3 and h.dim() == 4 and h.shape[0] == weight.shape[0] > 1:  # the gap's draws (decode)
        rows = h.shape[:-1]
        h = torch.baddbmm(bias.unsqueeze(-2), h.reshape(weight.shape[0], -1, h.shape[-1]), weight.transpose(-1, -2))
        return h.reshape(rows + (weight.shape[-2],))
    return torch.matmul(h, weight.transpose(-1, -2)) + bias.unsqueeze(-2)


def hidden(z, theta, slope=LEAKY_SLOPE):
    """The MLP decoder's last hidden layer for latents z (see :func:`decode`): what its last (linear) layer reads,
    [h, e_c] where the weights read the label again (:func:`decoder_shapes`)."""
    h = z
    for layer in (1, 2):
        h = F.leaky_relu(_layer(h, theta["decoder.w%d" % layer], theta["decoder.b%d" % layer]), slope)
        label = theta["decoder.w%d" % (layer + 1)].shape[-1] - h.shape[-1]  # K where the next layer reads e_c
        if label:
            h = torch.cat([h, z[..., -label:].expand(h.shape[:-1] + (label,))], -1)
    return h


def decode(z, theta, slope=LEAKY_SLOPE):
    """Ω(z; θ) of the MLP decoder: its mean for latents z [..., B, z_dim] and weights ``theta`` (site → tensor).

    Weights may carry a leading dimension P (particles, the gap's θ draws): [P, H, z_dim] with z [P, B, z_dim]
    or z [D, P, B, z_dim] (broadcast: SA-VI's one z draw per particle, D = 1), or z [P, S, B, z_dim] (the
    gap's S z draws per weight draw, P > 1: one matrix product of S·B rows per draw). A z [D, P, B, z_dim]
    with D = P > 1 would read as the latter: nothing here makes one.
    """
    return _layer(hidden(z, theta, slope), theta["decoder.w3"], theta["decoder.b3"])


class MLPDecoder:
    """The MLP decoder (module docstring); its last layer is linear, which the gap's WᵀW shortcut needs."""

    linear_head = True

    def __init__(self, z_dim, hidden, image_shape, label=0):
        self.shapes = decoder_shapes(z_dim, hidden, math.prod(image_shape), label)

    def __call__(self, z, theta, slope=LEAKY_SLOPE):
        return decode(z, theta, slope)


class ConvDecoder:
    """The convolutional decoder (module docstring) for images ``image_shape`` (C, H, W), H and W multiples of 4."""

    linear_head = False

    def __init__(self, z_dim, hidden, image_shape):
        channels, height, width = image_shape
        if height % 4 or width % 4:
            raise AmortizedPyroError("the conv decoder needs an image height and width divisible by 4, got %d × %d"
                                     % (height, width))
        self.grid = (height // 4, width // 4)
        self.channels = (max(1, hidden // 4), max(1, hidden // 8), channels)
        c0, c1, c = self.channels
        self.shapes = {"decoder.w1": (c0 * self.grid[0] * self.grid[1], z_dim), "decoder.b1": (c0 * self.grid[0] * self.grid[1],),
                       "decoder.k2": (c0, c1, 4, 4), "decoder.b2": (c1,), "decoder.k3": (c1, c, 4, 4), "decoder.b3": (c,)}

    def _convolve(self, x, theta, groups, slope):
        """The two transposed convolutions on x [R, groups·C0, h, w] (``groups`` draws side by side)."""
        for kernel, bias, last in (("decoder.k2", "decoder.b2", False), ("decoder.k3", "decoder.b3", True)):
            k, b = theta[kernel], theta[bias]
            x = F.conv_transpose2d(x, k.reshape((-1,) + k.shape[-3:]), b.reshape(-1), stride=2, padding=1,
                                   groups=groups)
            x = x if last else F.leaky_relu(x, slope)
        return x

    def __call__(self, z, theta, slope=LEAKY_SLOPE):
        """Ω(z; θ) [..., B, C·H·W] for latents z and weights θ laid out as :func:`decode`'s."""
        h = F.leaky_relu(_layer(z, theta["decoder.w1"], theta["decoder.b1"]), slope)  # [..., B, C0·h·w]
        c0 = self.channels[0]
        if theta["decoder.k2"].dim() == 4:  # one set of weights
            out = self._convolve(h.reshape((-1, c0) + self.grid), theta, 1, slope)
            return out.reshape(h.shape[:-1] + (-1,))
        # h is [P, B, ·], [1, P, B, ·] or [P, S, B, ·] (see decode): in each, the draws' rows are P-major
        draws = theta["decoder.k2"].shape[0]
        rows = h.reshape(draws, -1, h.shape[-1])  # [P, R, C0·h·w]
        x = rows.reshape((draws, rows.shape[1], c0) + self.grid).transpose(0, 1).reshape((rows.shape[1], -1) + self.grid)
        out = self._convolve(x, theta, draws, slope)  # [R, P·C, H, W]
        out = out.reshape(rows.shape[1], draws, -1).transpose(0, 1)  # [P, R, C·H·W]
        return out.reshape(h.shape[:-1] + (-1,))


DECODERS = {"mlp": MLPDecoder, "conv": ConvDecoder}
