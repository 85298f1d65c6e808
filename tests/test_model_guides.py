"""Site names, shapes and plates of the model and the four guides."""
import pytest
import torch

import pyro
from pyro import poutine

from amortized_pyro import AmortizedPyroError, BayesianDecoderModel, make_guide
from amortized_pyro.guides import GUIDES
from amortized_pyro.svi import make_elbo

from conftest import build_guide

N, B, X_DIM, Z_DIM, HIDDEN = 50, 8, 20, 4, 7
SHAPES = {"decoder.w1": (HIDDEN, Z_DIM), "decoder.b1": (HIDDEN,), "decoder.w2": (HIDDEN, HIDDEN),
          "decoder.b2": (HIDDEN,), "decoder.w3": (X_DIM, HIDDEN), "decoder.b3": (X_DIM,)}


def batch():
    idx = torch.randperm(N)[:B]
    return torch.rand(B, X_DIM), idx


@pytest.mark.parametrize("guide_name", GUIDES)
def test_sites_shapes_and_subsampled_plate(guide_name):
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN)
    guide = build_guide(guide_name, model, N, X_DIM, Z_DIM, HIDDEN, width=6)
    x, idx = batch()
    guide_trace = poutine.trace(guide).get_trace(x, idx)
    model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(x, idx)
    for trace in (model_trace, guide_trace):
        trace.compute_log_prob()
        for name, shape in SHAPES.items():
            site = trace.nodes[name]
            assert site["value"].shape == shape and site["fn"].event_shape == shape
            assert site["cond_indep_stack"] == () and site["scale"] == 1.0  # θ counted once
        z = trace.nodes["z"]
        assert z["value"].shape == (B, Z_DIM) and z["fn"].event_shape == (Z_DIM,)
        (frame,) = z["cond_indep_stack"]
        assert (frame.name, frame.full_size, frame.size, frame.dim) == ("data", N, B, -1)
        assert z["scale"] == pytest.approx(N / B)
        assert torch.equal(trace.nodes["data"]["value"], idx)
    assert model_trace.nodes["x"]["is_observed"] and model_trace.nodes["x"]["value"].shape == (B, X_DIM)
    assert model_trace.nodes["x"]["scale"] == pytest.approx(N / B)


@pytest.mark.parametrize("guide_name", GUIDES)
def test_vectorized_particles_give_particle_batches(guide_name):
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN)
    guide = build_guide(guide_name, model, N, X_DIM, Z_DIM, HIDDEN, width=6)
    x, idx = batch()
    elbo = make_elbo(particles=3)
    model_trace, guide_trace = next(elbo._get_traces(model, guide, (x, idx), {}))
    assert guide_trace.nodes["z"]["value"].shape == (3, B, Z_DIM)
    assert guide_trace.nodes["decoder.w1"]["value"].shape == (3, 1, HIDDEN, Z_DIM)
    assert model_trace.nodes["x"]["log_prob"].shape == (3, B)
    assert torch.isfinite(elbo.differentiable_loss(model, guide, x, idx))


def test_guides_share_one_q_theta_and_differ_in_q_z():
    x, idx = batch()
    names = {}
    for guide_name in GUIDES:
        pyro.clear_param_store()
        build_guide(guide_name, BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN), N, X_DIM, Z_DIM, HIDDEN, width=6)(x, idx)
        store = pyro.get_param_store()
        names[guide_name] = {k: tuple(store[k].shape) for k in store.keys()}
    theta = {"%s.%s" % (site, part): shape for site, shape in SHAPES.items() for part in ("loc", "scale")}
    for params in names.values():
        assert {k: v for k, v in params.items() if k.startswith("decoder.")} == theta
    assert names["per-datapoint"]["z.loc"] == (N, Z_DIM) and names["shared"]["z.loc"] == (Z_DIM,)
    assert names["amortized"]["encoder$$$body.0.weight"] == (6, X_DIM) and names["semi-amortized"] == names["amortized"]
    assert pyro.get_param_store()["decoder.w1.scale"].allclose(torch.tensor(0.1353352832))  # e^-2


@pytest.mark.parametrize("bad", [dict(name="nope"), dict(name="amortized", width=0), dict(name="amortized", width=-3)])
def test_bad_guide_arguments_raise_clear_errors(bad):
    with pytest.raises(AmortizedPyroError):
        make_guide(bad.pop("name"), N, X_DIM, Z_DIM, HIDDEN, **bad)
