"""SA-VI refining only the worst share of each batch (amortized_pyro.local.partial): the rows chosen are those of
highest score, the others keep the encoder's factor exactly, and the two ways of running the log joint on the
chosen rows (the data's rows of a hand-written one; the model's whole batch with the other rows held) agree."""
import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import SVI, Trace_ELBO

from amortized_pyro.autoguides import AutoSemiAmortizedNormal
from amortized_pyro.autoguides.masking import MaskedJoint
from amortized_pyro.errors import GuideError
from amortized_pyro.local.estimates import log_weights
from amortized_pyro.local.partial import Rows, score_of, worst_rows
from test_diagnose import orthogonal_model
from toy_models import WithGlobals

SHARE = 0.25


@pytest.fixture(autouse=True)
def global_param_store():
    yield
    pyro.clear_param_store()


def by_hand(model):
    """The linear-Gaussian model's local log joint (data [B, dx], z [..., B, dz]) → [..., B]."""
    def log_joint(x, z, theta):
        return (dist.Normal(z @ model.W.T + model.b, model.sigma).log_prob(x).sum(-1)
                + dist.Normal(0.0, 1.0).log_prob(z).sum(-1))
    return log_joint


def by_hand_guide(n, steps):
    """A linear-Gaussian model of ``n`` datapoints and an SA-VI guide refining its worst quarter on the hand-written
    log joint, called once."""
    model = orthogonal_model(n=n)
    pyro.set_rng_seed(0)
    guide = AutoSemiAmortizedNormal(model.model, steps=steps, lr=0.05, share=SHARE, width=8,
                                    local_log_joint=by_hand(model))
    guide(model.x)
    return model, guide


def factors(guide, x, seed=0):
    with torch.no_grad(), guide.refinement_draws(torch.Generator().manual_seed(seed)):
        return guide.local_factor(torch.arange(len(x)), (x,), {}, {})


def test_the_worst_rows_are_refined_and_the_rest_keep_the_encoders_factor():
    model, guide = by_hand_guide(40, 10)
    loc, scale = factors(guide, model.x)
    with torch.no_grad():
        loc0, scale0 = guide.q_z.encoder(model.x)
        # the same score draws as the factor's (the refinement generator's first draws), by hand
        log_w = log_weights(by_hand(model), model.x, loc0, scale0, {}, 8, torch.Generator().manual_seed(0))
    rows = torch.topk(score_of(log_w, "spread"), 10).indices.sort().values
    assert torch.equal(rows, worst_rows(by_hand(model), model.x, loc0, scale0, {}, SHARE, "spread", 8,
                                        torch.Generator().manual_seed(0)))
    # σ goes through log and back (log σ's steps): a row kept at the encoder's factor keeps it to float rounding
    moved = (loc != loc0).any(-1) | ~torch.isclose(scale, scale0, rtol=1e-6, atol=0).all(-1)
    assert torch.equal(moved.nonzero().flatten(), rows)  # exactly the chosen ten moved


def test_rows_of_the_data_and_the_whole_batch_agree():
    model = orthogonal_model(n=40)
    pyro.set_rng_seed(0)
    own = AutoSemiAmortizedNormal(model.model, steps=10, lr=0.05, share=SHARE, width=8,
                                  local_log_joint=by_hand(model))
    own(model.x)
    traced = AutoSemiAmortizedNormal(model.model, steps=10, lr=0.05, share=SHARE, width=8)  # read off the trace
    traced(model.x)
    traced.load_state_dict(own.state_dict())
    for a, b in zip(factors(own, model.x), factors(traced, model.x)):
        assert torch.allclose(a, b, atol=1e-5)
    with torch.no_grad():  # the wrapper by itself: the rows' terms of the whole batch's log joint
        z, rows = torch.randn(3, 40, 3), torch.tensor([2, 7, 30])
        base = torch.zeros(40, 3)
        full = base.expand(3, 40, 3).clone()
        full[:, rows] = z[:, rows]
        assert torch.allclose(Rows(by_hand(model), rows, base, model.x)(model.x[rows], z[:, rows], {}),
                              by_hand(model)(model.x, full, {})[:, rows])
        # a joint that reads the data and masks coordinates per row (a masked model's): the whole batch's rows
        masked = MaskedJoint(by_hand(model), torch.rand(40, 3, generator=torch.Generator().manual_seed(1)) > 0.3)
        assert torch.allclose(Rows(masked, rows, base, model.x)(model.x[rows], z[:, rows], {}),
                              masked(model.x, full, {})[:, rows])


def test_training_with_a_share_and_its_refusals():
    model = orthogonal_model(n=40)
    pyro.set_rng_seed(0)
    guide = AutoSemiAmortizedNormal(model.model, steps=3, share=0.5, score="elbo", width=8)
    svi = SVI(model.model, guide, pyro.optim.Adam({"lr": 0.02}), Trace_ELBO())
    losses = [svi.step(model.x) for _ in range(60)]
    assert sum(losses[-10:]) < sum(losses[:10])
    for bad in (dict(share=0.0), dict(share=1.5), dict(score="gap"), dict(score_draws=1)):
        with pytest.raises(GuideError, match="share"):
            AutoSemiAmortizedNormal(model.model, **bad)
    model = orthogonal_model(n=40, cls=WithGlobals)  # θ's particles: one refinement per particle
    vectorized = SVI(model.model, AutoSemiAmortizedNormal(model.model, steps=2, share=0.5, width=8),
                     pyro.optim.Adam({"lr": 0.02}), Trace_ELBO(num_particles=2, vectorize_particles=True))
    with pytest.raises(GuideError, match="one particle"):
        vectorized.step(model.x)


def test_every_row_passes_the_encoders_gradient_straight_through():
    model, guide = by_hand_guide(20, 5)
    head = guide.q_z.encoder.loc.bias
    with guide.refinement_draws(torch.Generator().manual_seed(0)):
        loc, _ = guide.local_factor(torch.arange(20), (model.x,), {}, {})
    # d Σ μ_n / d(the loc head's bias) = 20 per coordinate, refined rows or not, as for A-VI
    assert torch.allclose(torch.autograd.grad(loc.sum(), head)[0], torch.full((3,), 20.0))
    guide.q_z.grad = "unrolled"  # through the steps: the rows not refined still pass it as the identity
    with guide.refinement_draws(torch.Generator().manual_seed(0)):
        loc, _ = guide.local_factor(torch.arange(20), (model.x,), {}, {})
    kept = (loc == guide.q_z.encoder(model.x)[0]).all(-1)
    assert kept.sum() == 15 and torch.allclose(torch.autograd.grad(loc[kept].sum(), head)[0], torch.full((3,), 15.0))


def test_the_khat_score_ranks_by_arvizs_fit():
    model = orthogonal_model(n=40)
    loc = model.posterior_mean(model.x)
    scale = torch.cat([torch.full((20, 3), 0.3), torch.full((20, 3), 1.0)]) * model.precision().diagonal().rsqrt()
    rows = worst_rows(by_hand(model), model.x, loc, scale, {}, 0.5, "khat", 100, torch.Generator().manual_seed(0))
    assert torch.equal(rows, torch.arange(20))  # the narrow half, each k̂ finite and high
    with pytest.raises(GuideError, match="khat: 25"):
        AutoSemiAmortizedNormal(model.model, share=0.5, score="khat", score_draws=8)


def test_the_package_models_rows_of_data_agree_with_its_whole_batch(tmp_path):
    from amortized_pyro.autoguides.gap import guide_factor, theta_draws
    from amortized_pyro.local.gaps import GapSettings
    from amortized_pyro.models.guides import make_guide
    from amortized_pyro.models.local_posterior import ModelPosterior
    from amortized_pyro.runs.fit import finished_run
    from conftest import tiny_finished_run
    result, data = finished_run(tiny_finished_run(tmp_path / "run"), log=lambda line: None)
    x, idx = data.train[:12], torch.arange(12)
    own, whole = (make_guide("semi-amortized", result.model, width=4, refine_steps=3, refine_share=0.5)
                  for _ in range(2))
    for guide in (own, whole):
        guide.load_state_dict(result.guide.state_dict())
    whole.local_log_joint = lambda *a: result.model.local_log_joint(*a)  # not the model's: run on the whole batch
    posterior = ModelPosterior(result.model, own, x, idx)  # θ draws with per-image terms: taken per row
    fit, _ = theta_draws(posterior, own, GapSettings(theta_draws=3), selection=False)
    for a, b in zip(guide_factor(posterior, own, fit.at("guide")), guide_factor(posterior, whole, fit.at("guide"))):
        assert torch.allclose(a, b, atol=1e-5)


def test_a_share_trained_on_minibatches_serves_new_data_predictive_and_the_gap():
    # Pyro's examples' plate (len(x) per call): trained on batches of 10, then 7 new datapoints
    from pyro.infer import Predictive
    from amortized_pyro.autoguides import measure_gap
    from amortized_pyro.local.gaps import GapSettings
    model = orthogonal_model(n=47)
    x, x_new = model.x[:40], model.x[40:]
    pyro.set_rng_seed(0)
    guide = AutoSemiAmortizedNormal(model.model, steps=3, share=0.3, width=8)
    svi = SVI(model.model, guide, pyro.optim.Adam({"lr": 0.02}), Trace_ELBO())
    for _ in range(20):
        for batch in x[torch.randperm(40)].split(10):
            svi.step(batch)
    assert Predictive(model.model, guide=guide, num_samples=3)(x_new)["z"].shape == (3, 7, 3)
    loc, _ = factors(guide, x_new)
    assert loc.shape == (7, 3) and ((loc != guide.q_z.encoder(x_new)[0]).any(-1)).sum() == 3  # ⌈0.3 · 7⌉ refined
    report = measure_gap(model.model, guide, x_new, seen=False, settings=GapSettings(ais_steps=0, max_steps=200))
    assert len(report["per_image"]["amortization_gap"]) == 7
