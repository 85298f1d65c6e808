"""Pyro's CEVAE (``pyro.contrib.cevae``, run by examples/contrib/cevae/synthetic.py) in the gallery: per unit a latent
confounder z ~ N(0, I_20), features x ~ N(x_nn(z)), treatment t ~ Bernoulli(t_nn(z)), outcome y ~ Bernoulli of the
t-split outcome nets (its ``Model``, hidden 200, 3 layers), ``pyro.plate("data", size, subsample=x)``; its own
hand-written ``Guide``: q(t | x), q(y | t, x) (auxiliary, observed in training) and q(z | y, t, x), trained by
``TraceCausalEffect_ELBO`` (the ELBO plus log q(t|x) + log q(y|t,x)). Data: synthetic.py's generator (z ~ Bernoulli
½, 5 features, 75 % / 25 % treated, y ~ Bernoulli(logits 3(z + 2(2t − 2)))), 500 training and 200 held-out units
(one draw, seed 0), features whitened by the training set's mean and scale as ``CEVAE.fit`` does; the example's
ClippedAdam (lr 1e-3, weight decay 1e-4, lr decay ×0.1 over the run), minibatches of 100 (50 epochs).

Guides: ``hand`` (the contrib's Model and Guide as its ``CEVAE`` class wires them); ``hand-named`` (the same two
under one PyroModule parent, see below); ``contrib-model+exp`` (AutoAmortizedNormal, exp scale link, on the
contrib's Model as it stands, its plate given ``subsample=x``: the batch read from the subsample's rows since that
was fixed); and the builders with their other defaults, ``amortized``, ``semi-amortized``, ``iterative``, ``flow``
(each under both scale links, its name saying which: ``+softplus``, the default, and ``+exp``), on
:class:`BatchPlateModel`: the contrib's Model with its plate written ``pyro.plate("data", size,
subsample_size=len(x))`` (the same N/B scale), and its leaves t, y left out at a call of x alone (summed out
exactly; SA-VI's and IA-VI's refinement at a new unit refuses an unsummed discrete site). A builder's encoder reads
x alone (the first argument the plate observes): q(z | x), where the hand guide's q(z | y, t, x) needs t and y drawn
from its auxiliary nets at a new unit. The builders train by Trace_ELBO, which TraceCausalEffect_ELBO is for a guide
without observed sites, except that it flips the sign of a guide's factor sites: IA-VI's training terms ride on one,
and under it IA-VI diverges (loss 5e3 → 1e13 in 30 steps).

The contrib's ``CEVAE`` puts its Model and Guide under a plain nn.Module: both register their nets by attribute name,
and the Guide's ``t_nn``, ``y0_nn``, ``y1_nn`` share param-store names with the Model's (``t_nn$$$fc.0.weight``);
the guide registers first, so the Model's p(t | z) and the first layers of its outcome nets are never trained
(seen: their weights unchanged after fit). ``hand-named`` is the same code with distinct names.
Downstream: the example's number, |estimated − true ATE| on the held-out units (ITE by the example's recipe: z from
the guide at x alone, 50 draws, E[y | z, do(t)] of the model).
"""
import torch

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.contrib.cevae import Guide, Model, TraceCausalEffect_ELBO
from pyro.infer import Trace_ELBO
from pyro.nn import PyroModule

from amortized_pyro.autoguides import AutoAmortizedNormal
from common import BUILDERS, EXP, SOFTPLUS, Setup, minibatch_indices

NAME, PLATE, STEPS, BATCH = "cevae", "data", 250, 100
FEATURES = 5
CONFIG = dict(feature_dim=FEATURES, latent_dim=20, hidden_dim=200, num_layers=3, outcome_dist="bernoulli")
GUIDES = ("hand", "hand-named", "contrib-model+exp") + SOFTPLUS + EXP
OPTIMIZERS = {"example": lambda: pyro.optim.ClippedAdam({"lr": 1e-3, "weight_decay": 1e-4,
                                                         "lrd": 0.1 ** (1 / STEPS)})}
SWAP = """model = BatchPlateModel(config)        # the contrib Model, its plate: subsample_size=len(x)
guide = AutoAmortizedNormal(model)                            # was: pyro.contrib.cevae.Guide(config)
svi = SVI(model, guide, ClippedAdam({"lr": 1e-3, ...}), Trace_ELBO())   # was: TraceCausalEffect_ELBO()"""


class BatchPlateModel(Model):
    """The contrib's Model with its plate given the minibatch's size rather than ``subsample=x``, and its leaves t
    and y summed out where neither is given (exactly: nothing depends on them; a unit of x alone, the ITE's call)."""

    def forward(self, x, t=None, y=None, size=None):
        with pyro.plate("data", len(x) if size is None else size, subsample_size=len(x)):
            z = pyro.sample("z", self.z_dist())
            x = pyro.sample("x", self.x_dist(z), obs=x)
            if t is None and y is None:
                return None
            t = pyro.sample("t", self.t_dist(z), obs=t)
            return pyro.sample("y", self.y_dist(t, z), obs=y)


class Named(PyroModule):
    """The contrib's Model and Guide under one PyroModule: their nets registered as ``model.t_nn``, ``guide.t_nn``."""

    def __init__(self):
        super().__init__()
        self.model, self.guide = Model(CONFIG), Guide(CONFIG)


class Plain(torch.nn.Module):
    """As the contrib's ``CEVAE`` holds them: a plain nn.Module parent."""

    def __init__(self):
        super().__init__()
        self.model, self.guide = Model(CONFIG), Guide(CONFIG)


def generate(n):
    """synthetic.py's generator: (x [n, 5], t [n], y [n], true ITE [n])."""
    z = dist.Bernoulli(0.5).sample([n])
    x = dist.Normal(z, 5 * z + 3 * (1 - z)).sample([FEATURES]).t()
    t = dist.Bernoulli(0.75 * z + 0.25 * (1 - z)).sample()
    y = dist.Bernoulli(logits=3 * (z + 2 * (2 * t - 2))).sample()
    y_t0, y_t1 = dist.Bernoulli(logits=3 * (z + 2 * (2 * torch.tensor([[0.0], [1.0]]) - 2))).mean
    return x, t, y, y_t1 - y_t0


def data(train=500, test=200, seed=0):
    """{"train", "test"}: (whitened x, t, y) each; "ite": the held-out units' true ITE."""
    pyro.set_rng_seed(seed)
    x, t, y, ite = generate(train + test)
    loc, scale = x[:train].mean(0), x[:train].std(0, unbiased=False)
    x = (x - loc) / scale
    return {"train": (x[:train], t[:train], y[:train]), "test": (x[train:], t[train:], y[train:]),
            "ite": ite[train:]}


def build(guide, data):
    loss = TraceCausalEffect_ELBO()
    if guide in ("hand", "hand-named"):
        pair = Plain() if guide == "hand" else Named()
        return Setup(pair.model, pair.guide, loss)
    if guide == "contrib-model+exp":
        model = Model(CONFIG)
        return Setup(model, AutoAmortizedNormal(model, scale_link="exp"), loss)
    model = BatchPlateModel(CONFIG)
    # Trace_ELBO: the example's loss for a guide with no observed sites, but not for IA-VI, whose training terms
    # ride on a guide factor site that TraceCausalEffect_ELBO counts with the opposite sign (IA-VI diverges)
    return Setup(model, BUILDERS[guide](model), Trace_ELBO())


def batches(data, steps, generator):
    """``steps`` minibatches of 100 (x, t, y, N), epochs of fresh permutations: ``CEVAE.fit``'s calls."""
    x, t, y = data["train"]
    return ((x[idx], t[idx], y[idx], len(x)) for idx in minibatch_indices(len(x), BATCH, steps, generator))


def chunks(x):
    return [tuple(x)]


def with_data(simulated, args, kwargs):
    """diagnose's calibration: the model's arguments (x, t, y) for its simulated units."""
    return (simulated["x"], simulated["t"], simulated["y"]) + tuple(args[3:]), kwargs


def first(x, n):
    return tuple(part[:n] for part in x)


@torch.no_grad()
def ite(model, guide, x, draws=50):
    """The example's ITE(x) = E[y | x, do(t=1)] − E[y | x, do(t=0)]: z drawn from the guide at x alone (t and y
    hidden), E[y | z, t] of the model, averaged over ``draws``."""
    total = 0.0
    for _ in range(draws):
        traced = poutine.trace(poutine.block(guide, hide=["y", "t"])).get_trace(x)
        means = [poutine.replay(poutine.do(model.y_mean, data={"t": torch.full((), value)}), trace=traced)(x)
                 for value in (0.0, 1.0)]
        total = total + (means[1] - means[0])
    return total / draws


def downstream(setup, data, record):
    try:
        estimated = ite(setup.model, setup.guide, data["test"][0]).mean()
    except ValueError as error:  # a guide that cannot serve x alone: its line, not a crash
        return "|ATE error| (held out); refused: %s" % str(error).splitlines()[0][:200], None
    return "|ATE error| (held out)", float((estimated - data["ite"].mean()).abs())
