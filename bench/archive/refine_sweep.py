"""The refinement's step size, swept: how much the local ELBO rises after k refinement steps from the encoder's
factor, for Adam and for Kim et al.'s SGD with momentum on clipped gradients (issue 31, item 3), at each
learning rate, on the same images and draws (the gap's: M θ draws, 8 z draws per image and draw per step,
scored on S fresh draws).

    OMP_NUM_THREADS=1 python bench/archive/refine_sweep.py RUN_DIR [--images 20] [--steps 5,20] \
        [--adam 0.003,0.01,0.03,0.1] [--momentum 0.003,0.01,0.03,0.1,0.3,1]

For each optimizer, learning rate, split (training, held-out) and k: the mean over images of L_n(after k
steps) − L_n(the encoder's factor), nats per image, ± the standard error over images. The learning rate with
the largest rise at k = 5 on training images is the one to train SA-VI with (its steps in training are those).
"""
import argparse

import torch

from amortized_pyro.gap.measure import gap_images, guide_elbos
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.report.marks import plus_minus
from amortized_pyro.runs.fit import finished_run
from amortized_pyro.support.stats import mean_stderr
from inference_cost import run_arguments


def rates(text):
    return [float(v) for v in text.split(",") if v]


def main():
    parser = run_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--adam", type=rates, default=rates("0.003,0.01,0.03,0.1"))
    parser.add_argument("--momentum", type=rates, default=rates("0.003,0.01,0.03,0.1,0.3,1"))
    args = parser.parse_args()
    result, data = finished_run(args.run_dir, "cpu", lambda *a: None)
    settings = GapSettings(theta_draws=args.theta_draws)
    steps = tuple(int(k) for k in args.steps.split(","))
    splits = []
    for split, images in (("train", data.train), ("test", data.test)):
        seed, chosen = gap_images(settings, result.config.seed, images.shape[0], args.images)
        splits.append((split, images[chosen], chosen if split == "train" else None, seed))
    print("%s: %d images per split, M = %d θ draws, rise of L_n over the encoder's factor (nats per image, ± s.e. "
          "over images)\n" % (args.run_dir, args.images, args.theta_draws))
    print("| optimizer | lr | split | " + " | ".join("after %d steps" % k for k in steps) + " |")
    print("|---" * (3 + len(steps)) + "|")
    for optimizer, grid in (("adam", args.adam), ("sgd-momentum", args.momentum)):
        for lr in grid:
            for split, x, idx, seed in splits:
                elbos, _ = guide_elbos(result.model, result.guide, x, idx, settings, seed, steps, optimizer, lr)
                rises = [plus_minus(mean_stderr((elbos[k] - elbos["guide"]).tolist())) for k in steps]
                print("| %s | %g | %s | %s |" % (optimizer, lr, split, " | ".join(rises)), flush=True)


if __name__ == "__main__":
    with torch.no_grad():
        main()
