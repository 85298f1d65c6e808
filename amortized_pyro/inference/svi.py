"""Stochastic variational inference kept on the device: Pyro's ELBO as a module, a plain torch optimizer.

This is the interface Pyro's ``ELBO`` documents for model and guide that are ``nn.Module``s with
module-local parameters: ``elbo = estimator(model, guide)`` is an ``nn.Module`` whose ``forward`` is the
differentiable loss, and one torch Adam (or AdamW) over the guide's parameters steps it. The loss stays a
device tensor (read back once per epoch by the training loop); the optimizer's ``state_dict`` goes into
checkpoints.
"""
import contextlib

import torch

from torch.distributions import kl_divergence

import pyro
from pyro import poutine
from pyro.distributions.util import scale_and_mask
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO
from pyro.poutine.util import prune_subsample_sites

ESTIMATORS = ("trace", "meanfield")


class DeviceLoss:
    """The loss of Pyro's ELBO estimators for guides whose every site is reparameterized, as all guides here
    are, kept on the device: −(1/P) Σ_p elbo(model trace p, guide trace p) over P particles (vectorized in
    an outer plate where ``vectorize_particles``). Written with Pyro's public ``poutine.trace``/``replay``
    because their ``differentiable_loss`` reads the loss back to the host (``torch_item``), a sync per site
    (``Trace_ELBO``) or per particle (``TraceMeanField_ELBO``) and step (BENCHMARKS.md)."""

    def differentiable_loss(self, model, guide, *args, **kwargs):
        vectorized = self.vectorize_particles and self.num_particles > 1
        loss = 0.0
        for _ in range(1 if vectorized else self.num_particles):
            loss = loss - self.particle_elbo(*self.traces(model, guide, vectorized, args, kwargs))
        return loss / self.num_particles

    def traces(self, model, guide, vectorized, args, kwargs):
        """(model trace, guide trace) of one draw, its particles vectorized in an outer plate where asked."""
        particles = pyro.plate("num_particles_vectorized", self.num_particles, dim=-self.max_plate_nesting) \
            if vectorized else contextlib.nullcontext()
        with particles:
            guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
            model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
        return model_trace, guide_trace


class DeviceTrace_ELBO(DeviceLoss, Trace_ELBO):
    """Trace_ELBO: log p(x, z, θ) − log q(z, θ) at the draw, each site scaled by its plates' N/B (and any
    ``poutine.scale``)."""

    def particle_elbo(self, model_trace, guide_trace):
        return model_trace.log_prob_sum() - guide_trace.log_prob_sum()

    def particle_elbos(self, model, guide, *args, **kwargs):
        """Each vectorized particle's ELBO estimate, [P]: the terms summed within a particle, not over all.
        For replicas, particles whose parameters differ (:mod:`amortized_pyro.inference.replicas`)."""
        model_trace, guide_trace = self.traces(model, guide, True, args, kwargs)
        return per_particle(model_trace, self.num_particles) - per_particle(guide_trace, self.num_particles)


def per_particle(trace, particles):
    """Σ over a trace's sites of their log-densities, scaled as Pyro scales them (plates, ``poutine.scale``),
    summed within each of the ``particles`` of the outermost dimension: [particles]."""
    trace = prune_subsample_sites(trace)
    trace.compute_log_prob()
    return sum(site["log_prob"].reshape(particles, -1).sum(1) for site in trace.nodes.values()
               if site["type"] == "sample")


class DeviceTraceMeanField_ELBO(DeviceLoss, TraceMeanField_ELBO):
    """TraceMeanField_ELBO: log p(x | z, θ) at the draw minus the analytic KL(q ‖ p) of every latent site
    (θ's and z's Normals), each scaled as its site is (N/B, the warm-up's β): the same expectation as
    Trace_ELBO with less variance. Only for guides scored by their own density (``objective="elbo"``)."""

    def particle_elbo(self, model_trace, guide_trace):
        elbo = 0.0
        for name, site in prune_subsample_sites(model_trace).nodes.items():
            if site["type"] != "sample":
                continue
            if site["is_observed"]:
                elbo = elbo + scale_and_mask(site["fn"].log_prob(site["value"]), site["scale"], site["mask"]).sum()
            else:
                q = guide_trace.nodes[name]
                elbo = elbo - scale_and_mask(kl_divergence(q["fn"], site["fn"]), q["scale"], q["mask"]).sum()
        return elbo


def make_elbo(particles=1, estimator="trace"):
    """The ELBO estimator (``trace`` or ``meanfield``) with ``particles`` vectorized draws (calling it on
    (model, guide) gives the module)."""
    kind = DeviceTraceMeanField_ELBO if estimator == "meanfield" else DeviceTrace_ELBO
    return kind(num_particles=particles, vectorize_particles=particles > 1, max_plate_nesting=1)


def decays(name, value, leading_dims=0):
    """Whether AdamW's weight decay applies to the guide parameter ``name``: only q(z)'s matrices (the
    encoder's weight matrices, the per-datapoint table), as in the reference study's code, which decays
    every tensor of two or more dimensions and keeps q(θ) as one flat vector; never q(θ), never a vector.
    ``leading_dims``: dimensions stacked in front of the single run's tensor (replicas)."""
    return not name.startswith("q_theta.") and value.dim() - leading_dims >= 2


def make_optimizer(guide, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.999), params=None, leading_dims=0,
                   capturable=False):
    """Adam over the guide's parameters (or ``params``, name → tensor, with ``leading_dims`` stacked
    dimensions), or AdamW with decoupled weight decay on the tensors that :func:`decays` picks where
    weight_decay > 0: one multi-tensor (foreach) torch optimizer, its parameters in name order so that its
    ``state_dict`` is the same in every process; ``capturable``: its step count on the device, so that a CUDA
    graph can capture its step (:mod:`~amortized_pyro.inference.static_step`)."""
    params = dict(sorted((params or dict(guide.named_parameters())).items()))
    options = {"lr": lr, "betas": tuple(betas), "foreach": True, "capturable": capturable}
    if weight_decay <= 0:
        return torch.optim.Adam(list(params.values()), **options)
    decayed = [v for k, v in params.items() if decays(k, v, leading_dims)]
    plain = [v for k, v in params.items() if not decays(k, v, leading_dims)]
    groups = [g for g in ({"params": decayed, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0})
              if g["params"]]
    return torch.optim.AdamW(groups, **options)


def step(elbo, optimizer, *args):
    """One SVI step of the ELBO module: its gradient, one optimizer update; returns the loss as a device tensor."""
    loss = elbo(*args)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()
