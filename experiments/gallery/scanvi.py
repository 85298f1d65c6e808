"""Pyro's examples/scanvi in the gallery, without labels: tests/toy_models.CountModel (per cell z_n ~ N(0, I_5) and a
library size l_n ~ LogNormal(m, s), 50 genes of GammaPoisson counts with mean l_n softmax(decoder(z_n)), a learned
inverse dispersion, ``pyro.plate("cells", N, subsample_size=100)``) and its hand-written guide of the example's kind
(one network of log1p(x) to both sites' factors, softplus scales), as experiments/count_model.py trains them.
Data: 1,000 training and 200 held-out simulated cells, library sizes log-uniform over 500–20,000; ClippedAdam 1e-3,
Trace_ELBO.

Guides: ``hand``, ``amortized``, ``semi-amortized``, ``iterative``, ``flow`` (the builders' other defaults, plate
"cells", the encoder's input named: ``encoder_input=0``; each under both scale links, its name saying which:
``+softplus``, the default, and ``+exp``). The per-datapoint guide is left out: the model's plate draws its own
minibatch of all N cells, so a call names no chosen cell to score. Downstream: Spearman's ρ of the guide's median
l_n with the true library sizes of the held-out cells (the example's library-size inference).
"""
import sys
from pathlib import Path

import torch
from scipy.stats import spearmanr

import pyro
from pyro.infer import Trace_ELBO

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from toy_models import CountModel  # noqa: E402

from common import BUILDERS, EXP, SOFTPLUS, Setup  # noqa: E402

NAME, PLATE, STEPS, BATCH = "scanvi", "cells", 600, 100
GUIDES = ("hand",) + SOFTPLUS + EXP
OPTIMIZERS = {"example": lambda: pyro.optim.ClippedAdam({"lr": 1e-3})}
SWAP = """counts = CountModel.for_data(x)
guide = AutoAmortizedNormal(counts.model, plate="cells", encoder_input=0)   # was: counts.guide
svi = SVI(counts.model, guide, pyro.optim.ClippedAdam({"lr": 1e-3}), Trace_ELBO())"""


def data(train=1000, test=200):
    """{"train", "test", "library"}: simulated cells (CountModel.simulate, seeds 0 and 1), the held-out cells'
    true library sizes."""
    x, _ = CountModel.simulate(train, 0)
    held_out, library = CountModel.simulate(test, 1)
    return {"train": x, "test": held_out, "library": library}


def build(guide, data):
    counts = CountModel.for_data(data["train"], batch=BATCH)
    # encoder_input=0 named: the working tree's reading of it from the model's trace refuses this model (report)
    chosen = counts.guide if guide == "hand" else BUILDERS[guide](counts.model, plate=PLATE, encoder_input=0)
    return Setup(counts.model, chosen, Trace_ELBO(), module=counts)


def batches(data, steps, generator):
    """The whole training set at every step: the model's plate draws the minibatch of 100."""
    return ((data["train"],) for _ in range(steps))


def chunks(x):
    """Calls of exactly 100 cells: the plate's minibatch is then every cell of the call, in order."""
    return [(part,) for part in x.split(BATCH)]


def downstream(setup, data, record):
    with torch.no_grad():
        if setup.guide == setup.module.guide:
            median = setup.module.encoded(data["test"])[0][:, -1].exp()
        else:
            median = torch.cat([setup.guide.median(*args)["l"].reshape(-1) for args in chunks(data["test"])])
    return "Spearman ρ, median l vs true library (held out)", float(spearmanr(median.numpy(),
                                                                              data["library"].numpy())[0])
