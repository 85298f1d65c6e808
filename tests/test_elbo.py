"""Pyro's ELBO for our model and the studies' three guides equals an independent, handwritten ELBO (the
semi-amortized guide only changes q(z)'s parameters: tests/test_training.py checks it).

The oracle (tests/oracle.py) is written from the formulas and run here in float64, without calling the
package's model, decoder or guides.
"""
import math

import pytest
import torch

import pyro
from pyro import poutine
from pyro.infer import Trace_ELBO

from amortized_pyro.models.guides import GUIDES, make_guide

from conftest import STUDY_GUIDES, build_guide
from amortized_pyro.inference.svi import make_elbo
from amortized_pyro.models.decoder import BayesianDecoderModel

from oracle import LAYERS, draw, elbo, encoder_factor, meanfield_elbo

N, B, X_DIM, Z_DIM, HIDDEN, WIDTH = 30, 6, 12, 3, 5, 4
PRIOR_SCALE, OBS_SCALE = 1.3, 0.7
# (guide, likelihood, KL warm-up scale β or None): every guide with the normal likelihood, and the Bernoulli
# likelihood and a warm-up step for one guide each
CASES = [(g, "normal", None) for g in STUDY_GUIDES] + [("amortized", "bernoulli", None), ("per-datapoint", "bernoulli", None),
                                                 ("shared", "normal", 0.3), ("amortized", "bernoulli", 0.25)]


def split_theta(flat, shapes):
    """The flat vector of q(θ)'s means or scales, cut into the six decoder tensors in the model's order."""
    sizes = [math.prod(s) for s in shapes]
    return [part.reshape(s) for part, s in zip(flat.split(sizes), shapes)]


def variational_params(guide, idx):
    """(m, s) of every θ site, and (μ, σ) of q(z) for the batch, read from the guide's state_dict by name."""
    p = {name: value.detach() for name, value in guide.state_dict().items()}
    shapes = [(HIDDEN, Z_DIM), (HIDDEN,), (HIDDEN, HIDDEN), (HIDDEN,), (X_DIM, HIDDEN), (X_DIM,)]
    locs = split_theta(p["q_theta.loc"], shapes)
    scales = split_theta(p["q_theta.log_scale"].exp(), shapes)
    q_theta = {l: (m, s) for l, m, s in zip(LAYERS, locs, scales)}
    if guide.family == "amortized":
        return q_theta, None, {k[len("q_z.encoder."):]: v for k, v in p.items() if k.startswith("q_z.encoder.")}
    if guide.family == "per-datapoint":
        return q_theta, (p["q_z.loc"][idx], p["q_z.log_scale"][idx].exp()), None
    return q_theta, (p["q_z.loc"].expand(len(idx), -1), p["q_z.log_scale"].exp().expand(len(idx), -1)), None


def oracle_q(guide, x, idx):
    q_theta, q_z, encoder = variational_params(guide, idx)
    return q_theta, (encoder_factor(x, encoder) if encoder is not None else q_z)


def handwritten_elbo(case, x, q_theta, q_z, theta, z, scale=N / B):
    _, likelihood, kl_scale = case
    return elbo(x, q_theta, q_z, theta, z, scale, PRIOR_SCALE, OBS_SCALE, likelihood, kl_scale or 1.0)


def handwritten_draw(case, q_theta, q_z, scale=N / B, x=None):
    """The oracle's own reparameterized draw and its ELBO."""
    return handwritten_elbo(case, x, q_theta, q_z, *draw(q_theta, q_z), scale)


def handwritten_draws(case, q_theta, q_z, x, count, scale=N / B):
    """``count`` independent draws of :func:`handwritten_draw`, the oracle's code run on each draw by torch.func.vmap
    (its own fresh noise per draw: ``randomness="different"``) rather than in a Python loop (40× faster)."""
    return torch.func.vmap(lambda _: handwritten_draw(case, q_theta, q_z, scale, x), randomness="different")(
        torch.arange(count))


def step_args(case, x, idx):
    """The model's and guide's arguments: (x, idx), and the warm-up scale where the case has one."""
    return (x, idx) if case[2] is None else (x, idx, torch.tensor(case[2]))


@pytest.fixture
def setup(request):
    """Model, guide with every variational parameter moved off its initial value, and a minibatch."""
    torch.set_default_dtype(torch.float64)
    case = request.param
    guide_name, likelihood, _ = case
    pyro.set_rng_seed(0)
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, PRIOR_SCALE, OBS_SCALE, likelihood)
    guide = make_guide(guide_name, model, width=WIDTH)
    x_all = torch.rand(N, X_DIM)
    if likelihood == "bernoulli":
        x_all = (x_all < 0.4).to(x_all)
    idx = torch.tensor([3, 17, 5, 29, 0, 11])
    x = x_all[idx]
    with torch.no_grad():
        for unconstrained in guide.parameters():
            unconstrained.add_(0.3 * torch.randn_like(unconstrained))
    return case, model, guide, x, idx


@pytest.mark.parametrize("setup", CASES, indirect=True, ids=str)
def test_pyro_elbo_equals_handwritten_on_the_same_draw(setup):
    case, model, guide, x, idx = setup
    args = step_args(case, x, idx)
    pyro.set_rng_seed(1)
    guide_trace = poutine.trace(guide).get_trace(*args)
    for site in guide_trace.nodes.values():  # a fixed draw: constants, so that torch.jit can trace the replay
        if site["type"] == "sample":
            site["value"] = site["value"].detach()
    replayed = poutine.replay(guide, trace=guide_trace)
    theta = {l: guide_trace.nodes["decoder." + l]["value"] for l in LAYERS}
    z = guide_trace.nodes["z"]["value"]
    expected = handwritten_elbo(case, x, *oracle_q(guide, x, idx), theta, z)

    pyro_elbo = -Trace_ELBO().loss(model, replayed, *args)
    assert pyro_elbo == pytest.approx(expected.item(), rel=1e-6)
    # the training loop's sync-free estimator computes the same number on the same draw
    loss = make_elbo(particles=1).differentiable_loss(model, replayed, *args)
    assert -loss.item() == pytest.approx(expected.item(), rel=1e-6)
    if case[2] is not None:  # the warm-up scales the KL terms only: β = 1 gives a different number
        unscaled = handwritten_elbo((case[0], case[1], None), x, *oracle_q(guide, x, idx), theta, z)
        assert abs(unscaled.item() - expected.item()) > 1e-3 * abs(expected.item())


@pytest.mark.parametrize("setup", [case for case in CASES if case[2] is not None], indirect=True, ids=str)
def test_the_warm_up_holds_without_pyros_validation(setup):
    """The studies train with Pyro's validation off, their guides built by a first call without a warm-up
    (make_guide's): the guide's sites still take the warm-up's β, the oracle's ELBO on the same draw."""
    with pyro.validation_enabled(False):
        test_pyro_elbo_equals_handwritten_on_the_same_draw(setup)


@pytest.mark.parametrize("setup", CASES, indirect=True, ids=str)
def test_meanfield_estimator_equals_the_closed_form_kl_on_the_same_draw(setup):
    """--estimator meanfield: the likelihood at the draw minus the closed-form KL of every θ and z coordinate,
    scaled by N/B (z) and by the warm-up's β; a different number from Trace_ELBO's at the same draw."""
    case, model, guide, x, idx = setup
    args = step_args(case, x, idx)
    pyro.set_rng_seed(1)
    guide_trace = poutine.trace(guide).get_trace(*args)
    replayed = poutine.replay(guide, trace=guide_trace)
    theta = {l: guide_trace.nodes["decoder." + l]["value"] for l in LAYERS}
    z = guide_trace.nodes["z"]["value"]
    q_theta, q_z = oracle_q(guide, x, idx)
    expected = meanfield_elbo(x, q_theta, q_z, theta, z, N / B, PRIOR_SCALE, OBS_SCALE, case[1], case[2] or 1.0)
    loss = make_elbo(1, "meanfield").differentiable_loss(model, replayed, *args)
    assert -loss.item() == pytest.approx(expected.item(), rel=1e-6)
    sampled = make_elbo(1, "trace").differentiable_loss(model, replayed, *args)  # power: would fail the check
    assert -sampled.item() != pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("setup", CASES, indirect=True, ids=str)
def test_mean_of_pyro_elbo_draws_matches_handwritten_mean(setup):
    """Vectorized-particle ELBO estimates and the oracle's own draws agree in mean within 4 standard errors."""
    case, model, guide, x, idx = setup
    args = step_args(case, x, idx)
    q_theta, q_z = oracle_q(guide, x, idx)
    # 3,000 draws each side: Pyro's as 30 calls of 100 vectorized particles (not 300 of 10: the same estimator, the
    # same standard error of the mean, an eighth of the time)
    particles, calls = 100, 30
    elbo = make_elbo(particles=particles)
    pyro.set_rng_seed(2)
    with torch.no_grad():
        pyro_draws = torch.stack([-elbo.differentiable_loss(model, guide, *args) for _ in range(calls)])
        oracle_draws = handwritten_draws(case, q_theta, q_z, x, particles * calls)
        unscaled = handwritten_draws(case, q_theta, q_z, x, particles * calls, scale=1.0)
    se = math.sqrt(pyro_draws.var().item() / calls + oracle_draws.var().item() / len(oracle_draws))
    assert abs(pyro_draws.mean().item() - oracle_draws.mean().item()) < 4 * se
    # the test has power: forgetting the N/B scaling of the local terms would be caught
    assert abs(unscaled.mean().item() - oracle_draws.mean().item()) > 8 * se


@pytest.mark.parametrize("particles", [1, 3])
@pytest.mark.parametrize("guide_name", GUIDES)
def test_sync_free_estimator_repeats_pyros_trace_elbo_draw_for_draw(guide_name, particles):
    """The training loop's estimator (DeviceTrace_ELBO, written with poutine.trace/replay) and Pyro's own
    Trace_ELBO give the same loss and the same gradients for every parameter on the same draws, vectorized
    particles included, on minibatches of two sizes."""
    pyro.set_rng_seed(0)
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, PRIOR_SCALE, OBS_SCALE)
    guide = build_guide(guide_name, model, width=WIDTH)
    x_all = torch.rand(N, X_DIM)
    options = dict(num_particles=particles, vectorize_particles=particles > 1, max_plate_nesting=1)
    params = list(guide.parameters())
    for size in (B, 4):
        idx = torch.randperm(N)[:size]
        results = []
        for estimator in (make_elbo(particles), Trace_ELBO(**options)):
            pyro.set_rng_seed(7)
            loss = estimator(model, guide)(x_all[idx], idx)
            results.append((loss.item(), torch.autograd.grad(loss, params)))
        (loss_ours, grads_ours), (loss_pyro, grads_pyro) = results
        assert loss_ours == pytest.approx(loss_pyro, rel=1e-6)
        for g_ours, g_pyro in zip(grads_ours, grads_pyro):
            assert torch.allclose(g_ours, g_pyro, rtol=1e-5, atol=1e-6)


def test_a_draw_scored_by_its_noise_has_the_densitys_value_and_gradient():
    """DrawnNormal (q's Normal for the ELBO, issue 70) scores its own draw as −½ε² − log s − ½ log 2π: the value
    of torch's Normal density at that draw, and the same gradient in (m, log s) through the draw and the density
    together; another value is scored by torch's formula."""
    from amortized_pyro.autoguides.objectives import DrawnNormal

    results = []
    for cls in (DrawnNormal, pyro.distributions.Normal):
        loc = torch.randn(50, generator=torch.Generator().manual_seed(0), dtype=torch.float64).requires_grad_()
        log_scale = (0.3 * torch.randn(50, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
                     ).requires_grad_()
        torch.manual_seed(2)
        q = cls(loc, log_scale.exp())
        value = q.rsample()
        log_q = q.log_prob(value).sum()
        (torch.sin(value).sum() - log_q).backward()  # a log p of the draw beside it, as an ELBO has
        results.append((value.detach(), log_q.detach(), loc.grad, log_scale.grad))
    for ours, torchs in zip(*results):
        torch.testing.assert_close(ours, torchs, rtol=1e-12, atol=1e-12)
    other = torch.zeros(50, dtype=torch.float64)
    q = DrawnNormal(torch.ones(50, dtype=torch.float64), torch.full((50,), 2.0, dtype=torch.float64))
    q.rsample()
    torch.testing.assert_close(q.log_prob(other), torch.distributions.Normal(1.0, 2.0).log_prob(other))
