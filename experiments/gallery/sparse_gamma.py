"""Pyro's examples/sparse_gamma_def.py in the gallery: tests/toy_models.SparseGammaDEF (the example's model at small
sizes: 20 counts per datapoint, layers of 4, 3 and 2 Gamma(0.1, 0.1) locals, Gamma(0.1, 0.3) weights, Poisson
counts) and the example's hand-written guide, mean-field and per-datapoint: a Gamma factor per local and weight
coordinate, its shape and mean softplus of free parameters started at softplus(0.5 ± 0.1) and softplus(0 ± 0.1),
clipped after every step (log-shape ≥ −2.5, log-mean ≥ −4.5). Data: 200 training and 50 held-out datapoints of
simulated counts (a rank-2 Gamma-Poisson factorization, means about 10); the example's AdagradRMSProp (η 4.5,
t 0.1), and ClippedAdam 1e-3, each for every guide; full batch, Trace_ELBO.

Guides: ``hand`` (per-datapoint: no factor for held-out data); the builders ``per-datapoint``, ``amortized``,
``semi-amortized``, ``iterative``, ``flow`` (encoders on the raw counts, their other defaults, each under both scale
links, its name saying which: ``+softplus``, the default, and ``+exp``). Downstream: the example's own printed
number, the training ELBO per datapoint (globals' KL included; Trace_ELBO, 10 particles).
"""
import sys
from pathlib import Path

import torch
from torch.nn.functional import softplus

import pyro
import pyro.distributions as dist
from pyro.infer import Trace_ELBO

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from toy_models import SparseGammaDEF  # noqa: E402

from common import BUILDERS, EXP, SOFTPLUS, Setup  # noqa: E402

NAME, PLATE, STEPS, PIXELS = "sparse_gamma", "data", 600, 20
GUIDES = ("hand", "per-datapoint") + SOFTPLUS + EXP
SWAP = """def_model = SparseGammaDEF(pixels=20)
guide = AutoAmortizedNormal(def_model.model)                  # was: the example's guide, clip_params() per step
svi = SVI(def_model.model, guide, pyro.optim.AdagradRMSProp({"eta": 4.5, "t": 0.1}), Trace_ELBO())"""


def data(train=200, test=50, seed=0):
    """{"train", "test"}: counts [n, 20] ~ Poisson(u v), u ~ Gamma(1, 1) [n, 2], v ~ Gamma(2, 0.4) [2, 20]."""
    g = torch.Generator().manual_seed(seed)
    v = torch._standard_gamma(torch.full((2, PIXELS), 2.0), generator=g) / 0.4
    u = torch._standard_gamma(torch.ones(train + test, 2), generator=g)
    x = torch.poisson(u @ v, generator=g)
    return {"train": x[:train], "test": x[train:]}


class HandGuide:
    """The example's guide for ``model`` (a SparseGammaDEF): per-datapoint Gamma factors, clipped by
    :meth:`clip` after each step."""

    def __init__(self, model, n):
        self.model, self.n = model, n

    def _gamma(self, name, shape):
        log_shape = pyro.param("log_alpha_%s" % name, lambda: 0.5 + 0.1 * torch.randn(shape))
        log_mean = pyro.param("log_mean_%s" % name, lambda: 0.1 * torch.randn(shape))
        alpha, mean = softplus(log_shape), softplus(log_mean)
        return dist.Gamma(alpha, alpha / mean)

    def __call__(self, x):
        m = self.model
        for layer, size in (("top", m.top * m.mid), ("mid", m.mid * m.bottom), ("bottom", m.bottom * m.pixels)):
            with pyro.plate("w_%s_plate" % layer, size):
                pyro.sample("w_%s" % layer, self._gamma("w_q_" + layer, (size,)))
        with pyro.plate("data", x.size(0)):
            for layer, width in (("top", m.top), ("mid", m.mid), ("bottom", m.bottom)):
                pyro.sample("z_%s" % layer, self._gamma("z_q_" + layer, (self.n, width)).to_event(1))

    @staticmethod
    def clip():
        """The example's clip_params: log-shape ≥ −2.5, log-mean ≥ −4.5, every factor."""
        for prefix, low in (("log_alpha_", -2.5), ("log_mean_", -4.5)):
            for kind in ("w_q_", "z_q_"):
                for layer in ("top", "mid", "bottom"):
                    pyro.param(prefix + kind + layer).data.clamp_(min=low)


def build(guide, data):
    model = SparseGammaDEF(PIXELS)
    if guide == "hand":
        hand = HandGuide(model, len(data["train"]))
        return Setup(model.model, hand, Trace_ELBO(), after_step=hand.clip, serves_new=False)
    return Setup(model.model, BUILDERS[guide](model.model), Trace_ELBO(), serves_new=guide != "per-datapoint")


OPTIMIZERS = {"example": lambda: pyro.optim.AdagradRMSProp({"eta": 4.5, "t": 0.1}),
              "adam 1e-3": lambda: pyro.optim.ClippedAdam({"lr": 1e-3})}
"""The example's optimizer, and ClippedAdam 1e-3, under which the encoders train (at η 4.5 and at Adam 1e-2 they
stop within a few steps: the Gamma(0.1) density is unbounded at 0)."""


def batches(data, steps, generator):
    return ((data["train"],) for _ in range(steps))


def chunks(x):
    return [(x,)]


def downstream(setup, data, record):
    with torch.no_grad():
        loss = Trace_ELBO(num_particles=10).loss(setup.model, setup.guide, data["train"])
    return "training ELBO per datapoint (the example's number)", -loss / len(data["train"])
