"""Cremer et al.'s protocol, Bayesian-decoder edition: with q(θ) of a trained run frozen, fresh encoders of
growing capacity (width × depth) are trained on the frozen decoder alone, each to convergence, and their
amortization gap is measured on training and held-out images (:func:`amortized_pyro.gap.measure`). Does
capacity close the gap when the decoder is fixed, and does the held-out gap follow?

Training an encoder φ: Adam on the local ELBO, Σ_n L_n(encoder_φ(x_n); θ) over minibatches of the run's
training images (reshuffled each epoch), a fresh θ ~ q(θ) per step (KL(q(θ) ‖ p(θ)) does not depend on φ
and is left out). **Convergence**: the mean local ELBO per image over a window of ``encoder_window`` epochs
has improved on the window before by less than ``encoder_tolerance`` nats (windows average out the noise of
single epochs, whose draws are fresh) after the learning rate has been halved ``lr_halvings`` times, once at
each such window before (so that Adam's noise floor does not pass for the optimum); or ``max_epochs``,
recorded as a cap hit.
"""
import math
from dataclasses import asdict, dataclass

import torch

from .autoguides.factors import AmortizedFactor
from .gap import measure
from .guides import Guide, encoder, label
from .local_elbo import log_weights
from .settings import Checked, option


@dataclass
class EncoderTraining(Checked):
    """How each fresh encoder is trained; each field is one option of the ``capacity`` command."""

    encoder_lr: float = option(1e-3, "Adam's learning rate for the fresh encoders.", low=0, open_low=True)
    encoder_batch_size: int = option(250, "Training images per step.", low=1)
    encoder_tolerance: float = option(0.1, "Convergence: the mean local ELBO per image over a window of epochs has "
                                      "improved on the window before by less than this many nats ...", low=0)
    encoder_window: int = option(20, "... windows of this many epochs ...", low=1)
    lr_halvings: int = option(4, "... and the learning rate has been halved this many times at such windows ...",
                              low=0)
    max_epochs: int = option(2000, "... or after this many epochs (a cap hit, recorded).", low=1)


def train_encoder(model, q_theta, x, width, layers, slope, training, seed):
    """A fresh encoder trained on the frozen ``q_theta`` to convergence (module docstring): (its q(z)
    factor, epochs run, whether the cap was hit, the last window's mean local ELBO per image)."""
    generator = torch.Generator(x.device).manual_seed(seed)
    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        torch.manual_seed(seed)  # the encoder's initialisation
        factor = AmortizedFactor(encoder(x.shape[1], model.z_dim, width, layers, slope)).to(x.device)
    optimizer = torch.optim.Adam(factor.parameters(), lr=training.encoder_lr)
    previous, epoch, window, converged, halved = -math.inf, 0, [], False, 0
    while epoch < training.max_epochs and not converged:
        epoch += 1
        order = torch.randperm(x.shape[0], generator=generator, device=x.device)
        total = torch.zeros((), device=x.device)
        for rows in order.split(training.encoder_batch_size):
            with torch.no_grad():
                theta = q_theta.sample(generator)
            loc, scale = factor(x[rows], rows)
            objective = log_weights(model.local_log_joint, x[rows], loc, scale, theta, 1, generator).sum()
            optimizer.zero_grad()
            (-objective).backward()
            optimizer.step()
            total += objective.detach()
        window.append(total)
        if len(window) == training.encoder_window:
            mean = torch.stack(window).mean().item() / x.shape[0]  # one host sync per window
            stalled, previous, window = mean - previous < training.encoder_tolerance, mean, []
            converged = stalled and halved == training.lr_halvings
            if stalled and not converged:
                halved += 1
                for group in optimizer.param_groups:
                    group["lr"] /= 2
    return factor, epoch, not converged, previous


def sweep(result, data, widths, depths, seeds, n_images, training, settings, log=print, done=(), save=None):
    """For every width × depth × seed, a fresh encoder trained on ``result``'s frozen q(θ)
    (:func:`train_encoder`) and its gaps on the first ``n_images`` training and test images: a list of rows
    (one per encoder and split) holding the encoder, its training, and the gap report. Encoders with rows
    in ``done`` are not trained again; ``save(rows)`` is called after each encoder (to resume from)."""
    model, q_theta = result.model, result.guide.q_theta
    slope = result.config.encoder_slope
    rows = list(done)
    finished = {(r["width"], r["depth"], r["seed"]) for r in rows}
    for width in widths:
        for depth in depths:
            for seed in seeds:
                if (width, depth, seed) in finished:
                    continue
                factor, epochs, capped, elbo = train_encoder(model, q_theta, data.train, width, depth, slope,
                                                             training, seed)
                guide = Guide("amortized", data.train.shape[0], q_theta, factor)
                log("encoder k=%d, %d hidden layer(s), seed %d: %d epochs%s, local ELBO %.1f nats per image"
                    % (width, depth, seed, epochs, " (cap)" if capped else "", elbo))
                for split, images in (("train", data.train), ("test", data.test)):
                    x = images[:n_images]
                    idx = torch.arange(x.shape[0], device=x.device) if split == "train" else None
                    report = measure(model, guide, x, idx, settings)
                    report.pop("per_image")
                    rows.append(dict(width=width, depth=depth, seed=seed, split=split, n_images=x.shape[0],
                                     label=label("amortized", width), epochs=epochs, encoder_capped=capped,
                                     encoder_elbo=elbo, training=asdict(training), **report))
                if save:
                    save(rows)
    return rows
