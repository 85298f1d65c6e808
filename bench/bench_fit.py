"""Time whole training runs at the reference configuration: ms per epoch and peak memory, per guide.

    python bench/bench_fit.py --device cpu --epochs 30
    python bench/bench_fit.py --device cuda --epochs 300

Each guide runs ``fit`` in a process of its own (so that peak memory is its own) on N = 10,000 training
and 1,000 test images (the images of ``--dataset``, tiled where it has fewer), minibatches of 1,000,
width 128, evaluating the train/test MSE every ``--eval-every`` epochs as a real run does. Reports the
median training time per epoch (evaluation excluded, first epoch excluded: it validates shapes and warms
up), the whole run's wall time per epoch (evaluation included), the projected time of the reference
run (5,000 epochs) and peak memory (RSS; on CUDA also torch.cuda.max_memory_allocated).
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

GUIDES = ("amortized", "per-datapoint", "shared")


def child(args):
    images = load_data(args.dataset, n_obs=11000, n_test=0, log=lambda line: None).train
    images = images.repeat(-(-11000 // len(images)), 1)[:11000]
    data = Data(images[:10000], images[10000:], args.dataset)
    config = FitConfig(guide=args.child, width=128, epochs=args.epochs, device=args.device, jit=args.jit,
                       eval_every=args.eval_every)
    start = time.perf_counter()
    result = fit(config, data=data, progress=False)
    wall = time.perf_counter() - start
    times = [r["time"] for r in result.history]
    per_epoch = [b - a for a, b in zip(times, times[1:])]
    out = {"guide": args.child, "train_ms_per_epoch": 1000 * statistics.median(per_epoch),
           "wall_ms_per_epoch": 1000 * wall / args.epochs,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "final_train_mse": result.final["train_mse"]}
    if result.device.startswith("cuda"):
        out["cuda_max_allocated_mib"] = torch.cuda.max_memory_allocated() / 2 ** 20
    print(json.dumps(out))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dataset", default="mnist-sample")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=1)
    parser.add_argument("--jit", action="store_true")
    parser.add_argument("--guides", nargs="+", default=list(GUIDES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU, %d threads" % torch.get_num_threads()
    print("# %s | %d epochs, eval every %d | jit %s" % (where, args.epochs, args.eval_every, args.jit))
    print("| guide | train ms/epoch | wall ms/epoch (with eval) | 5,000 epochs (projected) | peak RSS MiB | CUDA peak MiB |")
    print("|---|---|---|---|---|---|")
    for guide in args.guides:
        command = [sys.executable, __file__, "--child", guide, "--device", args.device, "--dataset", args.dataset,
                   "--epochs", str(args.epochs), "--eval-every", str(args.eval_every)] + (["--jit"] if args.jit else [])
        r = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        print("| %s | %.0f | %.0f | %.1f min | %.0f | %s |" % (
            guide, r["train_ms_per_epoch"], r["wall_ms_per_epoch"], 5000 * r["wall_ms_per_epoch"] / 60000,
            r["peak_rss_mib"], "%.0f" % r["cuda_max_allocated_mib"] if "cuda_max_allocated_mib" in r else "–"),
            flush=True)


if __name__ == "__main__":
    main()
