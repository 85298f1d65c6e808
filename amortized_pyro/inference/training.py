"""The SVI training loop: a function of the runs it trains (one run, or seeds packed as replicas), the data
and the schedule, from the states they continue from.

Each epoch takes SVI steps (:mod:`amortized_pyro.inference.svi`) on a fresh random order of the training images in
minibatches drawn on the device, reads the loss back once (the epoch's one host sync), and every
``eval_every`` epochs evaluates the reconstructions (:mod:`amortized_pyro.inference.evaluation`). Pyro's validation
(shapes, supports) runs once, on one ELBO evaluation before training and outside the random stream;
the steps run unvalidated, so a loss that turns non-finite is what signals divergence. With a KL warm-up
the loss of the first ``kl_warmup`` epochs is the warm-up objective, not the ELBO: it is recorded as
``objective`` with its ``kl_scale``, and ``elbo`` is missing there. With ``objective="reference"`` or a β-VAE's
``kl_weight`` β ≠ 1 (neither an ELBO) the loss is recorded as ``objective``, and at every evaluation the true
ELBO is estimated separately (:func:`true_elbo`) and recorded as ``elbo``; every evaluation also records q(θ)'s mean scale s̄
(``theta_scale_mean``). ``batch_order="blocks"`` takes fixed consecutive minibatches in order (the
authors' code) instead of a fresh random order every epoch. The loop knows nothing of files:
after each epoch it hands the record to ``after_epoch`` (a run directory's writer, say), and SIGINT or
SIGTERM stop it after the epoch under way (a second signal at once). With ``stop_window`` W the run ends at
the first epoch e (a multiple of W, past any warm-up) where the mean training objective per image over
epochs e − W + 1 … e exceeds that over the W epochs before by less than ``stop_gain`` (:func:`flat`): one
convergence criterion for runs whose epochs differ in steps and images.
"""
import contextlib
import math
import time
from functools import partial

import torch
from tqdm.auto import tqdm

import pyro

from amortized_pyro.errors import Diverged, Interrupted
from amortized_pyro.inference.evaluation import evaluate
from amortized_pyro.inference.static_step import StaticStep
from amortized_pyro.inference.svi import make_elbo, make_optimizer, step
from amortized_pyro.models.conditional import model_data
from amortized_pyro.support.batching import minibatches
from amortized_pyro.support.signals import StopSignals
from amortized_pyro.support.streams import outside_the_stream


class TrainingState:
    """What changes as a run trains, besides the guide's parameters: the optimizer, the evaluation's own
    generator, the epochs done, their records and the training time."""

    def __init__(self, guide, schedule, device):
        self.optimizer = make_optimizer(guide, schedule.lr, schedule.weight_decay, (schedule.beta1, schedule.beta2),
                                        capturable=schedule.graph)
        self.evaluation_rng = torch.Generator(device).manual_seed(schedule.seed)
        self.epoch, self.history, self.train_seconds = 0, [], 0.0


def flat(values, schedule):
    """Whether the early-stopping rule (module docstring) ends training after the epochs whose training
    objectives per image are ``values`` (the whole run's, oldest first)."""
    w, epoch = schedule.stop_window, len(values)
    if not w or epoch % w or epoch - 2 * w < schedule.kl_warmup:
        return False
    return sum(values[-w:]) / w - sum(values[-2 * w:-w]) / w < schedule.stop_gain


def kl_weight(schedule, epoch):
    """β of ``epoch``: the β-VAE's weight ``kl_weight`` times the warm-up's min(1, epoch / kl_warmup); None where
    the KL terms are not scaled (the ELBO)."""
    if not schedule.kl_warmup and schedule.kl_weight == 1:
        return None
    return schedule.kl_weight * (min(1.0, epoch / schedule.kl_warmup) if schedule.kl_warmup else 1.0)


def kl_schedule(schedule, epoch, device):
    """:func:`kl_weight` for ``epoch`` as a device tensor (None where the KL terms are not scaled)."""
    weight = kl_weight(schedule, epoch)
    return None if weight is None else torch.tensor(weight, device=device)


def check_once(elbo, args, device):
    """One ELBO evaluation under Pyro's validation, without gradients and outside the random stream."""
    with outside_the_stream(device), pyro.validation_enabled(True), torch.no_grad():
        elbo(*args)


def epoch_batches(schedule, n_obs, device, generator=None):
    """One epoch's minibatch indices under ``schedule`` (its ``batch_size`` and ``batch_order``)."""
    return minibatches(n_obs, schedule.batch_size, device, generator, schedule.batch_order == "blocks")


@torch.no_grad()
def true_elbo(elbo, guide, data, schedule, x_all):
    """An estimate of the ELBO on ``data`` as the model reads it (one draw per minibatch, the mean of the
    minibatch estimates, as the training loss is) with q scored as the true Normal, outside the random stream:
    the ELBO of a run whose training objective is not one."""
    device = data.train.device
    blocks = torch.arange(data.train.shape[0], device=device).split(min(schedule.batch_size, data.train.shape[0]))
    with outside_the_stream(device), guide.scored_as("elbo"):
        return -(sum(elbo(data.train[idx], idx, None, x_all) for idx in blocks) / len(blocks)).item()


def epoch_record(model, guide, data, schedule, state, epoch, loss, kl_scale, elbo, x_all, last=None):
    """The record of ``epoch`` whose mean loss was ``loss`` (the ELBO's, or the objective's: see the module
    docstring), with the evaluation where ``eval_every`` asks for one or the run ends (``last``; default: at
    ``schedule.epochs``); its draws from ``state``'s generator, the true ELBO's outside the training stream."""
    n_obs = data.train.shape[0]
    is_elbo = schedule.objective == "elbo" and kl_weight(schedule, epoch) in (None, 1.0)
    record = {"epoch": epoch, "elbo": -loss if is_elbo else math.nan,
              "elbo_per_obs": -loss / n_obs if is_elbo else math.nan, "time": state.train_seconds}
    if not is_elbo or kl_scale is not None:
        record["objective"] = -loss
    if kl_scale is not None:
        record["kl_scale"] = kl_weight(schedule, epoch)
    if epoch % schedule.eval_every == 0 or (epoch == schedule.epochs if last is None else last):
        if schedule.objective != "elbo" or schedule.kl_weight != 1:  # a warm-up's ELBO waits for its end
            record["elbo"] = true_elbo(elbo, guide, model_data(model, data), schedule, x_all)
            record["elbo_per_obs"] = record["elbo"] / n_obs
        record.update(evaluate(model, guide, data, schedule.predictive_draws, state.evaluation_rng))
        record["theta_scale_mean"] = guide.q_theta.mean_scale().item()
    return record


class SingleRun:
    """One run as :func:`train` drives it: its model, guide, state (a :class:`TrainingState`) and ELBO
    (``schedule.particles``, ``schedule.estimator``), its minibatch orders and draws from the global stream.
    ``after_epoch(record, last, stopping)`` is called after every epoch. Seeds packed as replicas
    (:class:`amortized_pyro.inference.replicas.Pack`) are driven the same way."""

    def __init__(self, model, guide, state, schedule, after_epoch=None):
        self.models, self.guides, self.states = [model], [guide], [state]
        self.elbos = [make_elbo(schedule.particles, schedule.estimator)(model, guide)]
        self.label, self.after = guide.family, after_epoch
        self.step = StaticStep(self.elbos[0], state.optimizer, capture=True, fixed=(3,)) if schedule.graph else \
            partial(step, self.elbos[0], state.optimizer)  # the eager step, or its captured form (static_step.py)

    def epoch_losses(self, data, schedule, kl_scale, x_all):
        """One epoch of SVI steps on ``data`` as the model reads it (:func:`~amortized_pyro.models.conditional.model_data`);
        the mean loss, [1], a device tensor."""
        batches = epoch_batches(schedule, data.train.shape[0], data.train.device)
        loss = sum(self.step(data.train[idx], idx, kl_scale, x_all) for idx in batches)
        return (loss / len(batches)).reshape(1)

    def check(self, x, idx, kl_scale, x_all):
        """Pyro's validation on one ELBO evaluation of the first minibatch (:func:`check_once`)."""
        check_once(self.elbos[0], (x, idx, kl_scale, x_all), x.device)

    def random_states(self, r):
        """The random states run r's record is drawn under (a single run: the global ones)."""
        return contextlib.nullcontext()

    def after_epoch(self, records, last, stopping):
        if self.after:
            self.after(records[0], last, stopping)


def train(runs, data, schedule, progress=True):
    """Train ``runs`` (a :class:`SingleRun`, or seeds packed as replicas) on ``data`` (on their device) from
    their states to epoch ``schedule.epochs``; ``schedule`` is a FitConfig (epochs, batch_size, particles,
    kl_warmup, eval_every, predictive_draws). Raises :class:`Diverged` on a non-finite loss (``replica``:
    the run's index), :class:`Interrupted` on a signal."""
    device = data.train.device
    n_obs = data.train.shape[0]
    inputs = model_data(runs.models[0], data)  # what the model reads: a conditional model's rows carry the labels
    x_all = inputs.train if schedule.local_terms == "all" else None
    first = torch.arange(min(schedule.batch_size, n_obs), device=device)
    epoch0 = runs.states[0].epoch
    runs.check(inputs.train[first], first, kl_schedule(schedule, epoch0 + 1, device), x_all)
    bar = tqdm(range(epoch0 + 1, schedule.epochs + 1), desc=runs.label, unit="epoch", disable=not progress,
               leave=False, initial=epoch0, total=schedule.epochs)  # a resumed run's bar goes on from its epoch
    with StopSignals() as stop, pyro.validation_enabled(False):
        for epoch in bar:
            began = time.perf_counter()
            kl_scale = kl_schedule(schedule, epoch, device)
            losses = runs.epoch_losses(inputs, schedule, kl_scale, x_all).tolist()  # the epoch's one host sync
            elapsed = time.perf_counter() - began
            last = epoch == schedule.epochs or (schedule.stop_window and epoch % schedule.stop_window == 0 and all(
                flat([r.get("objective", r["elbo"]) / n_obs for r in state.history] + [-loss / n_obs], schedule)
                for loss, state in zip(losses, runs.states)))
            records = []
            for r, (loss, model, guide, state, elbo) in enumerate(zip(losses, runs.models, runs.guides, runs.states,
                                                                     runs.elbos)):
                state.train_seconds += elapsed
                if not math.isfinite(loss):
                    raise Diverged(epoch, loss, replica=r)
                with runs.random_states(r):
                    records.append(epoch_record(model, guide, data, schedule, state, epoch, loss, kl_scale, elbo,
                                                x_all, last))
                state.history.append(records[-1])
                state.epoch = epoch
            if "train_plugin_mse" in records[0]:
                bar.set_postfix(elbo="%.1f" % records[0]["elbo_per_obs"], mse="%.4f" % records[0]["train_plugin_mse"])
            stopping = stop.signum is not None
            runs.after_epoch(records, last, stopping)
            if stopping:
                raise Interrupted(stop.signum, epoch)
            if last:
                break
