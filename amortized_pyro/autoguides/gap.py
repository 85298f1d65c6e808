"""The amortization gap of any model and guide builder, the one function for every gap in the package
(:func:`measure_gap`): :mod:`amortized_pyro.local.gaps`' quantities (amortization, coupling and approximation gaps;
log p(x_n) by IWAE and AIS; q* converged per datapoint; refinement rows) on a **local posterior**, a small
protocol with three parts:

    draws of the globals      ``prepare(draws)``: the guide's θ draws, with what the log joint precomputes of them
    the local factor          ``factor(θ)``: the guide's (μ, σ) [B, size] for the call's datapoints, or None
                              (differentiable: an encoder's training step takes its gradient)
    the log joint             ``log_joint(x, z, θ)`` per datapoint, on ``x``, θ one value or draws stacked [M, ...]
                              (and ``size``, ``compact``, ``flow()``,
                              ``extras(best)``: what the report adds of its own,
                              ``unchecked``: whether Pyro's argument checks are off while it is measured)

:class:`TracedPosterior` implements it for any model, the log joint read off the model's trace
(:class:`.local_joint.LocalJoint`); a model may implement it itself, faster, by a method
``local_posterior(guide, args, kwargs, seen, stacked)`` (the package's model: its hand-written log joint,
:class:`~amortized_pyro.models.local_posterior.ModelPosterior`).

Everything lives in each local site's unconstrained space, where the guides' factors are Gaussian: the
gaps are those of the pushforward factors q(z_n), since the Jacobian is part of the log joint there. A model
without global latent sites has one "θ" (none), a point mass: no coupling term (no q*_m fitted, the coupling gap
None), as with ``global_guide="delta"``.
"""
import math
import numbers
import warnings
from contextlib import contextmanager, nullcontext

import torch

import pyro
from pyro.infer.autoguide import AutoGuideList

from amortized_pyro.autoguides.guide_list import held_at_draws
from amortized_pyro.autoguides.local_joint import LocalJoint, check_draws
from amortized_pyro.autoguides.masking import MaskedJoint
from amortized_pyro.autoguides.options import count
from amortized_pyro.errors import GuideError
from amortized_pyro.local.gaps import GapSettings, global_draws, measure_factors, selection_draws
from amortized_pyro.settings import INT64_MAX

REFINE_SEED = 0  # an SA-VI or IA-VI guide refines its factor with z draws of this seed: a measurement the same every time


def checked_settings(settings, name="settings"):
    """``settings`` (a :class:`GapSettings`; None: the defaults), checked; anything else refused in one line."""
    if settings is not None and not isinstance(settings, GapSettings):
        raise GuideError("%s must be a GapSettings, got %s" % (name, type(settings).__name__))
    return (settings or GapSettings()).check()


def checked_steps(refine_steps, name="refine_steps"):
    """``refine_steps`` as a list of whole numbers >= 0 (the command line's --refine-steps), or one line of
    :class:`GuideError`: a step count of -1 was measured as a refinement row, 2.5 and a bare 5 ended in Python's
    own TypeError (issue 71)."""
    if isinstance(refine_steps, (str, bytes)) or not hasattr(refine_steps, "__iter__"):
        raise GuideError("%s must be a list of whole numbers >= 0, got %r" % (name, refine_steps))
    steps = list(refine_steps)
    if any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0 for k in steps):
        raise GuideError("%s must be whole numbers >= 0, got %r" % (name, steps))
    return [int(k) for k in steps]


def checked_seed(seed, name="seed"):
    """``seed`` (None: the settings' own), a whole number in [0, int64's largest] (torch's generators overflow
    beyond), or one line of :class:`GuideError` naming it ``name``."""
    if seed is not None and count(name, seed, 0) > INT64_MAX:
        raise GuideError("%s must be at most %d (int64), got %d" % (name, INT64_MAX, seed))
    return seed


class TracedPosterior:
    """The local posterior of the module docstring for any model: the call ``model(*args, **kwargs)``'s datapoints,
    the log joint read off the model's trace. ``draws``: :func:`measure_gap`'s option; ``seen``: whether the guide
    was trained on these datapoints (a per-datapoint guide has a factor only for those); ``stacked``: θ comes as
    draws stacked [M, ...] (the gap's), else as one value (an encoder's training step)."""

    compact = False  # the model's log joint is of the whole call: no datapoint leaves an optimization early
    unchecked = False  # Pyro's argument checks as the user has them

    def __init__(self, model, guide, args, kwargs, seen=True, draws="auto", stacked=True):
        self.guide, self.args, self.kwargs, self.seen, self.draws = guide, args, kwargs, seen, draws
        self.stacked = stacked
        self.indices = guide.indices_of(*args, **kwargs)
        self.log_joint = LocalJoint(model, guide.structure, args, kwargs, self.indices, stacked=stacked, draws=draws,
                                    steady=True)
        kept = guide.coordinate_mask(args, kwargs, len(self.indices))
        if kept is not None:  # the model's masked coordinates: a standard Normal reference, as the guide's own steps
            self.log_joint = MaskedJoint(self.log_joint, kept)
        device = next(guide.parameters()).device
        self.x = torch.empty(len(self.indices), 0, device=device)  # the optimizers take n from it; args hold the data
        self.size = guide.structure.size

    def prepare(self, draws):
        return draws

    def factor(self, theta):
        if not (self.seen or self.guide.can_infer_unseen):
            return None
        with _guide_draws(self.guide, self.draws, self.args, self.kwargs, self.indices, self.stacked):
            return self.guide.local_factor(self.indices, self.args, self.kwargs, theta)

    def flow(self):
        return self.guide.row_flow(self.indices, self.args, self.kwargs)

    def extras(self, best):
        return {}


def local_posterior(model, guide, args, kwargs, seen=True, draws="auto", stacked=True):
    """The model's own local posterior where it has one (``model.local_posterior(guide, args, kwargs, seen, stacked)``),
    else :class:`TracedPosterior`. ``stacked``: θ comes as draws stacked [M, ...] (the gap's), else as one value
    whose ``factor(θ)`` keeps its gradient (an encoder's training step, :func:`~.capacity.encoder_step`)."""
    own = getattr(model, "local_posterior", None)
    if own is not None:
        return own(guide, args, kwargs, seen, stacked)
    return TracedPosterior(model, guide, args, kwargs, seen, draws, stacked)


@torch.no_grad()
def theta_draws(posterior, guide, settings, seed=None, selection=True):
    """(fit, score[, select]): the draws θ_m ~ q(θ) q* is fitted on, the fresh ones every L(q) is scored on, and
    with ``selection`` the ones q* is chosen on (:func:`~amortized_pyro.local.gaps.global_draws`,
    :func:`~amortized_pyro.local.gaps.selection_draws`), keyed by ``seed`` (default ``settings.seed``), each
    prepared by the posterior."""
    generator = torch.Generator(posterior.x.device).manual_seed(settings.seed if seed is None else seed)
    draws = global_draws(guide, settings, generator) + ((selection_draws(guide, settings, generator),)
                                                        if selection else ())
    return tuple(posterior.prepare(d) for d in draws)


@torch.no_grad()
def guide_factor(posterior, guide, theta):
    """The guide's factor on the posterior's datapoints at the draws ``theta`` (an SA-VI or IA-VI guide's refined
    there with z draws of :data:`REFINE_SEED`, so that a measurement is the same every time), or None."""
    with guide.refinement_draws(torch.Generator(posterior.x.device).manual_seed(REFINE_SEED)):
        return posterior.factor(theta)


def measure_gap(model, guide, *args, settings=None, refine_steps=(), seen=True, draws="auto", seed=None,
                progress=False, log=None, **kwargs):
    """The gaps per datapoint of the data plate in the model's call ``model(*args, **kwargs)``, for a trained
    guide of :mod:`amortized_pyro.autoguides` (its parameters are not changed), on the model's local posterior
    (:func:`local_posterior`).

    :param model: the Pyro model the guide was built from, every latent site of it one the guide covers (an
        enumerated discrete site summed out by hand): a latent site left, or a draw no trace shows (a site hidden
        by ``poutine.block``), is refused in one line (:mod:`.local_joint`), never counted at a prior draw.
    :param guide: an :class:`~amortized_pyro.autoguides.AutoLocalGuide`, or Pyro's ``AutoGuideList`` with
        exactly one such part: its gap with the other parts' sites (in its data plate) held at one draw from the
        measurement's seed, the model conditioned on them (:mod:`.guide_list`): a gap conditional on those draws,
        whose log p(x_n) is log p(x_n, held_n); the report's ``held_at_draws`` names the held sites.
    :param GapSettings settings: the Monte Carlo budget and q*'s stopping rule (defaults: GapSettings()); its
        ``seed`` keys every draw unless ``seed`` is given (``paired`` has nothing to pair here: the caller
        chooses the datapoints, and a seed per training run is the caller's to add).
    :param refine_steps: refinement rows: Adam steps from the guide's factor (0: the guide's own); a flow
        guide takes none but 0.
    :param bool seen: whether these datapoints are ones the guide was trained on; a per-datapoint guide has a
        factor only for those (otherwise its quantities are None and q* starts at N(0, I)).
    :param str draws: how the model is run on the estimators' many draws of θ and z
        (:class:`~amortized_pyro.autoguides.local_joint.LocalJoint`): ``"stacked"`` (one call, the draws a
        batch dimension left of the model's plates: the model must be broadcast-safe), ``"one-at-a-time"`` (one
        call per draw on plain [B, ...] values: any model, about as many times slower as there are draws per
        call) or ``"auto"`` (stacked until a stacked call raises, then one at a time, said once by a
        :class:`~amortized_pyro.autoguides.local_joint.NotBroadcastSafe` warning). An SA-VI or iterative
        guide's own steps (reading the log joint off the model's trace) take the same option. A model with a
        local posterior of its own ignores it.
    :param int seed: the draws' seed (default: ``settings.seed``).
    :param bool progress: a progress bar per phase on stderr; without one, ``log`` (where given) gets a line as
        each phase begins.
    :returns: the dict of :func:`amortized_pyro.local.gaps.measure_factors` (summaries "mean", "stderr" over the
        datapoints, and ``per_image`` values), with the posterior's extras (and, for an AutoGuideList,
        ``held_at_draws``).
    """
    settings, refine_steps, seed = checked_settings(settings), checked_steps(refine_steps), checked_seed(seed)
    check_draws(draws)
    held = None
    if isinstance(guide, AutoGuideList):  # its builder part, on the model held at the other parts' draws
        guide, model, held = held_at_draws(model, guide, args, kwargs, settings.seed if seed is None else seed)
    elif not hasattr(guide, "structure"):  # a hand-written guide: no factor to start q* from
        raise GuideError("measure_gap takes a guide builder of amortized_pyro.autoguides, not %s: it reads the "
                         "guide's factor of each datapoint, which a hand-written guide does not expose; build one "
                         "of the builders on the model to measure its gap" % type(guide).__name__)
    if guide.structure is None:  # a builder not called yet: read the model now
        with torch.no_grad():
            guide(*args, **kwargs)
    if any(refine_steps):
        guide.check_gaussian("refinement")
    posterior = (local_posterior(model, guide, args, kwargs, seen, draws) if held is None else
                 TracedPosterior(model, guide, args, kwargs, seen, draws))  # the conditioned model's trace
    with pyro.validation_enabled(False) if posterior.unchecked else nullcontext():
        result = _measure(posterior, guide, settings, refine_steps, seed, progress, log)
    _refuse_nan(result)
    if held is not None:
        result["held_at_draws"] = held
    if result["kept_at_cap"]:
        warnings.warn("for %d of %d datapoints q*'s optimization from the guide's factor stopped at max_steps=%d "
                      "without beating it: their amortization gap reads 0, a lower bound, not a measurement "
                      "(raise GapSettings(max_steps=...))" % (result["kept_at_cap"],
                                                              len(result["per_image"]["elbo_optimized"]),
                                                              settings.max_steps), GapNotMeasured, stacklevel=2)
    return result


class GapNotMeasured(UserWarning):
    """q* kept the guide's own factor because its optimization hit the step cap: a gap of 0 there is unmeasured."""


def _refuse_nan(result):
    """One line of :class:`GuideError` where a per-datapoint quantity came out NaN: never returned as numbers."""
    for name, values in result.get("per_image", {}).items():
        if not isinstance(values, (list, tuple)):
            continue
        bad = [i for i, v in enumerate(values) if isinstance(v, float) and math.isnan(v)]
        if bad:
            raise GuideError("the gap's %s is NaN for %d of %d datapoints (the first: %d): the guide's factor or "
                             "the model's log density is not finite there; try encoder_input= a transform of the "
                             "data (log1p of counts), a smaller learning rate, or fewer steps per refinement"
                             % (name, len(bad), len(values), bad[0]))


def _measure(posterior, guide, settings, refine_steps, seed, progress, log):
    fit, score, select = theta_draws(posterior, guide, settings, seed)  # q* chosen on draws of their own
    factor = guide_factor(posterior, guide, fit.at("guide"))
    result, best = measure_factors(posterior.log_joint, posterior.x, fit, score, factor, posterior.size, settings,
                                   () if guide.local_flow is not None else refine_steps, progress,
                                   compact=posterior.compact, coupling=not guide.global_is_point(),
                                   flow=posterior.flow(), select=select, log=log)
    result.update(posterior.extras(best))
    return result


@contextmanager
def _guide_draws(guide, draws, args, kwargs, indices, stacked=True):
    """While it lasts, an SA-VI or iterative guide that reads the log joint off its model's trace reads it with
    ``draws`` (its own default is "auto") and θ ``stacked`` or not; other guides, and ``draws="auto"``, are left as
    they are."""
    if draws == "auto" or getattr(guide, "local_log_joint", True) is not None:
        yield
        return
    guide.local_log_joint = LocalJoint(guide.model, guide.structure, args, kwargs, indices, stacked=stacked, draws=draws)
    try:
        yield
    finally:
        guide.local_log_joint = None
