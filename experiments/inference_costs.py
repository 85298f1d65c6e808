"""What inference on one new image costs, per configuration of comparison folders (the remedies study): the
time to have q(z_n) for one held-out image and one draw of z from it, at E_q[θ]. For an encoder family that is
its forward pass (SA-VI: with its refinement steps; iterative: with its iterations; a flow: with the flow's pass
for the draw); for F-VI, which has no factor for a new image, the per-image optimization a new image needs: the
gap's q* optimizer (Adam, the gap's default stopping rule, 8 z draws per step; with a flow, q* in its family) at
E_q[θ], from the prior. Seed 0's run of each folder, the median over --rounds (F-VI: over 3), on one torch
thread. Absolute times on a shared CPU drift: read the ratios, measured here side by side in one process.

    OMP_NUM_THREADS=1 python experiments/inference_costs.py runs/remedies/a-vi runs/remedies/f-vi ... [--rounds 21]
"""
import argparse
import glob
import statistics
import time

import torch

from amortized_pyro.inference.evaluation import factor, pushed
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.local.optimize import converge
from amortized_pyro.models.guides import config_label
from amortized_pyro.runs.fit import finished_run


def encoder_task(guide, x):
    def infer():
        with torch.no_grad():
            loc, scale = factor(guide, x)
            return pushed(guide, loc + scale * torch.randn_like(loc), x, None)
    return infer


def optimization_task(model, guide, x, settings):
    theta = Draws.of([guide.global_mean()], torch.Generator().manual_seed(0)).at("fit")
    idx = torch.arange(x.shape[0])
    size = model.z_dim

    def infer():
        flow = guide.row_flow(idx, (x, idx), {})
        best = converge(model.local_log_joint, x, torch.zeros(1, size), torch.zeros(1, size), theta, settings.lr,
                        settings.rule(), settings.step_samples, flow=flow)
        infer.steps = int(best.steps[0])
        return best
    return infer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    rows, settings = [], GapSettings()
    for folder in args.folders:
        runs = sorted(glob.glob("%s/runs/*/*-seed0" % folder))
        if not runs:
            print("<!-- %s: no seed-0 run yet -->" % folder)
            continue
        result, data = finished_run(runs[0], "cpu", lambda *a: None)
        x = data.test[:1]
        guide = result.guide
        task = (encoder_task(guide, x) if guide.can_infer_unseen else
                optimization_task(result.model, guide, x, settings))
        task()  # warm-up
        times = []
        for _ in range(args.rounds if guide.can_infer_unseen else 3):
            began = time.perf_counter()
            task()
            times.append(time.perf_counter() - began)
        how = "its own factor and a draw" if guide.can_infer_unseen else "q* optimization, %d steps" % task.steps
        rows.append((config_label(result.config), how, statistics.median(times)))
    print("| configuration | inference on one new image | median ms | × A-VI's |")
    print("|---|---|---|---|")
    base = next((t for label, _, t in rows if label.startswith("A-VI") and "," not in label), None)
    for label, how, seconds in rows:
        print("| %s | %s | %.2f | %s |" % (label, how, 1000 * seconds, "%.0f" % (seconds / base) if base else "n/a"))


if __name__ == "__main__":
    main()
