"""Guide builders for any Pyro model: amortized, semi-amortized, iterative, per-datapoint and shared Gaussian factors
q(z_n) over the local latent sites of a named plate, Pyro's AutoNormal or AutoDelta (or a module of one's own)
over the global ones,
the amortization gap of such a guide (:func:`measure_gap`), and how fresh encoders of growing capacity close
it on the guide's frozen globals (:func:`capacity_sweep`), whether it worked datapoint by datapoint (:func:`diagnose`:
PSIS k̂ and calibration through the encoder), and its draws as ArviZ's InferenceData (:func:`to_inference_data`).

    guide = AutoAmortizedNormal(model)                  # the model's plate "data", a default MLP encoder
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())
"""
from amortized_pyro.autoguides.base import AutoLocalGuide
from amortized_pyro.autoguides.capacity import EncoderTraining, capacity_sweep, train_fresh_encoder
from amortized_pyro.autoguides.families import (AutoAmortizedNormal, AutoPerDatapointNormal, AutoSharedNormal,
                                                default_encoder)
from amortized_pyro.autoguides.refining import AUTOGUIDES, AutoIterativeAmortizedNormal, AutoSemiAmortizedNormal
from amortized_pyro.autoguides.diagnose import diagnose, importance_diagnostics, local_sbc
from amortized_pyro.autoguides.gap import GapNotMeasured, measure_gap
from amortized_pyro.autoguides.inference_data import to_inference_data
from amortized_pyro.autoguides.local_joint import LocalJoint

__all__ = ["AUTOGUIDES", "AutoAmortizedNormal", "GapNotMeasured", "AutoIterativeAmortizedNormal", "AutoLocalGuide", "AutoPerDatapointNormal",
           "AutoSemiAmortizedNormal", "AutoSharedNormal", "EncoderTraining", "LocalJoint", "capacity_sweep",
           "default_encoder", "diagnose", "importance_diagnostics", "local_sbc", "measure_gap", "to_inference_data",
           "train_fresh_encoder"]
