"""The gap of a trained run (:func:`~amortized_pyro.autoguides.measure_gap`, on the package model's local
posterior: :class:`~amortized_pyro.models.local_posterior.ModelPosterior`): which images (:func:`gap_images`, by
the gap seed), a fresh guide's local ELBO on a report's draws (:func:`guide_elbos`), and the report of one run and
split (:func:`measure_run`, what the ``gap`` command writes).
"""
import time

import torch

import pyro

from amortized_pyro.autoguides.gap import checked_settings, checked_steps, guide_factor, measure_gap, theta_draws
from amortized_pyro.autoguides.options import count
from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.local.estimates import local_elbo
from amortized_pyro.local.optimize import refine
from amortized_pyro.models.conditional import model_data
from amortized_pyro.models.local_posterior import ModelPosterior
from amortized_pyro.models.guides import config_label
from amortized_pyro.runs.fit import finished_run
from amortized_pyro.runs.store import read_info


def gap_seed_for(settings, run_seed):
    """The gap seed of a run trained with seed ``run_seed``: ``settings.seed`` plus it, or ``settings.seed`` alone
    where ``settings.paired`` (every run then measured on the same images and draws). The one rule, for the gap
    report's images (:func:`gap_images`) and the held-out study's sets."""
    return settings.seed + (0 if settings.paired else run_seed)


def gap_images(settings, run_seed, split_size, n_images):
    """(the gap seed, the indices of ``n_images`` of a split's ``split_size`` images drawn without replacement
    by it)."""
    gap_seed = gap_seed_for(settings, run_seed)
    return gap_seed, torch.randperm(split_size, generator=torch.Generator().manual_seed(gap_seed))[:n_images]


@pyro.validation_enabled(False)  # argument checks of every Normal built in the loops: 9% of a gap (BENCHMARKS.md)
def guide_elbos(model, guide, x, idx=None, settings=None, seed=None, refine_steps=(), optimizer="adam", lr=None):
    """L_n of ``guide``'s factor per image on the score draws that :func:`~amortized_pyro.autoguides.measure_gap`
    takes for the same images, settings and seed, so that a report's L_n(q*) minus it is this guide's amortization
    gap with common random numbers (another encoder on a run's frozen q(θ), say), and the same after each of
    ``refine_steps`` Adam steps from it (the report's refinement rows; ``optimizer`` and ``lr``: the steps',
    default Adam at ``settings.refine_lr``): ({"guide": [n], k: [n], ...}, {k: seconds of the k steps})."""
    settings = checked_settings(settings)
    guide.check_gaussian("the guide's local ELBO")
    posterior = ModelPosterior(model, guide, x, idx)
    fit, score = theta_draws(posterior, guide, settings, seed, selection=False)
    scored, chunk = score.at("score"), settings.chunk
    loc, scale = guide_factor(posterior, guide, fit.at("guide"))
    elbos, seconds = {"guide": local_elbo(model.local_log_joint, x, loc, scale, scored, settings.samples, chunk)}, {}
    for k in refine_steps:
        began = time.perf_counter()
        k_loc, k_log_scale = refine(model.local_log_joint, x, loc, scale.log(), fit.at("refine"),
                                    lr or settings.refine_lr, k, settings.step_samples, chunk=chunk, optimizer=optimizer)
        seconds[k] = time.perf_counter() - began
        elbos[k] = local_elbo(model.local_log_joint, x, k_loc, k_log_scale.exp(), scored, settings.samples, chunk)
    return elbos, seconds


def phases(guide, settings, refine_steps=()):
    """What :func:`~amortized_pyro.autoguides.measure_gap` does for ``guide``, in order, a phrase each (what a run's measurement says first)."""
    steps = settings.max_steps
    said = ["q* per image (at most %d steps)" % steps]
    if guide.local_flow is None and [k for k in refine_steps if k]:
        said.append("the refinement rows (%s steps)" % ", ".join(str(k) for k in refine_steps if k))
    if not guide.global_is_point():
        said.append("the q*_m at each of %d θ draws (at most %d steps)" % (settings.theta_draws, steps))
    said.append("log p(x) by IWAE (%d samples)" % settings.importance_samples)
    if settings.ais_steps:
        said.append("by AIS (%d steps, %d chains)" % (settings.ais_steps, settings.ais_chains))
    return said


SPLITS = ("train", "test")


def measure_run(run_dir, split="test", n_images=100, settings=None, refine_steps=(), device="cpu", log=print,
                progress=False):
    """:func:`~amortized_pyro.autoguides.measure_gap` on ``n_images`` of a finished run's training or test images, drawn
    at random (without replacement) by the gap seed: ``settings.seed`` plus the run's training seed, or
    ``settings.seed`` alone where ``settings.paired``. The report names the run, the split, the settings,
    the gap seed and the images' indices (see the ``gap`` command)."""
    settings, refine_steps = checked_settings(settings), checked_steps(refine_steps)
    if split not in SPLITS:
        raise AmortizedPyroError("split must be one of %s, got %r" % (", ".join(SPLITS), split))
    count("n_images", n_images, 1)
    log("loading the run %s and its images" % run_dir)
    result, data = finished_run(run_dir, device, log)
    data = model_data(result.model, data)
    images = data.train if split == "train" else data.test
    if images.shape[0] == 0:
        raise AmortizedPyroError("the run has no %s images" % split)
    c = result.config
    if n_images > images.shape[0]:
        log("the run has %d %s images: measuring all of them, not %d" % (images.shape[0], split, n_images))
    gap_seed, chosen = gap_images(settings, c.seed, images.shape[0], n_images)
    x = images[chosen.to(images.device)]  # with their labels where the run is conditional
    idx = chosen.to(x.device) if split == "train" else None
    own = not (c.guide == "per-datapoint" and split == "test")  # F-VI has no factor for held-out images
    log("measuring on %d %s images (gap seed %d), in turn: %s" % (
        x.shape[0], split, gap_seed, "; ".join(phases(result.guide, settings, refine_steps if own else ()))))
    began = time.perf_counter()
    report = measure_gap(result.model, result.guide, x, idx, settings=settings, refine_steps=refine_steps,
                         seed=gap_seed, progress=progress, log=log)
    log("measured in %.0f s" % (time.perf_counter() - began))
    return dict(run=str(run_dir), run_id=read_info(run_dir).get("run_id"), trained_epochs=len(result.history),
                guide=c.guide, width=c.width, seed=c.seed, label=config_label(c), split=split,
                n_images=x.shape[0], gap_seed=gap_seed, images=chosen.tolist(), **report)
