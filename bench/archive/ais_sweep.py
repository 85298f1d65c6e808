"""Is the gap's AIS long enough? log p(x_n | θ_m) by AIS with 200, 1,000 and 5,000 annealing steps from the
same proposals q*_nm, on the same θ draws, images and chains' keys, against IWAE with K = 1,000 and 10,000:

    python bench/archive/ais_sweep.py RUN_DIR --split test --n-images 5 [--steps 200,1000,5000] [--repeats 2]

q* and the q*_m are fitted as ``gap`` fits them (its defaults but M = 4). Each estimate is a stochastic lower
bound on log p(x_n | θ_m); longer annealing can only raise AIS's expectation. Printed per setting: the mean
over images and draws of log p̂(x_n) (mean over the M draws), the mean paired difference from the longest
AIS with its standard error over images, the spread between repeats (other chain keys) and the wall time.
"""
import argparse
import time

import torch

from amortized_pyro.inference.evaluation import factor
from amortized_pyro.local.ais import ais_log_marginal
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.estimates import per_draw
from amortized_pyro.local.gaps import GapSettings, global_draws
from amortized_pyro.local.optimize import converge
from amortized_pyro.runs.fit import finished_run


def repeat(draws, phase, r):
    """The same θ draws for ``phase`` with other keys (repeat r): other z draws, chains and momenta."""
    return Draws(draws.values, [key + 7919 * r for key in draws.keys], draws.device, phase)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--split", default="test", choices=["train", "test"])
    parser.add_argument("--n-images", type=int, default=5)
    parser.add_argument("--steps", default="200,1000,5000")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    settings = GapSettings(theta_draws=4).check()
    result, data = finished_run(args.run_dir, "cpu", lambda *a: None)
    x = (data.train if args.split == "train" else data.test)[:args.n_images]
    idx = torch.arange(x.shape[0]) if args.split == "train" else None
    model, rule = result.model, settings.rule()
    fit, _ = global_draws(result.guide, settings, torch.Generator().manual_seed(settings.seed))
    fit = model.with_gram(fit, x)
    q_z = factor(result.guide, x, idx, fit.at("guide"))
    best = converge(model.local_log_joint, x, q_z[0], q_z[1].log(), fit.at("fit"), settings.lr, rule,
                    settings.step_samples)
    q_m = converge(model.local_log_joint, x, best.loc, best.log_scale, fit.at("fit-per-draw"), settings.lr, rule,
                   settings.step_samples, per_draw=True)
    proposal = (q_m.loc, q_m.log_scale.exp())

    rows = {}
    for K in (1000, 10000):
        began = time.perf_counter()
        rows["IWAE K=%d" % K] = [per_draw(model.local_log_joint, x, *proposal, repeat(fit, "iwae", r), K,
                                          "logmeanexp").mean(0) for r in range(args.repeats)]
        rows["IWAE K=%d" % K].append(time.perf_counter() - began)
    for steps in map(int, args.steps.split(",")):
        began = time.perf_counter()
        rows["AIS T=%d" % steps] = [ais_log_marginal(model.local_log_joint, x, *proposal, repeat(fit, "ais", r),
                                                     steps, settings.ais_chains, settings.leapfrog).mean(0)
                                    for r in range(args.repeats)]
        rows["AIS T=%d" % steps].append(time.perf_counter() - began)
    longest = torch.stack(rows["AIS T=%s" % args.steps.split(",")[-1]][:-1]).mean(0)
    n = x.shape[0]
    print("%s, %s images 0..%d, M = %d θ draws, %d chains, %d leapfrog steps, %d repeats"
          % (args.run_dir, args.split, n - 1, len(fit), settings.ais_chains, settings.leapfrog, args.repeats))
    print("| estimator | log p̂(x) (mean over images) | − longest AIS (± s.e. over images) | repeat spread | s |")
    print("|---|---|---|---|---|")
    for name, values in rows.items():
        estimates, seconds = torch.stack(values[:-1]), values[-1]
        mean = estimates.mean(0)
        difference = mean - longest
        spread = (estimates[0] - estimates[-1]).abs().mean().item() if args.repeats > 1 else float("nan")
        print("| %s | %.2f | %+.2f ± %.2f | %.2f | %.0f |" % (name, mean.mean(), difference.mean(),
                                                             difference.std() / n ** 0.5, spread, seconds))


if __name__ == "__main__":
    main()
