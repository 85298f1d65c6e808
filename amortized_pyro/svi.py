"""Stochastic variational inference kept on the device: Pyro's ELBO estimators and a plain torch optimizer.

This is Pyro's documented lower-level training loop (``loss = elbo.differentiable_loss(model, guide, ...)``,
``loss.backward()``, a torch optimizer over the param store's unconstrained tensors) rather than ``SVI``:
``SVI.step`` and ``Trace_ELBO.loss_and_grads`` return the loss as a Python float, a host sync per sample
site every step, and ``pyro.optim`` keeps one optimizer per tensor whose state cannot be saved whole. Here
the loss stays a device tensor, one multi-tensor Adam (or AdamW) updates every parameter, its
``state_dict`` goes into checkpoints, and the ELBO can be compiled once with torch.jit.
"""
import warnings

import torch

import pyro
from pyro import poutine
from pyro.infer import JitTrace_ELBO, Trace_ELBO


class DeviceTrace_ELBO(Trace_ELBO):
    """Trace_ELBO for guides whose every site is reparameterized, as all guides here are.

    Then the surrogate loss equals the loss, −(log p(x, z, θ) − log q(z, θ)) summed over the trace with
    the plates' N/B scaling (and any ``poutine.scale``), averaged over particles, and no per-site
    ``.item()`` is needed.
    """

    def differentiable_loss(self, model, guide, *args, **kwargs):
        loss = 0.0
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            if not all(site["fn"].has_rsample for site in guide_trace.nodes.values() if site["type"] == "sample"):
                raise NotImplementedError("DeviceTrace_ELBO needs a fully reparameterized guide")
            loss = loss - (model_trace.log_prob_sum() - guide_trace.log_prob_sum()) / self.num_particles
        return loss


class DeviceJitTrace_ELBO(JitTrace_ELBO):
    """JitTrace_ELBO without its per-step NaN check and ``.item()``: the same estimator, traced once by
    torch.jit, which removes Pyro's Python overhead per step.

    Pyro 1.9's ``JitTrace_ELBO.differentiable_loss`` returns ``loss + (surrogate − surrogate.detach())``
    where the traced ``loss`` still carries gradient, so gradients come out doubled; here the value is
    the loss and the gradient the surrogate's alone.
    """

    def differentiable_loss(self, model, guide, *args, **kwargs):
        with warnings.catch_warnings():  # torch >= 2.9 marks torch.jit.trace deprecated; it still works
            warnings.filterwarnings("ignore", message=".*torch.jit.trace.*", category=FutureWarning)
            loss, surrogate_loss = self.loss_and_surrogate_loss(model, guide, *args, **kwargs)
        return surrogate_loss + (loss - surrogate_loss).detach()


def make_elbo(particles=1, jit=False):
    """The ELBO estimator: ``particles`` vectorized draws, compiled with torch.jit when ``jit``."""
    elbo = DeviceJitTrace_ELBO if jit else DeviceTrace_ELBO
    options = dict(ignore_jit_warnings=True) if jit else {}
    return elbo(num_particles=particles, vectorize_particles=particles > 1, max_plate_nesting=1, **options)


def training_elbo(model, guide, args, particles, jit, log):
    """The estimator to train with: the torch.jit-compiled one where it compiles for this model and
    guide (tried once, on the arguments ``args`` of one step, without touching the random stream), else
    the plain one, saying so in one line."""
    if jit:
        elbo = make_elbo(particles, jit=True)
        try:
            with torch.random.fork_rng(devices=_devices(args)):
                elbo.differentiable_loss(model, guide, *args)
            return elbo
        except Exception as e:  # noqa: BLE001 -- any failure to trace means: run uncompiled
            log("torch.jit could not compile the ELBO (%s); training without --jit" % str(e).strip().splitlines()[0])
    return make_elbo(particles)


def _devices(args):
    return [a.device for a in args if torch.is_tensor(a) and a.device.type == "cuda"][:1]


def create_params(guide, args):
    """Run the guide once, outside any inference and without touching the random stream, so that every
    parameter exists; returns {name: unconstrained tensor} in name order."""
    with torch.random.fork_rng(devices=_devices(args)), poutine.block(), torch.no_grad():
        guide(*args)
    store = pyro.get_param_store()
    return {name: store.get_param(name).unconstrained() for name in sorted(store.keys())}


def decays(name, value):
    """Whether AdamW's weight decay applies to the parameter ``name``: only q(z)'s matrices (the encoder's
    weight matrices, the per-datapoint table), as in the reference study's code, which decays every tensor
    of two or more dimensions and keeps q(θ) as one flat vector; never q(θ) and never a vector."""
    return not name.startswith("decoder.") and value.dim() >= 2


def make_optimizer(params, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.999)):
    """Adam over ``params`` ({name: tensor}), or AdamW with decoupled weight decay on the tensors that
    :func:`decays` picks where weight_decay > 0: one multi-tensor (foreach) torch optimizer, its
    parameters in name order so that its ``state_dict`` is the same in every process."""
    options = {"lr": lr, "betas": tuple(betas), "foreach": True}
    if weight_decay <= 0:
        return torch.optim.Adam(list(params.values()), **options)
    decayed = [v for k, v in params.items() if decays(k, v)]
    plain = [v for k, v in params.items() if not decays(k, v)]
    groups = [g for g in ({"params": decayed, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0})
              if g["params"]]
    return torch.optim.AdamW(groups, **options)


def step(elbo, model, guide, optimizer, *args):
    """One SVI step: the ELBO's gradient, one optimizer update; returns the loss as a device tensor."""
    loss = elbo.differentiable_loss(model, guide, *args)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()
