"""Time the per-image local log joint that the gap evaluates millions of times: the package model's
hand-written ``local_log_joint`` against the one read off its Pyro trace (:class:`LocalJoint`, the path
``measure_gap`` takes for any model), side by side on the same draws.

    python bench/archive/bench_local_joint.py                  # 20 images, 100 z draws, z 64, H 256, x 784
    python bench/archive/bench_local_joint.py --draws 8        # a q* optimization step's draws

Interleaved round by round (absolute times drift here; ratios within a run do not); prints the median ms per
call and the ratio to the hand-written one.
"""
import argparse
import statistics
import time

import torch
from pyro import poutine

from amortized_pyro.autoguides import LocalJoint
from amortized_pyro.autoguides.structure import read_structure
from amortized_pyro.models.decoder import BayesianDecoderModel


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = BayesianDecoderModel(2500, 784, 64, 256, obs_scale=0.1)
    x, idx = torch.rand(args.images, 784), torch.arange(args.images)
    structure = read_structure(poutine.trace(model).get_trace(x, idx), "data")
    theta = {name: 0.05 * torch.randn(shape) for name, shape in model.shapes.items()}
    z = torch.randn(args.draws, args.images, 64)
    variants = {"hand-written local_log_joint": lambda: model.local_log_joint(x, z, theta),
                "LocalJoint (read off the trace)": lambda: LocalJoint(model, structure, (x, idx), {})(x, z, theta)}
    times = {name: [] for name in variants}
    with torch.no_grad():
        for _ in range(args.rounds):
            for name, call in variants.items():
                start = time.perf_counter()
                call()
                times[name].append(1e3 * (time.perf_counter() - start))
    base = statistics.median(times[next(iter(variants))])
    print("torch %s, %d threads; %d images x %d draws, %d rounds" % (torch.__version__, torch.get_num_threads(),
                                                                    args.images, args.draws, args.rounds))
    for name, values in times.items():
        print("%-34s %8.2f ms  x%.2f" % (name, statistics.median(values), statistics.median(values) / base))


if __name__ == "__main__":
    main()
