"""The gap's estimator, batched and unbiased by its fitting draws.

1. Batched = sequential: the q*_m of every θ draw optimized as one program equal those optimized one draw at a
   time, and no estimate (q*, q*_m, the local ELBOs, IWAE, AIS, refinement) changes with the chunk size, from
   the same keys (every draw at θ_m comes from θ_m's own generator).
2. Fresh scoring, against a closed form over q(θ): x_n ~ N(A z_n + b, σ²I) with a global shift b ~ q(b) =
   N(m, s²I). E_q(b) of the local ELBO is closed form, and so is q* (the best factor under q(b)) and the
   coupling gap ½ s² tr(AᵀA Λ⁻¹) / σ⁴. With the guide's factor at the exact q*, the true amortization gap is
   0; a q* fitted on M draws can only do worse under q(b), so the estimate must not be above 0 beyond its
   errors, and must not grow as M shrinks. Scored on the fitting draws (the old estimator) it reads about
   coupling / M above 0: seen failing both tests, the gap's mean +61.6 nats at M = 1 against +1.0 at M = 16.
"""
import math

import pytest
import torch

import pyro
import pyro.distributions as dist

from amortized_pyro.autoguides import AutoPerDatapointNormal, measure_gap
from amortized_pyro.local.gaps import GapSettings, global_draws, measure_factors
from amortized_pyro.local.optimize import converge
from amortized_pyro.models.decoder import BayesianDecoderModel
from amortized_pyro.models.guides import make_guide


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def small_run():
    """A small Bayesian decoder with a spread-out q(θ), 5 images, its guide's factors, and draws."""
    torch.manual_seed(0)
    model = BayesianDecoderModel(12, 10, 3, 6, obs_scale=0.3)
    guide = make_guide("per-datapoint", model, init_scale=0.2)
    with torch.no_grad():
        guide.q_theta.loc.copy_(0.6 * torch.randn(guide.q_theta.loc.shape))
    x = torch.rand(5, 10)
    return model, guide, x


def test_batched_draws_equal_sequential_ones_and_no_number_depends_on_the_chunk(float64):
    model, guide, x = small_run()
    settings = GapSettings(theta_draws=3, score_draws=4, samples=30, importance_samples=40, step_samples=4,
                           window=10, patience=3, max_steps=120, ais_steps=10, ais_chains=3)
    fit, score = global_draws(guide, settings, torch.Generator().manual_seed(5))
    start = (0.3 * torch.randn(5, 3), torch.full((5, 3), 0.5))
    reports = {}
    for chunk in (10 ** 6, 7):  # everything at once; one draw at a time, samples a few at a time
        reports[chunk], best = measure_factors(model.local_log_joint, x, fit, score, start, 3,
                                               GapSettings(**{**vars(settings), "chunk": chunk}), (0, 6))
        reports[chunk]["q*"] = torch.cat([best.loc, best.log_scale]).flatten().tolist()
    big, small = reports[10 ** 6], reports[7]
    for name, values in big["per_image"].items():
        assert torch.allclose(torch.tensor(small["per_image"][name]), torch.tensor(values), atol=1e-9), name
    assert torch.allclose(torch.tensor(small["q*"]), torch.tensor(big["q*"]), atol=1e-9)
    assert big["refinement"][1]["per_image"] == pytest.approx(small["refinement"][1]["per_image"], abs=1e-9)
    # the q*_m of every draw at once = each draw's own optimization, one after another
    together = converge(model.local_log_joint, x, *start, fit.at("fit-per-draw"), 0.01, settings.rule(), 4,
                        per_draw=True)
    for m in range(len(fit)):
        alone = converge(model.local_log_joint, x, *start, fit.at("fit-per-draw").part(m, m + 1), 0.01,
                         settings.rule(), 4, per_draw=True)
        assert torch.allclose(alone.loc[0], together.loc[m], atol=1e-12)
        assert torch.equal(alone.steps[0], together.steps[m])
    assert not torch.allclose(together.loc[0], together.loc[1])  # the draws' optima differ: a real check


def test_each_row_stops_on_its_own_and_compacting_stopped_images_changes_no_number(float64):
    """Every row (image, or image and θ draw) has its own learning rate, stopping and best iterate: an
    image's q* and q*_m do not change when another image starts elsewhere, nor when stopped images are left
    out of the computation (``compact``), which computes fewer rows. Seen failing with one learning-rate schedule over
    the total of the images (a row then depends on the others) and with compaction off (no fewer rows)."""
    model, guide, x = small_run()
    settings = GapSettings(theta_draws=3, step_samples=4, window=10, patience=2, tolerance=0.05, max_steps=400)
    fit, _ = global_draws(guide, settings, torch.Generator().manual_seed(5))
    fit = model.with_gram(fit, x)
    start = (0.3 * torch.randn(5, 3), torch.full((5, 3), 0.5).log())
    computed = []

    def log_joint(x, z, theta):
        computed.append(x.shape[0])
        return model.local_log_joint(x, z, theta)

    for per_draw, phase in ((False, "fit"), (True, "fit-per-draw")):
        computed.clear()
        full = converge(log_joint, x, *start, fit.at(phase), 0.05, settings.rule(), 4, per_draw=per_draw)
        rows_full = sum(computed)
        computed.clear()
        compact = converge(log_joint, x, *start, fit.at(phase), 0.05, settings.rule(), 4, per_draw=per_draw,
                           compact=True)
        assert sum(computed) < 0.9 * rows_full  # stopped images were left out
        assert len(set(full.steps.flatten().tolist())) > 1 and not full.capped.all()  # rows stopped apart
        assert torch.equal(compact.steps, full.steps)
        assert torch.allclose(compact.loc, full.loc, atol=1e-10)
        assert torch.allclose(compact.log_scale, full.log_scale, atol=1e-10)
        moved = (start[0].clone(), start[1].clone())
        moved[0][0] += 1.0  # another start for image 0 alone: the other images' rows must not notice
        other = converge(log_joint, x, *moved, fit.at(phase), 0.05, settings.rule(), 4, per_draw=per_draw)
        assert not torch.allclose(other.loc[..., 0, :], full.loc[..., 0, :])
        assert torch.equal(other.steps[..., 1:], full.steps[..., 1:])
        assert torch.allclose(other.loc[..., 1:, :], full.loc[..., 1:, :], atol=1e-10)


class Shifted:
    """x_n ~ N(A z_n + b, σ²I), z_n ~ N(0, I), a global b ~ N(0, I); q(b) = N(m, s²I) fixed by hand."""

    def __init__(self, n=8, dx=6, dz=2, sigma=0.5, s=2.0):
        g = torch.Generator().manual_seed(0)
        self.A, self.m = torch.randn(dx, dz, generator=g), torch.randn(dx, generator=g)
        self.sigma, self.s, self.dz = sigma, s, dz
        self.precision = torch.eye(dz) + self.A.T @ self.A / sigma ** 2
        self.x = torch.randn(n, dz, generator=g) @ self.A.T + self.m + sigma * torch.randn(n, dx, generator=g)

    def model(self, x):
        b = pyro.sample("b", dist.Normal(torch.zeros(x.shape[-1]), 1.0).to_event(1))
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([self.dz]).to_event(1))
            pyro.sample("x", dist.Normal(z @ self.A.T + b, self.sigma).to_event(1), obs=x)

    def optimum(self, b):
        """The best mean-field factor at shift b (b = m: under q(b)): (μ [n, dz], σ [dz])."""
        mean = torch.linalg.solve(self.precision, self.A.T @ (self.x - b).T / self.sigma ** 2).T
        return mean, self.precision.diagonal().rsqrt()

    def elbo(self, loc, scale, b, s=0.0):
        """L_n(N(loc, diag scale²); b) per image, averaged over b ~ N(b, s²I) in closed form."""
        dx = self.x.shape[-1]
        residual = self.x - loc @ self.A.T - b
        fit = -(residual.pow(2).sum(-1) + (scale ** 2 * self.A.pow(2).sum(0)).sum(-1) + dx * s ** 2) \
            / (2 * self.sigma ** 2) - dx * math.log(self.sigma) - dx / 2 * math.log(2 * math.pi)
        prior = -(loc.pow(2) + scale ** 2).sum(-1) / 2 - self.dz / 2 * math.log(2 * math.pi)
        return fit + prior + scale.log().sum(-1) + self.dz / 2 * (1 + math.log(2 * math.pi))

    def coupling(self):
        return 0.5 * self.s ** 2 * torch.trace(self.A.T @ self.A @ torch.linalg.inv(self.precision)) / self.sigma ** 4


def measured_shift(toy, theta_draws, score_draws=64):
    settings = GapSettings(theta_draws=theta_draws, score_draws=score_draws, samples=400, importance_samples=50,
                           ais_steps=0, lr=0.05, step_samples=16, window=40, patience=5, max_steps=3000)
    with pyro.settings.context(module_local_params=True):
        guide = AutoPerDatapointNormal(toy.model)
        guide(toy.x)
        loc, scale = toy.optimum(toy.m)
        with torch.no_grad():
            guide.q_theta.locs.b = toy.m.clone()
            guide.q_theta.scales.b = torch.full_like(toy.m, toy.s)
            guide.q_z.loc.copy_(loc)  # the guide's factor: the exact q* under q(b)
            guide.q_z.log_scale.copy_(scale.log().expand_as(loc))
        report = measure_gap(toy.model, guide, toy.x, settings=settings)
        _, score = global_draws(guide, settings, torch.Generator().manual_seed(settings.seed))
    return report, score


def test_fresh_draws_score_q_star_without_the_fitting_draws_noise(float64):
    toy = Shifted()
    loc, scale = toy.optimum(toy.m)
    exact = toy.elbo(loc, scale, toy.m, toy.s)  # E_q(b) L_n(q*): the most any factor can score under q(b)
    assert toy.coupling() > 10  # wide q(b): a q* fitted on 2 draws would overfit them by several nats
    report, score = measured_shift(toy, theta_draws=2)
    got = torch.tensor(report["per_image"]["elbo_optimized"])
    # the estimate's error: the S fresh draws of b (exact L_n(q*; b'_s) spread) and the z draws (400 each)
    at_draws = torch.stack([toy.elbo(loc, scale, score.one(s)["b"]) for s in range(len(score))])
    se = torch.hypot(at_draws.std(0) / math.sqrt(len(score)), torch.full_like(exact, 0.05))
    assert (got < exact + 4 * se).all()
    gap = torch.tensor(report["per_image"]["amortization_gap"])  # the guide sits at the exact q*: truly 0
    assert gap.mean() <= 4 * gap.std() / math.sqrt(len(gap))  # exactly 0 where the guide's factor wins q*


def test_the_amortization_gap_does_not_grow_as_the_fitting_draws_shrink(float64):
    toy = Shifted()
    gaps = {M: measured_shift(toy, M)[0]["amortization_gap"] for M in (1, 16)}
    few, many = gaps[1], gaps[16]
    assert few["mean"] <= many["mean"] + 4 * math.hypot(few["stderr"], many["stderr"])  # both 0 where the guide wins
