"""Pyro's examples/vae/vae.py in the gallery: z ~ N(0, I_16), x ~ Bernoulli(decoder(z)), decoder 16 → 200 → 784
(softplus), ``pyro.plate("data", x.shape[0])``, the decoder's weights parameters (``pyro.module``), and the example's
hand-written encoder guide (fc1 + softplus, two heads, exp scale) — tests/toy_models.VAE at the example's sizes, as
experiments/defaults_vs_hand.py trains it. Data: 1,000 training and 200 held-out images of the shipped real-MNIST
sample, binarized by rounding; Adam 1e-3, minibatches of 100, Trace_ELBO.

Guides: ``hand``; ``builder-body+exp`` (AutoAmortizedNormal around the example's own encoder body, exp scale link),
and ``builder-body+torch-heads+exp`` (``head_init="torch"``) and ``builder-body+hand-start+exp``
(``head_init="torch"``, ``init_scale=1``: the hand-written guide's start), to find which start costs what; the
builders ``amortized``, ``semi-amortized``, ``iterative``, ``flow`` with their other defaults (each under both scale
links, its name saying which: ``+softplus``, the default, and ``+exp``). The per-datapoint guide does not apply: the
model's plate is the minibatch, ``plate("data", x.shape[0])``, which names no datapoint across steps. Downstream:
the held-out reconstruction, E_q[log p(x_n | z_n)] per image (the example's test ELBO's likelihood).
"""
import sys
from pathlib import Path


import pyro
from pyro.infer import Trace_ELBO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from defaults_vs_hand import HIDDEN, Z_DIM, VAE  # noqa: E402  (tests/toy_models.VAE, on the path it puts)

from amortized_pyro import load_data  # noqa: E402
from amortized_pyro.autoguides import AutoAmortizedNormal  # noqa: E402
from common import BUILDERS, EXP, SOFTPLUS, Setup, minibatch_indices  # noqa: E402

NAME, PLATE, STEPS, BATCH = "vae", "data", 600, 100
GUIDES = ("hand", "builder-body+exp", "builder-body+torch-heads+exp", "builder-body+hand-start+exp") + SOFTPLUS + EXP
BODY_STARTS = {"builder-body+exp": {"scale_link": "exp"},
               "builder-body+torch-heads+exp": {"head_init": "torch", "scale_link": "exp"},
               "builder-body+hand-start+exp": {"head_init": "torch", "init_scale": 1.0, "scale_link": "exp"}}
"""AutoAmortizedNormal around the example's body (exp scale link, as recorded): its defaults, torch's heads (σ still
starting at init_scale 0.1), and the hand-written guide's start (torch's heads, σ about exp(0) = 1)."""
SWAP = """vae = VAE(x_dim=784, z_dim=16, hidden=200)
guide = AutoAmortizedNormal(vae.model)                        # was: vae.guide
svi = SVI(vae.model, guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())"""


def data(train=1000, test=200):
    """{"train", "test"}: binarized images of the shipped MNIST sample."""
    images = load_data("mnist-sample", n_obs=train, n_test=test, log=lambda *_: None)
    return {"train": images.train.round(), "test": images.test.round()}


def build(guide, data):
    vae = VAE(x_dim=784, z_dim=Z_DIM, hidden=HIDDEN)
    if guide == "hand":
        chosen = vae.guide
    elif guide in BODY_STARTS:
        chosen = AutoAmortizedNormal(vae.model, encoder=vae.body, **BODY_STARTS[guide])
    else:
        chosen = BUILDERS[guide](vae.model)
    return Setup(vae.model, chosen, Trace_ELBO())


OPTIMIZERS = {"example": lambda: pyro.optim.Adam({"lr": 1e-3})}


def batches(data, steps, generator):
    """``steps`` minibatches of 100, epochs of fresh permutations from ``generator``."""
    train = data["train"]
    return ((train[idx],) for idx in minibatch_indices(len(train), BATCH, steps, generator))


def chunks(x):
    return [(x,)]


def downstream(setup, data, record):
    return "held-out reconstruction log p(x|z) per image", record.get("heldout_recon")
