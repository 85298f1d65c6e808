"""Does torch.compile pay on the package's training step? (the check behind BENCHMARKS.md)

    python bench/archive/try_torch_compile.py --configs small reference
    python bench/archive/try_torch_compile.py --device cuda

For the amortized guide, compiles the ELBO module (``torch.compile(make_elbo()(model, guide))``), reports the
compilation time and the loss of both for one seed, then times whole steps (loss, backward, Adam) of the
eager and the compiled module, interleaved round by round.
"""
import argparse
import statistics
import time

import torch

import pyro
from amortized_pyro import BayesianDecoderModel, make_guide
from amortized_pyro.inference.svi import make_elbo, make_optimizer, step

CONFIGS = {"reference": (10000, 1000, 64, 256, 128), "small": (1000, 100, 16, 64, 32)}  # N, B, z, H, width


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--configs", nargs="+", default=["small", "reference"], choices=list(CONFIGS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    for name in args.configs:
        n, b, z_dim, hidden, width = CONFIGS[name]
        pyro.set_rng_seed(0)
        x_all = torch.rand(n, 784, device=device)
        model = BayesianDecoderModel(n, 784, z_dim, hidden).to(device)
        guide = make_guide("amortized", model, width=width).to(device)
        eager = make_elbo()(model, guide)
        compiled = torch.compile(eager)
        optimizer = make_optimizer(guide)
        batches = [torch.randint(0, n, (b,), device=device) for _ in range(4)]
        with pyro.validation_enabled(False):
            start = time.perf_counter()
            pyro.set_rng_seed(3)
            a = compiled(x_all[batches[0]], batches[0]).item()
            print("%s: torch.compile's first call (compilation) %.1f s" % (name, time.perf_counter() - start))
            pyro.set_rng_seed(3)
            b_loss = eager(x_all[batches[0]], batches[0]).item()
            print("%s: same seed: compiled loss %.6g, eager loss %.6g" % (name, a, b_loss))
            times = {"eager": [], "compiled": []}
            for r in range(args.rounds):
                for method, elbo in (("eager", eager), ("compiled", compiled))[:: 1 if r % 2 else -1]:
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    for s in range(args.steps):
                        idx = batches[s % len(batches)]
                        step(elbo, optimizer, x_all[idx], idx)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    times[method].append(1000 * (time.perf_counter() - start) / args.steps)
        print("%s: ms per step (median of %d rounds): eager %.2f, compiled %.2f" % (
            name, args.rounds, statistics.median(times["eager"]), statistics.median(times["compiled"])))


if __name__ == "__main__":
    main()
