"""Does the gap's optimizer reach the same optimum in fewer steps? q* and the q*_m of one run's images, from
the guide's factor and from the prior (as for F-VI's held-out images), at a given first learning rate and
step cap, with AIS off; the package on PYTHONPATH decides the optimizer (e.g. a worktree of the code before
window averaging):

    python bench/archive/gap_optimizer.py RUN_DIR --lr 0.05 --max-steps 1500
    PYTHONPATH=/tmp/before python bench/archive/gap_optimizer.py RUN_DIR --lr 0.01 --max-steps 3000

Printed per start: L(q*) on the fitting draws (what q* maximizes) and on the fresh score draws (what the gap
reports), mean_m L(q*_m; θ_m) (what each q*_m maximizes), the IWAE log p(x), the steps, the capped
optimizations and the wall time; the same θ draws, z draws and images (gap seed 0, first images) in every
setting, so the settings' numbers differ by their optimizers alone.
"""
import argparse
import time

import torch

from amortized_pyro.local import gaps as gap
from amortized_pyro.inference.evaluation import factor
from amortized_pyro.local.estimates import local_elbo
from amortized_pyro.runs.fit import finished_run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--split", default="test", choices=["train", "test"])
    parser.add_argument("--n-images", type=int, default=20)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--patience", type=int, default=10)
    parser.add_argument("--decay-patience", type=int, default=2)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--tolerance", type=float, default=None, help="(a package with a tolerance rule)")
    parser.add_argument("--starts", default="guide,prior")
    args = parser.parse_args()
    result, data = finished_run(args.run_dir, "cpu", lambda *a: None)
    x = (data.train if args.split == "train" else data.test)[:args.n_images]
    idx = torch.arange(x.shape[0]) if args.split == "train" else None
    rule = {} if args.tolerance is None else {"tolerance": args.tolerance}
    settings = gap.GapSettings(theta_draws=4, importance_samples=1000, samples=100, max_steps=args.max_steps,
                               lr=args.lr, ais_steps=0, patience=args.patience,
                               decay_patience=args.decay_patience, window=args.window, **rule).check()
    compact = {} if args.tolerance is None else {"compact": True}
    model = result.model
    for start in args.starts.split(","):
        began = time.perf_counter()
        draws = gap.global_draws(result.guide, settings, torch.Generator().manual_seed(0))
        fit, score = (model.with_gram(d, x) for d in draws)
        q_z = factor(result.guide, x, idx, fit.at("guide")) if start == "guide" else None
        report, best = gap.measure_factors(model.local_log_joint, x, fit, score, q_z, model.z_dim, settings,
                                            **compact)
        seconds = time.perf_counter() - began
        on_fit = local_elbo(model.local_log_joint, x, best.loc, best.log_scale.exp(), fit.at("score"), 100).mean()
        mean_steps = report.get("mean_steps", {})
        print("start %s, lr %g, cap %d, window %d, patience %d, decay patience %d, tolerance %s: L(q*) fitting draws %.3f, score draws %.3f; "
              "L(q*_m) %.3f; IWAE log p %.3f; steps %d (mean q* %s, q*_m %s); capped q* %d/%d, q*_m %d/%d; %.0f s" % (
                  start, args.lr, args.max_steps, args.window, args.patience, args.decay_patience, args.tolerance, on_fit,
                  report["elbo_optimized"]["mean"], report["elbo_per_theta"]["mean"], report["log_px"]["mean"],
                  report["optimizer_steps"], mean_steps.get("q*"), mean_steps.get("q*_m"), report["capped"],
                  x.shape[0], report["capped_per_theta"], x.shape[0] * len(fit), seconds))


if __name__ == "__main__":
    main()
