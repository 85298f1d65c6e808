"""Cremer et al.'s protocol, Bayesian-decoder edition: with q(θ) of a trained run frozen, fresh encoders of
growing capacity (width × hidden layers) are trained on the frozen decoder alone, each to convergence, and their
amortization gap is measured on training and held-out images (:func:`~amortized_pyro.autoguides.measure_gap`). Does
capacity close the gap when the decoder is fixed, and does the held-out gap follow?

Training an encoder φ: Adam on the local ELBO, Σ_n L_n(encoder_φ(x_n); θ) over minibatches of the run's
training images (reshuffled each epoch), a fresh θ ~ q(θ) per step (KL(q(θ) ‖ p(θ)) does not depend on φ
and is left out), to the convergence rule of :mod:`amortized_pyro.autoguides.capacity` (windows of epochs
average out the noise of single epochs, whose draws are fresh) *and*, where the run has an encoder of its own,
until the fresh encoder's training objective has reached that encoder's on the same images
(:func:`objective_level`): a fresh encoder that stops below the one the decoder was trained with measures the
optimizer, not the capacity (a fresh k = 64 encoder at lr 1e-3 stopped 14 nats per image short of it). Those
that never reach it stop at ``max_epochs``, recorded as a cap hit (``reached_target`` False). The same protocol for any model and guide
builder is :func:`amortized_pyro.autoguides.capacity.capacity_sweep`; both go through one loop
(:func:`~amortized_pyro.autoguides.capacity.sweep_encoders`) and one encoder trainer
(:func:`~amortized_pyro.autoguides.capacity.train_to_convergence`), on the model's local posterior (here the
package model's hand-written log joint); a run's sweep adds minibatches, the run's encoder body and the target.
"""
import math
from dataclasses import asdict

import torch

from amortized_pyro.autoguides.capacity import sweep_encoders, train_to_convergence
from amortized_pyro.autoguides.gap import measure_gap
from amortized_pyro.gap.measure import gap_images
from amortized_pyro.inference.svi import make_optimizer
from amortized_pyro.local.estimates import log_weights
from amortized_pyro.models.conditional import model_data
from amortized_pyro.models.guides import FAMILIES, label, make_guide
from amortized_pyro.support.batching import minibatches
from amortized_pyro.support.streams import outside_the_stream


def train_encoder(model, q_theta, x, width, layers, slope, training, seed, target=-math.inf, window_end=None,
                  weight_decay=0.0, encoder_label=True):
    """A fresh amortized guide of the package (:func:`~amortized_pyro.models.guides.make_guide`, the run's encoder
    body) on the frozen ``q_theta`` (a copy), its encoder trained to convergence on the images ``x`` by the one
    encoder trainer (:func:`~amortized_pyro.autoguides.capacity.train_to_convergence`) on minibatches of
    ``training.encoder_batch_size`` images, reshuffled each epoch (module docstring; ``target`` and
    ``window_end(guide, epochs, mean)`` as there; ``weight_decay``: AdamW's decoupled decay on the encoder's
    weight matrices, as ``fit --weight-decay``): (the guide, epochs run, whether the cap was hit, the last
    window's mean local ELBO per image)."""
    with outside_the_stream(x.device):
        torch.manual_seed(seed)  # the encoder's initialisation
        guide = make_guide("amortized", model, width=width, encoder_layers=layers, encoder_slope=slope,
                           encoder_label=encoder_label).to(x.device)  # a CVAE's encoder reads the label as the run's
    guide.q_theta.load_state_dict(q_theta.state_dict())
    optimizer = make_optimizer(guide, training.encoder_lr, weight_decay, params=dict(guide.q_z.named_parameters()))

    def calls(generator):
        return [((x[rows], rows), {}) for rows in minibatches(x.shape[0], training.encoder_batch_size, x.device,
                                                               generator)]

    return (guide,) + train_to_convergence(model, guide, calls, x.shape[0], training, seed, optimizer, target,
                                           window_end)


@torch.no_grad()
def objective_level(model, q_theta, factor, x, seed, epochs=5, batch_size=250):
    """The encoder training objective (mean local ELBO per image, one θ ~ q(θ) per minibatch and one z draw
    per image) of ``factor`` on images ``x``, averaged over ``epochs`` passes: the level a fresh encoder must
    reach (the jointly trained encoder's)."""
    generator, total = torch.Generator(x.device).manual_seed(seed), 0.0
    for _ in range(epochs):
        for rows in minibatches(x.shape[0], batch_size, x.device, generator):
            loc, scale = factor(x[rows], rows)
            theta = q_theta.sample(generator)
            total += log_weights(model.local_log_joint, x[rows], loc, scale, theta, 1, generator).sum().item()
    return total / epochs / x.shape[0]


def sweep(result, data, widths, layers, seeds, n_images, training, settings, log=print, done=(), save=None,
          progress=False):
    """For every width × hidden layers × seed, a fresh encoder trained on ``result``'s frozen q(θ)
    (:func:`train_encoder`) and its gaps on ``n_images`` training and test images drawn by the gap seed
    (:func:`~amortized_pyro.gap.measure.gap_images`: ``settings.seed`` plus the encoder's seed, or alone where
    ``settings.paired``; every width and hidden layers of one seed shares them), through the one loop of every
    sweep (:func:`~amortized_pyro.autoguides.capacity.sweep_encoders`): a list of rows (one per encoder and
    split) holding the encoder, its training, and the gap report. Encoders with rows in ``done`` are not
    trained again; ``save(rows)`` is called after each encoder (to resume from); ``progress``: the gap's
    progress bars."""
    model, q_theta = result.model, result.guide.q_theta
    data = model_data(model, data)  # a conditional run's images with their labels
    slope = result.config.encoder_slope
    own = FAMILIES[result.config.guide].encoder  # a run's own encoder sets the level every fresh one must reach
    target = objective_level(model, q_theta, result.guide.q_z, data.train, 0) if own else -math.inf

    def train(width, hidden, seed):
        guide, epochs, capped, elbo = train_encoder(model, q_theta, data.train, width, hidden, slope, training, seed,
                                                    target, encoder_label=result.config.encoder_label)
        return guide, epochs, capped, elbo, dict(label=label("amortized", width), target=target if own else None,
                                                 reached_target=elbo >= target if own else None,
                                                 training=asdict(training))

    def measure(guide, seed):
        reports = []
        for split, images in (("train", data.train), ("test", data.test)):
            gap_seed, chosen = gap_images(settings, seed, images.shape[0], n_images)
            x = images[chosen.to(images.device)]
            idx = chosen.to(x.device) if split == "train" else None
            report = measure_gap(model, guide, x, idx, settings=settings, seed=gap_seed, progress=progress)
            report.pop("per_image")
            reports.append((split, dict(n_images=x.shape[0], gap_seed=gap_seed, images=chosen.tolist(), **report)))
        return reports

    return sweep_encoders(train, measure, widths, layers, seeds, done, save, log)
