"""The four families of q(z_n), each a guide builder for any model (see :mod:`.base`):

    AutoAmortizedNormal       (μ_n, log σ_n) = heads(encoder(x_n))                           A-VI
    AutoSemiAmortizedNormal   the amortized factor refined by Adam steps on the local ELBO   SA-VI (Kim et al. 2018)
    AutoPerDatapointNormal    free (μ_n, log σ_n) for each of the plate's N datapoints       F-VI
    AutoSharedNormal          one (μ, log σ) for every datapoint                             constant-VI

Pyro has none of the amortized ones (an "AutoNormal encoder" pull request, pyro-ppl/pyro #2849, is unmerged);
its AutoNormal over a plate is per-datapoint, AutoNormalMessenger(amortized_plates=...) is shared.
"""
import math

import torch
from torch import nn

from ..errors import AmortizedPyroError
from ..local_elbo import refine
from .base import DEFAULT_INIT_SCALE, AutoLocalGuide, log_init_scale
from .local_joint import LocalJoint

REFINE_GRADS = ("straight-through", "unrolled")
DEFAULT_WIDTH, DEFAULT_LAYERS, LEAKY_SLOPE = 128, 2, 0.2


def default_encoder(x_dim, width=DEFAULT_WIDTH, layers=DEFAULT_LAYERS):
    """Flatten → (Linear(·, width) → LeakyReLU(0.2)) × ``layers``: features [B, width] of data [B, ...]."""
    sizes = [x_dim] + [width] * layers
    return nn.Sequential(nn.Flatten(), *[module for d_in, d_out in zip(sizes, sizes[1:])
                                         for module in (nn.Linear(d_in, d_out), nn.LeakyReLU(LEAKY_SLOPE))])


class AutoPerDatapointNormal(AutoLocalGuide):
    """F-VI: free (μ_n, log σ_n) for each of the data plate's N datapoints (its full size), picked out by
    the plate's subsample indices. Only datapoints of the plate it was built on have a factor.

    Takes :class:`~amortized_pyro.autoguides.base.AutoLocalGuide`'s parameters."""

    can_infer_unseen = False

    def _setup_local(self, indices, args, kwargs, device):
        self.n_datapoints = self.structure.full_size
        shape = (self.n_datapoints, self.structure.size)
        self.loc = nn.Parameter(torch.zeros(shape, device=device))
        self.log_scale = nn.Parameter(log_init_scale(self.init_scale, shape, device))

    def local_factor(self, indices, args, kwargs, theta):
        size = self.plates[self.plate].size
        if size != self.n_datapoints:
            raise AmortizedPyroError("this per-datapoint guide was built for the %d datapoints of plate %r; this "
                                     "call's plate has %d" % (self.n_datapoints, self.plate, size))
        return self.loc[indices], self.log_scale[indices].exp()


class AutoSharedNormal(AutoLocalGuide):
    """constant-VI: one (μ, log σ) shared by every datapoint.

    Takes :class:`~amortized_pyro.autoguides.base.AutoLocalGuide`'s parameters."""

    def _setup_local(self, indices, args, kwargs, device):
        self.loc = nn.Parameter(torch.zeros(self.structure.size, device=device))
        self.log_scale = nn.Parameter(log_init_scale(self.init_scale, (self.structure.size,), device))

    def local_factor(self, indices, args, kwargs, theta):
        batch = (len(indices), self.structure.size)
        return self.loc.expand(batch), self.log_scale.exp().expand(batch)


class AutoAmortizedNormal(AutoLocalGuide):
    """A-VI: (μ_n, log σ_n) = (W_μ h_n + b_μ, W_σ h_n + b_σ), h_n = encoder(x_n), with one pair of linear
    heads for all local sites (sized by the flat unconstrained layout). The heads start at torch's default
    initialization, with log ``init_scale`` added to the log-scale head's bias.

    :param callable model: as :class:`~amortized_pyro.autoguides.base.AutoLocalGuide`.
    :param torch.nn.Module encoder: data [B, ...] → features [B, F]; None builds :func:`default_encoder`
        (``width``, ``layers``) for the flattened data.
    :param encoder_input: the position of the model argument holding the plate's data (its first dimension
        the datapoints: the batch, or all N and indexed by the plate), or a function of the model's arguments
        returning it.
    :param int width: the default encoder's width.
    :param int layers: the default encoder's hidden layers.
    """

    def __init__(self, model, *, encoder=None, encoder_input=0, width=DEFAULT_WIDTH, layers=DEFAULT_LAYERS,
                 plate="data", init_scale=DEFAULT_INIT_SCALE, globals="normal", create_plates=None):
        super().__init__(model, plate=plate, init_scale=init_scale, globals=globals, create_plates=create_plates)
        if width < 1 or layers < 0:
            raise AmortizedPyroError("the encoder needs width >= 1 and layers >= 0, got %r and %r" % (width, layers))
        self.encoder_input, self.width, self.layers = encoder_input, width, layers
        if encoder is not None:
            self.encoder = encoder

    def encoder_data(self, indices, args, kwargs):
        """The plate's data for the datapoints ``indices`` of this call: [B, ...]."""
        if callable(self.encoder_input):
            data = self.encoder_input(*args, **kwargs)
        else:
            if self.encoder_input >= len(args):
                raise AmortizedPyroError("encoder_input=%d, but the model was called with %d positional arguments"
                                         % (self.encoder_input, len(args)))
            data = args[self.encoder_input]
        if not torch.is_tensor(data) or data.dim() == 0:
            raise AmortizedPyroError("the encoder's input (model argument %r) is not a tensor of datapoints"
                                     % self.encoder_input)
        if data.shape[0] == len(indices):
            return data
        if data.shape[0] == self.structure.full_size:
            return data.index_select(0, indices.to(data.device))
        raise AmortizedPyroError("the encoder's input has %d rows; the plate %r has %d datapoints in this batch "
                                 "of %d" % (data.shape[0], self.plate, len(indices), self.structure.full_size))

    def _setup_local(self, indices, args, kwargs, device):
        data = self.encoder_data(indices, args, kwargs)
        if "encoder" not in self._modules:
            self.encoder = default_encoder(math.prod(data.shape[1:]), self.width, self.layers).to(device)
        try:
            with torch.no_grad():
                features = self.encoder(data)
        except RuntimeError as error:
            raise AmortizedPyroError("the encoder cannot take the plate's data of shape %s: %s"
                                     % (tuple(data.shape), str(error).splitlines()[0])) from None
        if features.dim() != 2 or features.shape[0] != data.shape[0]:
            raise AmortizedPyroError("the encoder must map data [B, ...] to features [B, F]; it gave %s for %s"
                                     % (tuple(features.shape), tuple(data.shape)))
        self.loc_head = nn.Linear(features.shape[1], self.structure.size).to(device)
        self.log_scale_head = nn.Linear(features.shape[1], self.structure.size).to(device)
        with torch.no_grad():
            self.log_scale_head.bias.add_(math.log(self.init_scale))

    def local_factor(self, indices, args, kwargs, theta):
        features = self.encoder(self.encoder_data(indices, args, kwargs))
        return self.loc_head(features), self.log_scale_head(features).exp()


class AutoSemiAmortizedNormal(AutoAmortizedNormal):
    """SA-VI (Kim et al. 2018): the amortized factor (μ_0, log σ_0) refined by ``steps`` Adam steps (learning
    rate ``lr``, one draw of z each) on the local ELBO at the global values the guide has just drawn (held
    fixed: q(θ) gets the gradient at the refined factor only). The gradient reaches the encoder
    ``straight-through`` (μ = μ_0 + stop_grad(μ_k − μ_0), likewise log σ) or ``unrolled`` through every step
    (Kim et al.; steps by :class:`~amortized_pyro.local_elbo.SmoothAdam`). The local ELBO is the model's own,
    read off its trace (:class:`~amortized_pyro.autoguides.local_joint.LocalJoint`).

    :param int steps: refinement steps (0: the amortized guide).
    :param float lr: their learning rate.
    :param str grad: ``"straight-through"`` or ``"unrolled"``.

    The other parameters are :class:`AutoAmortizedNormal`'s.
    """

    def __init__(self, model, *, steps=5, lr=1e-2, grad="straight-through", **kwargs):
        super().__init__(model, **kwargs)
        if grad not in REFINE_GRADS or steps < 0 or not lr > 0:
            raise AmortizedPyroError("refinement needs steps >= 0, lr > 0 and grad in %s; got %r, %r, %r"
                                     % (", ".join(REFINE_GRADS), steps, lr, grad))
        self.steps, self.lr, self.grad = steps, lr, grad

    def local_factor(self, indices, args, kwargs, theta):
        loc0, scale0 = super().local_factor(indices, args, kwargs, theta)
        if not self.steps:
            return loc0, scale0
        detach = (lambda one: {k: v.detach() for k, v in one.items()})
        theta = [detach(one) for one in theta] if isinstance(theta, list) else detach(theta)
        log_joint = LocalJoint(self.model, self.structure, args, kwargs, indices)
        unrolled = self.grad == "unrolled"
        loc, log_scale = refine(log_joint, loc0, loc0, scale0.log(), theta, self.lr, self.steps, 1, self.refine_generator,
                                unrolled)
        if unrolled:
            return loc, log_scale.exp()
        return loc0 + (loc - loc0).detach(), scale0 * (log_scale.exp() / scale0).detach()


AUTOGUIDES = {"amortized": AutoAmortizedNormal, "semi-amortized": AutoSemiAmortizedNormal,
              "per-datapoint": AutoPerDatapointNormal, "shared": AutoSharedNormal}
"""The builders by family name (the package's ``--guide`` choices)."""
