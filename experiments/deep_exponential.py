"""Encoder guides on Pyro's sparse gamma deep exponential family (tests/toy_models.SparseGammaDEF: Gamma(0.1, ·)
locals in three layers, Gamma weights, Poisson counts of about 10; issue 59, item 5): how many steps of stock SVI
(Trace_ELBO, pyro.optim.Adam lr 0.01, Pyro's validation off) each builder takes before a loss or its factor is
not finite, reading the raw counts or log1p of them, from one seed. A table on stdout:

    OMP_NUM_THREADS=1 python experiments/deep_exponential.py --steps 200

What it shows and does not: where each guide stops on this model at these sizes and this learning rate, one
seed; not why (the model's Gamma(0.1) density is unbounded at 0, so a factor that moves mass toward 0 can raise
the ELBO without bound: a loss of −inf is the model's, not the guide's), nor any other model.
"""
import argparse
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402

import pyro  # noqa: E402
from pyro.infer import SVI, Trace_ELBO  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from toy_models import SparseGammaDEF  # noqa: E402

from amortized_pyro.autoguides import (AutoAmortizedNormal, AutoIterativeAmortizedNormal,  # noqa: E402
                                       AutoSemiAmortizedNormal)
from amortized_pyro.errors import GuideError  # noqa: E402

BUILDERS = {
    "A-VI": lambda model, **kw: AutoAmortizedNormal(model, **kw),
    "SA-VI (5 steps)": lambda model, **kw: AutoSemiAmortizedNormal(model, **kw),
    "IA-VI (5 iterations)": lambda model, **kw: AutoIterativeAmortizedNormal(model, **kw),
    "A-VI + flow (2)": lambda model, **kw: AutoAmortizedNormal(model, flow=2, flow_width=16, **kw),
}


def log1p(x):
    return x.log1p()


def run(make, model, x, steps, **options):
    """(steps taken with finite losses, the first loss, the last finite loss, how it stopped)."""
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    guide = make(model, **options)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
    losses = []
    for _ in range(steps):
        try:
            loss = svi.step(x)
        except (GuideError, ValueError) as error:
            return len(losses), losses[0] if losses else math.nan, losses[-1] if losses else math.nan, \
                type(error).__name__
        if not math.isfinite(loss):
            return len(losses), losses[0] if losses else math.nan, losses[-1] if losses else math.nan, "loss %s" % loss
        losses.append(loss)
    return len(losses), losses[0], losses[-1], "ran"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--n", type=int, default=16, help="datapoints")
    parser.add_argument("--pixels", type=int, default=20, help="counts per datapoint")
    args = parser.parse_args()
    pyro.enable_validation(False)
    model = SparseGammaDEF(args.pixels).model
    x = torch.poisson(torch.full((args.n, args.pixels), 10.0), generator=torch.Generator().manual_seed(0))
    print("| guide | encoder input | start | finite steps of %d | first loss | last finite loss | stopped by |"
          % args.steps)
    print("|---|---|---|---|---|---|---|")
    starts = {"centred heads, symlog standardized (default)": {},
              "zero heads, symlog standardized": dict(head_init="zero"),
              "torch heads, raw": dict(head_init="torch", standardize=False)}
    for name, make in BUILDERS.items():
        for start, options in starts.items():
            for label, first in (("raw counts", 0), ("log1p", log1p)):
                if "torch" in start and first is log1p:
                    continue
                taken, head, tail, how = run(make, model, x, args.steps, encoder_input=first, **options)
                print("| %s | %s | %s | %d | %.1f | %.1f | %s |" % (name, label, start, taken, head, tail, how))


if __name__ == "__main__":
    main()
