"""Seeds trained as one batched model: R runs of one configuration that differ only in their seed, as the
package's ordinary model and guide inside an outer plate of R replicas (the way vectorized particles
work: Pyro's plate at dim −2, the ELBO's terms summed per replica), so that one SVI step trains all R (on a
GPU, where a small model is launch-bound, R seeds cost about one step).

    loss = −Σ_r ELBO_r,   ELBO_r = the single run's ELBO estimate of replica r

Replica r *is* the run of its seed: its parameters are stacked from the guide that seed builds (the guide
is called with them by ``torch.func.functional_call``; its local factor vmapped over them,
:meth:`~amortized_pyro.models.guides.StudyGuide.local_factor`), its draws (minibatch
order, θ, z) come from a generator of its own (:class:`ReplicaStreams`), drawn in the order and shapes the
single run draws them from the global stream, its gradient is the single run's (the replicas share no
parameter) and Adam is elementwise. Only float rounding differs (batched matrix products). The pack is
trained by the single run's loop (:func:`amortized_pyro.inference.training.train`); each replica is written as its
own run directory, the files a single run writes (its checkpoints hold its own random states), so a replica
loads, resumes and compares as the single run would; a pack resumes when its runs stand at one epoch.
Supported: the amortized, per-datapoint and shared guides, one particle, the trace estimator
(:data:`SUPPORTED`); anything else is refused in one line.
"""
import contextlib
from dataclasses import replace
from functools import partial

import torch
from torch import nn
from torch.func import functional_call

import pyro.distributions as dist
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample

from amortized_pyro.errors import AmortizedPyroError, InvalidSettings
from amortized_pyro.inference.svi import DeviceTrace_ELBO, make_elbo, make_optimizer
from amortized_pyro.inference.training import check_once, epoch_batches
from amortized_pyro.support.streams import outside_the_stream, rng_states

SUPPORTED = ("every guide but the semi-amortized and iterative (they work on the local ELBO inside the guide), no "
             "flow, particles = 1, estimator = trace, decoder prior normal")


def check_pack(configs):
    """Refuse in one line a pack that is not one configuration at several seeds, or not :data:`SUPPORTED`."""
    first = configs[0]
    seeds = [c.seed for c in configs]
    if len(set(seeds)) != len(seeds):
        raise AmortizedPyroError("replicas need distinct seeds, got %s" % seeds)
    for c in configs[1:]:
        if replace(c, seed=first.seed) != first:
            raise AmortizedPyroError("replicas differ only in their seed")
    if first.stop_window:
        raise InvalidSettings("replicas train every seed for the same epochs: early stopping (stop_window) would make "
                              "a replica other than the run of its seed", ["stop_window"])
    if (first.guide in ("semi-amortized", "iterative") or first.flow or first.particles != 1
            or first.estimator != "trace" or first.decoder_prior != "normal"):
        raise InvalidSettings("replicas support %s (this run: guide %s, flow %d, particles %d, estimator %s, decoder "
                              "prior %s)" % (SUPPORTED, first.guide, first.flow, first.particles, first.estimator,
                                            first.decoder_prior), ["guide", "flow", "particles", "estimator",
                                                                   "decoder_prior"])


class ReplicaStreams(Messenger):
    """Replica r's draws (the leading dimension of every latent site) from generator r, ``loc + ε scale`` as
    torch's Normal draws them, ε of the single run's shape: each replica draws the numbers its single run
    draws from the global stream. Every latent site of the package's guides is a Normal."""

    def __init__(self, generators):
        super().__init__()
        self.generators = generators

    def _pyro_sample(self, msg):
        if msg["is_observed"] or msg["value"] is not None or site_is_subsample(msg):
            return
        fn = msg["fn"]
        normal = fn.base_dist if isinstance(fn, dist.Independent) else fn
        assert isinstance(normal, dist.Normal), "replicas draw Normal sites only, not %r" % fn
        shape = fn.shape()
        eps = torch.stack([torch.randn(shape[1:], generator=g, dtype=normal.loc.dtype, device=normal.loc.device)
                           for g in self.generators])
        msg["value"] = normal.loc + eps * normal.scale


class Stream:
    """Replica r's random states, captured when its run has been built or restored: a generator on the device
    for its draws (the global stream it would have drawn from alone), the others as they were."""

    def __init__(self, device):
        self.key = "cuda" if device.type == "cuda" else "torch"
        self.states = rng_states(device)
        self.generator = torch.Generator(device)
        self.generator.set_state(self.states[self.key])

    def current(self):
        """The random states to checkpoint: those of the run alone at this point."""
        return dict(self.states, **{self.key: self.generator.get_state()})

    @contextlib.contextmanager
    def as_global(self):
        """The global stream set to this replica's for the duration, and put back after (for draws made
        outside training's stream, such as the true ELBO's)."""
        with outside_the_stream(self.generator.device):
            (torch.cuda.set_rng_state if self.key == "cuda" else torch.set_rng_state)(self.generator.get_state())
            yield


class Pack:
    """R runs (their models, guides, training states and random streams, as :func:`fitting.start` built or
    restored them) trained as one: the first run's model and guide under an outer plate of R replicas (the
    ELBO's vectorized particles, :meth:`~amortized_pyro.inference.svi.DeviceTrace_ELBO.particle_elbos`), the guide
    called with every parameter stacked over the replicas (``torch.func.functional_call``), one optimizer."""

    def __init__(self, models, guides, states, streams, writers, schedule):
        self.models, self.guides, self.states, self.streams, self.writers = models, guides, states, streams, writers
        self.label = "%s x%d" % (guides[0].family, len(guides))
        self.elbos = [make_elbo(1, schedule.estimator)(model, guide) for model, guide in zip(models, guides)]
        self.names = sorted(name for name, _ in guides[0].named_parameters())
        self.stacked = {name: nn.Parameter(torch.stack([dict(g.named_parameters())[name].detach() for g in guides]))
                        for name in self.names}
        # Pyro counts the particles' plate in max_plate_nesting only where there are two or more
        self.elbo = DeviceTrace_ELBO(num_particles=len(guides), vectorize_particles=True,
                                     max_plate_nesting=1 if len(guides) > 1 else 2)
        self.optimizer = make_optimizer(guides[0], schedule.lr, schedule.weight_decay,
                                        (schedule.beta1, schedule.beta2), self.stacked, 1)
        single = [s.optimizer.state_dict() for s in states]
        stacked = {i: {key: value if key == "step" else torch.stack([sd["state"][i][key] for sd in single])
                       for key, value in entry.items()} for i, entry in single[0]["state"].items()}
        self.optimizer.load_state_dict({"state": stacked, "param_groups": single[0]["param_groups"]})

    def guide(self, *args):
        """The first run's guide with every replica's parameters, each replica drawing from its stream."""
        with ReplicaStreams([s.generator for s in self.streams]):
            return functional_call(self.guides[0], self.stacked, args)

    def step(self, x, idx, kl_scale, x_all):
        """One SVI step of every replica on its minibatch (x [R, B, ...], idx [R, B]; x_all [R, N, ...] or
        None); their losses [R] as a device tensor."""
        losses = -self.elbo.particle_elbos(self.models[0], self.guide, x, idx, kl_scale, x_all)
        losses.sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return losses.detach()

    def epoch_losses(self, data, schedule, kl_scale, x_all):
        """One epoch of SVI steps of every replica, each on its own minibatch order; their mean losses [R], a
        device tensor. The single guides then hold the replicas' parameters (for records and checkpoints)."""
        every = None if x_all is None else x_all.expand((len(self.guides),) + x_all.shape)
        orders = [epoch_batches(schedule, data.train.shape[0], data.train.device, s.generator) for s in self.streams]
        total = sum(self.step(data.train[idx], idx, kl_scale, every) for idx in map(torch.stack, zip(*orders)))
        self.copy_to_guides()
        return total / len(orders[0])

    def check(self, x, idx, kl_scale, x_all):
        """Pyro's validation on one evaluation of the pack's ELBOs (the outer plate, the stacked guide) on the
        first minibatch for every replica, outside every stream: the replicas' generators are put back."""
        replicas, states = len(self.guides), [s.generator.get_state() for s in self.streams]
        every = None if x_all is None else x_all.expand((replicas,) + x_all.shape)
        elbos = partial(self.elbo.particle_elbos, self.models[0], self.guide)
        check_once(elbos, (x.expand((replicas,) + x.shape), idx.expand(replicas, -1), kl_scale, every), x.device)
        for stream, state in zip(self.streams, states):
            stream.generator.set_state(state)

    def random_states(self, r):
        """The global streams set to replica r's while its record is drawn."""
        return self.streams[r].as_global()

    def after_epoch(self, records, last, stopping):
        """Every replica's checkpoint (when its first writer's clock says so: a pack stands at one epoch)
        before any of the epoch's records: a pack killed while writing them leaves its runs' checkpoints one
        epoch apart at most (:func:`~amortized_pyro.runs.packs.resume_pack` then goes on run by run)."""
        due = last or stopping or (self.writers[0] is not None and self.writers[0].due(records[0]["epoch"]))
        for r, (state, stream, writer) in enumerate(zip(self.states, self.streams, self.writers)):
            if writer and due:
                self.unstack_optimizer(r)
                writer.checkpoint(self.guides[r], state, stream.generator.device, stream.current())
        for record, writer in zip(records, self.writers):
            if writer:
                writer.add(record)

    @torch.no_grad()
    def copy_to_guides(self):
        """Each replica's parameters into its single guide."""
        for r, guide in enumerate(self.guides):
            for name, param in guide.named_parameters():
                param.copy_(self.stacked[name][r])

    def unstack_optimizer(self, r):
        """Replica r's slice of the optimizer's state into its own optimizer (for its checkpoint)."""
        stacked = self.optimizer.state_dict()
        state = {i: {key: value if key == "step" else value[r].clone() for key, value in entry.items()}
                 for i, entry in stacked["state"].items()}
        self.states[r].optimizer.load_state_dict({"state": state, "param_groups": stacked["param_groups"]})
