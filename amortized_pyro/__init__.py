"""amortized_pyro: amortized vs per-datapoint variational inference in a Bayesian deep generative model."""
from .comparison import compare
from .config import FitConfig
from .data import Data, load_data
from .errors import AmortizedPyroError
from .fitting import FitResult, fit, load_run, measure_run, resume
from .gap import GapSettings, measure
from .guides import GUIDES, make_guide
from .model import BayesianDecoderModel

__all__ = ["AmortizedPyroError", "BayesianDecoderModel", "Data", "FitConfig", "FitResult", "GUIDES", "GapSettings",
           "compare", "fit", "load_data", "load_run", "make_guide", "measure", "measure_run", "resume"]
