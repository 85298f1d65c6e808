"""Pyro's ELBO for our model and guides equals an independent, handwritten ELBO.

The oracle below is written from the formulas, in float64, without calling the package's model,
decoder or guides:

    ELBO = log p(θ) − log q(θ) + (N / B) Σ_{n ∈ batch} [log p(x_n | z_n, θ) + log p(z_n) − log q(z_n)]
"""
import math

import pytest
import torch

import pyro
from pyro import poutine
from pyro.infer import Trace_ELBO

from amortized_pyro.guides import GUIDES, make_guide
from amortized_pyro.inference import make_elbo
from amortized_pyro.model import BayesianDecoderModel

N, B, X_DIM, Z_DIM, HIDDEN, WIDTH = 30, 6, 12, 3, 5, 4
PRIOR_SCALE, OBS_SCALE = 1.3, 0.7
LAYERS = ("w1", "b1", "w2", "b2", "w3", "b3")


def log_normal(v, m, s):
    return -0.5 * ((v - m) / s) ** 2 - torch.log(torch.as_tensor(s, dtype=torch.float64)) - 0.5 * math.log(2 * math.pi)


def leaky(h):
    return torch.where(h > 0, h, 0.2 * h)


def mlp(h, ws, bs):
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = h @ w.T + b
        if i < len(ws) - 1:
            h = leaky(h)
    return h


def variational_params(guide_name, x, idx):
    """(m, s) of every θ site, and (μ, σ) of q(z) for the batch, read from the param store by name."""
    p = {name: pyro.param(name).detach() for name in pyro.get_param_store().keys()}
    q_theta = {l: (p["decoder.%s.loc" % l], p["decoder.%s.scale" % l]) for l in LAYERS}
    if guide_name == "amortized":
        e = {k.split("$$$")[1]: v for k, v in p.items() if k.startswith("encoder$$$")}
        h = leaky(leaky(x @ e["body.0.weight"].T + e["body.0.bias"]) @ e["body.2.weight"].T + e["body.2.bias"])
        q_z = (h @ e["loc.weight"].T + e["loc.bias"], torch.exp(h @ e["log_scale.weight"].T + e["log_scale.bias"]))
    elif guide_name == "per-datapoint":
        q_z = (p["z.loc"][idx], p["z.scale"][idx])
    else:
        q_z = (p["z.loc"].expand(len(idx), -1), p["z.scale"].expand(len(idx), -1))
    return q_theta, q_z


def handwritten_elbo(x, q_theta, q_z, theta, z, scale=N / B):
    log_p_theta = sum(log_normal(theta[l], 0.0, PRIOR_SCALE).sum() for l in LAYERS)
    log_q_theta = sum(log_normal(theta[l], *q_theta[l]).sum() for l in LAYERS)
    mean = mlp(z, [theta["w1"], theta["w2"], theta["w3"]], [theta["b1"], theta["b2"], theta["b3"]])
    local = log_normal(x, mean, OBS_SCALE).sum() + log_normal(z, 0.0, 1.0).sum() - log_normal(z, *q_z).sum()
    return log_p_theta - log_q_theta + scale * local


def handwritten_draw(q_theta, q_z, scale=N / B, x=None):
    """The oracle's own reparameterized draw and its ELBO."""
    theta = {l: m + s * torch.randn_like(m) for l, (m, s) in q_theta.items()}
    z = q_z[0] + q_z[1] * torch.randn_like(q_z[0])
    return handwritten_elbo(x, q_theta, q_z, theta, z, scale)


@pytest.fixture
def setup(request):
    """Model, guide with every variational parameter moved off its initial value, and a minibatch."""
    torch.set_default_dtype(torch.float64)
    guide_name = request.param
    pyro.set_rng_seed(0)
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, PRIOR_SCALE, OBS_SCALE)
    guide = make_guide(guide_name, N, X_DIM, Z_DIM, HIDDEN, WIDTH, device="cpu")
    x_all = torch.rand(N, X_DIM)
    idx = torch.tensor([3, 17, 5, 29, 0, 11])
    x = x_all[idx]
    guide(x, idx)  # creates the parameters
    with torch.no_grad():
        for name in pyro.get_param_store().keys():
            unconstrained = pyro.get_param_store().get_param(name).unconstrained()
            unconstrained.add_(0.3 * torch.randn_like(unconstrained))
    return guide_name, model, guide, x, idx


@pytest.mark.parametrize("setup", GUIDES, indirect=True)
def test_pyro_elbo_equals_handwritten_on_the_same_draw(setup):
    guide_name, model, guide, x, idx = setup
    pyro.set_rng_seed(1)
    guide_trace = poutine.trace(guide).get_trace(x, idx)
    for site in guide_trace.nodes.values():  # a fixed draw: constants, so that torch.jit can trace the replay
        if site["type"] == "sample":
            site["value"] = site["value"].detach()
    replayed = poutine.replay(guide, trace=guide_trace)
    theta = {l: guide_trace.nodes["decoder." + l]["value"] for l in LAYERS}
    z = guide_trace.nodes["z"]["value"]
    expected = handwritten_elbo(x, *variational_params(guide_name, x, idx), theta, z)

    pyro_elbo = -Trace_ELBO().loss(model, replayed, x, idx)
    assert pyro_elbo == pytest.approx(expected.item(), rel=1e-6)
    # the training loop's sync-free estimators compute the same number on the same draw
    for jit in (False, True):
        loss = make_elbo(particles=1, jit=jit).differentiable_loss(model, replayed, x, idx)
        assert -loss.item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("setup", GUIDES, indirect=True)
def test_mean_of_pyro_elbo_draws_matches_handwritten_mean(setup):
    """Vectorized-particle ELBO estimates and the oracle's own draws agree in mean within 4 standard errors."""
    guide_name, model, guide, x, idx = setup
    q_theta, q_z = variational_params(guide_name, x, idx)
    particles, calls = 10, 300
    elbo = make_elbo(particles=particles)
    pyro.set_rng_seed(2)
    with torch.no_grad():
        pyro_draws = torch.stack([-elbo.differentiable_loss(model, guide, x, idx) for _ in range(calls)])
        oracle_draws = torch.stack([handwritten_draw(q_theta, q_z, x=x) for _ in range(particles * calls)])
        unscaled = torch.stack([handwritten_draw(q_theta, q_z, scale=1.0, x=x) for _ in range(particles * calls)])
    se = math.sqrt(pyro_draws.var().item() / calls + oracle_draws.var().item() / len(oracle_draws))
    assert abs(pyro_draws.mean().item() - oracle_draws.mean().item()) < 4 * se
    # the test has power: forgetting the N/B scaling of the local terms would be caught
    assert abs(unscaled.mean().item() - oracle_draws.mean().item()) > 8 * se
