"""The eager SVI step against its CUDA-graph capture (issue 61, items 2–3; amortized_pyro/inference/static_step.py),
side by side in one process: the package's model and guides at a configuration of bench/bench_step.py (reference:
N 10,000, B 1,000, z 64, H 256, k 128), each guide's two steps interleaved round by round on the same minibatches;
then, with --fit-epochs E, `fit` end to end on the same data, eager and --graph (seconds of training, steps/s).

    python bench/graph_step.py --device cuda --dataset .gpu/mnist --fit-epochs 50
    python bench/graph_step.py --device cpu --configs small --rounds 2 --steps 2   (capture skipped: checks itself)

On the CPU nothing is captured (torch's CUDA graphs need a GPU): the captured column says so.
"""
import argparse
import sys
from pathlib import Path

import torch

import pyro

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import CONFIGS, interleaved_ms, sync  # noqa: E402

from amortized_pyro import fit, load_data  # noqa: E402
from amortized_pyro.inference.static_step import StaticStep  # noqa: E402
from amortized_pyro.inference.svi import make_elbo, make_optimizer, step  # noqa: E402
from amortized_pyro.models.decoder import BayesianDecoderModel  # noqa: E402
from amortized_pyro.models.guides import make_guide  # noqa: E402


def stepper(guide_name, cfg, x_dim, device, captured):
    model = BayesianDecoderModel(cfg["n_obs"], x_dim, cfg["z_dim"], cfg["hidden"]).to(device)
    guide = make_guide(guide_name, model, width=cfg["width"]).to(device)
    elbo = make_elbo()(model, guide)
    optimizer = make_optimizer(guide, 1e-3, capturable=captured)
    run = StaticStep(elbo, optimizer, capture=True) if captured else (lambda *args: step(elbo, optimizer, *args))

    def one(x, idx):
        with pyro.validation_enabled(False):
            return run(x, idx)
    return one


def step_times(guide_name, cfg, images, device, rounds, steps):
    x_all = images[: cfg["n_obs"]]
    batches = [idx for _ in range(3) for idx in torch.randperm(cfg["n_obs"], device=device).split(cfg["batch"])]
    kinds = ["eager"] + (["captured"] if device.type == "cuda" else [])
    runs = {kind: stepper(guide_name, cfg, x_all.shape[1], device, kind == "captured") for kind in kinds}
    for kind in kinds:  # warm-up: optimizer state; the captured one's eager steps and its capture
        for i in range(5):
            runs[kind](x_all[batches[i]], batches[i])
    sync(device)
    return interleaved_ms(runs, x_all, batches, rounds, steps, device)


def fit_seconds(dataset, cfg, epochs, device, graph):
    result = fit(dataset=dataset, n_obs=cfg["n_obs"], n_test=100, batch_size=cfg["batch"], z_dim=cfg["z_dim"],
                 hidden=cfg["hidden"], width=cfg["width"], epochs=epochs, eval_every=epochs, predictive_draws=0,
                 device=str(device), graph=graph, progress=False, log=lambda line: None)
    return result.train_seconds, result.history[-1]["elbo_per_obs"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dataset", default="mnist-sample", help="images (tiled up to N if fewer)")
    parser.add_argument("--configs", nargs="+", default=["reference"], choices=list(CONFIGS))
    parser.add_argument("--guides", nargs="+", default=["amortized", "per-datapoint", "shared"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20, help="steps per kind per round")
    parser.add_argument("--fit-epochs", type=int, default=0, help="fit end to end, eager and --graph (0: skip)")
    args = parser.parse_args()
    device = torch.device(args.device)
    images = load_data(args.dataset, n_obs=10000, n_test=0, log=lambda line: None).train
    images = images.repeat(-(-10000 // len(images)), 1)[:10000].to(device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU, %d threads" % torch.get_num_threads()
    print("# %s | torch %s | pyro %s | data %s" % (where, torch.__version__, pyro.__version__, args.dataset))
    print("| config | guide | eager ms/step | captured ms/step | eager ÷ captured |\n|---|---|---|---|---|")
    for cfg_name in args.configs:
        for guide in args.guides:
            ms = step_times(guide, CONFIGS[cfg_name], images, device, args.rounds, args.steps)
            captured = ms.get("captured")
            print("| %s | %s | %.2f | %s | %s |" % (cfg_name, guide, ms["eager"],
                  "%.2f" % captured if captured else "skipped (no CUDA)",
                  "%.1f×" % (ms["eager"] / captured) if captured else "n/a"), flush=True)
    if args.fit_epochs:
        for cfg_name in args.configs:
            cfg = CONFIGS[cfg_name]
            steps = args.fit_epochs * -(-cfg["n_obs"] // cfg["batch"])
            for graph in (False, True) if device.type == "cuda" else (False,):
                seconds, elbo = fit_seconds(args.dataset, cfg, args.fit_epochs, device, graph)
                print("# fit %s, %d epochs (%d steps), %s: %.1f s of training, %.0f steps/s, final ELBO/image %.1f"
                      % (cfg_name, args.fit_epochs, steps, "--graph" if graph else "eager", seconds, steps / seconds,
                         elbo), flush=True)


if __name__ == "__main__":
    main()
