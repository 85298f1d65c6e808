"""What inference on new images costs: the encoder's one forward pass against semi-amortized refinement (k Adam
steps from its output, the gap's refinement rows: M θ draws, 8 z draws per image and draw per step) on the same
images, interleaved, medians over rounds. The held-out study (experiments/held-out.sh) sets the gap left after
each against its cost.

    OMP_NUM_THREADS=1 python bench/archive/inference_cost.py RUN_DIR [--images 20] [--steps 5,20] [--rounds 7]
"""
import argparse
import statistics
import time

import torch

from amortized_pyro.autoguides.gap import theta_draws
from amortized_pyro.models.local_posterior import ModelPosterior
from amortized_pyro.inference.evaluation import factor
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.local.optimize import refine
from amortized_pyro.runs.fit import finished_run


def run_arguments(parser):
    """The options of a bench on a trained run's images (this one's and bench/archive/refine_sweep.py's)."""
    parser.add_argument("run_dir")
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--steps", default="5,20")
    parser.add_argument("--theta-draws", type=int, default=4)
    return parser


def main():
    parser = run_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    result, data = finished_run(args.run_dir, "cpu", lambda *a: None)
    model, guide, x = result.model, result.guide, data.test[:args.images]
    settings = GapSettings(theta_draws=args.theta_draws)
    fit, _ = theta_draws(ModelPosterior(model, guide, x), guide, settings, 0, selection=False)
    steps = [int(k) for k in args.steps.split(",")]

    def encoder():
        with torch.no_grad():
            return factor(guide, x, None, fit.at("guide"))

    def refined(k):
        loc, scale = encoder()
        return refine(model.local_log_joint, x, loc, scale.log(), fit.at("refine"), settings.refine_lr, k,
                      settings.step_samples)

    tasks = {"encoder": encoder, **{"encoder + %d steps" % k: (lambda k=k: refined(k)) for k in steps}}
    times = {name: [] for name in tasks}
    for task in tasks.values():
        task()  # warm-up
    for _ in range(args.rounds):
        for name, task in tasks.items():
            began = time.perf_counter()
            task()
            times[name].append(time.perf_counter() - began)
    print("| inference on %d images (%d θ draws per step) | median ms | per image ms | × the encoder |" % (
        args.images, args.theta_draws))
    print("|---|---|---|---|")
    base = statistics.median(times["encoder"])
    for name, values in times.items():
        median = statistics.median(values)
        print("| %s | %.2f | %.3f | %.0f |" % (name, 1000 * median, 1000 * median / args.images, median / base))


if __name__ == "__main__":
    main()
