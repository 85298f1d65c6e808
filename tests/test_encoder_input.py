"""The encoder's input is read from what the model observes in its plate, once, at the first call (issue 68, item 5):
the argument the plate observes, however the arguments are ordered or passed; its rows picked as the model picks them
(a permuted plate over every datapoint included); a model that observes no argument as it is refused in one line."""
import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import Trace_ELBO

from amortized_pyro.autoguides import AutoAmortizedNormal, AutoSemiAmortizedNormal
from amortized_pyro.autoguides import encoder_input as encoder_input_module
from amortized_pyro.errors import GuideError

N, DX, DC, DZ = 12, 3, 5, 2
X = torch.randn(N, DX, generator=torch.Generator().manual_seed(0))
COVARIATES = torch.randn(N, DC, generator=torch.Generator().manual_seed(1))
PERMUTED = torch.randperm(N, generator=torch.Generator().manual_seed(2))


@pytest.fixture(autouse=True)
def clean_store():
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


def covariates_first(covariates, x):
    """Per-datapoint covariates first (not observed, N rows like x), the observations second."""
    with pyro.plate("data", len(x)):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        mean = z.sum(-1, keepdim=True) + covariates[..., :1]
        pyro.sample("x", dist.Normal(mean, 1.0).expand([len(x), DX]).to_event(1), obs=x)


def scaled_pixels(x):
    """Observes a transform of its argument, as a model of raw pixels does (``obs=x / 255``)."""
    with pyro.plate("data", len(x)):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        pyro.sample("x", dist.Normal(z.sum(-1, keepdim=True), 1.0).expand([len(x), DX]).to_event(1), obs=x / 255)


def permuted_plate(x):
    """All N datapoints in another order than the data's rows: the model picks x's rows by its plate's indices."""
    with pyro.plate("data", N, subsample=PERMUTED) as idx:
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        pyro.sample("x", dist.Normal(z.sum(-1, keepdim=True), 1.0).expand([N, DX]).to_event(1), obs=x[idx])


def keyword_data(*, x):
    with pyro.plate("data", len(x)):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        pyro.sample("x", dist.Normal(z.sum(-1, keepdim=True), 1.0).expand([len(x), DX]).to_event(1), obs=x)


@pytest.mark.parametrize("builder", [AutoAmortizedNormal, AutoSemiAmortizedNormal])
def test_the_default_reads_the_argument_the_plate_observes_not_the_first(builder):
    """Covariates of N rows come first: sizes alone would have fed them to the encoder."""
    guide = builder(covariates_first, width=4)
    guide(COVARIATES, X)
    assert guide._input.position == 1
    torch.testing.assert_close(guide.encoder_data(torch.arange(N), (COVARIATES, X), {}), X)


def test_the_argument_given_as_a_keyword_is_found():
    guide = AutoAmortizedNormal(keyword_data, width=4)
    guide(x=X)
    assert guide._input.position == "x"
    torch.testing.assert_close(guide.encoder_data(torch.arange(N), (), {"x": X}), X)


def test_a_model_observing_a_transform_is_refused_in_one_line_and_served_when_told():
    with pytest.raises(GuideError, match="^no argument of the model is what the plate's sites observe .* give "
                                         "encoder_input= the position") as refused:
        AutoAmortizedNormal(scaled_pixels, width=4)(X)
    assert "\n" not in str(refused.value).split("\nTrace Shapes")[0]
    guide = AutoAmortizedNormal(scaled_pixels, width=4, encoder_input=0)
    guide(X)
    assert torch.isfinite(torch.tensor(Trace_ELBO().loss(scaled_pixels, guide, X)))


def test_a_plate_over_every_datapoint_in_another_order_gets_the_rows_the_model_observes():
    """Rows = batch = N, the plate permuted: the model's observation says the rows are picked by its indices (by
    sizes alone both readings were possible, and the guide asked for a function)."""
    guide = AutoAmortizedNormal(permuted_plate, width=4)
    guide(X)
    assert guide._input.reading == "indexed"
    torch.testing.assert_close(guide.encoder_data(PERMUTED, (X,), {}), X[PERMUTED])


def test_the_reading_is_made_once_at_the_first_call(monkeypatch):
    """Later calls use the first call's reading: no re-read (and no host sync comparing indices) per call."""
    guide = AutoAmortizedNormal(covariates_first, width=4)
    guide(COVARIATES, X)

    def again(*args, **kwargs):
        raise AssertionError("read again")
    monkeypatch.setattr(encoder_input_module.EncoderInput, "read", classmethod(again))
    monkeypatch.setattr(encoder_input_module, "_observed_as", again)
    for _ in range(2):
        guide(COVARIATES, X)
    assert guide._input.position == 1


def test_new_data_of_another_size_keeps_the_reading():
    guide = AutoAmortizedNormal(covariates_first, width=4)
    guide(COVARIATES, X)
    more = torch.randn(2 * N, DX)
    assert guide(torch.randn(2 * N, DC), more)["z"].shape == (2 * N, DZ)


def data_as_subsample(x):
    """pyro.contrib.cevae's plate: ``subsample=`` the data itself (a float tensor, [B, D]), not indices."""
    with pyro.plate("data", 50, subsample=x):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        pyro.sample("x", dist.Normal(z.sum(-1, keepdim=True), 1.0).expand([len(x), DX]).to_event(1), obs=x)


def test_a_plate_given_the_data_as_its_subsample_reads_its_rows():
    """The batch is the subsample's rows (10 of 3 features), not its last dimension (read as 3 datapoints, the
    guide stopped with a wrong line; with as many rows as features it trained silently on float 'indices')."""
    guide = AutoAmortizedNormal(data_as_subsample, width=4)
    guide(X[:10])
    assert guide._input.reading == "batch"
    torch.testing.assert_close(guide.encoder_data(X[:10], (X[:10],), {}), X[:10])
    assert torch.isfinite(torch.tensor(Trace_ELBO().loss(data_as_subsample, guide, X[:10])))


def test_a_per_datapoint_guide_on_such_a_plate_is_refused_in_one_line():
    from amortized_pyro.autoguides import AutoPerDatapointNormal
    with pytest.raises(GuideError, match="^a per-datapoint guide picks its factors by the plate's indices; the plate "
                                         "'data' is given subsample= a tensor of torch.float32 values") as refused:
        AutoPerDatapointNormal(data_as_subsample)(X[:10])
    assert "\n" not in str(refused.value).split("\nTrace Shapes")[0]
