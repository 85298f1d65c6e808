"""Normalizing flows on q(z_n) (`flow=K`, `--flow K`): a flow whose transforms start at zero is its Gaussian
guide exactly; a flow guide's ELBO on one draw equals a handwritten one (the Gaussian base's density minus the
log-determinant of the flow's Jacobian, taken here by autograd, not by Zuko, and the support map's); the
package trains one, and `gap` refuses it in one line until q* in the flow's family exists."""
import pytest
import torch
from click.testing import CliRunner

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import Trace_ELBO

from amortized_pyro.autoguides import AutoAmortizedNormal, AutoPerDatapointNormal, AutoSharedNormal
from amortized_pyro.autoguides.base import LOCAL_FLOW
from amortized_pyro.cli import cli

N, B = 12, 4


def model(x, idx=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, 3), 1.0).to_event(2))
    with pyro.plate("data", N, subsample=idx, subsample_size=None if idx is not None else B) as idx:
        z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        s = pyro.sample("s", dist.LogNormal(0.0, 0.5))  # a constrained local site: its support map's Jacobian
        pyro.sample("x", dist.Normal(z @ w, s[:, None]).to_event(1), obs=x[idx])


@pytest.fixture
def global_param_store():
    """Pyro's defaults: the builders' parameters in its global param store (emptied again afterwards)."""
    yield
    pyro.clear_param_store()


BUILDERS = {"amortized": lambda **k: AutoAmortizedNormal(model, width=8, **k),
            "per-datapoint": lambda **k: AutoPerDatapointNormal(model, **k),
            "shared": lambda **k: AutoSharedNormal(model, **k)}


def built(name, x, **kwargs):
    pyro.set_rng_seed(0)
    guide = BUILDERS[name](**kwargs)
    guide(x)
    return guide


def perturbed(guide, flow_only=False):
    with torch.no_grad():
        for name, p in guide.named_parameters():
            if not flow_only or name.startswith("flow."):
                p.add_(0.3 * torch.randn_like(p))
    return guide


@pytest.mark.parametrize("name", BUILDERS)
def test_a_flow_that_starts_at_zero_is_its_gaussian_guide(name, global_param_store):
    """On the flow guide's own draw, the Gaussian guide (same parameters) scores the same log q: the transforms
    are the identity with log-determinant 0; moving the flow's weights changes it."""
    x = torch.randn(N, 3, generator=torch.Generator().manual_seed(1))
    gaussian = perturbed(built(name, x))
    flow = built(name, x, flow=2)
    flow.load_state_dict(gaussian.state_dict(), strict=False)
    for moved in (False, True):
        if moved:
            perturbed(flow, flow_only=True)
        trace = poutine.trace(flow).get_trace(x)
        replayed = poutine.trace(poutine.replay(gaussian, trace=trace)).get_trace(x)  # its sites at the flow's draw
        assert torch.equal(replayed.nodes["s"]["value"], trace.nodes["s"]["value"])
        log_q, log_q_gaussian = trace.log_prob_sum().item(), replayed.log_prob_sum().item()
        if not moved:
            assert log_q == pytest.approx(log_q_gaussian, rel=1e-6, abs=1e-5)
        else:  # power: a moved flow is another distribution
            assert abs(log_q - log_q_gaussian) > 1e-2


def test_flow_elbo_equals_handwritten_on_the_same_draw(global_param_store):
    """The amortized flow (conditioned on the encoder's features), weights moved off zero: the oracle draws
    v ~ N(μ_n, σ_n) itself, pushes it through the transforms (Zuko's values), takes log |det ∂u/∂v| by
    autograd per datapoint, and adds up the ELBO: log p(w) − log q(w) + N/B Σ_n [log p(x_n, z_n, s_n | w) −
    log N(v_n; μ_n, σ_n) + log |det ∂u_n/∂v_n| + log s_n]; Pyro's Trace_ELBO on the guide given (w, u) equals
    it."""
    torch.set_default_dtype(torch.float64)
    x = torch.randn(N, 3, generator=torch.Generator().manual_seed(1))
    idx = torch.tensor([5, 0, 9, 2])
    guide = perturbed(built("amortized", x, flow=2))
    w = poutine.trace(guide).get_trace(x, idx).nodes["w"]["value"].detach()
    with torch.no_grad():
        loc, scale = guide.local_factor(idx, (x, idx), {}, {"w": w})
        context = guide.flow_context(idx, (x, idx), {})
        v = loc + scale * torch.randn(loc.shape, generator=torch.Generator().manual_seed(2))
        u = guide.flow.push(v, context)[0]
    jacobians = [torch.autograd.functional.jacobian(lambda row: guide.flow.push(row, context[n])[0], v[n])
                 for n in range(B)]
    log_det = torch.stack([torch.linalg.slogdet(j)[1] for j in jacobians])
    z, log_s = u[:, :2], u[:, 2]  # the flat layout: z's block, then s's (unconstrained: log s)
    s = log_s.exp()
    m, sd = guide.q_theta._get_loc_and_scale("w")
    with torch.no_grad():
        log_q_w = dist.Normal(m, sd).log_prob(w).sum()
        local = (dist.Normal(z @ w, s[:, None]).log_prob(x[idx]).sum(-1) + dist.Normal(0.0, 1.0).log_prob(z).sum(-1)
                 + dist.LogNormal(0.0, 0.5).log_prob(s)
                 - dist.Normal(loc, scale).log_prob(v).sum(-1) + log_det + log_s)  # q(s) = q(u) / s
        expected = dist.Normal(0.0, 1.0).log_prob(w).sum() - log_q_w + N / B * local.sum()
    w_unconstrained = w  # a real site: AutoNormal draws it unconstrained, then a Delta at the same value
    conditioned = poutine.condition(guide, data={"w_unconstrained": w_unconstrained, LOCAL_FLOW: u})
    loss = Trace_ELBO().loss(model, conditioned, x, idx)
    assert -loss == pytest.approx(expected.item(), rel=1e-9)


def test_the_package_trains_a_flow_and_gap_says_it_cannot_measure_it_yet(tmp_path):
    out = tmp_path / "run"
    args = ["fit", "--dataset", "mnist-sample", "--n-obs", "40", "--n-test", "10", "--epochs", "2", "--batch-size",
            "20", "--width", "4", "--z-dim", "3", "--hidden", "8", "--flow", "2", "--no-progress", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert '"flow": 2' in (out / "config.json").read_text()
    gap = CliRunner().invoke(cli, ["gap", str(out), "--n-images", "2"])
    assert gap.exit_code == 1
    assert "the gap of a flow guide (flow=2) needs q* in the flow's own family" in gap.output
    assert "Traceback" not in gap.output
