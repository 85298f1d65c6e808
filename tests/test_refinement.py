"""Semi-amortized refinement (local_elbo.refine): unrolled, its gradient with respect to the starting factor
is the derivative of what the steps end at (checked against central finite differences with the same draws);
straight-through passes the refined factor's gradient instead, which differs."""
import torch

from amortized_pyro.local.steppers import ClippedMomentum, SmoothAdam
from amortized_pyro.local.estimates import log_weights
from amortized_pyro.local.optimize import refine
from amortized_pyro.models.networks import decode


def toy(generator_seed=0):
    """A small LeakyReLU decoder in float64 (z 3 → 5 → 4) with fixed θ, its log joint and 6 images."""
    g = torch.Generator().manual_seed(generator_seed)
    theta = {"decoder.w1": torch.randn(5, 3, generator=g, dtype=torch.float64),
             "decoder.b1": torch.randn(5, generator=g, dtype=torch.float64),
             "decoder.w2": torch.randn(5, 5, generator=g, dtype=torch.float64),
             "decoder.b2": torch.randn(5, generator=g, dtype=torch.float64),
             "decoder.w3": torch.randn(4, 5, generator=g, dtype=torch.float64),
             "decoder.b3": torch.randn(4, generator=g, dtype=torch.float64)}

    def log_joint(x, z, th):
        return -0.5 * (x - decode(z, th)).square().sum(-1) - 0.5 * z.square().sum(-1)

    x = torch.randn(6, 4, generator=g, dtype=torch.float64)
    return log_joint, theta, x


def refined_objective(log_joint, theta, x, loc0, log_scale0, unrolled):
    """Σ_n L̂_n at the factor 5 refinement steps reach from (loc0, log σ0), every draw from seed 1."""
    generator = torch.Generator().manual_seed(1)
    loc, log_scale = refine(log_joint, x, loc0, log_scale0, theta, 0.1, 5, 2, generator, unrolled)
    return log_weights(log_joint, x, loc, log_scale.exp(), theta, 4, generator).mean(0).sum()


def test_unrolled_refinement_differentiates_through_the_steps():
    log_joint, theta, x = toy()
    loc0 = torch.zeros(6, 3, dtype=torch.float64, requires_grad=True)
    log_scale0 = torch.full((6, 3), -0.5, dtype=torch.float64, requires_grad=True)
    direction = torch.randn(6, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    h = 1e-5
    with torch.no_grad():
        finite = (refined_objective(log_joint, theta, x, loc0 + h * direction, log_scale0, True)
                  - refined_objective(log_joint, theta, x, loc0 - h * direction, log_scale0, True)) / (2 * h)
    unrolled = torch.autograd.grad(refined_objective(log_joint, theta, x, loc0, log_scale0, True), loc0)[0]
    torch.testing.assert_close((unrolled * direction).sum(), finite, rtol=1e-4, atol=1e-6)


def test_straight_through_is_not_the_unrolled_gradient():
    """What makes the test above discriminating: the straight-through gradient (the refined factor's own,
    applied to the start) is another vector here."""
    log_joint, theta, x = toy()
    loc0 = torch.zeros(6, 3, dtype=torch.float64, requires_grad=True)
    log_scale0 = torch.full((6, 3), -0.5, dtype=torch.float64, requires_grad=True)
    unrolled = torch.autograd.grad(refined_objective(log_joint, theta, x, loc0, log_scale0, True), loc0)[0]
    generator = torch.Generator().manual_seed(1)
    loc, log_scale = refine(log_joint, x, loc0, log_scale0, theta, 0.1, 5, 2, generator)
    through = loc0 + (loc - loc0).detach()
    straight = torch.autograd.grad(log_weights(log_joint, x, through, log_scale.exp(), theta, 4, generator)
                                   .mean(0).sum(), loc0)[0]
    assert (straight - unrolled).norm() > 0.1 * unrolled.norm()


def test_unrolled_refinement_stays_finite_where_a_gradient_is_exactly_zero():
    """z_0 does not enter the log joint, so the local ELBO's gradient in μ_0 is exactly zero (q's own terms
    cancel): torch's Adam(differentiable=True) differentiates √v at v = 0 there and returns NaN (what made
    unrolled SA-VI diverge, 1 zero among 16,000 entries); the unrolled steps must not."""
    def log_joint(x, z, theta):
        return -0.5 * (x - z[..., 1:]).square().sum(-1)

    x = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    loc0 = torch.zeros(4, 3, requires_grad=True)
    log_scale0 = torch.zeros(4, 3, requires_grad=True)
    loc, log_scale = refine(log_joint, x, loc0, log_scale0, {}, 0.1, 5, 2, torch.Generator().manual_seed(1), True)
    (loc.sum() + log_scale.sum()).backward()
    assert torch.isfinite(loc0.grad).all() and torch.isfinite(log_scale0.grad).all()
    assert torch.equal(loc.detach()[:, 0], loc0.detach()[:, 0])  # a zero gradient moves nothing


def test_smooth_adam_steps_are_torchs_adam_steps():
    """SmoothAdam (the unrolled steps) goes where torch's Adam goes wherever |g| is well above its ε."""
    start = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ends = []
    for optimizer in (torch.optim.Adam, SmoothAdam):
        x = start.clone().requires_grad_()
        step = optimizer([x], lr=0.05, eps=1e-8)
        for _ in range(20):
            x.grad = torch.autograd.grad((x.square() * torch.arange(1.0, 4.0, dtype=torch.float64)).sum(), [x])[0]
            with torch.no_grad():
                step.step()
        ends.append(x.detach())
    torch.testing.assert_close(ends[1], ends[0], rtol=1e-5, atol=1e-8)  # relative ε/|g|


def test_kims_momentum_steps_are_the_formula_with_each_images_gradient_clipped():
    """p ← 0.5 p − clip(g), x ← x + lr p, g clipped to norm 5 per image row: a row with a huge gradient is
    scaled down to norm 5 and does not change the step of the row beside it."""
    x = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    stepper = ClippedMomentum([x], lr=0.1)
    grads = [torch.tensor([[30.0, 40.0, 0.0], [0.3, -0.4, 1.2]], dtype=torch.float64),
             torch.tensor([[0.0, 0.0, 50.0], [0.1, 0.1, 0.1]], dtype=torch.float64)]
    expected, velocity = torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64)
    for g in grads:
        clipped = torch.stack([row * min(1.0, 5.0 / row.norm().item()) for row in g])
        velocity = 0.5 * velocity - clipped
        expected = expected + 0.1 * velocity
        x.grad = g.clone()
        stepper.step()
        torch.testing.assert_close(x.detach(), expected)
    assert torch.isclose(clipped[0].norm(), torch.tensor(5.0, dtype=torch.float64))  # the big row: clipped
    assert torch.equal(clipped[1], grads[1][1])  # the small row: as it was


def test_kims_refinement_raises_the_local_elbo_and_unrolls_exactly():
    log_joint, theta, x = toy()
    loc0 = torch.zeros(6, 3, dtype=torch.float64, requires_grad=True)
    log_scale0 = torch.full((6, 3), -0.5, dtype=torch.float64, requires_grad=True)

    def objective(loc_start, steps, unrolled):
        generator = torch.Generator().manual_seed(1)
        loc, log_scale = refine(log_joint, x, loc_start, log_scale0, theta, 0.05, steps, 2, generator, unrolled,
                                optimizer="sgd-momentum")
        return log_weights(log_joint, x, loc, log_scale.exp(), theta, 200, torch.Generator().manual_seed(3)).mean(0)

    with torch.no_grad():
        assert (objective(loc0, 20, False) > objective(loc0, 0, False)).all()  # every image's local ELBO rises
    direction = torch.randn(6, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    h = 1e-5
    with torch.no_grad():
        finite = (objective(loc0 + h * direction, 5, True).sum() - objective(loc0 - h * direction, 5, True).sum()) / (2 * h)
    unrolled = torch.autograd.grad(objective(loc0, 5, True).sum(), loc0)[0]
    torch.testing.assert_close((unrolled * direction).sum(), finite, rtol=1e-4, atol=1e-6)


def test_sa_vi_trains_with_kims_inner_loop_and_says_so_in_its_label(tmp_path):
    from click.testing import CliRunner

    from amortized_pyro.cli.commands import cli
    run = tmp_path / "run"
    result = CliRunner().invoke(cli, ["fit", "--guide", "semi-amortized", "--refine-steps", "3", "--refine-optimizer",
                                      "sgd-momentum", "--refine-lr", "0.05", "--dataset", "mnist-sample", "--n-obs", "40",
                                      "--n-test", "10", "--epochs", "2", "--batch-size", "20", "--hidden", "8",
                                      "--z-dim", "2", "--width", "4", "--no-progress", "--device", "cpu", "--out", str(run)])
    assert result.exit_code == 0, result.output
    from amortized_pyro.runs.fit import load_run
    from amortized_pyro.models.guides import config_label
    loaded = load_run(run)
    assert loaded.guide.q_z.optimizer == "sgd-momentum" and config_label(loaded.config) == "SA-VI k=4 r=3 momentum"
