"""Pyro's examples/dmm/dmm.py in the gallery: the deep Markov model, per sequence z_t ~ N(gated transition(z_{t-1}))
(z_0 a parameter) and x_t ~ Bernoulli(emitter(z_t)), the z_t under ``poutine.scale(scale=annealing_factor)`` (the
example's KL annealing) and every step masked past the sequence's length (``.mask(mask[:, t-1:t])``), all in
``pyro.plate("z_minibatch", len(mini_batch))``; the example's hand-written guide: an RNN (relu) over the sequence
reversed within its length (packed), its states reversed back, and the combiner q(z_t | z_{t-1}, h(x_{t:T})).
Sizes (the example's structure, shrunk): 12 binary notes per step, z 3, emitter 16, transition 24, RNN 32.
Data: 200 training and 50 held-out sequences of 5–10 steps (zero-padded to 10, masked) simulated from a DMM of these
sizes at a fixed seed (emitter's output layer ×4, transition scale lowered); minibatches of 20, the annealing factor
from 0.2 up to 1 over the first 20 % of the steps (the example's schedule, in steps); Trace_ELBO; the example's
ClippedAdam (betas (0.96, 0.999), clip_norm 10, lrd 0.99996, weight_decay 2) at lr 3e-3 (the example's 3e-4 ×10 for
the small budget; at 1e-2 the amortized builder's loss blew up to 1e6 within 20 steps).

Guides: ``hand``; the builders on ``plate="z_minibatch"``, the encoder reading the padded sequence and its mask
(:func:`sequence_input`), given ``local_mask`` (:func:`step_masks`: z_t's mask, as the model computes it):
``amortized``, ``semi-amortized``, ``iterative`` (each under both scale links, its name saying which: ``+softplus``,
the default, and ``+exp``); ``flow`` is refused (a flow takes no ``local_mask``, and the model masks its local
sites). The per-datapoint guide does not apply: the plate is the minibatch (``len(mini_batch)``). Departures: the
padded reversed sequences are passed (packed inside the guide, ``enforce_sorted=False``); every minibatch is padded
to the data's longest sequence (the example pads to the minibatch's: its number of z_t sites would change from call
to call); the model registers its own networks, the guide its own. Downstream: the example's test number, −ELBO per
time step of the held-out sequences (Trace_ELBO, 10 particles).
"""
import torch
from torch import nn

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import Trace_ELBO

from amortized_pyro.errors import GuideError
from common import BUILDERS, EXP, SOFTPLUS, Setup, minibatch_indices

NAME, PLATE, STEPS, BATCH = "dmm", "z_minibatch", 300, 20
INPUT, Z, EMISSION, TRANSITION, RNN = 12, 3, 16, 24, 32
T_MIN, T_MAX, MIN_ANNEALING, ANNEALED = 5, 10, 0.2, 0.2
GUIDES = ("hand",) + SOFTPLUS + EXP
REFUSED = {"flow+softplus": "a flow takes no local_mask", "flow+exp": "a flow takes no local_mask"}
"""The builders refused on this model, and a phrase of the line: the model masks its z_t (padded steps), which a
guide must be told (``local_mask``), and a flow cannot mask its log q."""
OPTIMIZERS = {"example": lambda: pyro.optim.ClippedAdam({"lr": 3e-3, "betas": (0.96, 0.999), "clip_norm": 10.0,
                                                         "lrd": 0.99996, "weight_decay": 2.0})}
SWAP = """dmm = DMM()
guide = AutoAmortizedNormal(dmm.model, plate="z_minibatch", encoder_input=sequence_input,
                            local_mask=step_masks)            # was: dmm.guide
svi = SVI(dmm.model, guide, pyro.optim.ClippedAdam({...}), Trace_ELBO())"""


class Emitter(nn.Module):
    """p(x_t | z_t): two relu layers, sigmoid probabilities."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Sequential(nn.Linear(Z, EMISSION), nn.ReLU(), nn.Linear(EMISSION, EMISSION), nn.ReLU())
        self.out = nn.Linear(EMISSION, INPUT)

    def forward(self, z):
        return torch.sigmoid(self.out(self.hidden(z)))


class GatedTransition(nn.Module):
    """p(z_t | z_{t-1}): a gate mixing a linear map (started at the identity) with a proposed mean; scale from it."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Sequential(nn.Linear(Z, TRANSITION), nn.ReLU(), nn.Linear(TRANSITION, Z), nn.Sigmoid())
        self.proposed = nn.Sequential(nn.Linear(Z, TRANSITION), nn.ReLU(), nn.Linear(TRANSITION, Z))
        self.lin_sig, self.lin_z_to_loc = nn.Linear(Z, Z), nn.Linear(Z, Z)
        with torch.no_grad():
            self.lin_z_to_loc.weight.copy_(torch.eye(Z))
            self.lin_z_to_loc.bias.zero_()

    def forward(self, z_prev):
        gate, proposed = self.gate(z_prev), self.proposed(z_prev)
        loc = (1 - gate) * self.lin_z_to_loc(z_prev) + gate * proposed
        return loc, nn.functional.softplus(self.lin_sig(torch.relu(proposed)))


class Combiner(nn.Module):
    """q(z_t | z_{t-1}, h_t): the RNN state averaged with tanh of a map of z_{t-1}, two heads (softplus scale)."""

    def __init__(self):
        super().__init__()
        self.lin_z_to_hidden = nn.Linear(Z, RNN)
        self.loc, self.scale = nn.Linear(RNN, Z), nn.Linear(RNN, Z)

    def forward(self, z_prev, h_rnn):
        h = 0.5 * (torch.tanh(self.lin_z_to_hidden(z_prev)) + h_rnn)
        return self.loc(h), nn.functional.softplus(self.scale(h))


def reverse_within(x, lengths):
    """Each sequence of ``x`` [B, T, ...] reversed within its length, its padding left in place."""
    t = torch.arange(x.shape[1]).expand(len(x), -1)
    idx = torch.where(t < lengths.unsqueeze(-1), lengths.unsqueeze(-1) - 1 - t, t)
    return x.gather(1, idx.reshape(idx.shape + (1,) * (x.dim() - 2)).expand(x.shape))


class DMM(nn.Module):
    """The example's model and guide; ``generative`` and ``inference`` the networks each registers."""

    def __init__(self):
        super().__init__()
        self.generative = nn.ModuleDict({"emitter": Emitter(), "trans": GatedTransition()})
        self.generative.z_0 = nn.Parameter(torch.zeros(Z))
        self.inference = nn.ModuleDict({"combiner": Combiner(),
                                        "rnn": nn.RNN(INPUT, RNN, nonlinearity="relu", batch_first=True)})
        self.inference.z_q_0 = nn.Parameter(torch.zeros(Z))
        self.inference.h_0 = nn.Parameter(torch.zeros(1, 1, RNN))

    def model(self, x, reversed_x, mask, lengths, annealing_factor=1.0):
        pyro.module("dmm_model", self.generative)
        net = self.generative
        z_prev = net.z_0.expand(len(x), Z)
        with pyro.plate("z_minibatch", len(x)):
            for t in pyro.markov(range(1, x.shape[1] + 1)):
                loc, scale = net.trans(z_prev)
                with poutine.scale(scale=annealing_factor):  # the KL annealing
                    z_t = pyro.sample("z_%d" % t, dist.Normal(loc, scale).mask(mask[:, t - 1:t]).to_event(1))
                pyro.sample("obs_x_%d" % t, dist.Bernoulli(net.emitter(z_t)).mask(mask[:, t - 1:t]).to_event(1),
                            obs=x[:, t - 1])
                z_prev = z_t

    def guide(self, x, reversed_x, mask, lengths, annealing_factor=1.0):
        pyro.module("dmm_guide", self.inference)
        net = self.inference
        packed = nn.utils.rnn.pack_padded_sequence(reversed_x, lengths, batch_first=True, enforce_sorted=False)
        states, _ = net.rnn(packed, net.h_0.expand(1, len(x), RNN).contiguous())
        states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=x.shape[1])
        states = reverse_within(states, lengths)  # states[:, t-1] = h(x_{t:T})
        z_prev = net.z_q_0.expand(len(x), Z)
        with pyro.plate("z_minibatch", len(x)):
            for t in pyro.markov(range(1, x.shape[1] + 1)):
                loc, scale = net.combiner(z_prev, states[:, t - 1])
                with poutine.scale(scale=annealing_factor):
                    z_t = pyro.sample("z_%d" % t, dist.Normal(loc, scale).mask(mask[:, t - 1:t]).to_event(1))
                z_prev = z_t


def sequence_input(x, reversed_x, mask, lengths, annealing_factor=1.0):
    """The builders' encoder input per sequence: its padded notes and its mask, flat."""
    return torch.cat([x.flatten(1), mask.to(x.dtype)], -1)


def step_masks(x, reversed_x, mask, lengths, annealing_factor=1.0):
    """The builders' ``local_mask``: z_t's mask [B], as the model masks it."""
    return {"z_%d" % t: mask[:, t - 1] for t in range(1, x.shape[1] + 1)}


def data(train=200, test=50, seed=0):
    """{"train", "test"}: (binary notes [n, 10, 12] zero-padded, lengths [n]) simulated from a DMM of the sizes."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        truth = DMM().generative
    with torch.no_grad():
        truth.emitter.out.weight.mul_(4.0)
        truth.trans.lin_sig.bias.sub_(1.5)
        g = torch.Generator().manual_seed(seed)
        n = train + test
        lengths = torch.randint(T_MIN, T_MAX + 1, (n,), generator=g)
        z, notes = truth.z_0.expand(n, Z), []
        for _ in range(T_MAX):
            loc, scale = truth.trans(z)
            z = loc + scale * torch.randn(n, Z, generator=g)
            notes.append(torch.bernoulli(truth.emitter(z), generator=g))
        x = torch.stack(notes, 1) * (torch.arange(T_MAX) < lengths.unsqueeze(-1)).unsqueeze(-1)
    return {"train": (x[:train], lengths[:train]), "test": (x[train:], lengths[train:])}


def call(x, lengths, annealing_factor=1.0):
    """The model's arguments for sequences ``x`` of ``lengths``: (x, reversed x, mask, lengths, annealing)."""
    mask = torch.arange(x.shape[1]) < lengths.unsqueeze(-1)
    return x, reverse_within(x, lengths), mask, lengths, annealing_factor


class _Refused:
    """A builder refused at its construction: its line raised at the first call, so that the tables name it."""

    def __init__(self, error):
        self.error = error

    def __call__(self, *args, **kwargs):
        raise self.error


def build(guide, data):
    dmm = DMM()
    if guide == "hand":
        return Setup(dmm.model, dmm.guide, Trace_ELBO())
    try:
        chosen = BUILDERS[guide](dmm.model, plate=PLATE, encoder_input=sequence_input, local_mask=step_masks)
    except GuideError as error:  # the flow: refused at construction
        chosen = _Refused(error)
    return Setup(dmm.model, chosen, Trace_ELBO())


def batches(data, steps, generator):
    """``steps`` minibatches of 20 (epochs of fresh permutations), the annealing factor rising from 0.2 to 1 over
    the first 20 % of the steps."""
    x, lengths = data["train"]
    for taken, idx in enumerate(minibatch_indices(len(x), BATCH, steps, generator), 1):
        factor = min(1.0, MIN_ANNEALING + (1 - MIN_ANNEALING) * taken / max(1.0, ANNEALED * steps))
        yield call(x[idx], lengths[idx], factor)


def chunks(x):
    return [call(*x)]


def with_data(simulated, args, kwargs):
    """diagnose's calibration: the model's arguments for its simulated notes (site ``obs_x_t`` → [B, 12]), padded
    past each sequence's length with zeros as the data are."""
    x, _, mask, lengths, annealing = args
    notes = torch.stack([simulated["obs_x_%d" % t] for t in range(1, x.shape[1] + 1)], 1) * mask.unsqueeze(-1)
    return call(notes.to(x.dtype), lengths, annealing), kwargs


def first(x, n):
    return x[0][:n], x[1][:n]


def downstream(setup, data, record):
    if not setup.serves_new:
        return "held-out −ELBO per time step (the example's test NLL)", None
    with torch.no_grad():
        loss = Trace_ELBO(num_particles=10).loss(setup.model, setup.guide, *chunks(data["test"])[0])
    return "held-out −ELBO per time step (the example's test NLL)", loss / float(data["test"][1].sum())
