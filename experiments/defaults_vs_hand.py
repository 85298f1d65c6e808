"""Issue 68, item 1: does the builder's default start train as well as the guide a user writes by hand?

Pyro's examples/vae (a decoder z 16 → 200 → 784 with softplus, ``pyro.plate("data", x.shape[0])``, Bernoulli on
binarized MNIST), as tests/toy_models.py writes it (Pyro's example read, not copied), trained alike by stock SVI (Adam
1e-3, minibatches of 100 on 2,000 images of the shipped real-MNIST sample) under three guides:

    hand      the example's encoder guide: h = softplus(fc1(x)), z ~ N(fc21(h), exp(fc22(h)))
    builder   AutoAmortizedNormal(model, encoder=<the same body: fc1 + softplus>, encoder_input=0), its defaults
    readme    AutoAmortizedNormal(model): the README's first example's builder call (the default encoder), on this model

(``builder-exp``, ``readme-exp``, ``readme-model-exp``: the same with ``scale_link="exp"``, the default until the
default became softplus; the lines written before that change were run as the plain names and renamed so)

and, on the README's first example's own model (a decoder z 8 → 256 → 784 with tanh, Bernoulli logits; the README
trains it 10 epochs: ``--epochs 10``):

    readme-model-hand   a hand-written encoder guide as examples/vae writes one (784 → 256, softplus, two heads)
    readme-model        the README's AutoAmortizedNormal(model), as written

Held-out ELBO per image on 500 test images (Trace_ELBO, 20 particles), at each of ``--epochs`` (several budgets of
one run: the checkpoints of one training). Writes one JSON line per (guide, seed) to ``--out``; resumable (a
finished line is kept, never redone). ``python experiments/defaults_vs_hand.py --out figures/defaults-vs-hand/runs.jsonl``
"""
import argparse
import os
import sys
import time
from pathlib import Path

import torch

import pyro
from pyro.infer import SVI, Trace_ELBO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from toy_models import VAE  # noqa: E402

from amortized_pyro import load_data  # noqa: E402
from amortized_pyro.support.jsonio import append_jsonl, read_jsonl  # noqa: E402
from amortized_pyro.autoguides import AutoAmortizedNormal  # noqa: E402

Z_DIM, HIDDEN = 16, 200


def make(guide_kind):
    """(model, guide) of a fresh VAE (tests/toy_models.py's, at examples/vae's sizes or the README's), the guide
    named by ``guide_kind`` (module docstring)."""
    options = {"scale_link": "exp"} if guide_kind.endswith("-exp") else {}
    if guide_kind.startswith("readme-model"):
        vae = VAE(x_dim=784, z_dim=8, hidden=256)
        vae.decoder = torch.nn.Sequential(torch.nn.Linear(8, 256), torch.nn.Tanh(), torch.nn.Linear(256, 784))
        return vae.model, vae.guide if guide_kind == "readme-model-hand" else AutoAmortizedNormal(vae.model, **options)
    vae = VAE(x_dim=784, z_dim=Z_DIM, hidden=HIDDEN)
    if guide_kind == "hand":
        return vae.model, vae.guide
    if guide_kind.startswith("builder"):
        return vae.model, AutoAmortizedNormal(vae.model, encoder=vae.body, encoder_input=0, **options)
    return vae.model, AutoAmortizedNormal(vae.model, **options)


def held_out(model, guide, x, particles=20):
    """The held-out ELBO per image, with its standard error over images' (20-particle) estimates."""
    elbo = Trace_ELBO(num_particles=particles, vectorize_particles=False)
    with torch.no_grad():
        per_image = torch.tensor([-elbo.loss(model, guide, x[i:i + 1]) for i in range(len(x))])
    return float(per_image.mean()), float(per_image.std() / len(per_image) ** 0.5)


def run(kind, seed, epochs, train, test):
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    model, guide = make(kind)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())
    generator = torch.Generator().manual_seed(seed)
    out, start, steps = {"guide": kind, "seed": seed, "epochs": {}}, time.perf_counter(), 0
    for epoch in range(1, max(epochs) + 1):
        for batch in train[torch.randperm(len(train), generator=generator)].split(100):
            svi.step(batch)
            steps += 1
        if epoch in epochs:
            mean, stderr = held_out(model, guide, test)
            out["epochs"][str(epoch)] = {"elbo": mean, "stderr": stderr}
            print("%-8s seed %d epoch %3d: held-out ELBO %.2f ± %.2f" % (kind, seed, epoch, mean, stderr), flush=True)
    out["seconds"], out["steps"] = time.perf_counter() - start, steps
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, nargs="+", default=[5, 25])
    parser.add_argument("--guides", nargs="+", default=["hand", "builder", "readme"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = load_data("mnist-sample", n_obs=2000, n_test=500, log=lambda *_: None)
    train, test = data.train.round(), data.test.round()
    done = {(r["guide"], r["seed"]) for r in (read_jsonl(args.out) if os.path.exists(args.out) else [])}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    for seed in args.seeds:
        for kind in args.guides:
            if (kind, seed) not in done:  # resumable: a finished line is kept, never redone
                append_jsonl(args.out, run(kind, seed, sorted(args.epochs), train, test))


if __name__ == "__main__":
    main()
