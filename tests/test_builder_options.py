"""A builder's options of the wrong kind, and a call with no datapoints, are refused in one line at construction
or at the call (issue 71: a string where a module was meant, NaN where a count was, and a plate of size 0 raised
torch's, Python's or Pyro's own errors before)."""
import math

import pytest
import torch

import pyro
import pyro.distributions as dist

from amortized_pyro.autoguides import (AutoAmortizedNormal, AutoIterativeAmortizedNormal, AutoPerDatapointNormal,
                                       AutoSemiAmortizedNormal, AutoSharedNormal)
from amortized_pyro.errors import GuideError


@pytest.fixture(autouse=True)
def global_param_store():
    yield
    pyro.clear_param_store()


def model(x):
    with pyro.plate("data", len(x)):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        pyro.sample("x", dist.Normal(z.sum(-1, keepdim=True), 1.0).to_event(1), obs=x)


BAD = [
    (AutoAmortizedNormal, {"encoder": "mlp"}, "^encoder must be a torch.nn.Module"),
    (AutoAmortizedNormal, {"encoder_input": "nope"}, "^encoder_input must be the position"),
    (AutoAmortizedNormal, {"encoder_input": True}, "^encoder_input must be the position"),
    (AutoAmortizedNormal, {"flow": "two"}, "^flow must be a whole number >= 0, got 'two'$"),
    (AutoAmortizedNormal, {"flow": 1.5}, "^flow must be a whole number"),
    (AutoAmortizedNormal, {"width": 0}, "^width must be a whole number >= 1, got 0$"),
    (AutoAmortizedNormal, {"layers": -1}, "^layers must be a whole number >= 0"),
    (AutoAmortizedNormal, {"head_init": "ones"}, "^head_init must be one of centred, zero, torch"),
    (AutoSemiAmortizedNormal, {"scale_link": "relu"}, "^scale_link must be one of exp, softplus, got 'relu'$"),
    (AutoSharedNormal, {"init_scale": math.nan}, "^init_scale must be a finite number > 0, got nan$"),
    (AutoPerDatapointNormal, {"init_scale": -1.0}, "^init_scale must be a finite number > 0"),
    (AutoSemiAmortizedNormal, {"steps": math.nan}, "^steps must be a whole number >= 0, got nan$"),
    (AutoSemiAmortizedNormal, {"steps": 2.0}, "^steps must be a whole number"),
    (AutoSemiAmortizedNormal, {"lr": math.inf}, "^lr must be a finite number > 0"),
    (AutoSemiAmortizedNormal, {"share": 1.5}, "^share must be a finite number > 0 and <= 1, got 1.5$"),
    (AutoIterativeAmortizedNormal, {"iterations": "5"}, "^iterations must be a whole number >= 0"),
    (AutoIterativeAmortizedNormal, {"update_width": 0}, "^update_width must be a whole number >= 1"),
]


@pytest.mark.parametrize("builder, options, refusal", BAD, ids=[str(o) for _, o, _ in BAD])
def test_an_option_of_the_wrong_kind_is_refused_in_one_line(builder, options, refusal):
    with pytest.raises(GuideError, match=refusal) as raised:
        builder(model, **options)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("builder", [AutoAmortizedNormal, AutoSharedNormal])
def test_a_call_of_no_datapoints_is_refused_in_one_line(builder):
    """At the first call (the prototype's model run) and at a later one (the plate's read)."""
    refusal = "^the model made a plate of size 0 in this call .* no datapoint to serve$"
    with pytest.raises(GuideError, match=refusal):
        builder(model)(torch.randn(0, 1))
    guide = builder(model)
    guide(torch.randn(5, 1))
    with pytest.raises(GuideError, match=refusal):
        guide(torch.randn(0, 1))
