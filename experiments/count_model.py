"""Issue 68, items 1 and 6: the encoder builders' defaults on counts with two local sites, against a hand-written
encoder guide of the same kind.

The scANVI-style model of tests/toy_models.py (:class:`CountModel`: 50 genes, library sizes log-uniform over
500–20,000, z_n of 5 dimensions and a LogNormal library size l_n per cell, GammaPoisson counts,
``pyro.plate("cells", N, subsample_size=100)``) on 2,000 simulated cells, trained by stock SVI with ClippedAdam
(lr 1e-3) for ``--steps`` steps under its hand-written guide (log1p of the counts, softplus scales) and the
builders with their defaults. Reports per guide and seed: the steps taken before a non-finite loss or a refusal
(and its line), the held-out ELBO per cell (500 new cells, 10 particles), and Spearman's ρ of the guide's
median l_n with the true library sizes. One JSON line per (guide, seed) in ``--out``, resumable:
``python experiments/count_model.py --out figures/defaults-vs-hand/counts.jsonl [--init median --guides amortized
semi-amortized iterative]`` (``--init median``: the builders started at the priors' medians; ``--init exp``:
their encoders' σ through exp, ``scale_link="exp"``, the default until it became softplus; their lines named so: the
lines written before that change name their link, the exp default's renamed ``, scale_link exp`` and softplus's
renamed to the plain builder's name).
"""
import argparse
import json
import os
import sys
from pathlib import Path

import torch
from scipy.stats import spearmanr

import pyro
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import init_to_median
from pyro.optim import ClippedAdam

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from toy_models import CountModel  # noqa: E402

from amortized_pyro.support.jsonio import append_jsonl, read_jsonl  # noqa: E402
from amortized_pyro.autoguides import AUTOGUIDES  # noqa: E402
from amortized_pyro.errors import AmortizedPyroError  # noqa: E402

GUIDES = ("hand", "amortized", "semi-amortized", "iterative")


INITS = {"default": {}, "median": {"init_loc_fn": init_to_median},  # the builders' options (--init)
         "exp": {"scale_link": "exp"}}


def label(kind, init):
    """A line's guide name: the builder's, with the option it was given (``--init``) after it."""
    if init == "default" or kind == "hand":
        return kind
    return "%s, init %s" % (kind, init) if init == "median" else "%s, scale_link %s" % (kind, init)


def run(kind, seed, steps, train, test, true_library, init="default"):
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    counts = CountModel.for_data(train)
    guide = counts.guide if kind == "hand" else AUTOGUIDES[kind](counts.model, plate="cells", **INITS[init])
    svi = SVI(counts.model, guide, ClippedAdam({"lr": 1e-3}), Trace_ELBO())
    name = label(kind, init)
    out, taken, stopped = {"guide": name, "seed": seed}, 0, None
    for _ in range(steps):
        try:
            loss = svi.step(train)
        except (AmortizedPyroError, ValueError) as error:  # a refusal, or Pyro's check of a distribution's argument
            stopped = "%s: %s" % (type(error).__name__, str(error).splitlines()[0][:200])
            break
        if not torch.isfinite(torch.tensor(loss)):
            stopped = "loss %r" % loss
            break
        taken += 1
    out.update(steps=taken, stopped=stopped)
    if stopped is None:
        elbo = Trace_ELBO(num_particles=10)
        with torch.no_grad():
            batches = test.split(100)
            out["held_out_elbo"] = sum(-elbo.loss(counts.model, guide, b) for b in batches) / len(test)
            if kind == "hand":
                median = counts.encoded(test)[0][:, -1].exp()
            else:
                median = torch.cat([guide.median(b)["l"].reshape(-1) for b in batches])
        out["library_spearman"] = float(spearmanr(median.numpy(), true_library.numpy())[0])
    print(json.dumps(out), flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--guides", nargs="+", choices=GUIDES, default=list(GUIDES))
    parser.add_argument("--init", choices=sorted(INITS), default="default",
                        help="the builders' option: their defaults, init_to_median, or scale_link='exp'")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pyro.enable_validation(True)
    train, _ = CountModel.simulate(2000, 0)
    test, library = CountModel.simulate(500, 1)
    done = {(r["guide"], r["seed"]) for r in (read_jsonl(args.out) if os.path.exists(args.out) else [])}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    for seed in args.seeds:
        for kind in args.guides:
            if (label(kind, args.init), seed) not in done:  # resumable: a finished line is kept, never redone
                append_jsonl(args.out, run(kind, seed, args.steps, train, test, library, args.init))


if __name__ == "__main__":
    main()
