"""Time a training step of step variants side by side: SA-VI's refinement, and seeds packed as replicas.

    python bench/archive/bench_variants.py refinement  # A-VI vs SA-VI: 5 steps (straight-through, unrolled), 20 steps
    python bench/archive/bench_variants.py replicas    # R single steps vs one step of R replicas (R = 3)

At the informative preset's size (N 2,500 of the shipped sample, B 250, z 64, H 256, encoder width 64,
σ 0.1), on --device. Variants run interleaved round by round on the same minibatches (absolute times drift;
ratios within a run do not); prints the median ms per step and the ratio to the first variant.
"""
import argparse
import statistics
import time
from dataclasses import replace

import torch

import pyro

from amortized_pyro import FitConfig
from amortized_pyro.inference.replicas import Pack, Stream
from amortized_pyro.inference.svi import make_elbo, make_optimizer, step
from amortized_pyro.inference.training import TrainingState
from amortized_pyro.runs.data import load_data
from amortized_pyro.runs.fit import build



def config(**changes):
    return replace(FitConfig(guide="amortized", width=64, obs_scale=0.1, init_scale=1e-3, n_obs=2500, batch_size=250,
                             lr=3e-3), **changes)


def single_step(cfg, data, device):
    model, guide = build(cfg, data.train.shape[0], data.train.shape[1], device)
    elbo, optimizer = make_elbo()(model, guide), make_optimizer(guide, cfg.lr)
    return lambda idx: step(elbo, optimizer, data.train[idx], idx)


def pack_step(cfg, data, device, replicas):
    models, guides, states, streams = [], [], [], []
    for seed in range(replicas):
        pyro.set_rng_seed(seed)
        model, guide = build(replace(cfg, seed=seed), data.train.shape[0], data.train.shape[1], device)
        models.append(model), guides.append(guide), states.append(TrainingState(guide, cfg, device))
        streams.append(Stream(device))
    pack = Pack(models, guides, states, streams, [None] * replicas, cfg)
    return lambda idx: pack.step(data.train[idx.expand(replicas, -1)], idx.expand(replicas, -1), None, None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["refinement", "replicas"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args()
    device = torch.device(args.device)
    data = load_data("mnist-sample", n_obs=2500, n_test=0, log=lambda *a: None).to(device)
    if args.what == "refinement":
        variants = {"A-VI": single_step(config(), data, device)}
        for name, changes in (("SA-VI r=5 straight-through", dict(refine_steps=5)),
                              ("SA-VI r=5 unrolled", dict(refine_steps=5, refine_grad="unrolled")),
                              ("SA-VI r=20 straight-through", dict(refine_steps=20))):
            variants[name] = single_step(config(guide="semi-amortized", **changes), data, device)
    else:
        singles = [single_step(config(seed=s), data, device) for s in range(args.replicas)]
        variants = {"%d single runs, one step each" % args.replicas: lambda idx: [one(idx) for one in singles][-1],
                    "one pack of %d replicas, one step" % args.replicas: pack_step(config(), data, device, args.replicas)}
    times = {name: [] for name in variants}
    for round_ in range(args.rounds + 2):  # two warm-up rounds
        idx = torch.randperm(2500, device=device)[:250]
        for name, run in variants.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            began = time.perf_counter()
            run(idx).sum().item()
            if round_ >= 2:
                times[name].append(1000 * (time.perf_counter() - began))
    first = statistics.median(next(iter(times.values())))
    print("| variant | median ms / step | ratio |\n|---|---|---|")
    for name, values in times.items():
        print("| %s | %.1f | %.2f |" % (name, statistics.median(values), statistics.median(values) / first))
    print("torch %s, %d threads, device %s" % (torch.__version__, torch.get_num_threads(), device))


if __name__ == "__main__":
    main()
