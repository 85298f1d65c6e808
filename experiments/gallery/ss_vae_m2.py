"""Pyro's examples/vae/ss_vae_M2.py in the gallery: the semi-supervised VAE M2, per image z ~ N(0, I_16), a digit
y ~ OneHotCategorical(uniform 10) observed where labelled, x ~ Bernoulli(decoder(z, y)) (softplus MLP, hidden 200),
and the example's auxiliary loss (its ``model_classify``: 46 · log q(y | x) of the labelled images) as a site
``y_aux`` of the model where labels are given; the example's hand-written guide: the classifier q(y | x) (softplus
MLP, softmax) where unlabelled, q(z | x, y) (softplus MLP of x and y, exp scale), y enumerated in parallel
(``config_enumerate``) under TraceEnum_ELBO(max_plate_nesting=1). Data: 500 training and 200 held-out images of
the shipped real-MNIST sample, binarized by rounding; 10 % of the training labels kept (50 images, a fixed seeded
choice); the example's Adam (lr 4.2e-4, betas (0.9, 0.999)), minibatches of 100 (per epoch the 50 labelled images
as one, first, then five of the unlabelled); sizes shrunk from the example's z 50 and hidden 500.

Guides: ``hand``; the builders as Pyro's AutoGuideList of the builder on z (``poutine.block(model, hide=["y",
"y_aux"])``: q(z | x), the encoder reading x) beside the example's classifier as a part guiding y (enumerated):
``amortized``, ``flow``; and ``semi-amortized``, ``iterative`` built on :meth:`SSVAE.collapsed` (y summed out by
hand where unlabelled: their refinement climbs the local ELBO of the model they are built on, and on the blocked one
it would hold a prior draw of y), with ``encoder_input=0``; each under both scale links, its name saying which
(``+softplus``, the default, and ``+exp``). The builders' q(z | x) does not see y (the hand guide's q(z | x, y)
does). The per-datapoint guide does not apply: the plate is the minibatch (``len(xs)``). One departure: the
example's ``pyro.plate("data")`` has no size, which the builders refuse in one line ("the model's plate 'data' has
no size: give it one"); written ``pyro.plate("data", len(xs))``. The gap: measure_gap through the AutoGuideList
measures its builder part, the classifier's y held at one draw per image from the measurement's seed and the model
conditioned on it (a line's ``gap_held``): the gap of q(z | x) conditional on the classifier's draws of y, its
log p(x_n) estimate log p(x_n, y_n); the lines of the other guides, recorded before measure_gap did this, hold its
refusal of the list, and diagnose's k̂ and calibration still refuse it. Downstream: the classifier's test accuracy
on the 200 held-out images (the example's number).
"""
import torch
from torch import nn

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import TraceEnum_ELBO, config_enumerate
from pyro.infer.autoguide import AutoGuideList

from amortized_pyro import load_data
from common import BUILDERS, EXP, SOFTPLUS, Setup

NAME, PLATE, STEPS, BATCH = "ss_vae_m2", "data", 300, 100
PIXELS, CLASSES, Z, HIDDEN, AUX, LABELLED = 784, 10, 16, 200, 46.0, 0.1
GUIDES = ("hand",) + SOFTPLUS + EXP
OPTIMIZERS = {"example": lambda: pyro.optim.Adam({"lr": 4.2e-4, "betas": (0.9, 0.999)})}
SWAP = """ssvae = SSVAE()
guide = AutoGuideList(ssvae.model, create_plates=ssvae.plates)  # was: config_enumerate(ssvae.guide, "parallel")
guide.append(AutoAmortizedNormal(poutine.block(ssvae.model, hide=["y", "y_aux"])))   # q(z | x)
guide.append(ssvae.classify_part(guide))                                               # q(y | x), enumerated
svi = SVI(ssvae.model, guide, pyro.optim.Adam({"lr": 4.2e-4}), TraceEnum_ELBO(max_plate_nesting=1))
measure_gap(ssvae.model, guide, xs)  # the builder part's gap, y held at the classifier's draws"""
GAP_CONDITIONAL = "conditional on the classifier's draws of y"
"""What the gap of this model's AutoGuideList guides is conditional on (the page says it beside the gap)."""


def mlp(sizes, out=None):
    layers = []
    for n_in, n_out in zip(sizes, sizes[1:]):
        layers += [nn.Linear(n_in, n_out), nn.Softplus()]
    return nn.Sequential(*layers[:-1], *([out] if out is not None else []))


def joined(a, b):
    """[a, b] along the last dimension, their leading dimensions broadcast (y enumerated in front of the batch)."""
    shape = torch.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    return torch.cat([a.expand(shape + a.shape[-1:]), b.expand(shape + b.shape[-1:])], -1)


class SSVAE(nn.Module):
    """The example's model, guide and classifier at the gallery's sizes."""

    def __init__(self):
        super().__init__()
        self.encoder_y = mlp([PIXELS, HIDDEN, CLASSES])  # logits of q(y | x)
        self.encoder_z = mlp([PIXELS + CLASSES, HIDDEN, 2 * Z])
        self.decoder = mlp([Z + CLASSES, HIDDEN, PIXELS])  # logits of p(x | y, z)

    def model(self, xs, ys=None):
        pyro.module("ss_vae", self)
        with pyro.plate("data", len(xs)):
            zs = pyro.sample("z", dist.Normal(xs.new_zeros(Z), 1.0).to_event(1))
            y = pyro.sample("y", dist.OneHotCategorical(logits=xs.new_zeros(CLASSES)), obs=ys)
            pyro.sample("x", dist.Bernoulli(logits=self.decoder(joined(zs, y))).to_event(1), obs=xs)
            if ys is not None:  # the example's model_classify: the auxiliary loss of the labelled images
                with poutine.scale(scale=AUX):
                    pyro.sample("y_aux", dist.OneHotCategorical(logits=self.encoder_y(xs)), obs=ys)

    def collapsed(self, xs, ys=None):
        """The model with y summed out by hand where it is not given (the auxiliary site left out)."""
        pyro.module("ss_vae", self)
        with pyro.plate("data", len(xs)):
            zs = pyro.sample("z", dist.Normal(xs.new_zeros(Z), 1.0).to_event(1))
            if ys is not None:
                y = pyro.sample("y", dist.OneHotCategorical(logits=xs.new_zeros(CLASSES)), obs=ys)
                pyro.sample("x", dist.Bernoulli(logits=self.decoder(joined(zs, y))).to_event(1), obs=xs)
                return
            every = torch.eye(CLASSES).reshape((CLASSES,) + (1,) * (zs.dim() - 1) + (CLASSES,))
            log_x = dist.Bernoulli(logits=self.decoder(joined(zs, every))).to_event(1).log_prob(xs)
            pyro.factor("x", log_x.logsumexp(0) - torch.log(torch.tensor(float(CLASSES))))

    def guide(self, xs, ys=None):
        with pyro.plate("data", len(xs)):
            if ys is None:
                ys = pyro.sample("y", dist.OneHotCategorical(logits=self.encoder_y(xs)))
            loc, log_scale = self.encoder_z(joined(xs, ys)).chunk(2, -1)
            pyro.sample("z", dist.Normal(loc, log_scale.exp()).to_event(1))

    @staticmethod
    def plates(xs, ys=None):
        return pyro.plate("data", len(xs))

    def classify_part(self, guide_list):
        """The classifier as a part of ``guide_list``: q(y | x) where unlabelled, in the list's plate."""

        def part(xs, ys=None):
            pyro.module("ss_vae", self)
            if ys is None:
                with guide_list.plates["data"]:
                    pyro.sample("y", dist.OneHotCategorical(logits=self.encoder_y(xs)),
                                infer={"enumerate": "parallel"})
        return part


def data(train=500, test=200, seed=0):
    """{"train": (images, one-hot labels, labelled mask), "test": (images, labels)}."""
    images = load_data("mnist-sample", n_obs=train, n_test=test, log=lambda *_: None)
    labelled = torch.zeros(train, dtype=torch.bool)
    labelled[torch.randperm(train, generator=torch.Generator().manual_seed(seed))[:int(LABELLED * train)]] = True
    onehot = nn.functional.one_hot(images.train_labels.long(), CLASSES).float()
    return {"train": (images.train.round(), onehot, labelled), "test": (images.test.round(), images.test_labels)}


def build(guide, data):
    ssvae = SSVAE()
    loss = TraceEnum_ELBO(max_plate_nesting=1, strict_enumeration_warning=False)  # labelled calls: none
    if guide == "hand":
        return Setup(ssvae.model, config_enumerate(ssvae.guide, "parallel"), loss)
    chosen = AutoGuideList(ssvae.model, create_plates=ssvae.plates)
    if guide.split("+")[0] in ("semi-amortized", "iterative"):
        chosen.append(BUILDERS[guide](ssvae.collapsed, encoder_input=0))
    else:
        chosen.append(BUILDERS[guide](poutine.block(ssvae.model, hide=["y", "y_aux"])))
    chosen.append(ssvae.classify_part(chosen))
    return Setup(ssvae.model, chosen, loss)


def batches(data, steps, generator):
    """``steps`` minibatches of 100: per epoch the labelled images (x, y) first, then the unlabelled (x,) ones,
    each shuffled from ``generator``."""
    x, y, labelled = data["train"]
    sup, unsup = labelled.nonzero().squeeze(-1), (~labelled).nonzero().squeeze(-1)
    taken = 0
    while True:
        parts = [(idx, True) for idx in sup[torch.randperm(len(sup), generator=generator)].split(BATCH)]
        parts += [(idx, False) for idx in unsup[torch.randperm(len(unsup), generator=generator)].split(BATCH)]
        for idx, with_labels in parts:
            if taken == steps:
                return
            taken += 1
            yield (x[idx], y[idx]) if with_labels else (x[idx],)


def chunks(x):
    """The images alone (unlabelled calls: log p(x), y latent)."""
    return [(x[0],)]


def first(x, n):
    return tuple(part[:n] for part in x)


def downstream(setup, data, record):
    with torch.no_grad():
        predicted = setup.model.__self__.encoder_y(data["test"][0]).argmax(-1)
    return "classifier test accuracy", float((predicted == data["test"][1]).float().mean())
