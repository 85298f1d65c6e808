"""The amortization gap of any model and guide builder: :mod:`amortized_pyro.gap.measure`'s quantities (amortization,
coupling and approximation gaps; log p(x_n) by IWAE and AIS; q* converged per datapoint; refinement rows),
with the per-datapoint log joint read off the model's trace (:class:`.local_joint.LocalJoint`) and the global
draws θ_m taken from the guide's global part.

Everything lives in each local site's unconstrained space, where the guides' factors are Gaussian: the
gaps are those of the pushforward factors q(z_n), since the Jacobian is part of the log joint there. A model
without global latent sites has one "θ" (none): its coupling gap is zero up to optimization noise.
"""
from contextlib import contextmanager

import torch

from amortized_pyro.autoguides.local_joint import LocalJoint, check_draws
from amortized_pyro.autoguides.masking import MaskedJoint
from amortized_pyro.local.gaps import GapSettings, global_draws, measure_factors, selection_draws


def measure_gap(model, guide, *args, settings=None, refine_steps=(), seen=True, draws="auto", **kwargs):
    """The gaps per datapoint of the data plate in the model's call ``model(*args, **kwargs)``, for a trained
    guide of :mod:`amortized_pyro.autoguides` (its parameters are not changed).

    :param model: the Pyro model the guide was built from.
    :param guide: an :class:`~amortized_pyro.autoguides.AutoLocalGuide`.
    :param GapSettings settings: the Monte Carlo budget and q*'s stopping rule (defaults: GapSettings()); its
        ``seed`` keys every draw (``paired`` has nothing to pair here: the caller chooses the datapoints, and
        a seed per training run is the caller's to add).
    :param refine_steps: refinement rows: Adam steps from the guide's factor (0: the guide's own).
    :param bool seen: whether these datapoints are ones the guide was trained on; a per-datapoint guide has a
        factor only for those (otherwise its quantities are None and q* starts at N(0, I)).
    :param str draws: how the model is run on the estimators' many draws of θ and z
        (:class:`~amortized_pyro.autoguides.local_joint.LocalJoint`): ``"stacked"`` (one call, the draws a
        batch dimension left of the model's plates: the model must be broadcast-safe), ``"one-at-a-time"`` (one
        call per draw on plain [B, ...] values: any model, about as many times slower as there are draws per
        call) or ``"auto"`` (stacked until a stacked call raises, then one at a time, said once by a
        :class:`~amortized_pyro.autoguides.local_joint.NotBroadcastSafe` warning). An SA-VI or iterative
        guide's own steps (reading the log joint off the model's trace) take the same option.
    :returns: the dict of :func:`amortized_pyro.local.gaps.measure_factors`: summaries ("mean", "stderr" over the
        datapoints) and ``per_image`` values.
    """
    settings = (settings or GapSettings()).check()
    check_draws(draws)
    if guide.structure is None:  # a builder not called yet: read the model now
        with torch.no_grad():
            guide(*args, **kwargs)
    if guide.local_flow is not None and refine_steps:
        guide.check_gaussian("refinement")
    indices = guide.indices_of(*args, **kwargs)
    device = next(guide.parameters()).device
    generator = torch.Generator(device).manual_seed(settings.seed)
    fit, score = global_draws(guide, settings, generator)
    select = selection_draws(guide, settings, generator)  # q* chosen among its candidates on draws of their own
    log_joint = LocalJoint(model, guide.structure, args, kwargs, indices, stacked=True, draws=draws)
    kept = guide.coordinate_mask(args, kwargs, len(indices))
    if kept is not None:  # the model's masked coordinates: a standard Normal reference, as the guide's own steps
        log_joint = MaskedJoint(log_joint, kept)
    placeholder = torch.empty(len(indices), 0, device=device)  # the optimizers take n from it; the model's args hold x
    factor = None
    if seen or guide.can_infer_unseen:
        with torch.no_grad(), _guide_draws(guide, draws, args, kwargs, indices):
            factor = guide.local_factor(indices, args, kwargs, fit.at("guide"))
    result, _ = measure_factors(log_joint, placeholder, fit, score, factor, guide.structure.size, settings,
                                refine_steps, flow=guide.row_flow(indices, args, kwargs), select=select)
    return result


@contextmanager
def _guide_draws(guide, draws, args, kwargs, indices):
    """While it lasts, an SA-VI or iterative guide that reads the log joint off its model's trace reads it with
    ``draws`` (its own default is "auto"); other guides, and ``draws="auto"``, are left as they are."""
    if draws == "auto" or getattr(guide, "local_log_joint", True) is not None:
        yield
        return
    guide.local_log_joint = LocalJoint(guide.model, guide.structure, args, kwargs, indices, stacked=True, draws=draws)
    try:
        yield
    finally:
        guide.local_log_joint = None
