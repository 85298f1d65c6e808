"""Training one configuration: devices, the SVI loop over epochs and minibatches, run results.

The loop calls Pyro's SVI step (:mod:`amortized_pyro.svi`) on minibatches drawn on the device, reads the
loss back once per epoch, evaluates the reconstruction MSE every ``eval_every`` epochs, and stops with a
clear error when the ELBO stops being finite.
"""
import math
import time
from dataclasses import asdict, dataclass, replace

import torch
from tqdm.auto import tqdm

import pyro

from .data import load_data
from .errors import AmortizedPyroError
from .evaluation import evaluate
from .guides import GUIDES, THETA_INIT_SCALE, make_guide
from .model import BayesianDecoderModel
from .runs import RunWriter, read_run
from .svi import DeviceSVI, make_optimizer, training_elbo


@dataclass
class FitConfig:
    """Everything that defines a run; the CLI options map one to one onto these fields."""

    guide: str = "amortized"
    width: int = 128
    dataset: str = "mnist"
    data_dir: str = "data"
    download: bool = True
    n_obs: int = 10000
    n_test: int = 1000
    epochs: int = 5000
    batch_size: int = 1000
    lr: float = 1e-3
    weight_decay: float = 0.0
    particles: int = 1
    z_dim: int = 64
    hidden: int = 256
    prior_scale: float = 1.0
    obs_scale: float = 1.0
    init_scale: float = THETA_INIT_SCALE
    device: str = "auto"
    seed: int = 0
    eval_every: int = 1
    jit: bool = True

    def check(self):
        if self.guide not in GUIDES:
            raise AmortizedPyroError("unknown guide %r: choose one of %s" % (self.guide, ", ".join(GUIDES)))
        positive = ("width", "n_obs", "epochs", "batch_size", "particles", "z_dim", "hidden", "eval_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise AmortizedPyroError("%s must be >= 1, got %r" % (name.replace("_", "-"), getattr(self, name)))
        for name in ("lr", "prior_scale", "obs_scale", "init_scale"):
            if not getattr(self, name) > 0:
                raise AmortizedPyroError("%s must be > 0, got %r" % (name.replace("_", "-"), getattr(self, name)))
        if self.weight_decay < 0 or self.n_test < 0:
            raise AmortizedPyroError("weight-decay and n-test must be >= 0")
        return self


def resolve_device(spec):
    """``auto`` → CUDA when available, else CPU; ``cuda``/``cuda:N`` must exist."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise AmortizedPyroError("unknown device %r: use auto, cpu, cuda or cuda:N" % spec) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise AmortizedPyroError("device %r asked for, but CUDA is not available on this machine" % spec)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise AmortizedPyroError("device %r asked for, but only %d CUDA device(s) exist"
                                     % (spec, torch.cuda.device_count()))
    elif device.type != "cpu":
        raise AmortizedPyroError("unsupported device %r: use auto, cpu, cuda or cuda:N" % spec)
    return device


@dataclass
class FitResult:
    """A trained run: its config, per-epoch history, model, guide and Pyro param-store state."""

    config: FitConfig
    history: list
    model: object
    guide: object
    param_state: dict
    data_source: str
    device: str
    train_seconds: float
    out: object = None

    @property
    def final(self):
        """The last epoch's record, with the last evaluated MSEs."""
        last = dict(self.history[-1])
        for key in ("train_mse", "test_mse"):
            last[key] = next((r[key] for r in reversed(self.history) if key in r), math.nan)
        return last

    def summary(self):
        final, c = self.final, self.config
        width = " (width %d)" % c.width if c.guide == "amortized" else ""
        lines = ["guide %s%s on %s, %d epochs on %s in %.1f s (%.1f ms/epoch)"
                 % (c.guide, width, self.data_source, final["epoch"], self.device, self.train_seconds,
                    1000 * self.train_seconds / final["epoch"]),
                 "final ELBO  %.1f nats in total, %.2f nats per observation" % (final["elbo"], final["elbo_per_obs"]),
                 "final MSE   train %s, test %s" % tuple(_fmt(final[k]) for k in ("train_mse", "test_mse"))]
        if self.out:
            lines.append("results in  %s" % self.out)
        return "\n".join(lines)


def _fmt(value):
    return "n/a" if value is None or math.isnan(value) else "%.4f" % value


def diverged(epoch, reason, writer):
    where = "; the metrics of the epochs before are in %s" % writer.metrics_path if writer else ""
    return AmortizedPyroError("training diverged at epoch %d (%s)%s" % (epoch, reason, where))


def fit(config=None, data=None, out=None, progress=True, log=print, **overrides):
    """Train one configuration and return a :class:`FitResult`.

    ``config`` is a :class:`FitConfig` (fields may be overridden by keyword), ``data`` an optional
    :class:`~amortized_pyro.data.Data` (else loaded from ``config.dataset``), ``out`` an optional run
    directory. Clears Pyro's param store first; on return the store holds this run's parameters.
    """
    config = replace(config or FitConfig(), **overrides).check()
    device = resolve_device(config.device)
    if data is None:
        data = load_data(config.dataset, config.data_dir, config.n_obs, config.n_test, config.seed,
                         config.download, log)
    data = data.to(device)
    n_obs = data.train.shape[0]
    pyro.clear_param_store()
    pyro.set_rng_seed(config.seed)
    model = BayesianDecoderModel(n_obs, data.train.shape[1], config.z_dim, config.hidden,
                                 config.prior_scale, config.obs_scale)
    guide = make_guide(config.guide, n_obs, data.train.shape[1], config.z_dim, config.hidden, config.width,
                       config.init_scale, device)
    first = torch.arange(min(config.batch_size, n_obs), device=device)
    elbo = training_elbo(model, guide, data.train[first], first, config.particles, config.jit, log)
    svi = DeviceSVI(model, guide, make_optimizer(config.lr, config.weight_decay), elbo)
    data_info = {"source": data.source, "n_obs": n_obs, "n_test": data.test.shape[0], "x_dim": data.train.shape[1]}
    writer = RunWriter(out, asdict(config), data_info, str(device)) if out else None

    history, train_seconds = [], 0.0
    bar = tqdm(range(1, config.epochs + 1), desc=config.guide, unit="epoch", disable=not progress, leave=False)
    for epoch in bar:
        start = time.perf_counter()
        order = torch.randperm(n_obs, device=device)
        try:
            with pyro.validation_enabled(epoch == 1):  # check shapes and supports once, then run unchecked
                loss = sum(svi.step(data.train[idx], idx) for idx in order.split(config.batch_size))
        except ValueError as e:  # a distribution refused NaN/inf parameters: the run diverged
            raise diverged(epoch, str(e).splitlines()[0], writer) from None
        loss = (loss / math.ceil(n_obs / config.batch_size)).item()  # the epoch's one host sync
        train_seconds += time.perf_counter() - start
        if not math.isfinite(loss):
            raise diverged(epoch, "the ELBO is %s" % loss, writer)
        record = {"epoch": epoch, "elbo": -loss, "elbo_per_obs": -loss / n_obs, "time": train_seconds}
        if epoch % config.eval_every == 0 or epoch == config.epochs:
            record.update(evaluate(guide, data))
            bar.set_postfix(elbo="%.1f" % record["elbo_per_obs"], mse="%.4f" % record["train_mse"])
        history.append(record)
        if writer:
            writer.add(record)
    result = FitResult(config, history, model, guide, pyro.get_param_store().get_state(), data.source,
                       str(device), train_seconds, out)
    if writer:
        writer.finish(result)
    return result


def load_run(path, device="cpu"):
    """Rebuild a finished run (model, guide, parameters, history) from its directory, to evaluate it."""
    device = resolve_device(device)
    info, history, state = read_run(path, map_location=device)
    config = FitConfig(**info["config"])
    n_obs, x_dim = info["data"]["n_obs"], info["data"]["x_dim"]
    pyro.clear_param_store()
    pyro.get_param_store().set_state(state)
    model = BayesianDecoderModel(n_obs, x_dim, config.z_dim, config.hidden, config.prior_scale, config.obs_scale)
    guide = make_guide(config.guide, n_obs, x_dim, config.z_dim, config.hidden, config.width, config.init_scale,
                       device)
    train_seconds = history[-1]["time"] if history else 0.0
    return FitResult(config, history, model, guide, state, info["data"]["source"], str(device), train_seconds, path)
