"""Normalizing flows on q(z_n) (`flow=K`, `--flow K`): a flow whose transforms start at zero is its Gaussian
guide exactly; a flow guide's ELBO on one draw equals a handwritten one (the Gaussian base's density minus the
log-determinant of the flow's Jacobian, taken here by autograd, not by Zuko, and the support map's); the gap's
flow factors (parameters per image) score as the module does, image by image; q* in the flow family beats the
best Gaussian where the posterior is not Gaussian; the package trains a flow and `gap` measures it."""
import json

import pytest
import torch
from click.testing import CliRunner

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import Trace_ELBO

from amortized_pyro.autoguides import AutoAmortizedNormal, AutoPerDatapointNormal, AutoSharedNormal
from amortized_pyro.autoguides.flows import LOCAL_FLOW
from amortized_pyro.cli import cli

N, B = 12, 4


def model(x, idx=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, 3), 1.0).to_event(2))
    with pyro.plate("data", N, subsample=idx, subsample_size=None if idx is not None else B) as idx:
        z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        s = pyro.sample("s", dist.LogNormal(0.0, 0.5))  # a constrained local site: its support map's Jacobian
        loc = (z.unsqueeze(-2) @ w).squeeze(-2)  # batched draws of w and z (particles, the gap's θ draws) too
        pyro.sample("x", dist.Normal(loc, s.unsqueeze(-1)).to_event(1), obs=x[idx])


@pytest.fixture
def global_param_store():
    """Pyro's defaults: the builders' parameters in its global param store (emptied again afterwards)."""
    yield
    pyro.clear_param_store()


BUILDERS = {"amortized": lambda **k: AutoAmortizedNormal(model, width=8, **k),
            "per-datapoint": lambda **k: AutoPerDatapointNormal(model, **k),
            "shared": lambda **k: AutoSharedNormal(model, **k)}


def built(name, *call, **kwargs):
    """The builder ``name`` set up on the model's call ``call``: its plate's form (here: the model draws the
    minibatch, or takes idx) is the one the guide follows from then on, as Pyro's autoguides follow their first."""
    pyro.set_rng_seed(0)
    guide = BUILDERS[name](**kwargs)
    guide(*call)
    return guide


def perturbed(guide, flow_only=False):
    with torch.no_grad():
        for name, p in guide.named_parameters():
            if not flow_only or name.startswith("local_flow."):
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
    guide = perturbed(built("amortized", x, idx, flow=2))
    w = poutine.trace(guide).get_trace(x, idx).nodes["w"]["value"].detach()
    with torch.no_grad():
        loc, scale = guide.local_factor(idx, (x, idx), {}, {"w": w})
        context = guide.flow_context(idx, (x, idx), {})
        v = loc + scale * torch.randn(loc.shape, generator=torch.Generator().manual_seed(2))
        u = guide.local_flow.push(v, context)[0]
    jacobians = [torch.autograd.functional.jacobian(lambda row: guide.local_flow.push(row, context[n])[0], v[n])
                 for n in range(B)]
    log_det = torch.stack([torch.linalg.slogdet(j)[1] for j in jacobians])
    z, log_s = u[:, :2], u[:, 2]  # the flat layout: z's block, then s's (unconstrained: log s)
    s = log_s.exp()
    m, sd = guide.q_theta.locs.w, guide.q_theta.scales.w
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


def banana(x, idx=None):
    """z_n ~ N(0, I₂), x_n ~ N(z_n1² + z_n2, 0.1²): a curved posterior, which a Gaussian fits badly."""
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z[..., 0] ** 2 + z[..., 1], 0.1), obs=x)


def test_gap_flow_factors_score_as_the_module_and_rows_are_independent(global_param_store):
    """local_elbo with the guide's RowFlow (one copy of the transforms per image, through vmap) equals the same
    estimate made with the module itself on the same draws; changing one image's parameters changes its value
    alone."""
    from amortized_pyro.autoguides.local_joint import LocalJoint
    from amortized_pyro.local.draws import Draws
    from amortized_pyro.local.estimates import local_elbo, normal_log_density

    x = torch.randn(N, 3, generator=torch.Generator().manual_seed(1))
    idx = torch.arange(N)
    guide = perturbed(built("amortized", x, flow=2))
    theta = [guide.global_sample(torch.Generator().manual_seed(m)) for m in range(3)]
    draws = Draws.of(theta, torch.Generator().manual_seed(4)).at("score")
    joint = LocalJoint(model, guide.structure, (x, idx), {}, idx, stacked=True)
    with torch.no_grad():
        loc, scale = guide.local_factor(idx, (x, idx), {}, theta[0])
        rows = guide.row_flow(idx, (x, idx), {})
        mine = local_elbo(joint, x, loc, scale, draws, 5, flow=rows)
        context = guide.flow_context(idx, (x, idx), {})
        by_hand = []
        for m, generator in enumerate(draws.generators()):
            eps = torch.randn((5, N, 3), generator=generator)
            u, log_det = guide.local_flow.push(loc + scale * eps, context)
            values = {k: v[m:m + 1] for k, v in draws.values.items()}
            w = joint(x, u[None], values)[0] + log_det - normal_log_density(eps, scale.log())
            by_hand.append(w.mean(0))
        assert torch.allclose(mine, torch.stack(by_hand).mean(0), rtol=1e-5, atol=1e-4)
        moved = rows.with_params(rows.params.clone())
        moved.params[3] += 0.5 * torch.randn(moved.params.shape[1], generator=torch.Generator().manual_seed(5))
        changed = local_elbo(joint, x, loc, scale, draws, 5, flow=moved)
    others = torch.arange(N) != 3
    assert torch.equal(changed[others], mine[others]) and changed[3] != mine[3]


def test_q_star_in_the_flow_family_beats_the_best_gaussian_on_a_curved_posterior(global_param_store):
    """measure_gap of a shared-family flow guide (K = 2, started at zero) on the banana model: q* is optimized
    in the flow family (its transforms per image), and rises above the best Gaussian factor by more than 3 standard
    errors; the gaps still add up to log p(x) − L(guide)."""
    from amortized_pyro.autoguides import measure_gap
    from amortized_pyro.local.gaps import GapSettings

    x = torch.tensor([1.5, 2.0, 0.5, 3.0, 1.0, 2.5])
    pyro.set_rng_seed(0)
    guide = AutoSharedNormal(banana, flow=2, flow_width=32)
    guide(x)
    # the flow's q* at the default flow_lr 0.01: at 0.05 its transforms' weights jitter (flow gain 0.8 ± 0.3
    # against 1.7 ± 0.3); at most 1,000 steps: q* is then capped on 4 of the 6 images (a lower bound, and so is the
    # gain: 1.51 ± 0.27, 1.57 ± 0.27 uncapped at 3,000 steps, in 3/4 of the time)
    settings = GapSettings(importance_samples=200, samples=200, max_steps=1000, ais_steps=0, theta="mean")
    report = measure_gap(banana, guide, x, settings=settings)
    gain = report["flow_gain"]
    assert report["q_family"] == "flow"
    assert gain["mean"] > 3 * gain["stderr"], gain
    assert report["coupling_gap"] is None and not report["coupling"]  # no global latent: no q*_m, no coupling term
    total = report["amortization_gap"]["mean"] + report["approximation_gap"]["mean"]
    assert total == pytest.approx(report["log_px"]["mean"] - report["elbo_guide"]["mean"], abs=1.0)


def test_the_package_trains_a_flow_and_gap_measures_it_in_its_family(tmp_path):
    out = tmp_path / "run"
    args = ["fit", "--dataset", "mnist-sample", "--n-obs", "40", "--n-test", "10", "--epochs", "2", "--batch-size",
            "20", "--width", "4", "--z-dim", "3", "--hidden", "8", "--flow", "2", "--no-progress", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert '"flow": 2' in (out / "config.json").read_text()
    small = ["--n-images", "2", "--max-steps", "100", "--ais-steps", "5", "--importance-samples", "10"]
    gap = CliRunner().invoke(cli, ["gap", str(out), *small])
    assert gap.exit_code == 0, gap.output
    assert "| flow_gain |" in gap.output and "best members of the guide's flow family" in gap.output
    assert "q* per image came from: the guide's flow" in gap.output
    from amortized_pyro.report.tables import format_reports
    report = json.loads((out / "gap.json").read_text())
    assert "| L(q*_Gaussian) | flow gain |" in format_reports([report])  # the gathered table says it too
    gaussian = {k: v for k, v in report.items() if k not in ("elbo_optimized_gaussian", "flow_gain", "q_family")}
    assert "flow gain" not in format_reports([gaussian])
    refined = CliRunner().invoke(cli, ["gap", str(out), *small, "--refine-steps", "5", "--out", str(tmp_path / "r")])
    assert refined.exit_code == 1 and "refinement takes a Gaussian q(z_n)" in refined.output
    assert "Traceback" not in refined.output


def linear(x):
    """z_n ~ N(0, I₂), x_n ~ N(z_n,1 + z_n,2, 0.5²): a Gaussian posterior, which a flow cannot beat by much."""
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z[..., 0] + z[..., 1], 0.5), obs=x)


def test_q_star_in_the_flow_family_is_no_worse_than_the_best_gaussian_from_a_bad_flow(global_param_store):
    """A flow guide whose transforms are far from any good member and a short budget: q* in the flow family is
    still no worse than the best Gaussian factor (it is chosen, per image, among the optimum from the guide's
    flow, the optimum from the Gaussian q* and that Gaussian itself), at the gap's default learning rates; one
    optimization from the guide's flow alone ends thousands of nats below it on some image."""
    from amortized_pyro.autoguides import measure_gap
    from amortized_pyro.local.gaps import GapSettings

    x = torch.tensor([1.5, -2.0, 0.5, 3.0])
    pyro.set_rng_seed(0)
    guide = AutoSharedNormal(linear, flow=2, flow_width=16)
    guide(x)
    with torch.no_grad():
        for name, p in guide.named_parameters():
            if name.startswith("local_flow."):
                p.add_(1.5 * torch.randn_like(p))
    settings = GapSettings(importance_samples=50, samples=100, max_steps=100, window=20, ais_steps=0, theta="mean")
    report = measure_gap(linear, guide, x, settings=settings)
    assert sum(report["q_star_from"].values()) == x.shape[0]  # each image's q* came from one of the three
    gains = torch.tensor(report["per_image"]["flow_gain"])
    assert gains.min() > -0.5, gains  # image by image: the Monte Carlo noise of two estimates on the same draws


def test_flows_are_refused_where_they_cannot_work(global_param_store):
    """SA-VI's steps and IA-VI's iterations move a Gaussian factor: a flow there is refused in one line, as is
    a flow on a one-dimensional local latent (an affine flow of one variable is a Gaussian again)."""
    from amortized_pyro.autoguides import AutoIterativeAmortizedNormal, AutoSemiAmortizedNormal
    from amortized_pyro.errors import AmortizedPyroError

    for builder in (AutoSemiAmortizedNormal, AutoIterativeAmortizedNormal):
        with pytest.raises(AmortizedPyroError, match="takes no flow"):
            builder(model, width=8, flow=2)

    def one_dimensional(x):
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
            pyro.sample("x", dist.Normal(z, 0.5), obs=x)

    with pytest.raises(AmortizedPyroError, match="2 or more dimensions"):
        AutoSharedNormal(one_dimensional, flow=2)(torch.zeros(3))
