"""Where the held-out amortization gap comes from: the encoder's generalization from N images, or held-out
posteriors that are hard to predict from x under this decoder? With a trained run's q(θ) frozen, fresh
encoders are trained on chosen images and scored against one reference measurement per image set:

    train         ``n_images`` of the run's training images, drawn by the gap seed (those of the ``gap``
                  command), in every fresh encoder's training images
    train-unseen  ``n_images`` other training images (the next in the gap seed's order): the decoder was
                  trained on them; encoders trained on a subset never see them
    test          ``n_images`` of the run's held-out images, drawn by the gap seed

What an encoder trains on (``train_on``): ``"train"`` (the run's N training images), ``"train+test"`` (those
and every held-out image: a transductive encoder, the upper reference), or a number n < N (the ``train``
images and the first n − ``n_images`` others in the gap seed's order, never the train-unseen ones: nested
subsets, the decoder fixed, so that N varies for the encoder alone). Regularized variants (:class:`FreshEncoder`):
AdamW's weight decay on the encoder's matrices, or early stopping on a validation split (the last tenth of
its training images, held out from it): the best window's encoder by the validation images' local ELBO,
stopped after ``patience`` windows without a rise.

The reference (:func:`reference`) is :func:`~amortized_pyro.autoguides.measure_gap` of the run's own guide on
each set: L(q*), the q*_m, log p(x), and the jointly trained encoder's L and refinement rows. A fresh
encoder's amortization gap on a set is L_n(q*) − L_n(encoder) on the reference's score draws
(:func:`~amortized_pyro.gap.measure.guide_elbos`: common random numbers), and likewise after each refinement
row's steps (semi-amortized inference at test time); so every encoder of a run is compared with the same q*.
Each encoder trains by :func:`~amortized_pyro.gap.capacity.train_encoder` until the convergence rule holds
*and* its training objective has reached the jointly trained encoder's on the same images (``target``), or
the epoch cap; at each window's end its gaps on ``train`` and ``test`` are recorded with ``TRACE_SAMPLES``
z draws (the trajectory: the held-out gap at every training gap it passed through).

Reading: the same decoder, images and q* for every encoder of a run, so differences between encoders are the
encoders'. If the transductive encoder's test gap falls to its train gap, held-out posteriors are as
predictable as training ones and the held-out gap is the encoder's generalization; if the subset encoders'
train-unseen gap is as large as their test gap, the decoder having seen an image does not make it easier.
"""
import copy
import math
from dataclasses import asdict, dataclass, replace

import torch

from amortized_pyro.gap.capacity import objective_level, train_encoder
from amortized_pyro.autoguides.gap import measure_gap
from amortized_pyro.gap.measure import gap_seed_for, guide_elbos
from amortized_pyro.local.gaps import summarize
from amortized_pyro.models.conditional import model_data

SETS = ("train", "train-unseen", "test")
TRACE_SAMPLES = 10  # z draws per image and θ draw of the trajectory's gaps (unbiased, noisier than the final's)
VALIDATION_FRACTION = 0.1


@dataclass(frozen=True)
class FreshEncoder:
    """One fresh encoder of the study: its width, what it trains on, and its regularizer.

    :param int width: hidden width k (the run's encoder's hidden layers and slope).
    :param train_on: ``"train"``, ``"train+test"`` or a number of training images (module docstring).
    :param str regularizer: ``"none"``, ``"weight-decay"`` (AdamW, decay ``strength``) or ``"early-stopping"``
        (validation on a tenth of its training images, ``strength`` windows of patience).
    """

    width: int
    train_on: object = "train"
    regularizer: str = "none"
    strength: float = 0.0

    @property
    def name(self):
        extra = {"none": "", "weight-decay": ", weight decay %g" % self.strength,
                 "early-stopping": ", early stopping (patience %d windows)" % self.strength}[self.regularizer]
        return "k=%d on %s%s" % (self.width, self.train_on, extra)


def image_sets(data, gap_seed, n_images):
    """{set name: (indices into its split, images)} of the module docstring, and the training images' order
    that subsets are cut from (the gap seed's)."""
    order = torch.randperm(data.train.shape[0], generator=torch.Generator().manual_seed(gap_seed))
    test = torch.randperm(data.test.shape[0], generator=torch.Generator().manual_seed(gap_seed))[:n_images]
    chosen = {"train": order[:n_images], "train-unseen": order[n_images:2 * n_images], "test": test}
    return {name: (idx, (data.test if name == "test" else data.train)[idx.to(data.train.device)])
            for name, idx in chosen.items()}, order


def training_images(data, order, encoder, n_images):
    """The images ``encoder`` trains on (module docstring) and, with early stopping, its validation images."""
    if encoder.train_on == "train":
        x = data.train[order.to(data.train.device)]
    elif encoder.train_on == "train+test":
        x = torch.cat([data.train[order.to(data.train.device)], data.test])
    else:
        n = int(encoder.train_on)
        rows = torch.cat([order[:n_images], order[2 * n_images:2 * n_images + n - n_images]])
        x = data.train[rows.to(data.train.device)]
    if encoder.regularizer != "early-stopping":
        return x, None
    held = max(1, int(VALIDATION_FRACTION * (x.shape[0] - n_images)))  # never the measured training images
    return x[:-held], x[-held:]


def reference(model, guide, sets, settings, gap_seed, refine_steps, progress=False):
    """{set name: the report of :func:`~amortized_pyro.autoguides.measure_gap` for the run's own guide}."""
    reports = {}
    for name, (idx, x) in sets.items():
        report = measure_gap(model, guide, x, idx.to(x.device) if name != "test" else None, settings=settings,
                             refine_steps=refine_steps, seed=gap_seed, progress=progress)
        reports[name] = dict(report, images=idx.tolist(), n_images=x.shape[0])
    return reports


def gaps(model, guide, sets, references, settings, gap_seed, refine_steps=()):
    """{set name: (per-image amortization gaps [n], {k: gaps left after k refinement steps}, {k: seconds})}
    of ``guide`` against the references' q*."""
    out = {}
    for name, (idx, x) in sets.items():
        elbos, seconds = guide_elbos(model, guide, x, idx if name != "test" else None, settings, gap_seed,
                                     refine_steps)
        best = torch.tensor(references[name]["per_image"]["elbo_optimized"], device=x.device)
        out[name] = (best - elbos["guide"], {k: best - elbos[k] for k in refine_steps}, seconds)
    return out


def train_and_score(result, data, encoder, training, settings, references, gap_seed, n_images, refine_steps,
                    seed):
    """One fresh ``encoder`` on the run ``result``'s frozen q(θ), trained and scored: a row per set."""
    model, run_guide = result.model, result.guide
    sets, order = image_sets(data, gap_seed, n_images)
    x, validation = training_images(data, order, encoder, n_images)
    target = objective_level(model, run_guide.q_theta, run_guide.q_z, x, seed)
    trace_settings = replace(settings, samples=TRACE_SAMPLES)
    trace_sets = {name: sets[name] for name in ("train", "test")}
    trajectory, best = [], {"score": -math.inf, "state": None, "epoch": 0, "since": 0}

    def window_end(guide, epochs, mean):
        found = gaps(model, guide, trace_sets, references, trace_settings, gap_seed)
        trajectory.append({"epoch": epochs, "objective": mean,
                           **{name: found[name][0].mean().item() for name in found}})
        if validation is None:
            return False
        score = objective_level(model, run_guide.q_theta, guide.q_z, validation, seed + 1, epochs=2)
        trajectory[-1]["validation"] = score
        if score > best["score"]:
            best.update(score=score, state=copy.deepcopy(guide.q_z.state_dict()), epoch=epochs, since=0)
        else:
            best["since"] += 1
        return best["since"] >= encoder.strength

    guide, epochs, capped, elbo = train_encoder(
        model, run_guide.q_theta, x, encoder.width, result.config.encoder_layers, result.config.encoder_slope,
        training, seed, target=target if validation is None else -math.inf, window_end=window_end,
        weight_decay=encoder.strength if encoder.regularizer == "weight-decay" else 0.0,
        encoder_label=result.config.encoder_label)
    if best["state"] is not None:
        guide.q_z.load_state_dict(best["state"])
    rows = []
    for name, (per_image, refined, seconds) in gaps(model, guide, sets, references, settings, gap_seed,
                                                     refine_steps).items():
        ref = references[name]
        rows.append(dict(asdict(encoder), encoder=encoder.name, set=name, n_images=per_image.numel(),
                         n_train=x.shape[0], epochs=epochs, encoder_capped=capped, encoder_elbo=elbo,
                         target=target, reached_target=elbo >= target, best_epoch=best["epoch"] or epochs,
                         amortization_gap=summarize(per_image), per_image=per_image.tolist(),
                         refinement=[{"steps": k, "gap_left": summarize(refined[k]), "seconds": seconds[k]}
                                     for k in refine_steps],
                         joint_amortization_gap=ref["amortization_gap"], coupling_gap=ref["coupling_gap"],
                         approximation_gap=ref["approximation_gap"], hit_cap=ref["hit_cap"],
                         training=asdict(training), trajectory=trajectory))
    return rows


def study(result, data, encoders, training, settings, n_images, refine_steps=(), references=None, done=(),
          save=None, log=print, progress=False):
    """Every fresh encoder of ``encoders`` on the finished run ``result`` (its data ``data``), trained with
    the run's training seed and scored on the sets of the gap seed (``settings.seed`` plus that seed unless
    ``settings.paired``): (the references, the rows). ``references`` (a previous call's) are reused where
    given; encoders with rows in ``done`` are not trained again; ``save(references, rows)`` after each."""
    seed = result.config.seed
    data = model_data(result.model, data)  # a conditional run's images with their labels
    gap_seed = gap_seed_for(settings, seed)
    sets, _ = image_sets(data, gap_seed, n_images)
    if references is None:
        log("reference: q*, the q*_m and log p(x) on %s (%d images each)" % (", ".join(sets), n_images))
        references = reference(result.model, result.guide, sets, settings, gap_seed, refine_steps, progress)
    rows, finished = list(done), {r["encoder"] for r in done}
    for encoder in encoders:
        if encoder.name in finished:
            continue
        new = train_and_score(result, data, encoder, training, settings, references, gap_seed, n_images,
                              refine_steps, seed)
        log("%s: %d epochs%s; amortization gap %s" % (encoder.name, new[0]["epochs"],
                                                     " (cap)" if new[0]["encoder_capped"] else "",
                                                     ", ".join("%s %.1f" % (r["set"], r["amortization_gap"]["mean"])
                                                               for r in new)))
        rows += new
        if save:
            save(references, rows)
    return references, rows
