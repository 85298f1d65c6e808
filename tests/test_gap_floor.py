"""q* never below the guide: q* is the best of its candidates, the guide's own factor among them, chosen on
selection draws of θ (neither the fitting draws nor the score draws), and each q*_m the better of q* and its own
optimum at θ_m; so the amortization gap, every refinement row's gap left and the coupling gap are ≥ 0 up to the
score draws' error of the difference and the choice's own (:mod:`amortized_pyro.local.gaps`). Per image that
error is checked against 4 √2 standard errors of the difference on the score draws (its own, and the choice's at
as many selection draws); an image whose q* is the guide's factor must read exactly 0.

The models are log joints written by hand (z [M, S, n, size] against θ stacked [M, ...]), each with its best
factor in closed form and the guide's factor set to it, so that the true amortization gap is 0:

1. a decoder that ignores z, x_n ~ N(b, σ²I) with a wide q(b): the prior is the exact posterior; Adam from it
   gets a gradient of pure noise, and its best window's average ends below it, capped or not;
2. a decoder that is another function of z at every draw and none on average, x_n ~ N(W z_n, σ²I) with
   W ~ N(0, s²) (constant-VI's case in the informative study): q* fitted on M = 2 draws overfits them, and
   only draws it was not fitted on can tell; likewise in a flow family;
3. a linear-Gaussian model whose posterior is in the family (orthogonal columns, θ fixed): L(guide) = log p(x).

Each also shows the reading that the rule replaces: the optimum alone (the q* of the code before, Adam from the
guide's factor, scored on the same fresh draws) reads below 0 beyond its standard error over the images.
"""
import math

import pytest
import torch

from amortized_pyro.autoguides.gap import measure_gap, theta_draws
from amortized_pyro.models.local_posterior import ModelPosterior
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.estimates import local_elbo, log_weights, per_draw
from amortized_pyro.local.flows import RowFlow
from amortized_pyro.local.gaps import GapSettings, measure_factors
from amortized_pyro.local.optimize import converge, refine
from amortized_pyro.models.decoder import BayesianDecoderModel
from amortized_pyro.models.guides import make_guide
from amortized_pyro.report.tables import format_gap, format_reports

N, DX, DZ, SIGMA, SPREAD = 16, 8, 3, 0.5, 0.5
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
SETTINGS = GapSettings(theta_draws=2, score_draws=32, select_draws=32, samples=100, importance_samples=10,
                       ais_steps=0)


@pytest.fixture(autouse=True)
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def normal(v, loc, sd):
    return (-0.5 * ((v - loc) / sd) ** 2 - math.log(sd) - HALF_LOG_2PI).sum(-1)


def ignores_z(x, z, theta):
    """x_n ~ N(b, σ²I), z_n ~ N(0, I): the decoder never reads z."""
    return normal(x, theta["b"][:, None, None, :], SIGMA) + normal(z, 0.0, 1.0)


def random_decoder(x, z, theta):
    """x_n ~ N(W z_n, σ²I), z_n ~ N(0, I), W ~ q(W) = N(0, s²): under q(W) the best factor is N(0, τ²I) with
    τ² = 1 / (1 + s² dx / σ²), the same for every image (E_W ‖x − W z‖² = ‖x‖² + s² dx ‖z‖²)."""
    return normal(x, torch.einsum("msnz,mxz->msnx", z, theta["W"]), SIGMA) + normal(z, 0.0, 1.0)


def draws(name, shape, count, generator):
    return Draws.of([{name: SPREAD * torch.randn(shape, generator=generator)} for _ in range(count)], generator)


def sampled(name, shape, settings=SETTINGS):
    """(fit, score, select): the three independent sets of θ draws."""
    generator = torch.Generator().manual_seed(1)
    return tuple(draws(name, shape, count, generator)
                 for count in (settings.theta_draws, settings.score_draws, settings.select_draws))


def images():
    return torch.randn(N, DX, generator=torch.Generator().manual_seed(0))


def score_se(log_joint, x, a, b, score, samples):
    """Per image the standard error of L_n(a) − L_n(b) on the score draws: the standard deviation over the S draws
    of the per-draw differences (common random numbers), over √S; a, b: (μ, σ)."""
    scored = score.at("score")
    difference = per_draw(log_joint, x, *a, scored, samples) - per_draw(log_joint, x, *b, scored, samples)
    return difference.std(0) / math.sqrt(len(score))


def optimum_alone(log_joint, x, guide, fit, score, settings):
    """The q* of the code before (Adam from the guide's factor on the fitting draws, its best window's average)
    minus the guide's factor, on the fresh draws, per image."""
    alone = converge(log_joint, x, guide[0], guide[1].log(), fit.at("fit"), settings.lr, settings.rule(),
                     settings.step_samples)
    scored = score.at("score")
    return local_elbo(log_joint, x, alone.loc, alone.log_scale.exp(), scored, settings.samples) - \
        local_elbo(log_joint, x, *guide, scored, settings.samples)


def below_zero(values):
    """Whether the mean of per-image values is below 0 by more than 4 standard errors over the images."""
    return values.mean() < -4 * values.std() / math.sqrt(len(values))


def assert_floor(result, best, log_joint, x, guide, score, settings):
    """Every image's amortization gap ≥ 0 up to 4 √2 of its score standard errors, exactly 0 where the guide's
    factor won, and the winners counted."""
    gap = torch.tensor(result["per_image"]["amortization_gap"])
    won = torch.tensor(result["per_image"]["q_star_from"])
    se = score_se(log_joint, x, (best.loc, best.log_scale.exp()), guide, score, settings.samples)
    # the report's own per-image standard error of the gap: the same, computed apart
    assert torch.allclose(torch.tensor(result["per_image"]["amortization_gap_stderr"]), se)
    assert (gap[won == 0].abs() < 1e-9).all()
    assert (gap > -4 * math.sqrt(2) * se - 1e-9).all(), (gap, se)
    assert list(result["q_star_from"].values()) == torch.bincount(won, minlength=len(result["q_star_from"])).tolist()
    return gap, won, se


@pytest.mark.parametrize("max_steps", [2000, 200])
def test_a_decoder_that_ignores_z_reads_no_gap_below_zero(max_steps):
    """The guide's factor is the prior, the exact posterior (its weights are log p(x_n | b) for every z: no z
    noise). One z draw per step, the noisiest steps: the optimum alone then reads 0.015 nats per image below 0
    (at 8, 0.0015; more than 3.8 of its standard errors either way). A cap of 200 steps stops every q* before the
    rule could (3 windows after the first): the images stay flagged as capped where the guide's factor wins."""
    settings = GapSettings(**{**vars(SETTINGS), "step_samples": 1, "max_steps": max_steps})
    x = images()
    fit, score, select = sampled("b", (DX,), settings)
    guide = (torch.zeros(N, DZ), torch.ones(N, DZ))
    assert below_zero(optimum_alone(ignores_z, x, guide, fit, score, settings))  # the reading the rule replaces
    result, best = measure_factors(ignores_z, x, fit, score, guide, DZ, settings, select=select)
    gap, won, _ = assert_floor(result, best, ignores_z, x, guide, score, settings)
    assert not below_zero(gap) and (won == 0).sum() >= N // 2
    assert result["capped"] == (N if max_steps == 200 else 0)


def test_a_decoder_that_is_another_function_of_z_at_each_draw_reads_no_gap_below_zero():
    """The guide's factor is the best factor under q(W); the optimum from M = 2 draws overfits them. Chosen on
    the fitting draws (where that optimum wins), the gap reads below 0 as the optimum alone does; chosen on the
    selection draws it does not, nor do the refinement rows' gaps left, nor the coupling gap."""
    x = images()
    fit, score, select = sampled("W", (DX, DZ))
    tau = (1 + SPREAD ** 2 * DX / SIGMA ** 2) ** -0.5
    guide = (torch.zeros(N, DZ), torch.full((N, DZ), tau))
    assert below_zero(optimum_alone(random_decoder, x, guide, fit, score, SETTINGS))
    on_fit, _ = measure_factors(random_decoder, x, fit, score, guide, DZ, SETTINGS)
    assert below_zero(torch.tensor(on_fit["per_image"]["amortization_gap"]))
    assert on_fit["select_draws"] is None and "the fitting draws" in on_fit["estimator"]
    result, best = measure_factors(random_decoder, x, fit, score, guide, DZ, SETTINGS, refine_steps=(0, 5, 20, 100),
                                   select=select)
    gap, won, se = assert_floor(result, best, random_decoder, x, guide, score, SETTINGS)
    assert not below_zero(gap) and result["select_draws"] == SETTINGS.select_draws
    assert result["q_star_from"]["the guide's factor, optimized"] == 0  # the overfitted optimum never wins
    names = list(result["q_star_from"])
    for row in result["refinement"]:  # q_k is a candidate: q* is no worse, and q_k itself where it won
        left = torch.tensor(row["per_image"])
        assert not below_zero(left), row["steps"]
        if row["steps"]:
            assert (left[won == names.index("the guide's factor after %d refinement steps" % row["steps"])] == 0).all()
    assert result["q_star_from"]["the guide's factor after 5 refinement steps"] > 0  # the rows near the guide's
    assert sum(result["q_m_star_from"].values()) == N * SETTINGS.theta_draws
    assert result["coupling_gap"]["mean"] > 0
    # the coupling gap's standard error holds the score draws' part of L(q*), computed apart, and more (the θ_m's)
    scored = per_draw(random_decoder, x, best.loc, best.log_scale.exp(), score.at("score"), SETTINGS.samples)
    coupling_se = torch.tensor(result["per_image"]["coupling_gap_stderr"])
    assert (coupling_se > scored.std(0) / math.sqrt(len(score))).all()
    assert "q* per image came from: the guide's factor: %d;" % (won == 0).sum() in format_gap(dict(
        result, n_images=N, run="hand-written", split="test", optimized_plugin_mse=0.0))



def test_more_refinement_steps_never_leave_a_worse_factor_on_the_selection_draws():
    """Refinement on M = 2 draws of a decoder that is another function of z at each draw overfits them: on the
    selection draws the factors of 20 and 100 raw steps end below those of fewer, for every image. Each row keeps,
    per image, the best on the selection draws of the guide's factor and the iterates of at most its steps (as q*
    keeps its best), says which (``kept_steps``), and its gap left is that factor's: so a row of more steps is never
    worse there than one of fewer, from the same start."""
    x = images()
    fit, score, select = sampled("W", (DX, DZ))
    tau = (1 + SPREAD ** 2 * DX / SIGMA ** 2) ** -0.5
    guide = (torch.zeros(N, DZ), torch.full((N, DZ), tau))
    steps = (0, 5, 20, 100)
    raw = {k: refine(random_decoder, x, guide[0], guide[1].log(), fit.at("refine"), SETTINGS.refine_lr, k,
                     SETTINGS.step_samples) if k else (guide[0], guide[1].log()) for k in steps}
    on_select = {k: per_draw(random_decoder, x, loc, log_scale.exp(), select.at("select"), SETTINGS.samples).mean(0)
                 for k, (loc, log_scale) in raw.items()}
    assert (on_select[100] < on_select[20]).all() and (on_select[20] < on_select[5]).sum() >= N // 2  # overfitted
    result, _ = measure_factors(random_decoder, x, fit, score, guide, DZ, SETTINGS, refine_steps=steps, select=select)
    optimum = torch.tensor(result["per_image"]["elbo_optimized"])
    scored = torch.stack([local_elbo(random_decoder, x, loc, log_scale.exp(), score.at("score"), SETTINGS.samples)
                          for loc, log_scale in raw.values()])
    kept, value = {}, {}
    for k in steps:
        among = torch.stack([on_select[j] for j in steps if j <= k])
        kept[k], value[k] = torch.tensor(steps)[among.argmax(0)], among.max(0).values
    for row in result["refinement"]:  # the kept factor's gap left
        chosen = scored[[steps.index(j) for j in kept[row["steps"]].tolist()], range(N)]
        assert torch.allclose(torch.tensor(row["per_image"]), optimum - chosen), row["steps"]
    assert [row["kept_steps"] for row in result["refinement"]] == [kept[k].tolist() for k in steps]
    assert all((value[more] >= value[fewer]).all() for fewer, more in zip(steps, steps[1:]))
    assert kept[100].tolist() != [100] * N


def affine(params, v, context):
    """An elementwise affine transform u = v e^a + c, params (a, c): log |det| = Σ a; identity at zeros."""
    a, c = params.chunk(2)
    return v * a.exp() + c, a.sum().expand(v.shape[:-1])


def test_in_a_flow_family_the_guides_flow_is_a_candidate():
    """The same decoder, the guide's factor followed by elementwise affine transforms at the identity (a flow
    family that is the Gaussian one again, so the guide's flow is its best member): chosen on the fitting draws
    every other member, optimized on them, wins and the gap reads below 0; on the selection draws it does not."""
    x = images()
    fit, score, select = sampled("W", (DX, DZ))
    tau = (1 + SPREAD ** 2 * DX / SIGMA ** 2) ** -0.5
    guide = (torch.zeros(N, DZ), torch.full((N, DZ), tau))
    flow = RowFlow(affine, torch.zeros(N, 2 * DZ), identity=torch.zeros(2 * DZ))
    settings = GapSettings(**{**vars(SETTINGS), "max_steps": 600})
    on_fit, _ = measure_factors(random_decoder, x, fit, score, guide, DZ, settings, flow=flow)
    assert below_zero(torch.tensor(on_fit["per_image"]["amortization_gap"]))
    result, best = measure_factors(random_decoder, x, fit, score, guide, DZ, settings, flow=flow, select=select)
    assert list(result["q_star_from"])[:2] == ["the guide's flow", "the guide's flow, optimized"]
    gap = torch.tensor(result["per_image"]["amortization_gap"])
    won = torch.tensor(result["per_image"]["q_star_from"])
    assert (gap[won == 0].abs() < 1e-9).all() and (won == 0).sum() >= N // 2
    assert not below_zero(gap)


def test_a_guide_at_the_posterior_reads_a_gap_of_zero_and_its_winner_is_recorded():
    """x_n ~ N(W z_n + c, σ²I) with W's columns orthogonal and no global latent: the posterior of z_n is
    N(Λ⁻¹ Wᵀ(x_n − c) / σ², Λ⁻¹) with Λ = I + WᵀW / σ² diagonal, in the mean-field family, and with it as the
    guide's factor every weight is log p(x_n): L(guide) = log p(x_n) exactly. The gap is 0 ± its noise (images
    where an optimum won by the choice's error read a little below 0, never beyond it), and so is the coupling gap
    (every q*_m the better of q* and its own optimum)."""
    W = torch.linalg.qr(torch.randn(DX, DZ, generator=torch.Generator().manual_seed(2)))[0]
    W = W * torch.tensor([3.0, 1.0, 0.3])  # orthogonal columns of three lengths
    c = torch.randn(DX, generator=torch.Generator().manual_seed(3))
    x = images()

    def linear(x, z, theta):
        return normal(x, z @ W.T + c, SIGMA) + normal(z, 0.0, 1.0)

    precision = torch.eye(DZ) + W.T @ W / SIGMA ** 2
    assert torch.allclose(precision, torch.diag(precision.diagonal()))
    guide = ((x - c) @ W / SIGMA ** 2 / precision.diagonal(), precision.diagonal().rsqrt().expand(N, DZ))
    log_px = torch.distributions.MultivariateNormal(c, SIGMA ** 2 * torch.eye(DX) + W @ W.T).log_prob(x)
    generator = torch.Generator().manual_seed(4)
    fit, score, select = (Draws.of([{}], generator) for _ in range(3))
    settings = GapSettings(**{**vars(SETTINGS), "step_samples": 1})  # the noisiest steps: the optimum drifts most
    assert below_zero(optimum_alone(linear, x, guide, fit, score, settings))
    result, best = measure_factors(linear, x, fit, score, guide, DZ, settings, select=select)
    assert torch.allclose(torch.tensor(result["per_image"]["elbo_guide"]), log_px, atol=1e-9)
    gap = torch.tensor(result["per_image"]["amortization_gap"])
    won = torch.tensor(result["per_image"]["q_star_from"])
    # one θ: the noise of L(q*) − L(guide) is L(q*)'s alone (the guide's weights are constant), by its z draws
    weights = log_weights(lambda x, z, theta: linear(x, z[None], theta)[0], x, best.loc, best.log_scale.exp(), {},
                          4000, torch.Generator().manual_seed(5))
    se = weights.std(0) / math.sqrt(settings.samples)
    assert (gap[won == 0].abs() < 1e-9).all() and (won == 0).sum() >= N // 2
    assert (gap.abs() < 4 * math.sqrt(2) * se + 1e-9).all(), (gap, se)
    assert list(result["q_star_from"].values()) == torch.bincount(won, minlength=2).tolist()
    coupling = torch.tensor(result["per_image"]["coupling_gap"])  # exactly 0 where q* and q*_m are the posterior
    assert (coupling.abs() < 1e-9).sum() >= N // 2 and not below_zero(coupling)
    rescored, _ = measure_factors(linear, x, fit, Draws.of([{}], generator), guide, DZ, settings, select=select)
    assert rescored["per_image"]["q_star_from"] == result["per_image"]["q_star_from"]  # not chosen on score draws
    assert rescored["per_image"]["elbo_optimized"] != result["per_image"]["elbo_optimized"]


def test_measure_chooses_on_draws_of_its_own():
    """The package's path: measure_gap takes the selection draws from the gap seed's generator after the fitting and
    score draws (which stay what they were), records them, and counts the winners; a table of reports made before
    says that their gaps may read below 0."""
    torch.manual_seed(0)
    model = BayesianDecoderModel(12, 10, 3, 6, obs_scale=0.3)
    guide = make_guide("shared", model, init_scale=0.2)
    x = torch.rand(5, 10)
    settings = GapSettings(theta_draws=2, score_draws=3, select_draws=4, samples=10, importance_samples=10,
                           max_steps=100, window=20, ais_steps=0)
    posterior = ModelPosterior(model, guide, x)
    fit, score = theta_draws(posterior, guide, settings, 7, selection=False)
    again, rescore, select = theta_draws(posterior, guide, settings, 7)
    assert (fit.keys, score.keys) == (again.keys, rescore.keys) and len(select) == 4
    assert not set(select.keys) & set(fit.keys + score.keys)
    report = measure_gap(model, guide, x, None, settings=settings, seed=7)
    assert report["select_draws"] == 4 and "selection draws" in report["estimator"]
    assert sum(report["q_star_from"].values()) == 5 and len(report["per_image"]["q_star_from"]) == 5
    report.update(run="r", split="test", n_images=5, guide="shared", width=None, seed=0, label="constant-VI")
    old = {k: v for k, v in report.items() if k != "select_draws"}
    assert "may read below 0" in format_reports([old]) and "may read below 0" not in format_reports([report])


def test_scoring_stderrs_are_the_draws_standard_errors_of_each_gap():
    """By hand: S = 4 per-draw differences 1, 3, 5, 7 (sd √(20/3)) → √(20/3) / 2; the coupling gap's two
    independent sets, M = 2 values 0, 2 (variance 2) and S = 4 values of L(q*) 0, 0, 4, 4 (variance 16/3) →
    √(2/2 + (16/3)/4); one draw in a set, or no guide, no coupling: None."""
    from amortized_pyro.local.estimates import scoring_stderrs
    optimized = torch.tensor([[0.0], [0.0], [4.0], [4.0]])
    guide = optimized - torch.tensor([[1.0], [3.0], [5.0], [7.0]])
    per_theta = torch.tensor([[0.0], [2.0]])
    found = scoring_stderrs(optimized, guide, per_theta)
    assert found["amortization_gap_stderr"].item() == pytest.approx(math.sqrt(20 / 3) / 2)
    assert found["coupling_gap_stderr"].item() == pytest.approx(math.sqrt(1 + 4 / 3))
    assert scoring_stderrs(optimized[:1], guide[:1], per_theta) == {"amortization_gap_stderr": None,
                                                                     "coupling_gap_stderr": None}
    assert scoring_stderrs(optimized, None, None) == {"amortization_gap_stderr": None, "coupling_gap_stderr": None}
