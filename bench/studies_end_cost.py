"""Where the time of a 50,000-step original-study run goes, per configuration (issue 48's runs).

    OMP_NUM_THREADS=1 python bench/studies_end_cost.py --dataset ../shared/data/mnist --epochs 6

Each configuration of ``experiments/studies-end.sh`` (``STUDIES=original``) is fitted for ``--epochs`` epochs
at N 8,000 / 2,000 with its preset, one torch thread. Reports the median training epoch (8 SVI steps of
B = 1,000; the first epoch excluded), one evaluation as ``fit`` makes it (for the authors' objective: the true
ELBO over the training set, then the plug-in and posterior-predictive MSEs; median of 3), and the projected
wall time of 6,250 epochs with an evaluation every ``--eval-every`` epochs, with the evaluations' share.
"""
import argparse
import statistics
import time

import torch

from amortized_pyro import FitConfig, fit, load_data
from amortized_pyro.inference.svi import make_elbo
from amortized_pyro.inference.training import TrainingState, epoch_record

CONFIGS = (("reference", "amortized", 64), ("reference", "per-datapoint", 64), ("reference", "shared", 64),
           ("reference", "amortized", 1), ("elbo", "amortized", 64), ("elbo", "per-datapoint", 64))
PRESETS = {"reference": "experiments/original-study.toml", "elbo": "experiments/original-study-elbo.toml"}


def cost(data, objective, guide, width, epochs, eval_every):
    config = FitConfig.from_toml(PRESETS[objective], guide=guide, width=width, n_obs=8000, n_test=2000,
                                 epochs=epochs, eval_every=epochs)
    result = fit(config, data=data, progress=False, log=lambda line: None)
    times = [r["time"] for r in result.history]
    train_s = statistics.median(b - a for a, b in zip(times, times[1:]))
    elbo = make_elbo(config.particles, config.estimator)(result.model, result.guide)
    x_all = data.train if config.local_terms == "all" else None
    state, evals = TrainingState(result.guide, config, "cpu"), []
    for _ in range(3):
        began = time.perf_counter()
        epoch_record(result.model, result.guide, data, config, state, epochs, 0.0, None, elbo, x_all, last=True)
        evals.append(time.perf_counter() - began)
    eval_s = statistics.median(evals)
    total_epochs = 6250
    wall_h = (total_epochs * train_s + total_epochs / eval_every * eval_s) / 3600
    share = (total_epochs / eval_every * eval_s) / (wall_h * 3600)
    return train_s, eval_s, wall_h, share


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist-sample")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--eval-every", type=int, default=50)
    args = parser.parse_args()
    data = load_data(args.dataset, n_obs=8000, n_test=2000, log=lambda line: None)
    print("# CPU, %d torch thread(s), %s, N %d / %d, %d epochs timed"
          % (torch.get_num_threads(), args.dataset, len(data.train), len(data.test), args.epochs))
    print("| objective | configuration | train s/epoch | one evaluation (s) | 6,250 epochs, evaluation every %d "
          "(projected h) | evaluation share |" % args.eval_every)
    print("|---|---|---|---|---|---|")
    for objective, guide, width in CONFIGS:
        train_s, eval_s, wall_h, share = cost(data, objective, guide, width, args.epochs, args.eval_every)
        label = {"amortized": "A-VI k=%d" % width, "per-datapoint": "F-VI", "shared": "constant-VI"}[guide]
        print("| %s | %s | %.3f | %.2f | %.2f | %.1f%% |" % (objective, label, train_s, eval_s, wall_h, 100 * share),
              flush=True)


if __name__ == "__main__":
    main()
