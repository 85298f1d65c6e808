"""amortized_pyro: amortized vs per-datapoint variational inference in a Bayesian deep generative model."""
from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.gap.measure import measure_run
from amortized_pyro.gap.measure import measure
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.models.decoder import BayesianDecoderModel
from amortized_pyro.models.guides import GUIDES, make_guide
from amortized_pyro.runs.config import FitConfig
from amortized_pyro.runs.data import Data, load_data
from amortized_pyro.runs.fit import FitResult, fit, load_run, resume
from amortized_pyro.study.comparison import compare

__all__ = ["AmortizedPyroError", "BayesianDecoderModel", "Data", "FitConfig", "FitResult", "GUIDES", "GapSettings",
           "compare", "fit", "load_data", "load_run", "make_guide", "measure", "measure_run", "resume"]
