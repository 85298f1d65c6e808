"""A run's life: build the model and guide a FitConfig defines, train them (:mod:`amortized_pyro.inference.training`)
into a run directory (:mod:`amortized_pyro.runs.store`), resume an interrupted run, load a finished one.

A new run seeds the global random streams (torch, numpy, python: ``pyro.set_rng_seed``) once, in
:meth:`TrainingRun.new`, before its guide is built: the encoder's initialisation and every draw of Pyro's sample
sites come from them. A resumed run restores them from its checkpoint instead. Nothing else in the package
seeds or reads global state: a :class:`FitResult` carries its own model and guide, whose parameters are
their own.
"""
import math
from dataclasses import asdict, dataclass, replace

import torch

import pyro

from amortized_pyro.autoguides.options import count
from amortized_pyro.errors import AmortizedPyroError, Diverged, FixedSettings, Interrupted, InvalidSettings
from amortized_pyro.inference.evaluation import MSE_KEYS, evaluate, mean_image_mse
from amortized_pyro.inference.training import SingleRun, TrainingState, train
from amortized_pyro.models.decoder import BayesianDecoderModel
from amortized_pyro.models.guides import make_guide
from amortized_pyro.runs.config import FitConfig, check_stop_gain, parse_every
from amortized_pyro.runs.data import checked_data
from amortized_pyro.runs.checkpoints import load_guide_state, restore
from amortized_pyro.runs.images import data_info, prepare_data, run_data
from amortized_pyro.runs.summary_text import format_fit
from amortized_pyro.runs.store import RunWriter, describe, read_checkpoint, read_info, read_run, run_status
from amortized_pyro.support.devices import resolve_device


def build(config, n_obs, x_dim, device, image_shape=None, n_classes=None):
    """The model and guide that ``config`` defines, for N = n_obs images of x_dim pixels (of ``image_shape``
    (C, H, W); None: one channel, square), on ``device``; a conditional model's labels name ``n_classes``
    classes."""
    model = BayesianDecoderModel(n_obs, x_dim, config.z_dim, config.hidden, config.prior_scale, config.obs_scale,
                                 config.likelihood, config.local_terms, decoder_prior=config.decoder_prior,
                                 decoder=config.decoder, image_shape=image_shape,
                                 n_classes=n_classes if config.conditional else 0, class_prior=config.class_prior,
                                 decoder_label=config.decoder_label)
    guide = make_guide(config.guide, model, width=config.width, init_scale=config.init_scale,
                       encoder_layers=config.encoder_layers, qz_init=config.qz_init, seed=config.seed,
                       refine_steps=config.refine_steps, refine_lr=config.refine_lr, encoder_slope=config.encoder_slope,
                       objective=config.objective, refine_grad=config.refine_grad, encoder=config.encoder,
                       refine_optimizer=config.refine_optimizer, iterations=config.iterations, flow=config.flow,
                       encoder_label=config.encoder_label, refine_share=config.refine_share,
                       refine_score=config.refine_score)
    return model.to(device), guide.to(device)


@dataclass
class FitResult:
    """A trained run: its config, per-epoch history, model and guide (which own their parameters)."""

    config: FitConfig
    history: list
    model: object
    guide: object
    data_source: str
    device: str
    train_seconds: float
    mean_image_mse: dict
    out: object = None

    def state_dict(self):
        """The guide's parameters (the model has none)."""
        return self.guide.state_dict()

    def evaluate(self, data, predictive_draws=0, seed=0):
        """The plug-in (and predictive) MSEs of this run on ``data``, the predictive draws from a generator
        seeded with ``seed`` (see :func:`~amortized_pyro.inference.evaluation.evaluate`)."""
        count("predictive_draws", predictive_draws, 0)
        data = checked_data(data).to(torch.device(self.device))
        generator = torch.Generator(data.train.device).manual_seed(count("seed", seed, 0))
        return evaluate(self.model, self.guide, data, predictive_draws, generator)

    @property
    def final(self):
        """The last epoch's record, with the last evaluated MSEs."""
        last = dict(self.history[-1])
        for key in MSE_KEYS:
            last[key] = next((r[key] for r in reversed(self.history) if key in r), math.nan)
        return last

    def summary(self):
        """A few lines: what was trained, the final ELBO and the MSEs beside the mean image's."""
        return format_fit(self)


def fit(config=None, data=None, out=None, progress=True, log=print, overwrite=False, **overrides):
    """Train one configuration and return a :class:`FitResult`.

    ``config`` is a :class:`FitConfig` (fields may be overridden by keyword), ``data`` an optional
    :class:`~amortized_pyro.runs.data.Data` (else loaded from ``config.dataset``), ``out`` an optional run
    directory, which must not hold a run unless ``overwrite``; without ``out`` nothing is written.
    """
    if config is not None and not isinstance(config, FitConfig):
        raise AmortizedPyroError("config must be a FitConfig (or None: settings by keyword), got %s"
                                 % type(config).__name__)
    if out is not None and not str(out).strip():  # wrote nothing, without a word (the CLI refuses it)
        raise AmortizedPyroError("out must name a folder for the run (None: nothing is written), got %r" % (out,))
    config = replace(config or FitConfig(), **overrides).check()
    device = checked_device(config)
    data = prepare_data(config, data, log)
    return TrainingRun.new(config, data, device, out, "overwrite" if overwrite else "new").train_alone(progress, log)


def checked_device(config):
    """The device ``config`` runs on, refused in one line (before anything is read or written) where ``--graph``
    has no CUDA device to capture on."""
    device = resolve_device(config.device)
    if config.graph and device.type != "cuda":
        raise InvalidSettings("--graph captures the step in a CUDA graph: it needs a CUDA device, this run's is %s"
                              % device, ["graph", "device"])
    return device


RESUMABLE_CHANGES = ("lr", "beta1", "beta2", "epochs", "stop_window", "stop_gain", "eval_every", "predictive_draws",
                     "checkpoint_every", "data_dir", "download")


def resume(path, data=None, progress=True, log=print, **changes):
    """Continue the run in ``path`` from its last checkpoint, with its own config; ``changes`` to its
    schedule (:data:`RESUMABLE_CHANGES`: a lower ``lr``, more ``epochs``, ...) are applied and recorded.
    A finished run given more ``epochs`` is extended from its final checkpoint; otherwise it is loaded and
    returned as it is. Nothing in ``path`` changes before everything the resume needs was read
    (:meth:`TrainingRun.start`)."""
    unknown = sorted(set(changes) - set(FitConfig.__dataclass_fields__))  # taken without a word before (issue 71)
    if unknown:
        raise InvalidSettings("resume takes no setting %s (only %s)"
                              % (", ".join(unknown), ", ".join(RESUMABLE_CHANGES)), unknown)
    status = run_status(path)
    info = read_info(path) if status != "empty" else {"config": {}}
    fixed = [k for k in sorted(set(changes) - set(RESUMABLE_CHANGES)) if info["config"].get(k, changes[k]) != changes[k]]
    if fixed:
        raise FixedSettings(fixed, RESUMABLE_CHANGES)
    check_stop_gain(changes, changes.get("stop_window", info["config"].get("stop_window")))
    if status not in ("finished", "partial"):
        raise AmortizedPyroError("cannot resume %s: %s" % (path, describe(path)))
    config = replace(FitConfig(**info["config"]), **changes).check()  # epochs=-5 returned a finished run before
    if status == "finished" and config.epochs <= info["config"]["epochs"]:
        log("%s is a finished run: nothing to resume (give more --epochs to extend it)" % path)
        return load_run(path)
    if status == "finished":
        read_run(path)  # every file read before it is extended: a damaged one is refused, the run stays finished
    device = checked_device(config)
    data = run_data(path, info, config, data, log)
    return TrainingRun.resumed(path, info, config, data, device, changes, log).train_alone(progress, log)


class TrainingRun:
    """One run's life in training, from its config to its :class:`FitResult`: opened (:meth:`new`, :meth:`resumed`),
    started (:meth:`start`), written epoch by epoch (:meth:`after_epoch`), finished (:meth:`finish`) or stopped
    (:meth:`stopped`). :func:`fit` and :func:`resume` train one alone (:meth:`train_alone`), a pack
    (:func:`amortized_pyro.runs.packs.fit_pack`) several together.

    :param config: the run's :class:`FitConfig`
    :param data: its images (:class:`~amortized_pyro.runs.data.Data`), moved to ``device``
    :param device: the torch device it trains on
    :param writer: the :class:`~amortized_pyro.runs.store.RunWriter` of its run directory; None: nothing is written
    :param checkpoint: the checkpoint a resumed run goes on from; None: a new run
    :param changes: the settings a resumed run changes (:data:`RESUMABLE_CHANGES`), recorded once it starts
    """

    def __init__(self, config, data, device, writer=None, checkpoint=None, changes=None):
        self.config, self.data, self.device = config, data.to(device), device
        self.writer, self.checkpoint, self.changes = writer, checkpoint, changes
        self.model = self.guide = self.state = None  # built by start()

    @classmethod
    def new(cls, config, data, device, out=None, mode="new"):
        """A new run, its directory claimed where given, the global random streams seeded with ``config.seed``:
        the one place the package seeds them (see the module docstring), for a single run and a pack's runs alike.

        :param config: its :class:`FitConfig`
        :param data: its images, as its run directory records them
        :param device: its torch device
        :param out: its run directory; None: nothing is written
        :param mode: ``"new"`` (``out`` must not hold a run) or ``"overwrite"``
        """
        info = {"config": asdict(config), "data": data_info(data), "device": str(device)} if out else None
        writer = RunWriter(out, info, mode, parse_every(config.checkpoint_every)) if out else None
        pyro.set_rng_seed(config.seed)
        return cls(config, data, device, writer)

    @classmethod
    def resumed(cls, path, info, config, data, device, changes, log):
        """The run in ``path`` going on from its last checkpoint (a finished one extended), nothing written before
        it starts (:meth:`start`).

        :param path: its run directory
        :param info: what the directory records (:func:`~amortized_pyro.runs.store.read_info`)
        :param config: its :class:`FitConfig`, ``changes`` applied
        :param data: its images
        :param device: its torch device
        :param changes: the settings changed (:data:`RESUMABLE_CHANGES`)
        :param log: where the line saying so goes
        """
        checkpoint = read_checkpoint(path)
        epoch, planned = checkpoint.get("epoch"), info["config"]["epochs"]
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= planned:
            raise AmortizedPyroError("checkpoint.pt in %s says epoch %r of a run of %d epochs: not this run's "
                                     "checkpoint" % (path, epoch, planned))
        if run_status(path) == "finished":
            log("extending the finished run %s from %d to %d epochs" % (path, info["config"]["epochs"], config.epochs))
        else:
            log("resuming %s from epoch %d" % (path, checkpoint["epoch"]))
        writer = RunWriter(path, info, "resume", parse_every(config.checkpoint_every))
        return cls(config, data, device, writer, checkpoint, dict(changes))

    def start(self):
        """Build the model, guide and training state (:func:`build`); restore them from the checkpoint of a
        resumed run, and only then change its directory (:meth:`~amortized_pyro.runs.store.RunWriter.reopen`),
        else write them as the first checkpoint where there is a writer."""
        n_obs, x_dim = self.data.train.shape
        self.model, self.guide = build(self.config, n_obs, x_dim, self.device, self.data.shape, self.data.n_classes)
        self.state = TrainingState(self.guide, self.config, self.device)
        if self.checkpoint:
            restore(self.checkpoint, self.guide, self.state, self.config, self.device)
            self.writer.reopen(self.checkpoint["epoch"], self.changes, asdict(self.config), self.state.history)
        elif self.writer:
            self.writer.checkpoint(self.guide, self.state, self.device)

    def after_epoch(self, record, last, stopping):
        """The ``after_epoch`` of a :class:`~amortized_pyro.inference.training.SingleRun`: write the epoch's record,
        and a checkpoint (with the global random states) when due, at the end and when stopping.

        :param record: the epoch's record
        :param last: whether it is the run's last epoch
        :param stopping: whether the run stops after it (a signal, or the stopping rule)
        """
        if self.writer:
            self.writer.add(record)
            if last or stopping or self.writer.due(record["epoch"]):
                self.writer.checkpoint(self.guide, self.state, self.device)

    def finish(self):
        """The :class:`FitResult` of the run trained to its end, written as finished where there is a writer."""
        state, writer = self.state, self.writer
        result = FitResult(self.config, state.history, self.model, self.guide, self.data.source, str(self.device),
                           state.train_seconds, mean_image_mse(self.data), writer.out if writer else None)
        if writer:
            writer.finish(self.guide, result.final, result.mean_image_mse, state.train_seconds, len(state.history))
        return result

    def stopped(self, error):
        """``error`` naming the run directory and what it keeps.

        :param error: the :class:`~amortized_pyro.errors.Diverged` or :class:`~amortized_pyro.errors.Interrupted`
            that stopped it
        """
        out = self.writer.out if self.writer else None
        if not isinstance(error, Diverged):
            return Interrupted(error.signum, error.epoch, out)
        return Diverged(error.epoch, error.loss, out, read_checkpoint(out)["epoch"], error.replica) if out else error

    def train_alone(self, progress, log):
        """Start, train and finish this run alone (the body of :func:`fit` and :func:`resume`); a new run that
        fails before its first checkpoint leaves no directory behind.

        :param progress: whether to show a progress bar
        :param log: where lines for the user go
        """
        config, data = self.config, self.data
        if config.batch_size > data.train.shape[0]:
            log("batch size %d > %d training images: training on the full batch"
                % (config.batch_size, data.train.shape[0]))
        try:
            self.start()
        except BaseException:
            if self.writer and not self.checkpoint:
                self.writer.discard()  # nothing finished: no directory that --out refuses and --resume cannot continue
            raise
        try:
            train(SingleRun(self.model, self.guide, self.state, config, self.after_epoch), data, config, progress)
        except (Diverged, Interrupted) as e:
            raise self.stopped(e) from None
        return self.finish()


def load_run(path, device="cpu", data=None):
    """Rebuild a run (model, guide with its parameters, history) from its directory, to evaluate it: a
    finished run as it ended, an interrupted one as of its last checkpoint. ``data``, where given, must be
    the images it was trained on (checked by their fingerprint)."""
    device = resolve_device(device)
    info, history, guide_state = read_run(path)
    config = FitConfig(**info["config"])
    if data is not None:
        run_data(path, info, config, data)
    with torch.random.fork_rng(devices=[]):  # the encoder's initialisation, overwritten at once, draws nothing
        labels = info["data"].get("labels") or {}
        model, guide = build(config, info["data"]["n_obs"], info["data"]["x_dim"], device,
                             info["data"].get("image_shape"),  # runs of earlier versions: square, one channel
                             labels.get("n_classes"))
    load_guide_state(guide, guide_state, "the run's parameters in %s" % path)
    train_seconds = history[-1]["time"] if history else 0.0
    return FitResult(config, history, model, guide, info["data"]["source"], str(device), train_seconds,
                     info["data"]["mean_image_mse"], path)


def check_finished(run_dir):  # a cheap check, before work that needs the run finished
    if run_status(run_dir) != "finished":
        raise AmortizedPyroError("%s is not a finished run: %s" % (run_dir, describe(run_dir)))


def finished_run(run_dir, device="cpu", log=print):
    """A finished run (:func:`load_run`) and its images, reloaded and checked, on ``device``."""
    check_finished(run_dir)
    result = load_run(run_dir, device)
    return result, run_data(run_dir, read_info(run_dir), result.config, None, log).to(result.device)
