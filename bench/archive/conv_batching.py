"""The conv decoder's θ draws batched two ways, and its training step against the MLP decoder's, side by side.

    python bench/archive/conv_batching.py --threads 1 > bench/results/conv-batching-1thread-DATE.md

1. Ω(z; θ) forward and backward for P draws of θ, each with its own z [B, z_dim]: one grouped convolution over
   the draws (models.networks.ConvDecoder, groups = P) against torch.func.vmap over the draws of the same
   decoder's one-draw path; the same outputs (checked), median of --repeats timings, interleaved.
2. One SVI step (A-VI k = 64, B = 100, 28 × 28 images, Trace_ELBO, Adam) with the MLP decoder and with the conv
   decoder at the nearest parameter count (--hidden chosen for the conv decoder so that its θ is about as
   large as the MLP's), with 1 and 4 particles.
"""
import argparse
import statistics
import time

import torch
from torch.func import vmap

from amortized_pyro.inference.svi import make_elbo, make_optimizer, step
from amortized_pyro.runs.config import FitConfig
from amortized_pyro.runs.fit import build
from amortized_pyro.models.networks import ConvDecoder, MLPDecoder

IMAGE = (1, 28, 28)


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def batching(args):
    decoder = ConvDecoder(args.z_dim, args.hidden, IMAGE)
    rows = ["| draws P | grouped conv (ms) | vmap (ms) | vmap ÷ grouped |", "|---|---|---|---|"]
    for draws in args.draws:
        theta = {k: (0.1 * torch.randn((draws,) + v)).requires_grad_() for k, v in decoder.shapes.items()}
        z = torch.randn(draws, args.batch, args.z_dim)
        one = vmap(lambda t, zz: decoder(zz, t))
        assert torch.allclose(decoder(z, theta), one(theta, z), atol=1e-4)
        grouped = lambda: decoder(z, theta).square().sum().backward()  # noqa: E731
        mapped = lambda: one(theta, z).square().sum().backward()  # noqa: E731
        a, b = [], []
        for _ in range(args.repeats):  # interleaved: drift hits both
            a.append(timed(grouped, 1))
            b.append(timed(mapped, 1))
        g, v = statistics.median(a), statistics.median(b)
        rows.append("| %d | %.2f | %.2f | %.2f |" % (draws, g, v, v / g))
    return rows


def size(decoder):
    return sum(torch.Size(s).numel() for s in decoder.shapes.values())


def steps(args):
    mlp_params = size(MLPDecoder(args.z_dim, args.hidden, IMAGE))
    conv_hidden = min(range(4, 4 * args.hidden, 4), key=lambda h: abs(size(ConvDecoder(args.z_dim, h, IMAGE)) - mlp_params))
    rows = ["| decoder | --hidden | θ size | particles | ms / step |", "|---|---|---|---|---|"]
    x = torch.rand(args.batch, 784)
    idx = torch.arange(args.batch)
    for decoder, hidden in (("mlp", args.hidden), ("conv", conv_hidden)):
        for particles in (1, 4):
            config = FitConfig(decoder=decoder, hidden=hidden, z_dim=args.z_dim, width=64, particles=particles,
                               device="cpu")
            model, guide = build(config, 1000, 784, "cpu", IMAGE)
            elbo = make_elbo(particles)(model, guide)
            optimizer = make_optimizer(guide)
            step(elbo, optimizer, x, idx, None, None)  # warm-up
            ms = timed(lambda: step(elbo, optimizer, x, idx, None, None), args.repeats)
            rows.append("| %s | %d | %d | %d | %.2f |" % (decoder, hidden, size(model.network), particles, ms))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--z-dim", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--draws", type=int, nargs="+", default=[1, 4, 8])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print("torch %s, %d thread(s), B = %d, z_dim = %d, --hidden %d, median of %d\n"
          % (torch.__version__, args.threads, args.batch, args.z_dim, args.hidden, args.repeats))
    print("\n".join(batching(args)) + "\n")
    print("\n".join(steps(args)))


if __name__ == "__main__":
    main()
