"""Per-datapoint diagnostics (amortized_pyro.autoguides.diagnose) on a linear-Gaussian model whose posterior is
known and mean-field: W with orthogonal columns, so Λ = I + WᵀW/σ² is diagonal and a linear encoder holds the
exact posterior. The exact guide must pass (k̂ good, ranks uniform), a guide made too narrow, shifted or too wide
must be caught, with the power measured over seeds; the shared guide is flagged; the other plate layouts and a
model with global latents go through the same path."""
import math

import numpy as np
import pytest
import torch
from torch import nn

import pyro
from pyro.infer import SVI, Trace_ELBO

from amortized_pyro.autoguides import AutoAmortizedNormal, AutoSharedNormal, measure_gap
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.autoguides.diagnose import diagnose, importance_diagnostics, local_sbc
from amortized_pyro.errors import GuideError
from amortized_pyro.local.diagnostics import grade, pareto_khat, rank_bins, ranks, uniformity
from toy_models import VAE, LinearGaussian, WithGlobals

ALPHA = 0.01  # the calibration test's level: an exact guide is flagged with probability at most 1 % per seed
SEEDS = range(10)
NULL_SEEDS = range(20)  # an exact guide flagged in at most 2 of 20 seeds: P(3 or more | 1 %) ≈ 0.001


@pytest.fixture(autouse=True)
def global_param_store():
    """The builders as stock Pyro runs them: parameters in its global param store (emptied afterwards)."""
    yield
    pyro.clear_param_store()


def orthogonal_model(n=100, seed=0, cls=LinearGaussian):
    """z_n ~ N(0, I_3), x_n ~ N(W z_n + b, 0.5² I_6), W's columns orthogonal (scales 2, 1, 0.5)."""
    model = cls(n, 6, 3, 0.5, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(6, 3, generator=generator))
    model.W = q * torch.tensor([2.0, 1.0, 0.5])
    model.x = torch.randn(n, 3, generator=generator) @ model.W.T + model.b + 0.5 * torch.randn(n, 6, generator=generator)
    return model


def exact_guide(model, x, scale=1.0, shift=0.0, style="model"):
    """A linear encoder set to the exact posterior, its σ times ``scale`` and its mean moved by ``shift`` (the exp
    link: the scale head's bias is log σ)."""
    guide = AutoAmortizedNormal(getattr(model, style), encoder=nn.Identity(), scale_link="exp")
    guide(x) if style == "model" else guide(x, 20)
    precision = model.precision()
    gain = torch.linalg.solve(precision, model.W.T) / model.sigma ** 2
    encoder = guide.q_z.encoder
    with torch.no_grad():
        encoder.loc.weight.copy_(gain)
        encoder.loc.bias.copy_(-gain @ model.b + shift)
        encoder.log_scale.weight.zero_()
        encoder.log_scale.bias.copy_((precision.diagonal().rsqrt() * scale).log())
    return guide


def test_pareto_khat_is_arviz_fit_on_known_tails():
    # weights with a Pareto tail of shape k: k̂ near k. PSIS fits the largest M = 3 √S weights; the fit's
    # standard error is about (1 + k) / √M, so the mean of 20 rows lies within 3 of its standard errors
    generator, draws, rows = np.random.default_rng(0), 4000, 20
    tail = int(3 * math.sqrt(draws))
    for k in (0.3, 0.8):
        log_w = np.log(generator.pareto(1 / k, size=(rows, draws)) + 1)  # Pareto weights of tail index 1/k
        assert abs(pareto_khat(torch.tensor(log_w)).mean() - k) < 3 * (1 + k) / math.sqrt(tail * rows)
    assert (pareto_khat(torch.full((3, 100), -2.5)) == -np.inf).all()  # constant weights: no tail


def test_rank_bins_divide_the_ranks_evenly():
    assert rank_bins(99, 200) == 20 and rank_bins(99, 60) == 10 and rank_bins(99, 4) == 1
    assert rank_bins(6, 1000) == 7
    ranks = torch.randint(0, 100, (400, 3), generator=torch.Generator().manual_seed(0))
    uniform = uniformity(ranks, 99)
    assert uniform["bins"] == 20 and uniform["p_value"] > ALPHA
    skewed = uniformity(ranks // 2, 99)  # every rank in the lower half
    assert skewed["p_value"] < 1e-10


def test_the_exact_posterior_passes():
    model = orthogonal_model()
    found = diagnose(model.model, exact_guide(model, model.x), model.x, samples=500, simulations=200, seed=0)
    assert max(found["importance"]["guide"]["khat"]) < 0.5
    assert set(found["importance"]["guide"]["grade"]) == {"good"}
    p_values = np.array([local_sbc(model.model, exact_guide(model, model.x), model.x, simulations=200,
                                   seed=s)["p_value"] for s in NULL_SEEDS])
    assert (p_values < ALPHA).sum() <= 2, p_values  # measured: 1 of 60 seeds below 0.01


@pytest.mark.parametrize("scale, shift", [(0.5, 0.0), (1.0, 0.7)])
def test_a_narrow_or_shifted_guide_is_caught_by_both(scale, shift):
    model = orthogonal_model()
    guide = exact_guide(model, model.x, scale, shift)
    khat = importance_diagnostics(model.model, guide, model.x, samples=500)["guide"]["khat"]
    assert np.median(khat) > 0.7
    detected = [local_sbc(model.model, guide, model.x, simulations=200, seed=s)["p_value"] < ALPHA for s in SEEDS]
    assert sum(detected) == len(SEEDS)  # the power at 200 simulations: every one of ten seeds


def test_a_wide_guide_passes_khat_and_fails_calibration():
    # overdispersed proposals are fine for importance sampling (k̂ low) and wrong as a posterior (ranks pile in
    # the middle): the two checks answer different questions
    model = orthogonal_model()
    guide = exact_guide(model, model.x, scale=2.0)
    assert max(importance_diagnostics(model.model, guide, model.x, samples=500)["guide"]["khat"]) < 0.5
    assert local_sbc(model.model, guide, model.x, simulations=200)["p_value"] < ALPHA


def test_the_shared_guide_is_flagged():
    model = orthogonal_model()
    pyro.set_rng_seed(0)
    guide = AutoSharedNormal(model.model)
    svi = SVI(model.model, guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    for _ in range(300):
        svi.step(model.x)
    found = diagnose(model.model, guide, model.x, samples=500, simulations=200)
    assert np.median(found["importance"]["guide"]["khat"]) > 0.7  # measured: 81 % of the datapoints above 0.7
    assert found["calibration"]["p_value"] < ALPHA


def test_other_plate_layouts_simulate_into_the_right_rows():
    model = orthogonal_model(n=40)
    batch = torch.arange(10, 30)
    # the plate subsampling all N datapoints given: the simulated batch written into the plate's rows
    guide = exact_guide(model, model.x, style="random_batches")
    found = local_sbc(model.random_batches, guide, model.x, 20, simulations=200)
    assert found["p_value"] > ALPHA
    narrow = exact_guide(model, model.x, 0.5, style="random_batches")
    assert local_sbc(model.random_batches, narrow, model.x, 20, simulations=200)["p_value"] < ALPHA
    # a minibatch with its indices
    sub = AutoAmortizedNormal(model.subsampled, encoder=nn.Identity(), scale_link="exp")  # exact_guide's link
    sub(model.x[batch], batch)
    sub.load_state_dict(exact_guide(model, model.x).state_dict())
    assert local_sbc(model.subsampled, sub, model.x[batch], batch, simulations=200)["p_value"] > ALPHA


def trained_with_globals(n, steps):
    """The model with global latents (W, σ) and an amortized guide trained ``steps`` SVI steps on all n."""
    model = orthogonal_model(n=n, cls=WithGlobals)
    pyro.set_rng_seed(0)
    guide = AutoAmortizedNormal(model.model, width=8)
    svi = SVI(model.model, guide, pyro.optim.Adam({"lr": 0.02}), Trace_ELBO())
    for _ in range(steps):
        svi.step(model.x)
    return model, guide


def test_a_model_with_globals_and_pyros_vae_run_through():
    model, guide = trained_with_globals(30, 50)
    found = diagnose(model.model, guide, model.x, samples=200, theta_draws=3, simulations=60)
    assert len(found["importance"]["guide"]["khat_per_draw"]) == 3
    assert len(found["calibration"]["ranks"]) == 60
    vae = VAE()
    x = torch.bernoulli(torch.rand(16, 12, generator=torch.Generator().manual_seed(0)))
    vae_guide = AutoAmortizedNormal(vae.model, width=8)
    vae_guide(x)
    found = diagnose(vae.model, vae_guide, x, samples=100, simulations=32)
    assert len(found["importance"]["guide"]["khat"]) == 16 and found["calibration"]["size"] == 3


def test_refusals_are_one_line():
    model = orthogonal_model(n=20)
    from amortized_pyro.autoguides import AutoPerDatapointNormal
    guide = AutoPerDatapointNormal(model.model)
    guide(model.x)
    with pytest.raises(GuideError, match="per-datapoint guide"):
        local_sbc(model.model, guide, model.x)
    assert diagnose(model.model, guide, model.x, samples=50)["calibration"] is None
    def transformed(x):  # the model observes its argument divided: no argument holds the observed values
        model.model(x / 255)
    scaled = AutoAmortizedNormal(transformed, encoder=nn.Identity(), encoder_input=0)
    scaled(model.x * 255)
    with pytest.raises(GuideError, match="^local_sbc: none of the model's arguments, given the simulated values of "
                                         "the observed site 'x', makes the model observe them .* give with_data="):
        local_sbc(transformed, scaled, model.x * 255)


def test_the_simulated_data_go_where_the_model_observes_them():
    """Two arguments of the data's size, the model observing the first: the re-trace picks it (sizes alone
    cannot), and the exact posterior passes calibration there."""
    model = orthogonal_model()

    def twice(x, y):
        model.model(x)
    guide = exact_guide(model, model.x)
    other = AutoAmortizedNormal(twice, encoder=nn.Identity())
    other(model.x, model.x.clone())
    other.load_state_dict(guide.state_dict())
    assert local_sbc(twice, other, model.x, torch.zeros_like(model.x), simulations=200)["p_value"] > ALPHA


def test_simulations_draw_theta_from_q_theta():
    # q(θ) a near point mass at the true (W, σ); the encoder exact at that θ: ranks uniform only if the simulations
    # take θ from q(θ) (from the prior, W ~ N(0, 1), the encoder would be wrong for almost every draw)
    model = orthogonal_model(n=50, cls=WithGlobals)
    guide = exact_guide(model, model.x)
    with torch.no_grad():
        guide.q_theta.locs.W = model.W.clone()
        guide.q_theta.scales.W = torch.full_like(model.W, 1e-4)
        guide.q_theta.locs.sigma = torch.tensor(math.log(model.sigma))
        guide.q_theta.scales.sigma = torch.tensor(1e-4)
    assert local_sbc(model.model, guide, model.x, simulations=200)["p_value"] > ALPHA


def test_ranks_count_the_draws_below_the_truth():
    truth = torch.tensor([[0.0, 1.0], [2.0, -1.0]])
    draws = torch.tensor([[[-1.0, 2.0], [3.0, -2.0]], [[0.5, 0.0], [1.0, -3.0]], [[-0.2, 0.9], [2.5, 0.0]]])
    brute = torch.tensor([[sum(float(draws[l, n, d]) < float(truth[n, d]) for l in range(3)) for d in range(2)]
                          for n in range(2)])
    assert torch.equal(ranks(truth, draws), brute) and brute.tolist() == [[2, 2], [1, 2]]


def test_each_datapoint_gets_its_own_khat():
    # a per-datapoint guide exact on the first half of the datapoints and far too narrow on the second
    from amortized_pyro.autoguides import AutoPerDatapointNormal
    model = orthogonal_model(n=20)
    guide = AutoPerDatapointNormal(model.model)
    guide(model.x)
    with torch.no_grad():
        guide.q_z.loc.copy_(model.posterior_mean(model.x))
        narrow = torch.tensor([1.0] * 10 + [0.3] * 10)[:, None]
        guide.q_z.log_scale.copy_((model.precision().diagonal().rsqrt() * narrow).log())
    khat = np.asarray(importance_diagnostics(model.model, guide, model.x, samples=500)["guide"]["khat"])
    assert khat[:10].max() < 0.5 < 0.7 < khat[10:].min()


def test_grades_take_the_sample_size_threshold():
    assert grade([0.3, 0.6, 0.8, -np.inf]) == ["good", "usable", "unreliable", "good"]
    assert grade([0.6], samples=100) == ["unreliable"]  # 1 − 1/log10(100) = 0.5: nothing is usable at S = 100
    assert grade([0.6], samples=10000) == ["usable"]


def test_q_star_and_refinement_fix_a_narrow_encoder():
    # σ halved on every datapoint: k̂ high; q* (the gap's optimum from it) is the exact posterior again, and 200
    # refinement steps get most of the way
    model = orthogonal_model(n=30)
    found = importance_diagnostics(model.model, exact_guide(model, model.x, scale=0.5), model.x, samples=500,
                                   refine_steps=(200,), refine_lr=0.05, q_star=True)
    assert np.median(found["guide"]["khat"]) > 0.7
    assert np.max(found["q*"]["khat"]) < 0.5 and np.median(found["refined-200"]["khat"]) < 0.5


def test_a_flow_guides_weights_go_through_its_transforms():
    # the flow's transforms start as the identity: its k̂ is the Gaussian factor's; trained, still finite per datapoint
    model = orthogonal_model(n=30)
    gaussian = exact_guide(model, model.x, scale=0.5)
    flow = AutoAmortizedNormal(model.model, encoder=nn.Identity(), flow=2, scale_link="exp")  # exact_guide's link
    flow(model.x)
    flow.q_z.load_state_dict(gaussian.q_z.state_dict())
    same = [importance_diagnostics(model.model, g, model.x, samples=300)["guide"]["khat"] for g in (gaussian, flow)]
    assert np.allclose(same[0], same[1], atol=1e-3)
    with pytest.raises(GuideError, match="Gaussian"):
        importance_diagnostics(model.model, flow, model.x, samples=300, q_star=True)
    # transforms moved off the identity: the weights' mean is the flow guide's local ELBO, as the gap measures it
    with torch.no_grad():
        for p in flow.local_flow.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    found = importance_diagnostics(model.model, flow, model.x[:10], samples=2000, theta_draws=1)["guide"]
    report = measure_gap(model.model, flow, model.x[:10], settings=GapSettings(samples=2000, ais_steps=0,
                                                                                max_steps=100, importance_samples=10))
    stderr = np.asarray(found["spread"]) / math.sqrt(2000)
    gap_elbo = np.asarray(report["per_image"]["elbo_guide"])
    assert np.all(np.abs(np.asarray(found["elbo"]) - gap_elbo) < 4 * stderr * math.sqrt(2))
    gaussian_elbo = importance_diagnostics(model.model, gaussian, model.x[:10], samples=2000)["guide"]["elbo"]
    assert np.abs(np.asarray(gaussian_elbo) - gap_elbo).max() > 10 * stderr.max()  # the transforms count


@pytest.mark.parametrize("call, refusal", [
    (lambda m, g, x: importance_diagnostics(m, g, x, samples=5), "^samples must be a whole number >= 25, got 5$"),
    (lambda m, g, x: diagnose(m, g, x, samples=5), "^samples must be a whole number >= 25, got 5$"),
    (lambda m, g, x: local_sbc(m, g, x, simulations=-1), "^simulations must be a whole number >= 1, got -1$"),
    (lambda m, g, x: local_sbc(m, g, x, draws=0), "^draws must be a whole number >= 1, got 0$"),
])
def test_settings_that_cannot_give_an_answer_are_refused_in_one_line(call, refusal):
    """samples=5 returned k̂ = ∞ for every datapoint, simulations=-1 raised torch.cat's error (issue 71)."""
    model = orthogonal_model(n=20)
    guide = exact_guide(model, model.x)
    with pytest.raises(GuideError, match=refusal):
        call(model.model, guide, model.x)
