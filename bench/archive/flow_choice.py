"""Which flow to build on: Zuko's masked autoregressive transform (the package's, through pyro.contrib.zuko)
against Pyro's ``conditional_affine_autoregressive`` (its own IAF-style conditional transform), both affine,
K transforms with hyper-networks of two hidden layers of --width, both applied in their one-pass direction, last
layers zeroed (each starts as the Gaussian guide), conditioned on the encoder's features, after A-VI's
Gaussian factor. Each trains the same model from the same start (informative preset on the shipped sample,
A-VI k = 64, B = 250) for --steps SVI steps in alternating blocks of --block steps (so that load on a shared
CPU falls on both alike); reported: ms per step (median of the blocks' means) and the ELBO per image on the
training images at the end (--particles draws of Trace_ELBO, mean ± s.e.).

    OMP_NUM_THREADS=1 python bench/archive/flow_choice.py [--seed S] > bench/results/flow-choice-DATE.md
"""
import argparse
import statistics
import time

import torch
from torch import nn

import pyro
import pyro.distributions as dist
import pyro.distributions.transforms as T

from amortized_pyro.autoguides.flows import LocalFlow
from amortized_pyro.inference.svi import make_elbo, make_optimizer, step
from amortized_pyro.runs.config import FitConfig
from amortized_pyro.runs.data import load_data
from amortized_pyro.runs.fit import build


class PyroLocalFlow(nn.Module):
    """LocalFlow's interface (push, distribution) on Pyro's conditional affine autoregressive transforms."""

    def __init__(self, size, transforms, context, width):
        super().__init__()
        self.transforms = nn.ModuleList(T.conditional_affine_autoregressive(size, context, hidden_dims=[width, width])
                                        for _ in range(transforms))
        with torch.no_grad():
            for transform in self.transforms:
                transform.nn.layers[-1].weight.zero_()
                transform.nn.layers[-1].bias.zero_()

    def push(self, v, context=None):
        ladj = 0
        for transform in self.transforms:
            conditioned = transform.condition(context)
            u = conditioned(v)
            ladj, v = ladj + conditioned.log_abs_det_jacobian(v, u), u
        return v, ladj

    def distribution(self, loc, scale, context=None):
        return dist.TransformedDistribution(dist.Normal(loc, scale).to_event(1),
                                            [t.condition(context) for t in self.transforms])


def guide_with(kind, args, data):
    config = FitConfig(guide="amortized", width=64, flow=args.transforms, z_dim=args.z_dim, obs_scale=0.1,
                       init_scale=1e-3, n_obs=args.n_obs, batch_size=250, lr=3e-3)
    pyro.set_rng_seed(args.seed)
    model, guide = build(config, args.n_obs, data.train.shape[1], torch.device("cpu"))
    width = args.width
    if kind == "pyro":
        old = guide.flow
        guide.flow = PyroLocalFlow(model.z_dim, args.transforms, old.transforms[0].hyper[0].in_features - model.z_dim,
                                   width)
    else:
        guide.flow = LocalFlow(model.z_dim, args.transforms, guide.flow_context_size(), width)
    return model, guide


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--transforms", type=int, default=2)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--z-dim", type=int, default=16)
    parser.add_argument("--n-obs", type=int, default=1000)
    parser.add_argument("--particles", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0, help="the model's and guides' initialization")
    args = parser.parse_args()
    data = load_data("mnist-sample", n_obs=args.n_obs, n_test=0, log=lambda *a: None)
    x, runs = data.train, {}
    for kind in ("zuko", "pyro"):
        model, guide = guide_with(kind, args, data)
        runs[kind] = dict(model=model, guide=guide, elbo=make_elbo()(model, guide),
                          optimizer=make_optimizer(guide, 3e-3), times=[], done=0,
                          generator=torch.Generator().manual_seed(args.seed + 1))
    while any(r["done"] < args.steps for r in runs.values()):
        for r in runs.values():
            began = time.perf_counter()
            for _ in range(args.block):
                idx = torch.randperm(args.n_obs, generator=r["generator"])[:250]
                step(r["elbo"], r["optimizer"], x[idx], idx)
            r["times"].append((time.perf_counter() - began) / args.block)
            r["done"] += args.block
    print("| flow (K = %d, hidden %d × 2, z_dim %d, seed %d) | ms per SVI step | ELBO per image after %d steps |" % (
        args.transforms, args.width, args.z_dim, args.seed, args.steps))
    print("|---|---|---|")
    for kind, r in runs.items():
        with torch.no_grad():
            values = torch.stack([-r["elbo"](x, torch.arange(args.n_obs)) / args.n_obs for _ in range(args.particles)])
        print("| %s | %.1f | %.1f ± %.1f |" % ({"zuko": "Zuko MaskedAutoregressiveTransform",
                                                "pyro": "Pyro conditional_affine_autoregressive"}[kind],
                                               1000 * statistics.median(r["times"]), values.mean().item(),
                                               values.std().item() / args.particles ** 0.5))


if __name__ == "__main__":
    main()
