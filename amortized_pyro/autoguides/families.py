"""The families of q(z_n), each a guide builder for any model (see :mod:`.base`); their factors are the
modules of :mod:`.factors` (an encoder's: :mod:`.encoders`), sized from the model's trace (the two that work on
the local ELBO inside the guide, SA-VI and IA-VI, are in :mod:`.refining`):

    AutoAmortizedNormal       (μ_n, link⁻¹ σ_n) = heads(encoder(x_n))                        A-VI
    AutoSemiAmortizedNormal   the amortized factor refined by Adam steps on the local ELBO   SA-VI (Kim et al. 2018)
    AutoIterativeAmortizedNormal  the amortized factor updated by a network of the local     iterative amortized
                              ELBO's gradient, T times                                       inference (Marino et al.)
    AutoPerDatapointNormal    free (μ_n, log σ_n) for each of the plate's N datapoints       F-VI
    AutoSharedNormal          one (μ, log σ) for every datapoint                             constant-VI

Pyro has none of the amortized ones (an "AutoNormal encoder" pull request, pyro-ppl/pyro #2849, is unmerged);
its AutoNormal over a plate is per-datapoint, AutoNormalMessenger(amortized_plates=...) is shared.
"""
import math
import numbers

import torch
from pyro.ops.tensor_utils import periodic_repeat

from amortized_pyro.autoguides.base import AutoLocalGuide
from amortized_pyro.autoguides.encoder_input import EncoderInput, observed_rows
from amortized_pyro.autoguides.encoders import DEFAULT_LAYERS, DEFAULT_WIDTH, SCALE_LINKS, Encoder, default_encoder
from amortized_pyro.autoguides.factors import AmortizedFactor, FreeFactor
from amortized_pyro.autoguides.options import count
from amortized_pyro.errors import GuideError



class _FreeFactors(AutoLocalGuide):
    """The families whose factors are free parameters, μ_n starting where ``init_loc_fn`` puts them and σ_n at
    ``init_scale``. Takes :class:`~amortized_pyro.autoguides.base.AutoLocalGuide`'s parameters."""

    per_datapoint = None

    def free_start(self):
        """(how the free factors start, its seed): ``"prior"`` (μ by init_loc_fn, σ = init_scale) here; a hook for
        the package's studies, whose code draws them at random (:class:`~.factors.FreeFactor`)."""
        return "prior", 0

    def _setup_local(self, indices, args, kwargs, device):
        rows = self.structure.full_size if self.per_datapoint else None
        init = self.init_locs  # the prototype call's datapoints', by init_loc_fn: [B, size]
        # as Pyro's AutoNormal: a subsampled prototype's values repeated over the plate's full size
        init_loc = periodic_repeat(init, rows, 0) if self.per_datapoint else init.mean(0)
        start, seed = self.free_start()
        self.q_z = FreeFactor(rows, self.structure.size, start, seed, self.init_scale, device, init_loc)


class AutoPerDatapointNormal(_FreeFactors):
    """F-VI: free (μ_n, log σ_n) for each of the data plate's N datapoints (its full size), picked out by
    the plate's subsample indices. Only datapoints of the plate it was built on have a factor.

    Takes :class:`~amortized_pyro.autoguides.base.AutoLocalGuide`'s parameters."""

    family, per_datapoint = "per-datapoint", True

    def local_factor(self, indices, args, kwargs, theta):
        if indices.is_floating_point():  # pyro.plate(..., subsample=x): no datapoint named, nothing to pick
            raise GuideError("a per-datapoint guide picks its factors by the plate's indices; the plate %r is given "
                             "subsample= a tensor of %s values, not indices: give the plate subsample=idx, or use an "
                             "amortized guide" % (self.plate, indices.dtype))
        size = self.plates[self.plate].size
        if size != self.structure.full_size:
            raise GuideError("this per-datapoint guide was built for the %d datapoints of plate %r; this "
                                     "call's plate has %d" % (self.structure.full_size, self.plate, size))
        return self.q_z(None, indices)


class AutoSharedNormal(_FreeFactors):
    """constant-VI: one (μ, log σ) shared by every datapoint.

    Takes :class:`~amortized_pyro.autoguides.base.AutoLocalGuide`'s parameters."""

    family, per_datapoint = "shared", False

    def local_factor(self, indices, args, kwargs, theta):
        return self.q_z(None, indices)


class AutoAmortizedNormal(AutoLocalGuide):
    """A-VI: (μ_n, σ_n) = (W_μ h_n + b_μ, link(W_σ h_n + b_σ)), h_n = encoder(x_n), link softplus or exp
    (``scale_link``), with one pair of linear
    heads for all local sites (sized by the flat unconstrained layout).

    :param callable model: as :class:`~amortized_pyro.autoguides.base.AutoLocalGuide`.
    :param torch.nn.Module encoder: data [B, ...] → features [B, F]; None builds :func:`default_encoder`
        (``width``, ``layers``) for the flattened data.
    :param encoder_input: None (the default): the model argument that the plate's sites observe, found at the
        first call (the batch, or all N picked by the plate's indices), and refused in one line where no argument
        is observed as it is (``obs=x / 255``); else the position of the model argument holding the plate's data
        (its first dimension the datapoints), or a function of the model's arguments returning it (the batch in
        the plate's order, or all N). How its rows are the datapoints is read once, at the first call
        (:class:`~.encoder_input.EncoderInput`).
    :param int width: the default encoder's width.
    :param int layers: the default encoder's hidden layers.
    :param str head_init: how the heads start: ``"centred"`` (the default) torch's default weights, shrunk
        row by row so that each output's root mean square over the prototype call's datapoints is at most 1, and
        biases that put the factors' mean over those datapoints at μ = the prototype's ``init_loc_fn`` values
        (their mean) and σ = ``init_scale`` (:meth:`~.encoders.Encoder.centre`: tame on inputs of any scale, and
        the encoder's body trained from the first step); ``"zero"`` zero weights, every datapoint's factor at
        that mean (the body gets no gradient at the first step and its features start alike: on Pyro's VAE 32
        nats worse than a hand-written guide after 25 epochs, as issue 68 measured); ``"torch"`` torch's default
        initialization with log ``init_scale`` added to the log-scale head's bias (the package's studies).
    :param str scale_link: σ_n from the scale head's output: ``"softplus"`` (the default, as Pyro's AutoNormal
        constrains its scales) or ``"exp"`` (as Pyro's examples/vae writes its guide, and the package's studies):
        softplus grows σ linearly in the head's output, not exponentially; exp's σ overflowed its draws on issue
        68's count model (SA-VI, seed 2) and stopped LDA in 5 of 12 gallery runs, softplus in none
        (figures/defaults-vs-hand/tables.md, docs/gallery.md).
    :param bool standardize: the default encoder reads sign(x) log(1 + |x|) of its input standardized by the first call's data
        (per-feature mean, one overall standard deviation, held fixed: :class:`~.encoders.Standardize`); False:
        the raw input; unused with ``encoder=``.

    The other parameters are :class:`~amortized_pyro.autoguides.base.AutoLocalGuide`'s.
    """

    family = "amortized"
    HEAD_INITS = ("centred", "zero", "torch")

    def __init__(self, model, *, encoder=None, encoder_input=None, width=DEFAULT_WIDTH, layers=DEFAULT_LAYERS,
                 head_init="centred", standardize=True, scale_link="softplus", **kwargs):
        super().__init__(model, **kwargs)
        count("width", width, 1)
        count("layers", layers)
        if scale_link not in SCALE_LINKS:
            raise GuideError("scale_link must be one of %s, got %r" % (", ".join(SCALE_LINKS), scale_link))
        if head_init not in self.HEAD_INITS:
            raise GuideError("head_init must be one of %s, got %r" % (", ".join(self.HEAD_INITS), head_init))
        if encoder is not None and not isinstance(encoder, torch.nn.Module):
            raise GuideError("encoder must be a torch.nn.Module from the plate's data [B, ...] to features [B, F] "
                             "(or None: the default encoder), got %r" % (encoder,))
        if encoder_input is not None and not callable(encoder_input) and (
                isinstance(encoder_input, bool) or not isinstance(encoder_input, numbers.Integral)):
            raise GuideError("encoder_input must be the position of the model's argument holding the data, or a "
                             "function of the model's arguments returning it, got %r" % (encoder_input,))
        self.encoder_input, self.width, self.layers, self.head_init = encoder_input, width, layers, head_init
        self.standardize, self.scale_link, self._input = standardize, scale_link, None
        self._body = (encoder,)  # not a child until the factor is built around it

    def encoder_data(self, indices, args, kwargs):
        """The plate's data for the datapoints ``indices`` of this call: [B, ...] (the argument and how its rows are
        the datapoints read at the first call: :class:`~.encoder_input.EncoderInput`)."""
        full = self.plates[self.plate].size
        if self.first_trace is not None:  # the first call's setup: read from what the model observes in the plate
            self._input = EncoderInput.read(
                self.encoder_input, args, kwargs, observed_rows(self.first_trace, self.plate), indices, full,
                lambda: torch.equal(indices.cpu(), torch.arange(full)))
        in_order = self.call_plate is not None and self.call_plate.covers_all  # 0..N-1 by construction
        return self._input.rows(self._input.data(args, kwargs), indices, full, in_order)

    def _encoder(self, data, device):
        """The :class:`~.encoders.Encoder` around the user's body (left where the user put it) or the default
        one (on ``device``) for this data; its heads on the features' device."""
        body = self._body[0]
        if body is None:
            body = default_encoder(math.prod(data.shape[1:]), self.width, self.layers,
                                   data if self.standardize else None).to(device)
        try:
            with torch.no_grad():
                features = body(data)
        except RuntimeError as error:
            raise GuideError("the encoder cannot take the plate's data of shape %s: %s"
                                     % (tuple(data.shape), str(error).splitlines()[0])) from None
        if features.dim() != 2 or features.shape[0] != data.shape[0]:
            raise GuideError("the encoder must map data [B, ...] to features [B, F]; it gave %s for %s"
                                     % (tuple(features.shape), tuple(data.shape)))
        encoder = Encoder(body, features.shape[1], self.structure.size, self.init_scale, self.scale_link)
        encoder.loc.to(features.device)  # the heads only: a user's body stays where the user put it
        encoder.log_scale.to(features.device)
        start = (self.init_locs.mean(0), self.init_scale)  # init_loc_fn's μ, init_scale
        if self.head_init == "centred":
            encoder.centre(features.to(encoder.loc.weight), *start)
        elif self.head_init == "zero":  # every datapoint's factor starts at (init_loc_fn's μ, init_scale)
            with torch.no_grad():
                for head, bias in zip((encoder.loc, encoder.log_scale), (start[0], SCALE_LINKS[self.scale_link][1](
                        self.init_scale))):
                    head.weight.zero_()
                    head.bias.copy_(torch.as_tensor(bias).to(head.bias))
        return encoder

    def _setup_local(self, indices, args, kwargs, device):
        self.q_z = AmortizedFactor(self._encoder(self.encoder_data(indices, args, kwargs), device))

    def flow_context_size(self):
        return self.q_z.encoder.loc.in_features

    def flow_context(self, indices, args, kwargs):
        """The encoder's features of the datapoints: the amortized flow's context (the body run once more)."""
        # not ``self.q_z``: its parameters are registered once per call, by local_factor (PyroModule's access)
        return self._modules["q_z"].encoder.body(self.encoder_data(indices, args, kwargs))

    def local_factor(self, indices, args, kwargs, theta):
        return self.q_z(self.encoder_data(indices, args, kwargs), indices)
