"""The per-datapoint diagnostics of a trained run (:mod:`amortized_pyro.autoguides.diagnose` on the package's
model), what the ``diagnose`` command writes: on the gap's images of each split (the same images as ``gap``
with the same seed: :func:`~amortized_pyro.gap.measure.gap_images`), k̂ of the guide's factor and of the factor
refined by each of ``refine_steps`` Adam steps, and local SBC on data the fitted model simulates.
"""
import time

import torch

from amortized_pyro.autoguides.diagnose import importance_diagnostics, local_sbc, reading
from amortized_pyro.autoguides.gap import checked_seed, checked_steps
from amortized_pyro.autoguides.options import count, positive
from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.gap.measure import gap_images
from amortized_pyro.local.diagnostics import KHAT_DRAWS
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.models.conditional import model_data
from amortized_pyro.runs.fit import finished_run
from amortized_pyro.runs.store import read_info

SPLITS = ("train", "test")
SBC_THETA_DRAWS = 10  # the simulations come in this many rounds, each at its own θ ~ q(θ)


def diagnose_run(run_dir, n_images=20, seed=0, samples=1000, theta_draws=4, simulations=200, sbc_draws=99,
                 refine_steps=(), refine_lr=1e-2, q_star=False, device="cpu", log=print):
    """The run's diagnostics: per split, ``n_images`` images drawn by the gap seed (``seed`` plus the run's
    training seed: ``gap``'s images for the same seed), k̂ and the log weights' summaries of the guide's factor
    and of each refined one (``refine_steps``) and, with ``q_star``, of q*; then ``simulations`` simulated images' ranks (not for a
    per-datapoint guide, which has no factor for them). Returns the report's dict (``diagnose.json``).
    Every argument is checked before the run is read."""
    for name, value, low in (("n_images", n_images, 1), ("samples", samples, KHAT_DRAWS),
                             ("theta_draws", theta_draws, 1), ("simulations", simulations, 0),
                             ("sbc_draws", sbc_draws, 1)):
        count(name, value, low)
    checked_seed(seed)
    refine_steps = checked_steps(refine_steps)
    if refine_steps:
        positive("refine_lr", refine_lr)
    log("loading the run %s and its images" % run_dir)
    result, data = finished_run(run_dir, device, log)
    data = model_data(result.model, data)
    c, guide = result.config, result.guide
    if guide.local_flow is not None and (refine_steps or q_star):
        raise AmortizedPyroError("refinement rows and q* take a Gaussian q(z_n); this run's guide has a flow: "
                                 "drop --refine-steps and --q-star")
    report = dict(run=str(run_dir), run_id=read_info(run_dir).get("run_id"), guide=c.guide, width=c.width,
                  seed=c.seed, samples=samples, theta_draws=theta_draws, refine_steps=list(refine_steps), q_star=q_star,
                  refine_lr=refine_lr, splits={})
    settings = GapSettings(seed=seed)
    for split in SPLITS:
        images = data.train if split == "train" else data.test
        if images.shape[0] == 0:
            continue
        gap_seed, chosen = gap_images(settings, c.seed, images.shape[0], n_images)
        x = images[chosen.to(images.device)]
        idx = chosen.to(x.device) if split == "train" else None
        seen = not (c.guide == "per-datapoint" and split == "test")
        if not seen:
            log("%s: a per-datapoint guide has no factor for held-out images: skipped" % split)
            continue
        log("%s: k̂ of %d images (gap seed %d), %d z draws at each of %d θ draws%s" % (
            split, x.shape[0], gap_seed, samples, theta_draws,
            ("; refined by %s steps" % ", ".join(map(str, refine_steps)) if refine_steps else "")
            + ("; q*" if q_star else "")))
        began = time.perf_counter()
        found = importance_diagnostics(result.model, guide, x, idx, samples=samples, theta_draws=theta_draws,
                                       seed=gap_seed, refine_steps=refine_steps, refine_lr=refine_lr, q_star=q_star)
        log("%s: done in %.0f s" % (split, time.perf_counter() - began))
        report["splits"][split] = dict(found, gap_seed=gap_seed, images=chosen.tolist(), reading=reading(found))
    report["calibration"] = None
    if guide.can_infer_unseen and simulations:
        batch = data.train[:min(len(data.train), -(-simulations // SBC_THETA_DRAWS))]
        log("calibration: %d images simulated from the fitted model in rounds of %d, each at its own θ draw, ranked "
            "among %d draws of q each" % (simulations, len(data.train[:-(-simulations // SBC_THETA_DRAWS)]), sbc_draws))
        began = time.perf_counter()
        idx = torch.arange(len(batch), device=batch.device)  # the batch's places in the plate
        report["calibration"] = local_sbc(result.model, guide, batch, idx, simulations=simulations, draws=sbc_draws,
                                          seed=seed + c.seed)
        log("calibration: done in %.0f s" % (time.perf_counter() - began))
    if not report["splits"]:
        raise AmortizedPyroError("the run has no images to diagnose")
    return report

