"""Pyro's SVI pieces, kept on the device: the same algorithms as ``SVI`` + ``Trace_ELBO`` + ``pyro.optim.Adam``.

Pyro's ``SVI.step`` and ``Trace_ELBO`` return the loss as a Python float, which costs a host sync (one
per sample site) every step, and ``pyro.optim.Adam`` steps one torch optimizer per parameter tensor.
Here the loss stays a device tensor, gradients are released instead of zero-filled, one multi-tensor
Adam updates every parameter, and the ELBO can be compiled once with torch.jit.
"""
import warnings

import torch

import pyro
from pyro import poutine
from pyro.infer import SVI, JitTrace_ELBO, Trace_ELBO
from pyro.optim import PyroOptim


class _LossOnDevice:
    """``loss_and_grads`` that backpropagates and returns the loss tensor instead of a float."""

    def loss_and_grads(self, model, guide, *args, **kwargs):
        loss = self.differentiable_loss(model, guide, *args, **kwargs)
        loss.backward()
        return loss.detach()


class DeviceTrace_ELBO(_LossOnDevice, Trace_ELBO):
    """Trace_ELBO for guides whose every site is reparameterized, as all guides here are.

    Then the surrogate loss equals the loss, −(log p(x, z, θ) − log q(z, θ)) summed over the trace with
    the plates' N/B scaling, averaged over particles, and no per-site ``.item()`` is needed.
    """

    def differentiable_loss(self, model, guide, *args, **kwargs):
        loss = 0.0
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            if not all(site["fn"].has_rsample for site in guide_trace.nodes.values() if site["type"] == "sample"):
                raise NotImplementedError("DeviceTrace_ELBO needs a fully reparameterized guide")
            loss = loss - (model_trace.log_prob_sum() - guide_trace.log_prob_sum()) / self.num_particles
        return loss


class DeviceJitTrace_ELBO(_LossOnDevice, JitTrace_ELBO):
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


class DeviceSVI(SVI):
    """``pyro.infer.SVI`` whose ``step`` returns the loss as a device tensor (no host sync) and releases
    gradients (``grad = None``) instead of allocating fresh zero tensors for them."""

    def step(self, *args, **kwargs):
        with poutine.trace(param_only=True) as param_capture:
            loss = self.loss_and_grads(self.model, self.guide, *args, **kwargs)
        params = set(site["value"].unconstrained() for site in param_capture.trace.nodes.values())
        self.optim(params)
        for p in params:
            p.grad = None
        return loss


def decays(name, value):
    """Whether AdamW's weight decay applies to the parameter ``name``: only q(z)'s matrices (the encoder's
    weight matrices, the per-datapoint table), as in the reference study's code, which decays every tensor
    of two or more dimensions and keeps q(θ) as one flat vector; never q(θ) and never a vector."""
    return not name.startswith("decoder.") and value.dim() >= 2


class SingleOptim(PyroOptim):
    """A PyroOptim with one torch optimizer for all parameters (new ones join as parameter groups).

    ``pyro.optim.Adam`` keeps one optimizer per parameter tensor and steps them one by one; Adam's update
    is elementwise, so one optimizer over all tensors computes the same update with torch's multi-tensor
    kernels and a single call. With weight decay, the parameters that :func:`decays` picks form their own
    group with it; the others have none.
    """

    def __init__(self, optim_constructor, optim_args, weight_decay=0.0):
        super().__init__(optim_constructor, optim_args)
        self.weight_decay = weight_decay
        self.optimizer = None
        self.known = set()

    def __call__(self, params, *args, **kwargs):
        store = pyro.get_param_store()
        # in param-store name order, so that the optimizer's state_dict is the same in every process
        new = sorted((p for p in params if p not in self.known), key=store.param_name)
        if new:
            self.known.update(new)
            decayed = [p for p in new if decays(store.param_name(p), p)] if self.weight_decay > 0 else []
            groups = [{"params": decayed, "weight_decay": self.weight_decay},
                      {"params": [p for p in new if not any(p is q for q in decayed)], "weight_decay": 0.0}]
            for group in (g for g in groups if g["params"]):
                if self.optimizer is None:
                    self.optimizer = self.pt_optim_constructor([group], **self.pt_optim_args)
                else:
                    self.optimizer.add_param_group(group)
        self.optimizer.step()


def make_optimizer(lr=1e-3, weight_decay=0.0, betas=(0.9, 0.999)):
    """Adam, or AdamW with decoupled weight decay on q(z)'s matrices (:func:`decays`) where
    weight_decay > 0, as one multi-tensor (foreach) Pyro optimizer."""
    optimizer = torch.optim.AdamW if weight_decay > 0 else torch.optim.Adam
    return SingleOptim(optimizer, {"lr": lr, "betas": tuple(betas), "foreach": True}, weight_decay)


def make_elbo(particles=1, jit=False):
    """The ELBO estimator: ``particles`` vectorized draws, compiled with torch.jit when ``jit``."""
    elbo = DeviceJitTrace_ELBO if jit else DeviceTrace_ELBO
    options = dict(ignore_jit_warnings=True) if jit else {}
    return elbo(num_particles=particles, vectorize_particles=particles > 1, max_plate_nesting=1, **options)


def training_elbo(model, guide, args, particles, jit, log):
    """The estimator to train with: the torch.jit-compiled one where it compiles for this model and
    guide (tried once, on the arguments ``args`` of one step), else the plain one, saying so in one line."""
    if jit:
        elbo = make_elbo(particles, jit=True)
        try:
            elbo.differentiable_loss(model, guide, *args)
            return elbo
        except Exception as e:  # noqa: BLE001 -- any failure to trace means: run uncompiled
            log("torch.jit could not compile the ELBO (%s); training without --jit" % str(e).strip().splitlines()[0])
    return make_elbo(particles)
