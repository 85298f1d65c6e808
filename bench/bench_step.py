"""Time one training step: a handwritten PyTorch step vs Pyro's stock ELBO module vs the package's step.

    python bench/bench_step.py --device cpu --configs reference small
    python bench/bench_step.py --device cuda --dataset ../shared/data/mnist

Methods, interleaved round by round on the same minibatches (absolute times drift; ratios within a run
do not):
  plain          a lean step in plain PyTorch as a user would write it (bench/plain_step.py: torch.distributions
                 without validation, torch.optim.Adam with defaults): the yardstick
  handwritten    the test oracle's ELBO (tests/oracle.py) with the same reparameterized draws, one
                 torch.optim.Adam, plain PyTorch
  trace-elbo     Pyro's stock ``Trace_ELBO()(model, guide)`` module on the package's model and guide, the
                 same torch Adam, validation off: Pyro's documented interface, which reads every site's
                 log-density back to the host
  package        the package's step: DeviceTrace_ELBO's module + one foreach Adam (svi.step),
                 FixedScaleNormal likelihood and prior, no validation, no host sync
Prints median ms per step, the package's ratio to plain and to handwritten, and peak memory per method (CUDA: the increase of
``torch.cuda.max_memory_allocated`` over the data; CPU: the process's peak RSS at the end).
"""
import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

import pyro
from pyro.infer import Trace_ELBO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from oracle import draw, elbo, encoder_factor  # noqa: E402
from plain_step import PlainStep  # noqa: E402

from amortized_pyro.autoguides.encoders import Encoder, hidden_layers
from amortized_pyro.inference.svi import make_elbo, make_optimizer, step as svi_step
from amortized_pyro.models.decoder import BayesianDecoderModel
from amortized_pyro.models.networks import decoder_shapes
from amortized_pyro.models.guides import make_guide
from amortized_pyro.runs.data import load_data

CONFIGS = {  # N, B, z_dim, H, encoder width
    "reference": dict(n_obs=10000, batch=1000, z_dim=64, hidden=256, width=128),
    "small": dict(n_obs=1000, batch=100, z_dim=16, hidden=64, width=32),
}
METHODS = ("plain", "handwritten", "trace-elbo", "package")


class HandwrittenStep:
    """Plain PyTorch: parameters as leaf tensors (scales through exp, as Pyro's positive constraint does)."""

    def __init__(self, guide, n_obs, x_dim, z_dim, hidden, width, lr, device):
        def leaf(value):
            return value.to(device).requires_grad_()

        self.scale = None
        self.guide = guide
        self.q_theta = {name.split(".")[1]: (leaf(torch.zeros(shape)), leaf(torch.full(shape, -2.0)))
                        for name, shape in decoder_shapes(z_dim, hidden, x_dim).items()}
        params = [t for pair in self.q_theta.values() for t in pair]
        if guide == "amortized":
            self.encoder = Encoder(hidden_layers(x_dim, width, 2), width, z_dim).to(device)  # the package's encoder
            params += list(self.encoder.parameters())
        else:
            shape = (n_obs, z_dim) if guide == "per-datapoint" else (z_dim,)
            self.q_z = (leaf(torch.zeros(shape)), leaf(torch.zeros(shape)))
            params += list(self.q_z)
        self.n_obs = n_obs
        self.optim = torch.optim.Adam(params, lr=lr, foreach=True)  # the torch optimizer the package uses

    def __call__(self, x, idx):
        q_theta = {l: (m, log_s.exp()) for l, (m, log_s) in self.q_theta.items()}
        if self.guide == "amortized":
            q_z = encoder_factor(x, dict(self.encoder.named_parameters()))
        elif self.guide == "per-datapoint":
            q_z = (self.q_z[0][idx], self.q_z[1][idx].exp())
        else:
            q_z = (self.q_z[0].expand(len(idx), -1), self.q_z[1].exp().expand(len(idx), -1))
        loss = -elbo(x, q_theta, q_z, *draw(q_theta, q_z), self.n_obs / len(idx))
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        return loss.detach()


def pyro_step(method, guide_name, cfg, x_dim, lr, device):
    """A step function of the package's model and guide, with Pyro's stock estimator or the package's."""
    model = BayesianDecoderModel(cfg["n_obs"], x_dim, cfg["z_dim"], cfg["hidden"]).to(device)
    guide = make_guide(guide_name, model, width=cfg["width"]).to(device)
    elbo = (Trace_ELBO() if method == "trace-elbo" else make_elbo())(model, guide)
    optimizer = make_optimizer(guide, lr)

    def step(x, idx):
        with pyro.validation_enabled(False):
            return svi_step(elbo, optimizer, x, idx)
    return step


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def bench(guide, cfg_name, data, device, rounds, steps, lr):
    cfg = CONFIGS[cfg_name]
    x_all = data[: cfg["n_obs"]]
    x_dim = x_all.shape[1]
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    batches = [idx for _ in range(3) for idx in torch.randperm(cfg["n_obs"], device=device).split(cfg["batch"])]
    steppers, peak = {}, {}
    for method in METHODS:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
        if method in ("plain", "handwritten"):
            kind = PlainStep if method == "plain" else HandwrittenStep
            steppers[method] = kind(guide, cfg["n_obs"], x_dim, cfg["z_dim"], cfg["hidden"], cfg["width"], lr, device)
        else:
            steppers[method] = pyro_step(method, guide, cfg, x_dim, lr, device)
        for i in range(3):  # warm-up: optimizer state, allocator
            steppers[method](x_all[batches[i]], batches[i])
        sync(device)
        if device.type == "cuda":
            peak[method] = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
    return interleaved_ms(steppers, x_all, batches, rounds, steps, device), peak


def interleaved_ms(steppers, x_all, batches, rounds, steps, device):
    """Median ms per step of each of ``steppers`` (name → step(x, idx)): ``rounds`` rounds of ``steps`` steps
    each on the minibatches in turn, the order rotated every round (absolute times drift; ratios within a round
    do not)."""
    names = list(steppers)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            sync(device)
            start = time.perf_counter()
            for s in range(steps):
                idx = batches[(r * steps + s) % len(batches)]
                steppers[name](x_all[idx], idx)
            sync(device)
            times[name].append(1000 * (time.perf_counter() - start) / steps)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dataset", default="mnist-sample", help="images to train on (tiled up to N if fewer)")
    parser.add_argument("--configs", nargs="+", default=["reference", "small"], choices=list(CONFIGS))
    parser.add_argument("--guides", nargs="+", default=["amortized", "per-datapoint", "shared"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5, help="steps per method per round")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    images = load_data(args.dataset, n_obs=10000, n_test=0, log=lambda line: None).train
    images = images.repeat(-(-10000 // len(images)), 1)[:10000].to(device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU, %d threads" % torch.get_num_threads()
    print("# %s | torch %s | pyro %s | data %s" % (where, torch.__version__, pyro.__version__, args.dataset))
    print("| config | guide | " + " | ".join("%s ms" % m for m in METHODS) + " | package ÷ plain | ratio to "
          "handwritten: package · trace-elbo |" + (" peak MiB (handwritten / package) |" if device.type == "cuda" else ""))
    print("|---" * (len(METHODS) + 4 + (device.type == "cuda")) + "|")
    for cfg_name in args.configs:
        for guide in args.guides:
            ms, peak = bench(guide, cfg_name, images, device, args.rounds, args.steps, 1e-3)
            row = "| %s | %s | " % (cfg_name, guide) + " | ".join("%.2f" % ms[m] for m in METHODS)
            row += " | **%.3f** |" % (ms["package"] / ms["plain"])
            row += " %.2f× · %.2f× |" % tuple(ms[m] / ms["handwritten"] for m in ("package", "trace-elbo"))
            if peak:
                row += " %.0f / %.0f |" % (peak["handwritten"], peak["package"])
            print(row, flush=True)
    print("# peak RSS of this process: %.0f MiB" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


if __name__ == "__main__":
    main()
