"""Pyro's ProdLDA tutorial (tutorial/source/prodlda.ipynb) in the gallery: per document θ ~ LogNormal(0, I_K),
normalized, and word counts ~ Multinomial(words, softmax(BatchNorm(β θ))) through a decoder with dropout
(``pyro.module``), ``pyro.plate("documents", docs.shape[0])``; the tutorial's hand-written guide: an encoder
(softplus layers, dropout, BatchNorm'd heads, scale exp(½ ·)) to a LogNormal factor. Data: 300 training and 100
held-out simulated documents of 50 words over V = 120 from K = 5 topics (true β [K, V] Gaussian, sharpened ×3; the
model's θ prior); the tutorial's Adam 1e-3, minibatches of 32, TraceMeanField_ELBO; dropout 0.2, hidden 32.

Guides: ``hand``, ``amortized``, ``semi-amortized``, ``iterative``, ``flow`` (the builders' other defaults on the
raw counts, each under both scale links, its name saying which: ``+softplus``, the default, and ``+exp``). The
per-datapoint guide is left out: the plate is the minibatch (``docs.shape[0]``) and names no document across steps.
Scored and measured with the decoder (and the hand guide's encoder) in eval mode: BatchNorm's running statistics, no
dropout. Downstream: topic recovery, the mean correlation of the true β's topics with the decoder's β weights,
matched one to one (Hungarian).

One departure from the tutorial: its ``dist.Multinomial(...).to_event(1)`` inside the documents plate makes the
event [B, V], which the plate expands over B: every document's term holds the whole minibatch's likelihood (B times
too much, and a per-document ELBO that depends on the batch size). Written here without ``.to_event(1)``; on the
tutorial's form the builders refuse the model in one line (no argument is what the plate's sites observe).
"""
import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment
from torch import nn

import pyro
import pyro.distributions as dist
from pyro.infer import TraceMeanField_ELBO

from common import BUILDERS, EXP, SOFTPLUS, Setup, minibatch_indices

NAME, PLATE, STEPS, BATCH = "prodlda", "documents", 600, 32
TOPICS, VOCAB, WORDS, HIDDEN, DROPOUT = 5, 120, 50, 32, 0.2
GUIDES = ("hand",) + SOFTPLUS + EXP
REFUSED = {guide: "changes from call to call" for guide in ("semi-amortized+exp", "iterative+exp",
                                                            "semi-amortized+softplus", "iterative+softplus")}
"""The builders refused on this model, and a phrase of the line: the decoder's dropout (in training mode) makes the
local log joint at fixed values change from call to call, which SA-VI's and IA-VI's steps would climb."""
OPTIMIZERS = {"example": lambda: pyro.optim.Adam({"lr": 1e-3})}
SWAP = """prodlda = ProdLDA()
guide = AutoAmortizedNormal(prodlda.model, plate="documents")  # was: prodlda.guide
svi = SVI(prodlda.model, guide, pyro.optim.Adam({"lr": 1e-3}), TraceMeanField_ELBO())"""


class Encoder(nn.Module):
    """The tutorial's encoder: counts → (loc, scale) of log θ."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(DROPOUT)
        self.fc1, self.fc2 = nn.Linear(VOCAB, HIDDEN), nn.Linear(HIDDEN, HIDDEN)
        self.fcmu, self.fclv = nn.Linear(HIDDEN, TOPICS), nn.Linear(HIDDEN, TOPICS)
        self.bnmu, self.bnlv = nn.BatchNorm1d(TOPICS), nn.BatchNorm1d(TOPICS)

    def forward(self, counts):
        h = self.drop(F.softplus(self.fc2(F.softplus(self.fc1(counts)))))
        return self.bnmu(self.fcmu(h)), (0.5 * self.bnlv(self.fclv(h))).exp()


class Decoder(nn.Module):
    """The tutorial's decoder: θ → word probabilities softmax(BatchNorm(β θ))."""

    def __init__(self):
        super().__init__()
        self.beta, self.bn, self.drop = nn.Linear(TOPICS, VOCAB), nn.BatchNorm1d(VOCAB), nn.Dropout(DROPOUT)

    def forward(self, theta):
        return F.softmax(self.bn(self.beta(self.drop(theta))), dim=-1)


class ProdLDA(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.decoder = Encoder(), Decoder()

    def model(self, docs):
        pyro.module("decoder", self.decoder)
        with pyro.plate("documents", docs.shape[0]):
            theta = pyro.sample("theta", dist.LogNormal(docs.new_zeros(TOPICS), 1.0).to_event(1))
            theta = theta / theta.sum(-1, keepdim=True)
            pyro.sample("obs", dist.Multinomial(WORDS, self.decoder(theta)), obs=docs)

    def guide(self, docs):
        pyro.module("encoder", self.encoder)
        with pyro.plate("documents", docs.shape[0]):
            loc, scale = self.encoder(docs)
            pyro.sample("theta", dist.LogNormal(loc, scale).to_event(1))


def data(train=300, test=100, seed=0):
    """{"train", "test", "beta"}: word counts [docs, V] and the true topics β [K, V]."""
    g = torch.Generator().manual_seed(seed)
    beta = 3.0 * torch.randn(TOPICS, VOCAB, generator=g)
    theta = torch.randn(train + test, TOPICS, generator=g).exp()
    probs = torch.softmax((theta / theta.sum(-1, keepdim=True)) @ beta, -1)
    counts = torch.stack([torch.multinomial(p, WORDS, replacement=True, generator=g).bincount(minlength=VOCAB)
                          for p in probs]).float()
    return {"train": counts[:train], "test": counts[train:], "beta": beta}


def build(guide, data):
    prodlda = ProdLDA()
    chosen = prodlda.guide if guide == "hand" else BUILDERS[guide](prodlda.model, plate=PLATE)
    return Setup(prodlda.model, chosen, TraceMeanField_ELBO(), module=prodlda)


def batches(data, steps, generator):
    """``steps`` minibatches of 32 (the last of an epoch dropped where it has one document: BatchNorm needs two)."""
    train = data["train"]
    return ((train[idx],) for idx in minibatch_indices(len(train), BATCH, steps, generator, lambda idx: len(idx) > 1))


def chunks(x):
    return [(x,)]


def downstream(setup, data, record):
    found = setup.module.decoder.beta.weight.detach().T  # [K, V]
    true = data["beta"]
    centred = [F.normalize(b - b.mean(-1, keepdim=True), dim=-1) for b in (true, found)]
    correlation = (centred[0] @ centred[1].T).numpy()
    rows, cols = linear_sum_assignment(-correlation)
    return "topic recovery (matched correlation)", float(correlation[rows, cols].mean())
