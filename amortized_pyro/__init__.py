"""amortized_pyro: amortized vs per-datapoint variational inference in a Bayesian deep generative model."""
from .config import FitConfig
from .data import Data, load_data
from .errors import AmortizedPyroError
from .guides import GUIDES, make_guide
from .model import BayesianDecoderModel
from .train import FitResult, fit, load_run, resume

__all__ = ["AmortizedPyroError", "BayesianDecoderModel", "Data", "FitConfig", "FitResult", "GUIDES", "fit",
           "load_data", "load_run", "make_guide", "resume"]
