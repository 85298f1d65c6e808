"""One SVI step with a builder (AutoAmortizedNormal, B) against a hand-written Pyro encoder guide (A) of the
same encoder (issue 46, item 8): the builder gets the hand-written guide's body as ``encoder=`` and its heads'
weights and its exp scale link, so both are one architecture at one start (checked: equal first-step losses from
one seed). Both:
Pyro's SVI, Trace_ELBO(), pyro.optim.Adam, the param store (each side its own model instance and param store
scope, swapped between blocks, outside the timed steps), Pyro's argument validation off (--validate: on).

  prodlda  Pyro's ProdLDA tutorial: plate "documents", logtheta_d ~ N(0, I_K), θ_d = softmax(logtheta_d), a
           pyro.module decoder Linear(K, V, no bias) + softmax (no BatchNorm, no dropout), Multinomial(longest
           document, ·) counts; the guide's encoder: docs → Softplus MLP (H, H) → (loc, exp(log-scale head)).
           Random counts (100 words a document) from a fixed seed.
  vae      tests/toy_models.VAE (Pyro's examples/vae, its own encoder guide) at MNIST sizes; random binary data.

A and B alternate blocks of --steps steps (--blocks of each, A first in even blocks, B first in odd ones,
after --warmup steps each), so load on a shared CPU falls on both alike. Reported: the median over blocks of
ms per step, and of the per-block ratio B/A with its interquartile range.

    OMP_NUM_THREADS=1 python bench/builder_step.py --blocks 20 --steps 20 --warmup 20
    python bench/builder_step.py --device cuda --blocks 20 --steps 20 --warmup 20

With ``--device cuda`` the models and data live on the GPU and each block ends on ``torch.cuda.synchronize()``.
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import pyro  # noqa: E402
import pyro.distributions as dist  # noqa: E402
from pyro.infer import SVI, Trace_ELBO  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from toy_models import VAE  # noqa: E402

from amortized_pyro.autoguides import AutoAmortizedNormal  # noqa: E402


class ProdLDA(nn.Module):
    """The tutorial's model and hand-written guide (BatchNorm- and dropout-free; scale = exp of a head)."""

    def __init__(self, vocab, topics, hidden):
        super().__init__()
        self.topics = topics
        self.decoder = nn.Linear(topics, vocab, bias=False)
        self.body = nn.Sequential(nn.Linear(vocab, hidden), nn.Softplus(), nn.Linear(hidden, hidden), nn.Softplus())
        self.loc, self.log_scale = nn.Linear(hidden, topics), nn.Linear(hidden, topics)

    def model(self, docs):
        pyro.module("decoder", self.decoder)
        with pyro.plate("documents", docs.shape[0]):
            logtheta = pyro.sample("logtheta", dist.Normal(docs.new_zeros(docs.shape[0], self.topics), 1.0).to_event(1))
            count_param = F.softmax(self.decoder(F.softmax(logtheta, -1)), -1)
            pyro.sample("obs", dist.Multinomial(int(docs.sum(-1).max()), count_param), obs=docs)

    def guide(self, docs):
        pyro.module("body", self.body)
        pyro.module("loc", self.loc)
        pyro.module("log_scale", self.log_scale)
        with pyro.plate("documents", docs.shape[0]):
            h = self.body(docs)
            pyro.sample("logtheta", dist.Normal(self.loc(h), self.log_scale(h).exp()).to_event(1))


def setups(args):
    """name → (sizes, plate, a function making the model at a seed, the minibatches)."""
    g = torch.Generator().manual_seed(args.seed)
    words = F.softmax(2 * torch.randn(args.batches * args.lda_batch, args.vocab, generator=g), -1)
    docs = torch.zeros_like(words).scatter_add_(-1, torch.multinomial(words, 100, True, generator=g),
                                                torch.ones(len(words), 100))
    images = torch.bernoulli(torch.rand(args.batches * args.batch, args.x_dim, generator=g), generator=g)
    return {"prodlda": ("V %d, K %d, H %d, B %d" % (args.vocab, args.topics, args.lda_hidden, args.lda_batch),
                        "documents", lambda: ProdLDA(args.vocab, args.topics, args.lda_hidden),
                        docs.split(args.lda_batch)),
            "vae": ("x %d, H %d, z %d, B %d" % (args.x_dim, args.hidden, args.z_dim, args.batch), "data",
                    lambda: VAE(args.x_dim, args.z_dim, args.hidden), images.split(args.batch))}


def sides(make, plate, batch, args):
    """The hand-written (A) and the builder's (B) SVI, each with its model and param store, at one start."""
    made, losses = [], []
    for builder in (False, True):
        torch.manual_seed(args.seed)
        m = make().to(args.device)
        guide = (AutoAmortizedNormal(m.model, plate=plate, encoder=m.body, init_scale=1.0, scale_link="exp")  # as A
                 if builder else m.guide)
        store = {"params": {}, "constraints": {}}
        with pyro.get_param_store().scope(store):
            if builder:
                guide(batch)  # built: its heads set to the hand-written guide's
                with torch.no_grad():
                    for head, own in ((guide.q_z.encoder.loc, m.loc), (guide.q_z.encoder.log_scale, m.log_scale)):
                        head.weight.copy_(own.weight)
                        head.bias.copy_(own.bias)
            svi = SVI(m.model, guide, pyro.optim.Adam({"lr": args.lr}), Trace_ELBO())
            pyro.set_rng_seed(args.seed + 1)
            losses.append(svi.step(batch))
        made.append((svi, store))
    if abs(losses[0] - losses[1]) > 1e-4 * abs(losses[0]):
        raise SystemExit("the two guides differ: first-step losses %r and %r" % tuple(losses))
    return made


def synchronize(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def block(svi, store, batches, steps):
    """ms per step over ``steps`` steps on the minibatches in turn (the device's queue drained at both ends)."""
    with pyro.get_param_store().scope(store):
        synchronize(batches[0].device)
        start = time.perf_counter()
        for i in range(steps):
            svi.step(batches[i % len(batches)])
        synchronize(batches[0].device)
        return (time.perf_counter() - start) / steps * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=("prodlda", "vae"), default=["prodlda", "vae"])
    for option, text in (("--blocks", "blocks of each side"), ("--steps", "SVI steps per block"),
                         ("--warmup", "untimed steps of each side first")):
        parser.add_argument(option, type=int, default=20, help=text)
    parser.add_argument("--vocab", type=int, default=12722, help="ProdLDA's V (the tutorial's 20 newsgroups)")
    parser.add_argument("--topics", type=int, default=20, help="ProdLDA's K")
    parser.add_argument("--lda-hidden", type=int, default=100, help="ProdLDA's encoder width")
    parser.add_argument("--lda-batch", type=int, default=32, help="ProdLDA's documents per step")
    parser.add_argument("--x-dim", type=int, default=784, help="the VAE's data size")
    parser.add_argument("--hidden", type=int, default=400, help="the VAE's hidden width")
    parser.add_argument("--z-dim", type=int, default=50, help="the VAE's latent size")
    parser.add_argument("--batch", type=int, default=128, help="the VAE's images per step")
    parser.add_argument("--batches", type=int, default=8, help="distinct minibatches, taken in turn")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--validate", action="store_true", help="keep Pyro's argument validation on (off: default)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pyro.enable_validation(args.validate)
    print("| model | sizes | hand-written (A) ms/step | builder (B) ms/step | B/A, median of blocks | B/A IQR |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        sizes, plate, make, batches = setups(args)[name]
        batches = [b.to(args.device) for b in batches]
        (svi_a, store_a), (svi_b, store_b) = sides(make, plate, batches[0], args)
        block(svi_a, store_a, batches, args.warmup)
        block(svi_b, store_b, batches, args.warmup)
        times = {"A": [], "B": []}
        for b in range(args.blocks):
            for side in ("AB" if b % 2 == 0 else "BA"):
                svi, store = (svi_a, store_a) if side == "A" else (svi_b, store_b)
                times[side].append(block(svi, store, batches, args.steps))
        ratios = [tb / ta for ta, tb in zip(times["A"], times["B"])]
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
        print("| %s | %s | %.2f | %.2f | %.3f | %.3f–%.3f |" % (name, sizes, statistics.median(times["A"]),
              statistics.median(times["B"]), statistics.median(ratios), q1, q3), flush=True)


if __name__ == "__main__":
    main()
