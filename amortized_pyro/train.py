"""Training one configuration: devices, the SVI loop over epochs and minibatches, run results.

The loop calls Pyro's SVI step (:mod:`amortized_pyro.svi`) on minibatches drawn on the device, reads the
loss back once per epoch, evaluates the reconstructions every ``eval_every`` epochs
(:mod:`amortized_pyro.evaluation`), and stops with a clear error when the ELBO stops being finite.
With a KL warm-up the loss of the first ``kl_warmup`` epochs is the warm-up objective, not the ELBO: it is
recorded as ``objective`` with its ``kl_scale``, and ``elbo`` is missing there.
"""
import math
import time
from dataclasses import asdict, dataclass, replace

import torch
from tqdm.auto import tqdm

import pyro

from .config import FitConfig
from .data import load_data
from .errors import AmortizedPyroError
from .evaluation import MSE_KEYS, evaluate, mean_image_mse
from .guides import make_guide
from .model import BayesianDecoderModel
from .runs import RunWriter, read_run
from .svi import DeviceSVI, make_optimizer, training_elbo

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


def build(config, n_obs, x_dim, device):
    """The model and guide that ``config`` defines, for N = n_obs images of x_dim pixels."""
    model = BayesianDecoderModel(n_obs, x_dim, config.z_dim, config.hidden, config.prior_scale, config.obs_scale,
                                 config.likelihood)
    guide = make_guide(config.guide, n_obs, x_dim, config.z_dim, config.hidden, config.width, config.init_scale,
                       device, config.encoder_layers, config.qz_init, config.seed)
    return model, guide


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
    mean_image_mse: dict
    out: object = None

    @property
    def final(self):
        """The last epoch's record, with the last evaluated MSEs."""
        last = dict(self.history[-1])
        for key in MSE_KEYS:
            last[key] = next((r[key] for r in reversed(self.history) if key in r), math.nan)
        return last

    def summary(self):
        final, c = self.final, self.config
        width = " (width %d)" % c.width if c.guide == "amortized" else ""
        lines = ["guide %s%s on %s, %d epochs on %s in %.1f s (%.1f ms/epoch)"
                 % (c.guide, width, self.data_source, final["epoch"], self.device, self.train_seconds,
                    1000 * self.train_seconds / final["epoch"]),
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


def diverged(epoch, reason, writer):
    where = "; the metrics of the epochs before are in %s" % writer.metrics_path if writer else ""
    return AmortizedPyroError("training diverged at epoch %d (%s)%s" % (epoch, reason, where))


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


def kl_schedule(config, epoch, device):
    """The warm-up's KL scale for ``epoch`` as a device tensor (None without warm-up)."""
    if not config.kl_warmup:
        return None
    return torch.tensor(min(1.0, epoch / config.kl_warmup), device=device)


def fit(config=None, data=None, out=None, progress=True, log=print, **overrides):
    """Train one configuration and return a :class:`FitResult`.

    ``config`` is a :class:`FitConfig` (fields may be overridden by keyword), ``data`` an optional
    :class:`~amortized_pyro.data.Data` (else loaded from ``config.dataset``), ``out`` an optional run
    directory. Clears Pyro's param store first; on return the store holds this run's parameters.
    """
    config = replace(config or FitConfig(), **overrides).check()
    device = resolve_device(config.device)
    data = prepare_data(config, data, log).to(device)
    n_obs, x_dim = data.train.shape
    batch_size = min(config.batch_size, n_obs)
    if config.batch_size > n_obs:
        log("batch size %d > %d training images: training on the full batch" % (config.batch_size, n_obs))
    pyro.clear_param_store()
    pyro.set_rng_seed(config.seed)
    model, guide = build(config, n_obs, x_dim, device)
    first = torch.arange(batch_size, device=device)
    warmup = kl_schedule(config, 1, device)
    first_step = (data.train[first], first) + (() if warmup is None else (warmup,))
    elbo = training_elbo(model, guide, first_step, config.particles, config.jit, log)
    optimizer = make_optimizer(config.lr, config.weight_decay, (config.beta1, config.beta2))
    svi = DeviceSVI(model, guide, optimizer, elbo)
    evaluation_rng = torch.Generator(device).manual_seed(config.seed)
    baseline = mean_image_mse(data)
    data_info = {"source": data.source, "n_obs": n_obs, "n_test": data.test.shape[0], "x_dim": x_dim,
                 "binarized": data.binarized, "mean_image_mse": baseline}
    writer = RunWriter(out, asdict(config), data_info, str(device)) if out else None

    history, train_seconds = [], 0.0
    bar = tqdm(range(1, config.epochs + 1), desc=config.guide, unit="epoch", disable=not progress, leave=False)
    for epoch in bar:
        start = time.perf_counter()
        kl_scale = kl_schedule(config, epoch, device)
        extra = () if kl_scale is None else (kl_scale,)
        order = torch.randperm(n_obs, device=device)
        try:
            with pyro.validation_enabled(epoch == 1):  # check shapes and supports once, then run unchecked
                loss = sum(svi.step(data.train[idx], idx, *extra) for idx in order.split(batch_size))
        except ValueError as e:  # a distribution refused NaN/inf parameters: the run diverged
            raise diverged(epoch, str(e).splitlines()[0], writer) from None
        loss = (loss / math.ceil(n_obs / batch_size)).item()  # the epoch's one host sync
        train_seconds += time.perf_counter() - start
        if not math.isfinite(loss):
            raise diverged(epoch, "the ELBO is %s" % loss, writer)
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
    result = FitResult(config, history, model, guide, pyro.get_param_store().get_state(), data.source,
                       str(device), train_seconds, baseline, out)
    if writer:
        writer.finish(result)
    return result


def load_run(path, device="cpu"):
    """Rebuild a finished run (model, guide, parameters, history) from its directory, to evaluate it."""
    device = resolve_device(device)
    info, history, state = read_run(path, map_location=device)
    config = FitConfig(**info["config"])
    pyro.clear_param_store()
    pyro.get_param_store().set_state(state)
    model, guide = build(config, info["data"]["n_obs"], info["data"]["x_dim"], device)
    train_seconds = history[-1]["time"] if history else 0.0
    return FitResult(config, history, model, guide, state, info["data"]["source"], str(device), train_seconds,
                     info["data"]["mean_image_mse"], path)
