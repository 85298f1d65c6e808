"""Training: SVI with Trace_ELBO, on CUDA or CPU, with one host sync per epoch.

Pyro's ``SVI.step`` and ``Trace_ELBO`` return the loss as a Python float, which costs a host sync (one
per sample site) on every step. :class:`DeviceSVI` and :class:`DeviceTrace_ELBO` are the same
algorithms with the loss kept as a device tensor; the loop reads it back once per epoch.
"""
import math
import time
import warnings
from dataclasses import asdict, dataclass, field, replace

import torch
from tqdm.auto import tqdm

import pyro
from pyro import poutine
from pyro.infer import SVI, JitTrace_ELBO, Trace_ELBO
from pyro.optim import PyroOptim

from .data import load_data
from .errors import AmortizedPyroError
from .evaluation import evaluate
from .guides import GUIDES, THETA_INIT_SCALE, make_guide
from .model import BayesianDecoderModel
from .runs import RunWriter, read_run


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


class _LossOnDevice:
    """``loss_and_grads`` that backpropagates and returns the loss tensor instead of a float."""

    def loss_and_grads(self, model, guide, *args, **kwargs):
        loss = self.differentiable_loss(model, guide, *args, **kwargs)
        loss.backward()
        return loss.detach()


class DeviceTrace_ELBO(_LossOnDevice, Trace_ELBO):
    """Trace_ELBO for guides whose every site is reparameterized, as all guides here are.

    Then the surrogate loss equals the loss, −(log p(x, z, θ) − log q(z, θ)) summed over the trace with
    the plates' N/B scaling, averaged over particles, and no per-site ``.item()`` is needed.
    """

    def differentiable_loss(self, model, guide, *args, **kwargs):
        loss = 0.0
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            if not all(site["fn"].has_rsample for site in guide_trace.nodes.values() if site["type"] == "sample"):
                raise NotImplementedError("DeviceTrace_ELBO needs a fully reparameterized guide")
            loss = loss - (model_trace.log_prob_sum() - guide_trace.log_prob_sum()) / self.num_particles
        return loss


class DeviceJitTrace_ELBO(_LossOnDevice, JitTrace_ELBO):
    """JitTrace_ELBO without its per-step NaN check and ``.item()``: the same estimator, traced once by
    torch.jit, which removes Pyro's Python overhead per step.

    Pyro 1.9's ``JitTrace_ELBO.differentiable_loss`` returns ``loss + (surrogate − surrogate.detach())``
    where the traced ``loss`` still carries gradient, so gradients come out doubled; here the value is
    the loss and the gradient the surrogate's alone.
    """

    def differentiable_loss(self, model, guide, *args, **kwargs):
        with warnings.catch_warnings():  # torch >= 2.9 marks torch.jit.trace deprecated; it still works
            warnings.filterwarnings("ignore", message=".*torch.jit.trace.*", category=FutureWarning)
            loss, surrogate_loss = self.loss_and_surrogate_loss(model, guide, *args, **kwargs)
        return surrogate_loss + (loss - surrogate_loss).detach()


class DeviceSVI(SVI):
    """``pyro.infer.SVI`` whose ``step`` returns the loss as a device tensor (no host sync) and releases
    gradients (``grad = None``) instead of allocating fresh zero tensors for them."""

    def step(self, *args, **kwargs):
        with poutine.trace(param_only=True) as param_capture:
            loss = self.loss_and_grads(self.model, self.guide, *args, **kwargs)
        params = set(site["value"].unconstrained() for site in param_capture.trace.nodes.values())
        self.optim(params)
        for p in params:
            p.grad = None
        return loss


class SingleOptim(PyroOptim):
    """A PyroOptim with one torch optimizer for all parameters (new ones join as a parameter group).

    ``pyro.optim.Adam`` keeps one optimizer per parameter tensor and steps them one by one; Adam's update
    is elementwise, so one optimizer over all tensors computes the same update with torch's multi-tensor
    kernels and a single call.
    """

    def __init__(self, optim_constructor, optim_args):
        super().__init__(optim_constructor, optim_args)
        self.optimizer = None
        self.known = set()

    def __call__(self, params, *args, **kwargs):
        new = [p for p in params if p not in self.known]
        if new:
            self.known.update(new)
            if self.optimizer is None:
                self.optimizer = self.pt_optim_constructor(new, **self.pt_optim_args)
            else:
                self.optimizer.add_param_group({"params": new})
        self.optimizer.step()


def optimizer_args(lr=1e-3, weight_decay=0.0):
    """(torch optimizer, its arguments): Adam, or AdamW where weight_decay > 0; multi-tensor (foreach)."""
    if weight_decay > 0:
        return torch.optim.AdamW, {"lr": lr, "weight_decay": weight_decay, "foreach": True}
    return torch.optim.Adam, {"lr": lr, "foreach": True}


def make_optimizer(lr=1e-3, weight_decay=0.0):
    """Adam (AdamW with decoupled weight decay where weight_decay > 0) as one Pyro optimizer."""
    return SingleOptim(*optimizer_args(lr, weight_decay))


def make_elbo(particles=1, jit=False):
    """The ELBO estimator: ``particles`` vectorized draws, compiled with torch.jit when ``jit``."""
    elbo = DeviceJitTrace_ELBO if jit else DeviceTrace_ELBO
    options = dict(ignore_jit_warnings=True) if jit else {}
    return elbo(num_particles=particles, vectorize_particles=particles > 1, max_plate_nesting=1, **options)


def training_elbo(model, guide, x, idx, particles, jit, log):
    """The estimator to train with: the torch.jit-compiled one where it compiles for this model and
    guide (tried once, on one minibatch), else the plain one, saying so in one line."""
    if jit:
        elbo = make_elbo(particles, jit=True)
        try:
            elbo.differentiable_loss(model, guide, x, idx)
            return elbo
        except Exception as e:  # noqa: BLE001 -- any failure to trace means: run uncompiled
            log("torch.jit could not compile the ELBO (%s); training without --jit" % str(e).strip().splitlines()[0])
    return make_elbo(particles)


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
    reconstructions: dict = field(default_factory=dict)

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
