"""What reading the model's plate costs a builder per call (issues 59, 68): the guide's read alone (the model run
under poutine.block up to its first local site, with or without Pyro's validation: one read, one path) against
the whole guide call (validation off), on tests/toy_models.VAE (Pyro's
examples/vae) at MNIST sizes, Pyro's validation off, one thread; the mean of --calls calls after a warm-up.

    OMP_NUM_THREADS=1 python bench/plate_read.py --calls 500
"""
import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402

import pyro  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from toy_models import VAE  # noqa: E402

from amortized_pyro.autoguides import AutoAmortizedNormal  # noqa: E402


def mean_us(call, calls):
    for _ in range(50):
        call()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    torch.set_num_threads(1)
    pyro.enable_validation(False)
    torch.manual_seed(0)
    vae = VAE(784, 50, 400)
    x = torch.bernoulli(torch.rand(128, 784))
    guide = AutoAmortizedNormal(vae.model)
    guide(x)
    whole = mean_us(lambda: guide(x), args.calls)
    read = mean_us(lambda: guide._read_plate((x,), {}), args.calls)
    print("VAE x 784, H 400, z 50, B 128: the plate read to the first local site %.0f µs of a guide call's %.0f µs "
          "(%.1f%%)" % (read, whole, 100 * read / whole))


if __name__ == "__main__":
    main()
