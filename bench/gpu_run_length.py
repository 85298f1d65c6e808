"""Issue 70, item 4, on a lent GPU: a whole reference run's wall time eager and captured, five seeds packed as
replicas against one seed, and ``torch.compile(mode="reduce-overhead")`` against the captured step. Each part is
its own process (bench/cuda_issue70.sh runs them under ``timeout``), at bench/bench_step.py's reference size
(N 10,000 cut to 9,900 + 100 held out from the MNIST test files, B 1,000, z 64, H 256, k 128: 10 steps an epoch):

    python bench/gpu_run_length.py fit --dataset .gpu/mnist --epochs 5000 --graph   (50,000 steps, captured)
    python bench/gpu_run_length.py fit --dataset .gpu/mnist --epochs 300             (3,000 steps, eager)
    python bench/gpu_run_length.py replicas --dataset .gpu/mnist --epochs 300 --replicas 5
    python bench/gpu_run_length.py compile --dataset .gpu/mnist --rounds 5 --steps 10

``fit`` and ``replicas`` print the seconds of training (the runs' own clock, evaluation excluded) and steps per
second; ``compile`` prints ms per step, eager, captured (``StaticStep``) and compiled, interleaved round by round
on the same minibatches (bench/bench_step.py's ``interleaved_ms``), with the compile's own time. On the CPU
``fit`` without --graph, ``replicas`` and ``compile`` (without the captured column) run as a check of this script.
"""
import argparse
import sys
import time
from pathlib import Path

import torch

import pyro

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import CONFIGS, interleaved_ms, sync  # noqa: E402
from graph_step import stepper  # noqa: E402

from amortized_pyro import fit, load_data  # noqa: E402
from amortized_pyro.inference.svi import make_elbo, make_optimizer  # noqa: E402
from amortized_pyro.models.decoder import BayesianDecoderModel  # noqa: E402
from amortized_pyro.models.guides import make_guide  # noqa: E402
from amortized_pyro.runs.config import FitConfig  # noqa: E402
from amortized_pyro.runs.packs import fit_replicas  # noqa: E402

REFERENCE = CONFIGS["reference"]


def config(args, **overrides):
    return FitConfig(dataset=args.dataset, n_obs=REFERENCE["n_obs"], n_test=100, batch_size=REFERENCE["batch"],
                     z_dim=REFERENCE["z_dim"], hidden=REFERENCE["hidden"], width=REFERENCE["width"],
                     epochs=args.epochs, eval_every=args.epochs, predictive_draws=0, device=args.device,
                     guide=args.guide, **overrides)


def report(kind, args, seconds, wall, elbos):
    steps = args.epochs * 10
    print("# %s, %s, %d epochs (%d steps): %.1f s of training (%.1f s wall with data and evaluation), %.0f steps/s, "
          "%.3f ms/step; final ELBO/image %s" % (kind, args.guide, args.epochs, steps, seconds, wall, steps / seconds,
                                                 1000 * seconds / steps, ", ".join("%.1f" % e for e in elbos)),
          flush=True)


def run_fit(args):
    start = time.perf_counter()
    result = fit(config(args, graph=args.graph), progress=False, log=lambda line: None)
    report("fit --graph" if args.graph else "fit eager", args, result.train_seconds, time.perf_counter() - start,
           [result.history[-1]["elbo_per_obs"]])


def run_replicas(args):
    start = time.perf_counter()
    results = fit_replicas(config(args), args.replicas, progress=False, log=lambda line: None)
    report("fit --replicas %d (eager; seeds 0-%d)" % (args.replicas, args.replicas - 1), args,
           max(r.train_seconds for r in results), time.perf_counter() - start,
           [r.history[-1]["elbo_per_obs"] for r in results])


def compiled_stepper(guide_name, cfg, x_dim, device):
    """The eager step with the ELBO module's forward under torch.compile(mode="reduce-overhead"): the loss and its
    graph compiled (with whatever graph breaks Pyro's messengers cause), backward and Adam as in the eager step."""
    model = BayesianDecoderModel(cfg["n_obs"], x_dim, cfg["z_dim"], cfg["hidden"]).to(device)
    guide = make_guide(guide_name, model, width=cfg["width"]).to(device)
    elbo = make_elbo()(model, guide)
    optimizer = make_optimizer(guide, 1e-3)
    compiled = torch.compile(elbo, mode="reduce-overhead")

    def step(x, idx):
        with pyro.validation_enabled(False):
            loss = compiled(x, idx)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def run_compile(args):
    device = torch.device(args.device)
    images = load_data(args.dataset, n_obs=10000, n_test=0, log=lambda line: None).train
    x_all = images.repeat(-(-10000 // len(images)), 1)[:10000].to(device)
    cfg = REFERENCE
    batches = [idx for _ in range(3) for idx in torch.randperm(cfg["n_obs"], device=device).split(cfg["batch"])]
    runs = {"eager": stepper(args.guide, cfg, x_all.shape[1], device, False)}
    if device.type == "cuda":
        runs["captured"] = stepper(args.guide, cfg, x_all.shape[1], device, True)
    for kind, one in runs.items():
        for i in range(5):
            one(x_all[batches[i]], batches[i])
    start = time.perf_counter()
    try:
        runs["compiled"] = compiled_stepper(args.guide, cfg, x_all.shape[1], device)
        for i in range(5):  # the compile, then reduce-overhead's recording and capture
            runs["compiled"](x_all[batches[i]], batches[i])
        sync(device)
        print("# torch.compile(mode='reduce-overhead'): %.1f s to compile and warm up (5 steps)"
              % (time.perf_counter() - start), flush=True)
    except Exception as error:  # a measurement, not a feature: what failed is the finding
        runs.pop("compiled", None)
        print("# torch.compile(mode='reduce-overhead') failed after %.1f s: %s: %s"
              % (time.perf_counter() - start, type(error).__name__, str(error).splitlines()[0][:300]), flush=True)
    ms = interleaved_ms(runs, x_all, batches, args.rounds, args.steps, device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print("# %s, %s, reference size; median ms/step over %d interleaved rounds of %d steps" % (
        where, args.guide, args.rounds, args.steps))
    print("| " + " | ".join(ms) + " |\n|" + "---|" * len(ms) + "\n| " + " | ".join("%.3f" % v for v in ms.values())
          + " |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["fit", "replicas", "compile"])
    parser.add_argument("--dataset", default="mnist-sample")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--guide", default="amortized")
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--graph", action="store_true")
    parser.add_argument("--replicas", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    pyro.set_rng_seed(0)
    {"fit": run_fit, "replicas": run_replicas, "compile": run_compile}[args.part](args)


if __name__ == "__main__":
    main()
