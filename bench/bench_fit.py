"""Time whole training runs at the reference configuration: ms per epoch and peak memory, per guide.

    python bench/bench_fit.py --device cpu --epochs 30
    python bench/bench_fit.py --device cuda --epochs 300

Each guide runs ``fit`` in a process of its own (so that peak memory is its own) on N = 10,000 training
and 1,000 test images (the images of ``--dataset``, tiled where it has fewer), minibatches of 1,000,
width 128, with the package's defaults. Reports the median training time per epoch (the first epoch
excluded: it holds the one-off validation and allocations), the time of one evaluation as ``fit`` does it
(plug-in and posterior-predictive MSE on train and test, the default predictive draws; median of 5), the
share of wall time that evaluations take when made every ``--eval-every`` epochs (default: the package's
default cadence), the set-up time (data on the device, first epoch), the projected time of the reference
run, 5,000 epochs, and peak memory (RSS; on CUDA also torch.cuda.max_memory_allocated).
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

from amortized_pyro import Data, FitConfig, fit, load_data
from amortized_pyro.inference.evaluation import evaluate

GUIDES = ("amortized", "per-datapoint", "shared")


def child(args):
    images = load_data(args.dataset, n_obs=11000, n_test=0, log=lambda line: None).train
    images = images.repeat(-(-11000 // len(images)), 1)[:11000]
    data = Data(images[:10000], images[10000:], args.dataset)
    config = FitConfig(guide=args.child, width=128, epochs=args.epochs, device=args.device, eval_every=args.epochs)
    start = time.perf_counter()
    result = fit(config, data=data, progress=False)
    wall = time.perf_counter() - start
    times = [r["time"] for r in result.history]
    train_ms = 1000 * statistics.median(b - a for a, b in zip(times, times[1:]))
    device_data = data.to(result.device)
    eval_ms = []
    for _ in range(5):
        start = time.perf_counter()
        evaluate(result.model, result.guide, device_data, config.predictive_draws, torch.Generator(result.device))
        eval_ms.append(1000 * (time.perf_counter() - start))
    eval_ms = statistics.median(eval_ms)
    setup_s = wall - (args.epochs - 1) * train_ms / 1000 - eval_ms / 1000
    out = {"guide": args.child, "train_ms_per_epoch": train_ms, "eval_ms": eval_ms, "setup_s": setup_s,
           "eval_share": eval_ms / (eval_ms + args.eval_every * train_ms),
           "projected_min": (setup_s + 5000 * (train_ms + eval_ms / args.eval_every) / 1000) / 60,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if result.device.startswith("cuda"):
        out["cuda_max_allocated_mib"] = torch.cuda.max_memory_allocated() / 2 ** 20
    print(json.dumps(out))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dataset", default="mnist-sample")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=FitConfig.eval_every)
    parser.add_argument("--guides", nargs="+", default=list(GUIDES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU, %d threads" % torch.get_num_threads()
    print("# %s | %d epochs timed" % (where, args.epochs))
    print("| guide | train ms/epoch | one evaluation (ms) | evaluation share, every %d epochs | set-up (s) "
          "| 5,000 epochs (projected) | peak RSS MiB | CUDA peak MiB |" % args.eval_every)
    print("|---|---|---|---|---|---|---|---|")
    for guide in args.guides:
        command = [sys.executable, __file__, "--child", guide, "--device", args.device, "--dataset", args.dataset,
                   "--epochs", str(args.epochs), "--eval-every", str(args.eval_every)]
        r = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        print("| %s | %.0f | %.0f | %.1f%% | %.1f | %.1f min | %.0f | %s |" % (
            guide, r["train_ms_per_epoch"], r["eval_ms"], 100 * r["eval_share"], r["setup_s"], r["projected_min"], r["peak_rss_mib"], "%.0f" % r["cuda_max_allocated_mib"] if "cuda_max_allocated_mib" in r else "–"),
            flush=True)


if __name__ == "__main__":
    main()
