"""Pyro's examples/lda.py in the gallery: topic weights ~ Gamma(1/K, 1) and topic words ~ Dirichlet(1/V) in plate
"topics", per document doc topics ~ Dirichlet(topic weights) in plate "documents", per word a topic enumerated
(``infer={"enumerate": "parallel"}``) and the word ~ Categorical(topic words[topic]); data [words per doc, docs]
of word ids, as the example lays it out. The example's hand-written guide: Gamma(·, 1) and Dirichlet factors of the
globals (its conjugate guide), the doc topics a Delta at an MLP's softmax of the document's word counts (sigmoid
layers, weights N(0, 0.001)). Data: 300 training and 100 held-out documents of 32 words over V = 40, K = 4 topics,
drawn from the model (seed 0); the example's ClippedAdam 0.01, full batch, TraceEnum_ELBO(max_plate_nesting=2).

Guides: ``hand``, and the builders built on ``poutine.block(model, hide=["word_topics"])`` (plate "documents", the
encoder reading the documents' word counts): ``amortized``, ``semi-amortized``, ``iterative``, ``flow`` (each under
both scale links, its name saying which: ``+softplus``, the default, and ``+exp``); all trained with TraceEnum_ELBO
on the enumerated model. Scored, and measured by measure_gap, on :meth:`LDA.collapsed`: the same model with the word
topics summed out by hand (the words' Categorical of doc topics @ topic words), its ELBO the enumerated one's.
Downstream: topic recovery, the mean cosine similarity of the true topics with the guide's (q's median; the hand
guide's: its Dirichlet's mean), matched one to one (Hungarian).

The hand guide's doc topics are a point mass: its "ELBO" has no entropy for them and is no bound on log p(x).
"""
import torch
from scipy.optimize import linear_sum_assignment
from torch import nn
from torch.distributions import constraints

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import TraceEnum_ELBO

from common import BUILDERS, EXP, SOFTPLUS, Setup

NAME, PLATE, STEPS = "lda", "documents", 600
TOPICS, VOCAB, WORDS = 4, 40, 32
GUIDES = ("hand",) + SOFTPLUS + EXP
OPTIMIZERS = {"example": lambda: pyro.optim.ClippedAdam({"lr": 0.01})}
GAP_DRAWS = "one-at-a-time"
"""measure_gap's draws: the example's Dirichlet(topic_weights) inside the documents plate puts stacked draws of θ at
the words plate's dim, silently (stacked, a trained guide's gap read 131.8 nats per document; one at a time 0.11)."""
SWAP = """lda = LDA()
guide = AutoAmortizedNormal(poutine.block(lda.model, hide=["word_topics"]), plate="documents",
                            encoder_input=word_counts)         # was: the example's parametrized_guide
svi = SVI(lda.model, guide, pyro.optim.ClippedAdam({"lr": 0.01}), TraceEnum_ELBO(max_plate_nesting=2))
# SA-VI and IA-VI: built on lda.collapsed (the word topics summed out by hand): on the blocked model refused"""


def word_counts(data):
    """The documents' word counts [docs, V] of word ids [words, docs]: what the example's predictor reads."""
    return torch.zeros(data.shape[1], VOCAB).scatter_add_(1, data.T, torch.ones(data.T.shape))


class LDA:
    """The example's model and guide at the gallery's sizes."""

    def model(self, data):
        with pyro.plate("topics", TOPICS):
            topic_weights = pyro.sample("topic_weights", dist.Gamma(1.0 / TOPICS, 1.0))
            topic_words = pyro.sample("topic_words", dist.Dirichlet(torch.ones(VOCAB) / VOCAB))
        with pyro.plate("documents", data.shape[1]):
            doc_topics = pyro.sample("doc_topics", dist.Dirichlet(topic_weights))
            with pyro.plate("words", data.shape[0]):
                word_topics = pyro.sample("word_topics", dist.Categorical(doc_topics),
                                          infer={"enumerate": "parallel"})
                pyro.sample("doc_words", dist.Categorical(topic_words[word_topics]), obs=data)

    def collapsed(self, data):
        """The model with the word topics summed out by hand: each word ~ Categorical(doc topics @ topic words)."""
        with pyro.plate("topics", TOPICS):
            topic_weights = pyro.sample("topic_weights", dist.Gamma(1.0 / TOPICS, 1.0))
            topic_words = pyro.sample("topic_words", dist.Dirichlet(torch.ones(VOCAB) / VOCAB))
        with pyro.plate("documents", data.shape[1]):
            doc_topics = pyro.sample("doc_topics", dist.Dirichlet(topic_weights))
            with pyro.plate("words", data.shape[0]):
                probs = (doc_topics.unsqueeze(-1) * topic_words.unsqueeze(-3)).sum(-2)  # [..., docs, V]
                pyro.sample("doc_words", dist.Categorical(probs), obs=data)

    def __init__(self, hidden=(32, 32)):
        sizes = (VOCAB,) + hidden + (TOPICS,)
        layers = []
        for n_in, n_out in zip(sizes, sizes[1:]):
            layer = nn.Linear(n_in, n_out)
            nn.init.normal_(layer.weight, 0, 0.001)
            nn.init.normal_(layer.bias, 0, 0.001)
            layers += [layer, nn.Sigmoid()]
        self.predictor = nn.Sequential(*layers, nn.Softmax(-1))

    def guide(self, data):
        """The example's parametrized_guide: a conjugate guide of the globals, a Delta of the doc topics."""
        weights = pyro.param("topic_weights_posterior", lambda: torch.ones(TOPICS), constraint=constraints.positive)
        words = pyro.param("topic_words_posterior", lambda: torch.ones(TOPICS, VOCAB),
                           constraint=constraints.greater_than(0.5))
        with pyro.plate("topics", TOPICS):
            pyro.sample("topic_weights", dist.Gamma(weights, 1.0))
            pyro.sample("topic_words", dist.Dirichlet(words))
        pyro.module("predictor", self.predictor)
        with pyro.plate("documents", data.shape[1]):
            pyro.sample("doc_topics", dist.Delta(self.predictor(word_counts(data)), event_dim=1))


def data(train=300, test=100, seed=0):
    """{"train", "test", "topics"}: word ids [32, docs] drawn from the model (its prior) and the true topic words."""
    pyro.set_rng_seed(seed)
    weights = dist.Gamma(1.0 / TOPICS, 1.0).sample([TOPICS])
    topics = dist.Dirichlet(torch.ones(VOCAB) / VOCAB).sample([TOPICS])
    doc_topics = dist.Dirichlet(weights).sample([train + test])
    words = dist.Categorical(doc_topics).sample([WORDS])
    ids = dist.Categorical(topics[words]).sample()
    return {"train": ids[:, :train], "test": ids[:, train:], "topics": topics}


def build(guide, data):
    lda = LDA()
    loss = TraceEnum_ELBO(max_plate_nesting=2)
    if guide == "hand":
        return Setup(lda.model, lda.guide, loss, score_model=lda.collapsed)
    # SA-VI's and IA-VI's steps read the local ELBO off the model they are built on: on the blocked model it would
    # hold a prior draw of the word topics (refused in one line at their first call), so they are built on the
    # model with them summed out by hand, as the refusal asks; the other builders only need its sites
    built_on = lda.collapsed if guide.split("+")[0] in ("semi-amortized", "iterative") else poutine.block(lda.model,
                                                                                         hide=["word_topics"])
    return Setup(lda.model, BUILDERS[guide](built_on, plate=PLATE, encoder_input=word_counts), loss,
                 score_model=lda.collapsed)


def batches(data, steps, generator):
    return ((data["train"],) for _ in range(steps))


def chunks(x):
    return [(x,)]


def first(x, n):
    """The first ``n`` documents of word ids [words, docs]."""
    return x[:, :n]


def downstream(setup, data, record):
    with torch.no_grad():
        if isinstance(setup.guide, torch.nn.Module):
            found = setup.guide.median(data["train"])["topic_words"]
        else:
            found = pyro.param("topic_words_posterior")
            found = found / found.sum(-1, keepdim=True)
    true = data["topics"]
    cosine = (nn.functional.normalize(true, dim=-1) @ nn.functional.normalize(found, dim=-1).T).numpy()
    rows, cols = linear_sum_assignment(-cosine)
    return "topic recovery (matched cosine)", float(cosine[rows, cols].mean())
