"""Guide builders for any Pyro model: amortized, semi-amortized, per-datapoint and shared Gaussian factors
q(z_n) over the local latent sites of a named plate, Pyro's AutoNormal or AutoDelta over the global ones,
and the amortization gap of such a guide (:func:`measure_gap`).

    guide = AutoAmortizedNormal(model)                  # the model's plate "data", a default MLP encoder
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())
"""
from .base import AutoLocalGuide
from .families import (AUTOGUIDES, AutoAmortizedNormal, AutoPerDatapointNormal, AutoSemiAmortizedNormal,
                       AutoSharedNormal, default_encoder)
from .gap import measure_gap
from .local_joint import LocalJoint

__all__ = ["AUTOGUIDES", "AutoAmortizedNormal", "AutoLocalGuide", "AutoPerDatapointNormal",
           "AutoSemiAmortizedNormal", "AutoSharedNormal", "LocalJoint", "default_encoder", "measure_gap"]
