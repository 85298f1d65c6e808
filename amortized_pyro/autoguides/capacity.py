"""Cremer et al.'s capacity protocol for any model: with a trained guide's global part q(θ) frozen, fresh
encoders of growing capacity (width × hidden layers) are trained on the model's local ELBO alone, each to
convergence, and their gaps are measured (:func:`~amortized_pyro.autoguides.measure_gap`) on the training
call and, where given, on held-out datapoints. Does capacity close the gap when the model's globals are
fixed, and does the held-out gap follow?

Training an encoder φ (:func:`train_to_convergence`, the one trainer): Adam on Σ_n L_n(encoder_φ(x_n); θ), the
local ELBO on the model's local posterior (:func:`~amortized_pyro.autoguides.gap.local_posterior`: read off the
model's trace, or the model's own log joint), one fresh θ ~ q(θ) and one z draw per datapoint per step, every
datapoint of the call in each step (or minibatches of it, as a run's sweep takes them) (KL(q(θ) ‖ p(θ)) does not depend on φ and is
left out). **Convergence** (:func:`until_converged`): the mean objective per datapoint over a window of
``encoder_window`` epochs has improved on the window before by less than ``encoder_tolerance`` nats after
the learning rate has been halved ``lr_halvings`` times, once at each such window before (so that Adam's
noise floor does not pass for the optimum); or ``max_epochs``, recorded as a cap hit.
"""
import copy
import math
from dataclasses import asdict, dataclass

import torch

import pyro

from amortized_pyro.autoguides.families import AutoAmortizedNormal
from amortized_pyro.autoguides.gap import local_posterior, measure_gap
from amortized_pyro.autoguides.local_joint import check_draws
from amortized_pyro.local.estimates import log_weights
from amortized_pyro.settings import Checked, setting
from amortized_pyro.support.streams import outside_the_stream


@dataclass
class EncoderTraining(Checked):
    """How each fresh encoder is trained; each field is one option of the ``capacity`` command."""

    encoder_lr: float = setting(3e-3, "Adam's first learning rate for the fresh encoders (1e-3 left a fresh k = 64 "
                               "encoder 14 nats per image short of its run's own on the training images; 3e-3, "
                               "the informative runs' rate, passed it in half the epochs).", low=0, open_low=True)
    encoder_batch_size: int = setting(250, "Training images per step.", low=1)
    encoder_tolerance: float = setting(0.1, "Convergence: the mean local ELBO per image over a window of epochs has "
                                      "improved on the window before by less than this many nats ...", low=0)
    encoder_window: int = setting(20, "... windows of this many epochs ...", low=1)
    lr_halvings: int = setting(4, "... and the learning rate has been halved this many times at such windows ...",
                              low=0)
    max_epochs: int = setting(2000, "... or after this many epochs (a cap hit, recorded).", low=1)


def until_converged(epoch, optimizer, training, n, target=-math.inf, window_end=None):
    """Run ``epoch()`` (one epoch's steps; its summed objective over the ``n`` datapoints, a device tensor)
    until the convergence rule of the module docstring, halving ``optimizer``'s learning rate on the way:
    (epochs run, whether the cap was hit, the last window's mean objective per datapoint). ``target``: a
    level the last window's mean must also reach (once the rule holds, training goes on at the last
    learning rate until it does, or to the cap); ``window_end(epochs, mean)``, called at each window's end,
    stops training where it returns True (not a cap hit: the caller's own rule, e.g. early stopping)."""
    previous, epochs, window, converged, halved = -math.inf, 0, [], False, 0
    while epochs < training.max_epochs and not converged:
        epochs += 1
        window.append(epoch())
        if len(window) == training.encoder_window:
            mean = torch.stack(window).mean().item() / n  # one host sync per window
            stalled, previous, window = mean - previous < training.encoder_tolerance, mean, []
            converged = stalled and halved == training.lr_halvings and mean >= target
            if window_end is not None and window_end(epochs, mean):
                return epochs, False, previous
            if stalled and halved < training.lr_halvings:
                halved += 1
                for group in optimizer.param_groups:
                    group["lr"] /= 2
    return epochs, not converged, previous


def train_fresh_encoder(model, guide, *args, width=64, layers=2, encoder=None, encoder_input=None, training=None,
                        seed=0, draws="auto", **kwargs):
    """A fresh :class:`~amortized_pyro.autoguides.AutoAmortizedNormal` on the trained ``guide``'s frozen
    global part, its encoder trained to convergence on the local ELBO of the call ``model(*args, **kwargs)``
    (module docstring). Built and trained with module-local parameters: nothing of Pyro's param store is
    touched.

    :param guide: a trained guide of the four builders (any family, any global part): its q(θ) is copied into
        the fresh guide, which does not train it, with its plates (``create_plates``, ``datapoint_indices``);
        the trained guide is left as it was.
    :param int width: the default encoder's width. :param int layers: its hidden layers.
    :param encoder: a body of the user's instead (data [B, ...] → features [B, F]); it is trained.
    :param encoder_input: as :class:`~amortized_pyro.autoguides.AutoAmortizedNormal`; None: the trained
        guide's own where it has an encoder, else 0.
    :param EncoderTraining training: the optimizer and convergence rule; ``encoder_batch_size`` is unused
        (each step takes the call's datapoints).
    :param int seed: the encoder's initialization and the draws of θ and z.
    :param str draws: how the model is run on the draws (:func:`~amortized_pyro.autoguides.measure_gap`'s
        option): ``"auto"``, ``"stacked"`` or ``"one-at-a-time"``.
    :returns: (the fresh guide, epochs run, whether the cap was hit, the last window's mean local ELBO per
        datapoint).
    """
    training = (training or EncoderTraining()).check()
    check_draws(draws)
    if encoder_input is None:
        encoder_input = getattr(guide, "encoder_input", 0)
    device = next(guide.parameters()).device
    with pyro.settings.context(module_local_params=True):
        with outside_the_stream(device):
            torch.manual_seed(seed)  # the encoder's initialization
            own = copy.deepcopy(guide.q_theta) if guide.global_kind == "own" else None
            if hasattr(own, "objective"):  # the package's q(θ): its draws scored by their density (an ELBO)
                own.objective = "elbo"
            fresh = AutoAmortizedNormal(model, plate=guide.plate, encoder=encoder, encoder_input=encoder_input,
                                        width=width, layers=layers, init_scale=guide.init_scale,
                                        init_loc_fn=guide.init_loc_fn,
                                        head_init=getattr(guide, "head_init", "zero"),
                                        standardize=getattr(guide, "standardize", True),
                                        scale_link=getattr(guide, "scale_link", "softplus"),
                                        global_guide=guide.global_kind if own is None else own,
                                        create_plates=guide._user_plates, local_mask=guide.local_mask)
            with torch.no_grad():
                fresh(*args, **kwargs)  # reads the model, builds the encoder for its data
        if fresh.q_theta is not None:  # the trained q(θ), copied; its draws (global_sample) carry no gradient
            fresh.q_theta.load_state_dict(guide.q_theta.state_dict())
        optimizer = torch.optim.Adam(fresh.q_z.parameters(), lr=training.encoder_lr)
        posterior = local_posterior(model, fresh, args, kwargs, draws=draws, stacked=False)  # built once: a call
        epochs, capped, elbo = train_to_convergence(model, fresh, lambda generator: [(args, kwargs, posterior)],
                                                    len(posterior.x), training, seed, optimizer)
    return fresh, epochs, capped, elbo


def encoder_step(model, fresh, args, kwargs, posterior=None, *, optimizer, generator, draws="auto"):
    """One step of the fresh guide's ``optimizer`` on Σ_n L_n of the call ``model(*args, **kwargs)``'s datapoints at
    one θ ~ q(θ) and one z draw per datapoint, on the model's local posterior (``posterior``: that call's, built
    already; else built here, :func:`~amortized_pyro.autoguides.gap.local_posterior`): the objective, detached."""
    posterior = posterior or local_posterior(model, fresh, args, kwargs, draws=draws, stacked=False)
    theta = fresh.global_sample(generator)
    loc, scale = posterior.factor(theta)
    objective = log_weights(posterior.log_joint, posterior.x, loc, scale, theta, 1, generator).sum()
    optimizer.zero_grad()
    (-objective).backward()
    optimizer.step()
    return objective.detach()


def train_to_convergence(model, fresh, calls, n, training, seed, optimizer, target=-math.inf, window_end=None,
                         draws="auto"):
    """The one encoder trainer, of every capacity sweep and of the held-out study: epochs of :func:`encoder_step`
    on the calls ``calls(generator)`` (a list of (args, kwargs[, their local posterior]) per epoch: the whole call,
    or minibatches of it), the draws from a generator seeded with ``seed``, until :func:`until_converged`'s rule
    (``n``: datapoints per epoch; ``target`` and ``window_end(fresh, epochs, mean)`` as there): (epochs run, whether
    the cap was hit, the last window's mean local ELBO per datapoint). ``fresh``: a guide whose factor (``q_z``)
    ``optimizer`` trains, its q(θ) frozen."""
    generator = torch.Generator(next(fresh.parameters()).device).manual_seed(seed)

    def epoch():
        return torch.stack([encoder_step(model, fresh, *call, optimizer=optimizer, generator=generator, draws=draws)
                            for call in calls(generator)]).sum()

    hook = None if window_end is None else (lambda epochs, mean: window_end(fresh, epochs, mean))
    return until_converged(epoch, optimizer, training, n, target, hook)


def layers_of(row):
    """A sweep row's hidden layers (rows written before the two sweeps became one call them ``depth``)."""
    return row["layers"] if "layers" in row else row["depth"]


def sweep_encoders(train, measure, widths, layers, seeds, done=(), save=None, log=print):
    """The loop of every capacity sweep: for every width × hidden layers × seed without rows in ``done``, a fresh
    encoder ``train(width, layers, seed)`` → (the fresh guide, epochs run, whether the cap was hit, the last
    window's mean local ELBO per datapoint, more fields for its rows), then its gaps ``measure(guide, seed)`` →
    [(split, the split's report and fields)]: a row per encoder and split, ``save(rows)`` after each encoder
    (to resume from). Returns the rows, ``done``'s first."""
    rows = list(done)
    finished = {(r["width"], layers_of(r), r["seed"]) for r in rows}
    for width in widths:
        for hidden in layers:
            for seed in seeds:
                if (width, hidden, seed) in finished:
                    continue
                fresh, epochs, capped, elbo, fields = train(width, hidden, seed)
                log("encoder k=%d, %d hidden layer(s), seed %d: %d epochs%s, local ELBO %.2f nats per datapoint"
                    % (width, hidden, seed, epochs, " (cap)" if capped else "", elbo))
                for split, report in measure(fresh, seed):
                    rows.append(dict(width=width, layers=hidden, seed=seed, split=split, epochs=epochs,
                                     encoder_capped=capped, encoder_elbo=elbo, **fields, **report))
                if save:
                    save(rows)
    return rows


def capacity_sweep(model, guide, train_args, test_args=None, *, widths=(16, 64, 256), layers=(2,), seeds=(0,),
                   encoder_input=None, training=None, settings=None, draws="auto", log=print):
    """For every width × hidden layers × seed, a fresh encoder trained on ``guide``'s frozen q(θ)
    (:func:`train_fresh_encoder`) on the call ``model(*train_args)``, and its gaps on that call ("train")
    and on ``model(*test_args)`` ("test": datapoints it never saw), where given (:func:`sweep_encoders`).

    :param tuple train_args: the model's positional arguments for the training datapoints.
    :param tuple test_args: the same for held-out datapoints, or None.
    :param GapSettings settings: :func:`~amortized_pyro.autoguides.measure_gap`'s budget.
    :param str draws: :func:`~amortized_pyro.autoguides.measure_gap`'s option, for the encoders' training too.
    :returns: a list of rows, one per encoder and split: width, layers, seed, split, epochs, encoder_capped,
        encoder_elbo, training, and the gap report's summaries (its ``per_image`` values kept).
    """
    training = (training or EncoderTraining()).check()
    check_draws(draws)
    calls = {"train": train_args} if test_args is None else {"train": train_args, "test": test_args}

    def train(width, hidden, seed):
        fresh = train_fresh_encoder(model, guide, *train_args, width=width, layers=hidden, encoder_input=encoder_input,
                                    training=training, seed=seed, draws=draws)
        return fresh + (dict(training=asdict(training)),)

    def measure(fresh, seed):
        with pyro.settings.context(module_local_params=True):
            return [(split, measure_gap(model, fresh, *call, settings=settings, seen=split == "train", draws=draws))
                    for split, call in calls.items()]

    return sweep_encoders(train, measure, widths, layers, seeds, log=log)
