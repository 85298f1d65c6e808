"""Iterative amortized inference (Marino et al. 2018), the guide --guide iterative builds: with T = 0 it is A-VI,
number for number; its ELBO on one draw equals the oracle's, whose iterations are written here from the
formulas (the local ELBO's gradient by autograd, Andrychowicz et al.'s gradient encoding, the gated update); its
training objective adds every iteration's local ELBO for their gradient alone; and it trains and is measured."""
import math

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO

from amortized_pyro.autoguides import AutoAmortizedNormal, AutoIterativeAmortizedNormal
from amortized_pyro.models.decoder import BayesianDecoderModel
from amortized_pyro.models.guides import make_guide

from oracle import LAYERS, elbo, encoder_factor, leaky, log_normal, mlp_forward

N, B, X_DIM, Z_DIM, HIDDEN, WIDTH, T = 30, 6, 12, 3, 5, 4, 2
PRIOR_SCALE, OBS_SCALE = 1.3, 0.7


def toy_model(x):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, 4), 1.0).to_event(2))
    with pyro.plate("data", x.shape[0], subsample_size=5) as idx:
        z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z @ w, 0.5).to_event(1), obs=x[idx])


@pytest.fixture
def global_param_store():
    """Pyro's defaults: the builders' parameters in its global param store (emptied again afterwards)."""
    yield
    pyro.clear_param_store()


def test_zero_iterations_is_the_amortized_guide_step_for_step(global_param_store):
    """Built from the same seed, T = 0 and A-VI hold the same encoder, draw the same values and take the same
    SVI steps (the update network's initial weights leave the random stream alone)."""
    x = torch.randn(20, 4, generator=torch.Generator().manual_seed(0))
    losses = {}
    for name, build in (("a", lambda: AutoAmortizedNormal(toy_model, width=8)),
                        ("t0", lambda: AutoIterativeAmortizedNormal(toy_model, iterations=0, width=8))):
        pyro.clear_param_store()
        pyro.set_rng_seed(3)
        guide = build()
        svi = SVI(toy_model, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
        losses[name] = [svi.step(x) for _ in range(5)]
    assert losses["a"] == losses["t0"]
    pyro.clear_param_store()
    pyro.set_rng_seed(3)
    guide = AutoIterativeAmortizedNormal(toy_model, iterations=2, width=8)
    svi = SVI(toy_model, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
    assert [svi.step(x) for _ in range(5)] != losses["a"]  # power: iterating changes the steps


def encode(g, p=10.0):
    """Andrychowicz et al. (2016): (log|g| / p, sign g) where |g| >= e^-p, else (-1, e^p g)."""
    cut = math.exp(-p)
    magnitude = torch.where(g.abs() >= cut, torch.log(g.abs().clamp_min(cut)) / p, torch.full_like(g, -1.0))
    return torch.cat([magnitude, torch.where(g.abs() >= cut, torch.sign(g), g * math.exp(p))], -1)


def oracle_iterations(x, theta, encoder, update, generator):
    """The oracle's λ_T and Σ_t L_n(λ_t), from the formulas: L_n at one z draw, its gradient by autograd, the
    gated update λ ← γ λ + (1 − γ) Δ with λ_t stopped, log σ clamped to [-7.5, 2.5]."""
    h = leaky(mlp_forward(x, [encoder["body.0.weight"], encoder["body.2.weight"]], [encoder["body.0.bias"],
                                                                           encoder["body.2.bias"]]))
    loc, scale = encoder_factor(x, encoder)
    log_scale, total = scale.log(), 0
    ws = [update["update.%d.weight" % i] for i in (0, 2, 4)]
    bs = [update["update.%d.bias" % i] for i in (0, 2, 4)]
    for _ in range(T):
        eps = torch.randn((1,) + loc.shape, generator=generator, dtype=loc.dtype)
        z = loc + log_scale.exp() * eps
        out = mlp_forward(z, [theta["w1"], theta["w2"], theta["w3"]], [theta["b1"], theta["b2"], theta["b3"]])
        local = (log_normal(x, out, OBS_SCALE).sum(-1) + log_normal(z, 0.0, 1.0).sum(-1)
                 - log_normal(z, loc, log_scale.exp()).sum(-1))[0]
        grads = torch.autograd.grad(local.sum(), (loc, log_scale), retain_graph=True, create_graph=False)
        total = total + local
        hidden = torch.cat([h, loc.detach(), log_scale.detach(), encode(grads[0]), encode(grads[1])], -1)
        for w, b in zip(ws[:-1], bs[:-1]):
            hidden = torch.nn.functional.elu(hidden @ w.T + b)
        d_loc, d_log_scale, g_loc, g_log_scale = (hidden @ ws[-1].T + bs[-1]).chunk(4, -1)
        loc = torch.sigmoid(g_loc) * loc.detach() + (1 - torch.sigmoid(g_loc)) * d_loc
        log_scale = (torch.sigmoid(g_log_scale) * log_scale.detach()
                     + (1 - torch.sigmoid(g_log_scale)) * d_log_scale).clamp(-7.5, 2.5)
    return loc, log_scale.exp(), total


def test_elbo_and_its_gradient_equal_the_oracles_on_the_same_draw():
    """On one draw of θ and z and one generator for the iterations' z: Pyro's ELBO equals the oracle's ELBO at
    λ_T (the iterations' objectives add nothing to the value), and the gradient of the training loss with
    respect to the update network equals that of the oracle's ELBO plus N/B Σ_t Σ_n L_n(λ_t)."""
    torch.set_default_dtype(torch.float64)
    pyro.set_rng_seed(0)
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, PRIOR_SCALE, OBS_SCALE, "normal")
    guide = make_guide("iterative", model, width=WIDTH, iterations=T)
    x_all = torch.rand(N, X_DIM)
    idx = torch.tensor([3, 17, 5, 29, 0, 11])
    x = x_all[idx]
    with torch.no_grad():
        for p in guide.parameters():
            p.add_(0.3 * torch.randn_like(p))
    with guide.refinement_draws(torch.Generator().manual_seed(5)):
        guide_trace = poutine.trace(guide).get_trace(x, idx)
    for site in guide_trace.nodes.values():
        if site["type"] == "sample":
            site["value"] = site["value"].detach()
    theta = {l: guide_trace.nodes["decoder." + l]["value"] for l in LAYERS}
    z = guide_trace.nodes["z"]["value"]
    with guide.refinement_draws(torch.Generator().manual_seed(5)):
        loss = Trace_ELBO().differentiable_loss(model, poutine.replay(guide, trace=guide_trace), x, idx)
    update = [p for name, p in guide.named_parameters() if name.startswith("q_z.update.")]
    pyro_grads = torch.autograd.grad(loss, update)

    state = dict(guide.named_parameters())
    q_theta = {l: (m, s) for l, m, s in zip(LAYERS, *(split(state[name], model) for name in
                                                       ("q_theta.loc", "q_theta.log_scale")))}
    q_theta = {l: (m, s.exp()) for l, (m, s) in q_theta.items()}
    encoder = {k[len("q_z.encoder."):]: v for k, v in state.items() if k.startswith("q_z.encoder.")}
    nets = {k[len("q_z."):]: v for k, v in state.items() if k.startswith("q_z.update.")}
    loc, scale, total = oracle_iterations(x, theta, encoder, nets, torch.Generator().manual_seed(5))
    expected = elbo(x, q_theta, (loc, scale), theta, z, N / B, PRIOR_SCALE, OBS_SCALE)
    assert -loss.item() == pytest.approx(expected.item(), rel=1e-9)
    without = torch.autograd.grad(-expected, update, retain_graph=True)  # power: the terms matter
    oracle_grads = torch.autograd.grad(-(expected + N / B * total.sum()), update)
    for mine, theirs in zip(pyro_grads, oracle_grads):
        assert torch.allclose(mine, theirs, rtol=1e-7, atol=1e-9 * theirs.abs().max().item())  # sums reordered
    assert not all(torch.allclose(a, b, rtol=1e-3) for a, b in zip(without, pyro_grads))


def split(flat, model):
    """q(θ)'s flat vector cut into the decoder's tensors, in the model's order."""
    shapes = list(model.shapes.values())
    return [part.reshape(s) for part, s in zip(flat.split([math.prod(s) for s in shapes]), shapes)]


def test_iterations_raise_the_local_elbo_of_a_trained_guide(tmp_path):
    """A short iterative run on the shipped sample: `fit --guide iterative` trains, its label says T, and at
    evaluation the iterated factor's local ELBO on its training images beats the encoder's own (T = 0)."""
    from amortized_pyro import FitConfig, fit
    from amortized_pyro.runs.data import load_data
    from amortized_pyro.inference.evaluation import factor
    from amortized_pyro.local.estimates import local_elbo
    from amortized_pyro.models.guides import config_label

    config = FitConfig(guide="iterative", iterations=3, width=32, dataset="mnist-sample", n_obs=200, n_test=50,
                       epochs=30, batch_size=50, lr=3e-3, obs_scale=0.1, init_scale=1e-3, eval_every=30)
    data = load_data("mnist-sample", n_obs=200, n_test=50, log=lambda *a: None)
    result = fit(config, data=data, out=tmp_path / "run", progress=False, log=lambda *a: None)
    assert config_label(result.config) == "IA-VI k=32 T=3"
    x, idx = data.train[:50], torch.arange(50)
    theta = result.guide.global_mean()
    draws = torch.Generator().manual_seed(1)
    with torch.no_grad():
        iterated = factor(result.guide, x, idx)
        result.guide.q_z.iterations = 0
        start = factor(result.guide, x, idx)
    values = [local_elbo(result.model.local_log_joint, x, loc, scale, _one(theta, draws), 200) for loc, scale in
              (start, iterated)]
    difference = values[1] - values[0]
    stderr = difference.std() / math.sqrt(len(difference))
    assert difference.mean() > 3 * stderr, (difference.mean(), stderr)


def _one(theta, generator):
    from amortized_pyro.local.draws import Draws
    return Draws.of([theta], generator).at("score")
