"""Seeds trained as one batched model: R runs of one configuration that differ only in their seed, as one
Pyro model and guide with an outer ``pyro.plate("replicas", R)`` on every parameter and draw, so that one
SVI step trains all R (on a GPU, where a small model is launch-bound, R seeds cost about one step).

    loss = −Σ_r ELBO_r,   ELBO_r = the single run's ELBO estimate of replica r

Replica r *is* the run of its seed: its parameters are stacked from the guide that seed builds, its draws
(minibatch order, θ, z) come from a generator of its own, drawn in the order and shapes the single run draws
them from the global stream, its gradient is the single run's (the replicas share no parameter) and Adam
is elementwise. Only float rounding differs (batched matrix products). Each replica is written as its own
run directory, the files a single run writes (its checkpoints hold its own random states), so a replica
loads, resumes and compares as the single run would; a pack resumes when its runs stand at one epoch.

Hand-written around Pyro's traces rather than ``torch.func.vmap`` over whole steps: vmap's randomness
cannot give each replica its own generator. The encoders are vmapped (``torch.func.functional_call`` over
stacked parameters). Supported: the amortized, per-datapoint and shared guides, one particle, the trace
estimator (:data:`SUPPORTED`); anything else is refused in one line.
"""
import contextlib
import math
import time
from dataclasses import replace

import torch
from torch import nn
from torch.distributions import constraints, transform_to
from torch.func import functional_call, vmap
from tqdm.auto import tqdm

import pyro
from pyro import poutine
from pyro.distributions.util import scale_and_mask
from pyro.poutine.util import prune_subsample_sites

from .errors import AmortizedPyroError, Diverged, Interrupted
from .model import decode, kl_scaled
from .posterior import q_normal
from .process import StopSignals
from .runs import rng_states
from .svi import make_elbo, make_optimizer
from .training import check_once, epoch_record, kl_schedule, minibatches, outside_the_stream

SUPPORTED = "guides amortized, per-datapoint and shared, particles = 1, elbo = trace"


def check_pack(configs):
    """Refuse in one line a pack that is not one configuration at several seeds, or not :data:`SUPPORTED`."""
    first = configs[0]
    seeds = [c.seed for c in configs]
    if len(set(seeds)) != len(seeds):
        raise AmortizedPyroError("replicas need distinct seeds, got %s" % seeds)
    for c in configs[1:]:
        if replace(c, seed=first.seed) != first:
            raise AmortizedPyroError("replicas differ only in their seed")
    if first.guide not in ("amortized", "per-datapoint", "shared") or first.particles != 1 or first.elbo != "trace":
        raise AmortizedPyroError("replicas support %s (this run: guide %s, particles %d, elbo %s)"
                                 % (SUPPORTED, first.guide, first.particles, first.elbo))


_STREAMED = {}


def streamed(normal):
    """The Normal class ``normal`` drawing ε for replica r (the leading batch dimension) from generator r:
    ``loc + ε scale``, as torch's Normal draws, ε of the single run's shape."""
    if normal not in _STREAMED:
        class Streamed(normal):
            def __init__(self, loc, scale, generators):
                super().__init__(loc, scale, validate_args=False)
                self.generators = generators

            def expand(self, batch_shape, _instance=None):
                return Streamed(self.loc.expand(batch_shape), self.scale.expand(batch_shape), self.generators)

            def rsample(self, sample_shape=torch.Size()):
                shape = self._extended_shape(sample_shape)[1:]
                eps = torch.stack([torch.randn(shape, generator=g, dtype=self.loc.dtype, device=self.loc.device)
                                   for g in self.generators])
                return self.loc + eps * self.scale
        _STREAMED[normal] = Streamed
    return _STREAMED[normal]


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


class ReplicaGuide(nn.Module):
    """The guides of R replicas as one: each parameter of the single guide stacked along a leading replica
    dimension (named as the single guide names it), draws from the replicas' generators."""

    def __init__(self, guides, generators):
        super().__init__()
        template = guides[0]
        self.family, self.n_obs, self.local_terms = template.family, template.n_obs, template.local_terms
        self.objective, self.shapes = template.objective, template.q_theta.shapes
        self.generators, self.replicas = generators, len(guides)
        self.encoder = [template.q_z.encoder] if self.family == "amortized" else None  # a template, not a child
        self.names = sorted(name for name, _ in template.named_parameters())
        self.stacked = nn.ParameterDict({name.replace(".", ":"): nn.Parameter(torch.stack(
            [dict(g.named_parameters())[name].detach() for g in guides])) for name in self.names})

    def get(self, name):
        return self.stacked[name.replace(".", ":")]

    def named_stacked(self):
        """(single guide's name, stacked parameter), in name order."""
        return [(name, self.get(name)) for name in self.names]

    @torch.no_grad()
    def copy_to(self, guides):
        """Each replica's parameters into its single guide."""
        for r, guide in enumerate(guides):
            for name, param in guide.named_parameters():
                param.copy_(self.get(name)[r])

    def q_theta(self, normal, kl_scale):
        loc = self.get("q_theta.loc_unconstrained")
        scale = transform_to(constraints.positive)(self.get("q_theta.scale_unconstrained"))
        sizes = [math.prod(shape) for shape in self.shapes.values()]
        theta = {}
        with kl_scaled(kl_scale):
            for (site, shape), m, s in zip(self.shapes.items(), loc.split(sizes, -1), scale.split(sizes, -1)):
                view = (self.replicas, 1) + tuple(shape)
                theta[site] = pyro.sample(site, normal(m.view(view), s.view(view), self.generators)
                                          .to_event(len(shape)))
        return theta

    def factor(self, x, idx):
        """(μ, σ) [R, n, z_dim] for images x ([R, n, x_dim], or [n, x_dim] shared) at indices idx [R, n]."""
        if self.family == "amortized":
            prefix = "q_z.encoder."
            params = {name[len(prefix):]: self.get(name) for name in self.names if name.startswith(prefix)}
            return vmap(lambda p, images: functional_call(self.encoder[0], p, (images,)),
                        in_dims=(0, 0 if x.dim() == 3 else None))(params, x)
        loc, log_scale = self.get("q_z.loc"), self.get("q_z.log_scale")
        if self.family == "per-datapoint":
            rows = torch.arange(self.replicas, device=idx.device)[:, None]
            return loc[rows, idx], log_scale[rows, idx].exp()
        shape = (self.replicas, idx.shape[1], loc.shape[-1])
        return loc[:, None].expand(shape), log_scale.exp()[:, None].expand(shape)

    def forward(self, x, idx, kl_scale=None, x_all=None):
        normal = streamed(q_normal(self.objective))
        with pyro.plate("replicas", self.replicas, dim=-2):
            self.q_theta(normal, kl_scale)
            if self.local_terms == "all":
                every = torch.arange(self.n_obs, device=idx.device).expand(self.replicas, self.n_obs)
                with pyro.plate("latents", self.n_obs, dim=-1):
                    loc, scale = self.factor(x_all, every)
                    with kl_scaled(kl_scale):
                        pyro.sample("z", normal(loc, scale, self.generators).to_event(1))
                return
            with pyro.plate("data", idx.shape[1], dim=-1), poutine.scale(scale=self.n_obs / idx.shape[1]):
                loc, scale = self.factor(x, idx)
                with kl_scaled(kl_scale):
                    pyro.sample("z", normal(loc, scale, self.generators).to_event(1))


class ReplicaModel(nn.Module):
    """The model of R replicas as one: :class:`~amortized_pyro.model.BayesianDecoderModel`'s sites inside the
    plate ``replicas``; a minibatch x [R, B, x_dim] with indices idx [R, B], its terms scaled by N/B."""

    def __init__(self, model, replicas):
        super().__init__()
        self.model, self.replicas = model, replicas

    def forward(self, x, idx, kl_scale=None, x_all=None):
        m = self.model
        prior_z = m.prior_z(x.new_zeros(()))
        with pyro.plate("replicas", self.replicas, dim=-2):
            with kl_scaled(kl_scale):
                theta = m.sample_decoder(x.new_zeros(()))
            if m.local_terms == "all":
                with pyro.plate("latents", m.n_obs, dim=-1), kl_scaled(kl_scale):
                    z = pyro.sample("z", prior_z).gather(1, idx[..., None].expand(-1, -1, m.z_dim))
            with pyro.plate("data", idx.shape[1], dim=-1), poutine.scale(scale=m.n_obs / idx.shape[1]):
                if m.local_terms != "all":
                    with kl_scaled(kl_scale):
                        z = pyro.sample("z", prior_z)
                pyro.sample("x", m.observation(decode(z, theta)), obs=x)


def replica_elbos(model, guide, *args):
    """Each replica's ELBO estimate [R]: log p − log q at the guide's draw, site by site, scaled as Pyro
    scales them (plates, ``poutine.scale``), summed within each replica (Trace_ELBO's estimate)."""
    guide_trace = prune_subsample_sites(poutine.trace(guide).get_trace(*args))
    model_trace = prune_subsample_sites(poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args))
    total = 0.0
    for trace, sign in ((model_trace, 1.0), (guide_trace, -1.0)):
        for site in trace.nodes.values():
            if site["type"] == "sample":
                term = scale_and_mask(site["fn"].log_prob(site["value"]), site["scale"], site["mask"])
                total = total + sign * term.reshape(guide.replicas, -1).sum(1)
    return total


class Pack:
    """R runs (their models, guides, training states and random streams, as :func:`fitting.start` built or
    restored them) trained as one: the stacked guide, the batched model, one optimizer."""

    def __init__(self, models, guides, states, streams, schedule):
        self.models, self.guides, self.states, self.streams = models, guides, states, streams
        self.guide = ReplicaGuide(guides, [s.generator for s in streams])
        self.model = ReplicaModel(models[0], len(guides))
        self.optimizer = make_optimizer(self.guide, schedule.lr, schedule.weight_decay,
                                        (schedule.beta1, schedule.beta2), dict(self.guide.named_stacked()), 1)
        single = [s.optimizer.state_dict() for s in states]
        stacked = {i: {key: value if key == "step" else torch.stack([sd["state"][i][key] for sd in single])
                       for key, value in entry.items()} for i, entry in single[0]["state"].items()}
        self.optimizer.load_state_dict({"state": stacked, "param_groups": single[0]["param_groups"]})

    def step(self, x, idx, kl_scale, x_all):
        """One SVI step of every replica; their losses [R] as a device tensor."""
        losses = -replica_elbos(self.model, self.guide, x, idx, kl_scale, x_all)
        losses.sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return losses.detach()

    def unstack_optimizer(self, r):
        """Replica r's slice of the optimizer's state into its own optimizer (for its checkpoint)."""
        stacked = self.optimizer.state_dict()
        state = {i: {key: value if key == "step" else value[r].clone() for key, value in entry.items()}
                 for i, entry in stacked["state"].items()}
        self.states[r].optimizer.load_state_dict({"state": state, "param_groups": stacked["param_groups"]})


def train_pack(pack, data, schedule, writers, progress=True):
    """Train every replica of ``pack`` on ``data`` (on its device) to epoch ``schedule.epochs``, writing each
    replica's records and checkpoints to its writer (or None) as a single run does. Raises Diverged or
    Interrupted as :func:`~amortized_pyro.training.train` does, with the replica's index as ``replica``."""
    device, (n_obs, _) = data.train.device, data.train.shape
    elbos = [make_elbo(1, schedule.elbo)(model, guide) for model, guide in zip(pack.models, pack.guides)]
    x_all = data.train if schedule.local_terms == "all" else None
    first = torch.arange(min(schedule.batch_size, n_obs), device=device)
    epoch0 = pack.states[0].epoch
    check_once(elbos[0], (data.train[first], first, kl_schedule(schedule, epoch0 + 1, device), x_all), device)
    bar = tqdm(range(epoch0 + 1, schedule.epochs + 1), desc="%s x%d" % (pack.guide.family, len(pack.guides)),
               unit="epoch", disable=not progress, leave=False)
    with StopSignals() as stop, pyro.validation_enabled(False):
        for epoch in bar:
            began = time.perf_counter()
            kl_scale = kl_schedule(schedule, epoch, device)
            orders = [minibatches(schedule, n_obs, device, s.generator) for s in pack.streams]
            total = sum(pack.step(data.train[idx], idx, kl_scale, x_all) for idx in map(torch.stack, zip(*orders)))
            losses = (total / len(orders[0])).tolist()  # the epoch's one host sync
            elapsed = time.perf_counter() - began
            last, stopping = epoch == schedule.epochs, stop.signum is not None
            # the pack checkpoints together (by its first writer's clock), so that it stands at one epoch
            due = last or stopping or (writers[0] is not None and writers[0].due(epoch))
            if due or epoch % schedule.eval_every == 0:  # the single guides are read only to evaluate and save
                pack.guide.copy_to(pack.guides)
            for r, (loss, state, stream, writer) in enumerate(zip(losses, pack.states, pack.streams, writers)):
                state.train_seconds += elapsed
                if not math.isfinite(loss):
                    error = Diverged(epoch, loss)
                    error.replica = r
                    raise error
                with stream.as_global():
                    record = epoch_record(pack.models[r], pack.guides[r], data, schedule, state, epoch, loss,
                                          kl_scale, elbos[r], x_all)
                state.history.append(record)
                state.epoch = epoch
            # every replica's checkpoint before any of the epoch's records: a pack killed while writing them
            # leaves its runs' checkpoints one epoch apart at most (resume_pack then goes on run by run)
            for r, (state, stream, writer) in enumerate(zip(pack.states, pack.streams, writers)):
                if writer and due:
                    pack.unstack_optimizer(r)
                    writer.checkpoint(pack.guides[r], state, device, stream.current())
            for state, writer in zip(pack.states, writers):
                if writer:
                    writer.add(state.history[-1])
            if stop.signum:
                raise Interrupted(stop.signum, epoch)
