"""Pyro's examples/cvae in the gallery: quadrant completion, one quadrant of an MNIST digit given (the rest −1), the
other three predicted. Per image z ~ N(prior_net(x, ŷ)) (the conditional prior p(z | x), fed the baseline net's
guess ŷ, under no_grad), the masked quadrants' pixels ~ Bernoulli(generation_net(z)) at the pixels x masks, and
``pyro.deterministic("y", ...)`` where no y is given; the example's hand-written guide: the recognition net q(z | x, y)
(an MLP of x with its masked pixels filled from y) where y is given, the prior net where not. Sizes shrunk from the
example's (z 200, hidden 500, 500): z 16, hidden 200, 200, every net relu with exp scales; the baseline NN
(784 → 200 → 200 → 784, sigmoid; optional in the model, ``BASELINE``) trained first, 40 epochs of the masked BCE
(torch Adam 1e-3, seed 0), then frozen. Data: 1,000 training and 200 held-out images of the shipped real-MNIST
sample, binarized by rounding, flat [n, 784], the bottom-left quadrant given (``num_quadrant_inputs=1``); the
example's Adam 1e-3, minibatches of 128, Trace_ELBO.

Guides: ``hand``; ``defaults`` (AutoAmortizedNormal with its defaults: refused, the model observes the masked
pixels, no argument as it is); and the builders with the encoder reading what the recognition net reads (the whole
image: x with its masked pixels filled from y, :func:`filled`): ``amortized``, ``semi-amortized``, ``iterative``,
``flow`` (each under both scale links, its name saying which: ``+softplus``, the default, and ``+exp``). The
per-datapoint guide does not apply: the plate is the minibatch. Departures: the example's ``pyro.plate("data")`` has
no size, which the builders refuse in one line (written ``pyro.plate("data", len(xs))``); its boolean indexing of
the masked pixels written as ``masked_select`` (the same pixels, broadcast-safe for the builders' vectorized draws).
Downstream: the reconstruction of the masked quadrants from the given one alone, as the example predicts (z from the
model's prior net, 20 draws): the masked BCE per held-out image of the draws' mean probabilities (the baseline NN's
own BCE, the same for every guide, in the name).
"""
import torch
from torch import nn

import pyro
import pyro.distributions as dist
from pyro.infer import Trace_ELBO

from amortized_pyro import load_data
from amortized_pyro.autoguides import AutoAmortizedNormal
from common import BUILDERS, EXP, SOFTPLUS, Setup, minibatch_indices

NAME, PLATE, STEPS, BATCH = "cvae", "data", 400, 128
PIXELS, Z, HIDDEN, BASELINE = 784, 16, 200, True
GUIDES = ("hand", "defaults") + SOFTPLUS + EXP
REFUSED = {"defaults": "no argument of the model is what the plate's sites observe"}
"""The builders refused on this model, and a phrase of the line: the model observes the masked pixels of y (a
selection), which no model argument is; ``encoder_input=`` names it."""
OPTIMIZERS = {"example": lambda: pyro.optim.Adam({"lr": 1e-3})}
SWAP = """cvae = CVAE(baseline_net)
guide = AutoAmortizedNormal(cvae.model, encoder_input=filled)   # was: cvae.guide
svi = SVI(cvae.model, guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())"""


def mlp(n_in, n_out, out=None):
    return nn.Sequential(nn.Linear(n_in, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, n_out), *([out] if out is not None else []))


def filled(xs, ys=None):
    """x with its masked (−1) pixels filled from y: the recognition net's input (the whole image)."""
    return torch.where(xs == -1, ys, xs)


class Encoder(nn.Module):
    """The example's Encoder: (x, y) → (loc, exp scale) of z, reading x filled from y."""

    def __init__(self):
        super().__init__()
        self.net = mlp(PIXELS, 2 * Z)

    def forward(self, xs, ys):
        loc, log_scale = self.net(filled(xs, ys)).chunk(2, -1)
        return loc, log_scale.exp()


class CVAE(nn.Module):
    def __init__(self, baseline_net):
        super().__init__()
        self._baseline = (baseline_net,)  # frozen, not a child: pyro.module would warn for each of its parameters
        self.prior_net, self.recognition_net = Encoder(), Encoder()
        self.generation_net = mlp(Z, PIXELS, nn.Sigmoid())

    def guess(self, xs):
        """The baseline net's guess ŷ of the masked pixels (0.5 without the baseline)."""
        with torch.no_grad():
            return self._baseline[0](xs) if BASELINE else torch.full_like(xs, 0.5)

    def model(self, xs, ys=None):
        pyro.module("generation_net", self)
        with pyro.plate("data", len(xs)):
            prior_loc, prior_scale = self.prior_net(xs, self.guess(xs))
            zs = pyro.sample("z", dist.Normal(prior_loc, prior_scale).to_event(1))
            loc = self.generation_net(zs)
            if ys is not None:
                masked = xs == -1
                mask_loc = loc.masked_select(masked.expand(loc.shape)).view(loc.shape[:-1] + (-1,))
                pyro.sample("y", dist.Bernoulli(mask_loc).to_event(1), obs=ys.masked_select(masked).view(len(xs), -1))
            else:
                pyro.deterministic("y", loc.detach())
            return loc

    def guide(self, xs, ys=None):
        with pyro.plate("data", len(xs)):
            if ys is None:
                loc, scale = self.prior_net(xs, self.guess(xs))
            else:
                loc, scale = self.recognition_net(xs, ys)
            pyro.sample("z", dist.Normal(loc, scale).to_event(1))


def masked_bce(probs, xs, ys):
    """The example's MaskedBCELoss (sum) per image: −Σ over the masked pixels of log Bernoulli(y; probs)."""
    masked = xs == -1
    return -(dist.Bernoulli(probs.clamp(1e-6, 1 - 1e-6)).log_prob(ys.clamp(0, 1)) * masked).sum(-1)


def quadrants(images):
    """(inputs, outputs) of the example's MaskImages(1): the bottom-left quadrant given, the others −1; the outputs
    the image with that quadrant −1."""
    grid = images.view(-1, 28, 28)
    given = torch.zeros(28, 28, dtype=torch.bool)
    given[14:, :14] = True
    inputs = torch.where(given, grid, torch.tensor(-1.0)).view(-1, PIXELS)
    outputs = torch.where(given, torch.tensor(-1.0), grid).view(-1, PIXELS)
    return inputs, outputs


def data(train=1000, test=200, seed=0, epochs=40):
    """{"train", "test"}: (inputs, outputs) [n, 784] each; "baseline": the trained, frozen baseline net."""
    images = load_data("mnist-sample", n_obs=train, n_test=test, log=lambda *_: None)
    xs, ys = quadrants(images.train.round())
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        baseline = mlp(PIXELS, PIXELS, nn.Sigmoid())
        optimizer = torch.optim.Adam(baseline.parameters(), lr=1e-3)
        for _ in range(epochs):
            for idx in torch.randperm(train).split(BATCH):
                optimizer.zero_grad()
                (masked_bce(baseline(xs[idx]), xs[idx], ys[idx]).mean()).backward()
                optimizer.step()
    baseline.eval().requires_grad_(False)
    return {"train": (xs, ys), "test": quadrants(images.test.round()), "baseline": baseline}


def build(guide, data):
    cvae = CVAE(data["baseline"])
    if guide == "hand":
        return Setup(cvae.model, cvae.guide, Trace_ELBO())
    if guide == "defaults":  # AutoAmortizedNormal(model) as it stands: refused at its first call, whatever its link
        return Setup(cvae.model, AutoAmortizedNormal(cvae.model), Trace_ELBO())
    return Setup(cvae.model, BUILDERS[guide](cvae.model, encoder_input=filled), Trace_ELBO())


def batches(data, steps, generator):
    """``steps`` minibatches of 128, epochs of fresh permutations from ``generator``."""
    xs, ys = data["train"]
    return ((xs[idx], ys[idx]) for idx in minibatch_indices(len(xs), BATCH, steps, generator))


def chunks(x):
    return [tuple(x)]


def with_data(simulated, args, kwargs):
    """diagnose's calibration: the model's arguments for its simulated masked pixels (site ``y``, [B, masked
    pixels]): the outputs ys with those pixels replaced, the given quadrant's −1 kept."""
    xs, ys = args
    new = ys.clone()
    new[xs == -1] = simulated["y"].reshape(-1).to(ys.dtype)
    return (xs, new), kwargs


def first(x, n):
    return tuple(part[:n] for part in x)


@torch.no_grad()
def downstream(setup, data, record, draws=20):
    xs, ys = data["test"]
    probs = torch.stack([setup.model(xs) for _ in range(draws)]).mean(0)  # z from the prior net: no guide
    baseline = float(masked_bce(data["baseline"](xs), xs, ys).mean())
    return ("masked-quadrant BCE per held-out image, predicted from the given quadrant (baseline NN: %.1f)"
            % baseline, float(masked_bce(probs, xs, ys).mean()))
