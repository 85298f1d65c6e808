"""Site names, shapes and plates of the model and the four guides."""
import pytest
import torch

import pyro
from pyro import poutine

from amortized_pyro import AmortizedPyroError, BayesianDecoderModel, make_guide
from amortized_pyro.inference.svi import make_elbo
from amortized_pyro.models.guides import GUIDES

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
    guide = build_guide(guide_name, model, width=6)
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
    guide = build_guide(guide_name, model, width=6)
    x, idx = batch()
    elbo = make_elbo(particles=3)
    with pyro.plate("num_particles_vectorized", 3, dim=-2):  # as the estimator vectorizes its particles
        guide_trace = poutine.trace(guide).get_trace(x, idx)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(x, idx)
    model_trace.compute_log_prob()
    assert guide_trace.nodes["z"]["value"].shape == (3, B, Z_DIM)
    assert guide_trace.nodes["decoder.w1"]["value"].shape == (3, 1, HIDDEN, Z_DIM)
    assert model_trace.nodes["x"]["log_prob"].shape == (3, B)
    assert torch.isfinite(elbo.differentiable_loss(model, guide, x, idx))


def test_guides_share_one_q_theta_and_differ_in_q_z():
    x, idx = batch()
    names = {}
    for guide_name in GUIDES:
        guide = build_guide(guide_name, BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN), width=6)
        guide(x, idx)
        names[guide_name] = {k: tuple(v.shape) for k, v in guide.state_dict().items()}
        assert torch.allclose(guide.q_theta.scale, torch.tensor(0.1353352832))  # e^-2, q(θ)'s start
    size = sum(torch.Size(shape).numel() for shape in SHAPES.values())
    for params in names.values():  # q(θ): flat means and log-scales over every decoder tensor
        assert {k: v for k, v in params.items() if k.startswith("q_theta.")} == {
            "q_theta.loc": (size,), "q_theta.log_scale": (size,)}
    assert names["per-datapoint"]["q_z.loc"] == (N, Z_DIM) and names["shared"]["q_z.loc"] == (Z_DIM,)
    assert names["amortized"]["q_z.encoder.body.0.weight"] == (6, X_DIM)
    assert names["semi-amortized"] == names["amortized"]
    assert not list(pyro.get_param_store().keys())  # nothing in Pyro's global store


def test_two_guides_never_share_parameters():
    """Module-local parameters: a second guide of the same family starts from its own values, and moving
    one guide's parameters leaves the other's alone."""
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN)
    first, second = (build_guide("per-datapoint", model) for _ in range(2))
    with torch.no_grad():
        first.q_z.loc.add_(1.0)
    assert torch.equal(second.q_z.loc, torch.zeros(N, Z_DIM))
    assert not set(map(id, first.parameters())) & set(map(id, second.parameters()))


@pytest.mark.parametrize("bad", [dict(name="nope"), dict(name="amortized", width=0), dict(name="amortized", width=-3)])
def test_bad_guide_arguments_raise_clear_errors(bad):
    with pytest.raises(AmortizedPyroError):
        make_guide(bad.pop("name"), BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN), **bad)
