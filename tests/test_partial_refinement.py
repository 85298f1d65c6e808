"""SA-VI refining only the worst share of each batch (amortized_pyro.local.partial): the rows chosen are those of
highest score, the others keep the encoder's factor exactly, and the two ways of running the log joint on the
chosen rows (the data's rows of a hand-written one; the model's whole batch with the other rows held) agree."""
import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import SVI, Trace_ELBO

from amortized_pyro.autoguides import AutoSemiAmortizedNormal
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


def factors(guide, x, seed=0):
    with torch.no_grad(), guide.refinement_draws(torch.Generator().manual_seed(seed)):
        return guide.local_factor(torch.arange(len(x)), (x,), {}, {})


def test_the_worst_rows_are_refined_and_the_rest_keep_the_encoders_factor():
    model = orthogonal_model(n=40)
    pyro.set_rng_seed(0)
    guide = AutoSemiAmortizedNormal(model.model, steps=10, lr=0.05, share=SHARE, width=8,
                                    local_log_joint=by_hand(model))
    guide(model.x)
    loc, scale = factors(guide, model.x)
    with torch.no_grad():
        loc0, scale0 = guide.q_z.encoder(model.x)
        # the same score draws as the factor's (the refinement generator's first draws), by hand
        log_w = log_weights(by_hand(model), model.x, loc0, scale0, {}, 8, torch.Generator().manual_seed(0))
    rows = torch.topk(score_of(log_w, "spread"), 10).indices.sort().values
    assert torch.equal(rows, worst_rows(by_hand(model), model.x, loc0, scale0, {}, SHARE, "spread", 8,
                                        torch.Generator().manual_seed(0)))
    moved = (loc != loc0).any(-1) | (scale != scale0).any(-1)
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
        assert torch.allclose(Rows(by_hand(model), rows, base)(model.x, z[:, rows], {}), by_hand(model)(model.x, full, {})[:, rows])


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
