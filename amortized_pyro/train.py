"""Training one configuration: the SVI loop over epochs and minibatches, checkpoints, resume, run results.

The loop takes SVI steps (:mod:`amortized_pyro.svi`) on minibatches drawn on the device, reads the loss
back once per epoch, evaluates the reconstructions every ``eval_every`` epochs
(:mod:`amortized_pyro.evaluation`) and checkpoints the whole state (:mod:`amortized_pyro.runs`) at the
start, every ``checkpoint_every``, at the end and when SIGINT or SIGTERM arrives (after the epoch under
way: a second signal stops at once). A resumed run restores parameters, optimizer and every random state,
so it ends exactly where the uninterrupted run would. A non-finite loss stops the run, keeping the last
good checkpoint. With a KL warm-up the loss of the first ``kl_warmup`` epochs is the warm-up objective, not
the ELBO: it is recorded as ``objective`` with its ``kl_scale``, and ``elbo`` is missing there.
"""
import contextlib
import math
import time
from dataclasses import asdict, dataclass, replace

import torch
from tqdm.auto import tqdm

import pyro

from .config import FitConfig, option_name, parse_every
from .data import load_data
from .errors import AmortizedPyroError, Interrupted
from .evaluation import MSE_KEYS, evaluate, mean_image_mse
from .guides import ENCODER_GUIDES, make_guide
from .model import BayesianDecoderModel
from .process import StopSignals, resolve_device
from .runs import RunWriter, read_checkpoint, read_info, read_run, rng_states, run_status, set_rng_states
from .svi import create_params, make_optimizer, step, training_elbo


def build(config, n_obs, x_dim, device):
    """The model and guide that ``config`` defines, for N = n_obs images of x_dim pixels."""
    model = BayesianDecoderModel(n_obs, x_dim, config.z_dim, config.hidden, config.prior_scale, config.obs_scale,
                                 config.likelihood)
    guide = make_guide(config.guide, n_obs, x_dim, config.z_dim, config.hidden, config.width, config.init_scale,
                       device, config.encoder_layers, config.qz_init, config.seed, config.refine_steps,
                       config.refine_lr, model.local_log_joint)
    return model, guide


@dataclass
class FitResult:
    """A trained run: its config, per-epoch history, model, guide and its own Pyro param-store state.

    The guide reads its parameters from Pyro's global param store, which the next ``fit`` clears: use it
    inside ``with result.params():`` (or :meth:`evaluate`), which puts this run's parameters there.
    """

    config: FitConfig
    history: list
    model: object
    guide: object
    param_state: dict
    data_source: str
    device: str
    train_seconds: float
    mean_image_mse: dict
    out: object = None

    @contextlib.contextmanager
    def params(self):
        """Pyro's param store holding this run's parameters for the duration; what it held before after."""
        store = pyro.get_param_store()
        saved = store.get_state()
        store.clear()
        store.set_state(self.param_state)
        try:
            yield self
        finally:
            store.clear()
            store.set_state(saved)

    def evaluate(self, data, predictive_draws=0, seed=0):
        """The plug-in (and predictive) MSEs of this run on ``data`` (see :func:`~amortized_pyro.evaluation.evaluate`)."""
        data = data.to(torch.device(self.device))
        with self.params():
            generator = torch.Generator(data.train.device).manual_seed(seed)
            return evaluate(self.model, self.guide, data, predictive_draws, generator)

    @property
    def final(self):
        """The last epoch's record, with the last evaluated MSEs."""
        last = dict(self.history[-1])
        for key in MSE_KEYS:
            last[key] = next((r[key] for r in reversed(self.history) if key in r), math.nan)
        return last

    def summary(self):
        final, c = self.final, self.config
        width = " (width %d)" % c.width if c.guide in ENCODER_GUIDES else ""
        lines = ["guide %s%s on %s, %d epochs on %s in %.1f s (%.1f ms/epoch)"
                 % (c.guide, width, self.data_source, final["epoch"], self.device, self.train_seconds,
                    1000 * self.train_seconds / max(1, final["epoch"])),
                 "final ELBO      %.1f nats in total, %.2f nats per observation" % (final["elbo"], final["elbo_per_obs"])]
        for split in ("train", "test"):
            lines.append("%-5s MSE       plug-in %s, predictive %s, mean image %s" % (
                split, _fmt(final["%s_plugin_mse" % split]), _fmt(final["%s_predictive_mse" % split]),
                _fmt(self.mean_image_mse["%s_mse" % split])))
        if self.out:
            lines.append("results in      %s" % self.out)
        return "\n".join(lines)


def _fmt(value):
    return "n/a" if value is None or math.isnan(value) else "%.4f" % value


def prepare_data(config, data, log):
    """The run's data: loaded (or given), binarized where asked, checked against the likelihood."""
    if data is None:
        data = load_data(config.dataset, config.data_dir, config.n_obs, config.n_test, config.seed,
                         config.download, log, binarize=config.binarize)
    elif config.binarize and not data.binarized:
        data = data.binarize(config.seed)
    if config.likelihood == "bernoulli" and not data.is_binary():
        raise AmortizedPyroError("the Bernoulli likelihood needs binary images: add --binarize")
    return data


def data_info(data, device):
    return {"name": data.name, "source": data.source, "n_obs": data.train.shape[0], "n_test": data.test.shape[0],
            "x_dim": data.train.shape[1], "binarized": data.binarized, "fingerprint": data.fingerprint(),
            "mean_image_mse": mean_image_mse(data)}


def kl_schedule(config, epoch, device):
    """The warm-up's KL scale for ``epoch`` as a device tensor (None without warm-up)."""
    if not config.kl_warmup:
        return None
    return torch.tensor(min(1.0, epoch / config.kl_warmup), device=device)


def fit(config=None, data=None, out=None, progress=True, log=print, overwrite=False, **overrides):
    """Train one configuration and return a :class:`FitResult`.

    ``config`` is a :class:`FitConfig` (fields may be overridden by keyword), ``data`` an optional
    :class:`~amortized_pyro.data.Data` (else loaded from ``config.dataset``), ``out`` an optional run
    directory, which must not hold a run unless ``overwrite``. Clears Pyro's param store first.
    """
    config = replace(config or FitConfig(), **overrides).check()
    device = resolve_device(config.device)
    data = prepare_data(config, data, log)
    writer = None
    if out:
        info = {"config": asdict(config), "data": data_info(data, device), "device": str(device)}
        writer = RunWriter(out, info, "overwrite" if overwrite else "new")
    return train(config, data, writer, None, progress, log)


RESUMABLE_CHANGES = ("lr", "beta1", "beta2", "epochs", "eval_every", "predictive_draws", "checkpoint_every", "jit",
                     "data_dir", "download")


def resume(path, data=None, progress=True, log=print, **changes):
    """Continue the run in ``path`` from its last checkpoint, with its own config; ``changes`` to its
    schedule (:data:`RESUMABLE_CHANGES`: a lower ``lr``, more ``epochs``, ...) are applied and recorded.
    A finished run is loaded and returned as it is."""
    fixed = sorted(set(changes) - set(RESUMABLE_CHANGES))
    info_config = read_info(path)["config"] if run_status(path) != "empty" else {}
    fixed = [k for k in fixed if info_config.get(k, changes[k]) != changes[k]]
    if fixed:
        raise AmortizedPyroError("--resume continues a run as it was defined: it cannot change %s (only %s)"
                                 % (", ".join(option_name(k) for k in fixed),
                                    ", ".join(option_name(k) for k in RESUMABLE_CHANGES)))
    status = run_status(path)
    if status == "finished":
        log("%s is a finished run: nothing to resume" % path)
        return load_run(path)
    if status != "partial":
        raise AmortizedPyroError("%s has no checkpoint to resume from (%s)" % (path, status))
    info = read_info(path)
    config = replace(FitConfig(**info["config"]), **changes).check()
    device = resolve_device(config.device)
    data = prepare_data(config, data, log)
    if data.fingerprint() != info["data"]["fingerprint"]:
        raise AmortizedPyroError("the data for %s are not the images it was trained on (%s)" % (path, data.source))
    checkpoint = read_checkpoint(path, device)
    writer = RunWriter(path, info, "resume")
    writer.record_resume(checkpoint["epoch"], {k: v for k, v in changes.items()}, asdict(config))
    log("resuming %s from epoch %d" % (path, checkpoint["epoch"]))
    return train(config, data, writer, checkpoint, progress, log)


def train(config, data, writer, checkpoint, progress, log):
    """The loop behind :func:`fit` and :func:`resume` (``checkpoint``: the state to continue from)."""
    device = resolve_device(config.device)
    data = data.to(device)
    n_obs, x_dim = data.train.shape
    batch_size = min(config.batch_size, n_obs)
    if config.batch_size > n_obs:
        log("batch size %d > %d training images: training on the full batch" % (config.batch_size, n_obs))
    pyro.clear_param_store()
    pyro.set_rng_seed(config.seed)
    model, guide = build(config, n_obs, x_dim, device)
    first, warmup = torch.arange(batch_size, device=device), kl_schedule(config, 1, device)
    first_step = (data.train[first], first) + (() if warmup is None else (warmup,))
    params = create_params(guide, first_step)
    elbo = training_elbo(model, guide, first_step, config.particles, config.jit, log)
    optimizer = make_optimizer(params, config.lr, config.weight_decay, (config.beta1, config.beta2))
    evaluation_rng = torch.Generator(device).manual_seed(config.seed)
    history, train_seconds, start = [], 0.0, 1
    if checkpoint:
        history, train_seconds, start = restore(checkpoint, params, optimizer, evaluation_rng, config, device)
        writer.rewrite_metrics(history)

    def save(epoch):
        if writer:
            writer.checkpoint({"epoch": epoch, "param_state": pyro.get_param_store().get_state(),
                               "optimizer": optimizer.state_dict(), "rng": rng_states(device),
                               "evaluation_rng": evaluation_rng.get_state(), "history": history,
                               "train_seconds": train_seconds})
        return time.perf_counter()

    every_kind, every = parse_every(config.checkpoint_every)
    last_save = save(start - 1) if not checkpoint else time.perf_counter()
    bar = tqdm(range(start, config.epochs + 1), desc=config.guide, unit="epoch", disable=not progress, leave=False)
    with StopSignals() as stop:
        for epoch in bar:
            began = time.perf_counter()
            kl_scale = kl_schedule(config, epoch, device)
            extra = () if kl_scale is None else (kl_scale,)
            order = torch.randperm(n_obs, device=device)
            try:
                with pyro.validation_enabled(epoch == 1):  # check shapes and supports once, then run unchecked
                    loss = sum(step(elbo, model, guide, optimizer, data.train[idx], idx, *extra)
                               for idx in order.split(batch_size))
            except ValueError as e:
                if "invalid values" not in str(e):  # not a distribution refusing NaN parameters: a bug
                    raise
                loss = torch.tensor(math.nan)
            loss = (loss / math.ceil(n_obs / batch_size)).item()  # the epoch's one host sync
            train_seconds += time.perf_counter() - began
            if not math.isfinite(loss):
                raise diverged(epoch, loss, writer)
            warming = kl_scale is not None and epoch < config.kl_warmup
            record = {"epoch": epoch, "elbo": math.nan if warming else -loss,
                      "elbo_per_obs": math.nan if warming else -loss / n_obs, "time": train_seconds}
            if kl_scale is not None:
                record.update(objective=-loss, kl_scale=min(1.0, epoch / config.kl_warmup))
            if epoch % config.eval_every == 0 or epoch == config.epochs:
                record.update(evaluate(model, guide, data, config.predictive_draws, evaluation_rng))
                bar.set_postfix(elbo="%.1f" % record["elbo_per_obs"], mse="%.4f" % record["train_plugin_mse"])
            history.append(record)
            if writer:
                writer.add(record)
            due = epoch % every == 0 if every_kind == "epochs" else time.perf_counter() - last_save >= every
            if due or epoch == config.epochs or stop.signum:
                last_save = save(epoch)
            if stop.signum:
                raise Interrupted(stop.signum, epoch, writer.out if writer else None)
    result = FitResult(config, history, model, guide, pyro.get_param_store().get_state(), data.source,
                       str(device), train_seconds, mean_image_mse(data), writer.out if writer else None)
    if writer:
        writer.finish(result)
    return result


def restore(checkpoint, params, optimizer, evaluation_rng, config, device):
    """Put a checkpoint's state back: parameters (in place, so the optimizer keeps them), optimizer state
    (with this config's learning rate and betas, which a resume may change), every random state."""
    with torch.no_grad():
        for name, value in checkpoint["param_state"]["params"].items():
            params[name].copy_(value)
    optimizer.load_state_dict(checkpoint["optimizer"])
    for group in optimizer.param_groups:
        group.update(lr=config.lr, betas=(config.beta1, config.beta2))
    set_rng_states(checkpoint["rng"], device)
    evaluation_rng.set_state(checkpoint["evaluation_rng"])
    return list(checkpoint["history"]), checkpoint["train_seconds"], checkpoint["epoch"] + 1


def diverged(epoch, loss, writer):
    """The error for a non-finite loss, saying where the last good checkpoint is and how to go on."""
    if not writer:
        return AmortizedPyroError("training diverged at epoch %d (the loss is %s)" % (epoch, loss))
    kept = read_checkpoint(writer.out)["epoch"]
    return AmortizedPyroError("training diverged at epoch %d (the loss is %s); the last good checkpoint (epoch %d) "
                              "is kept: continue it with a lower learning rate, python -m amortized_pyro fit "
                              "--resume %s --lr LR" % (epoch, loss, kept, writer.out))


def load_run(path, device="cpu"):
    """Rebuild a run (model, guide, parameters, history) from its directory, to evaluate it: a finished
    run as it ended, an interrupted one as of its last checkpoint. On return Pyro's param store holds its
    parameters (see :meth:`FitResult.params`)."""
    device = resolve_device(device)
    info, history, state = read_run(path, map_location=device)
    config = FitConfig(**info["config"])
    pyro.clear_param_store()
    pyro.get_param_store().set_state(state)  # as after fit: the store holds this run's parameters
    model, guide = build(config, info["data"]["n_obs"], info["data"]["x_dim"], device)
    train_seconds = history[-1]["time"] if history else 0.0
    return FitResult(config, history, model, guide, state, info["data"]["source"], str(device), train_seconds,
                     info["data"]["mean_image_mse"], path)
