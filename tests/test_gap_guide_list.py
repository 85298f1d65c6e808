"""measure_gap through Pyro's AutoGuideList (issue 69, item 2: the semi-supervised VAE M2's guide, the classifier a
part beside the builder): the builder part's gap with the other parts' sites held at one draw each, against closed
forms. The model: per datapoint w_n ~ N(0, 1), guided by the other part (hand-written, or AutoNormal), z_n ~ N(0, I),
x_n ~ N(W z_n + b + c w_n, σ² I). Given w_n the posterior of z_n is LinearGaussian's on x_n − c w_n, so at the held
draw log p(x_n, w_n) = log N(w_n; 0, 1) + log N(x_n − c w_n; b, W Wᵀ + σ² I), and the ELBO of any factor and
the best mean-field one are closed form (plus log N(w_n; 0, 1): the held site's log-density stays in the log
joint). Each estimate must match within 4 standard errors (the z draws' Monte Carlo error) plus what Adam's best
iterate may leave, as in tests/test_autoguide_gap.py; and the closed form at another draw of w must not match (the
draw is the one the measurement's seed gives, none other). The refusals, each in one line."""
import math

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer.autoguide import AutoDelta, AutoGuideList, AutoNormal

from amortized_pyro.autoguides import AutoAmortizedNormal, LocalJoint, measure_gap
from amortized_pyro.autoguides.guide_list import held_draws
from amortized_pyro.errors import GuideError
from amortized_pyro.local.estimates import log_weights
from amortized_pyro.local.gaps import GapSettings
from toy_models import LinearGaussian

N, DX, DZ, SIGMA = 5, 6, 2, 0.5
SETTINGS = GapSettings(samples=2000, importance_samples=2000, chunk=1000, lr=0.02, step_samples=32, window=50,
                       patience=5, max_steps=4000, ais_steps=0, seed=3)
OPT = 0.02  # what Adam's best iterate may leave of an optimum here, in nats (as in test_autoguide_gap)
TINY = GapSettings(samples=8, importance_samples=8, max_steps=10, window=5, ais_steps=0)


class HeldLinearGaussian(LinearGaussian):
    """LinearGaussian with a local w_n ~ N(0, 1) shifting x_n by c w_n (c: ``loading`` per coordinate)."""

    def __init__(self):
        # W's columns correlated 0.4: IWAE's weights from the best mean-field proposal have finite variance
        # (tests/test_autoguide_gap.py's model without globals)
        super().__init__(N, DX, DZ, SIGMA, correlation=0.4)
        self.loading = torch.linspace(-1.5, 1.5, DX)

    def model(self, x):
        with pyro.plate("data", len(x)):
            w = pyro.sample("w", dist.Normal(0.0, 1.0))
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([self.dz]).to_event(1))
            pyro.sample("x", dist.Normal(z @ self.W.T + self.b + w.unsqueeze(-1) * self.loading, self.sigma)
                        .to_event(1), obs=x)

    def shifted(self, w):
        return self.x - w.unsqueeze(-1) * self.loading


def plates(x):
    """The lists' create_plates: the model's plate at each call."""
    return pyro.plate("data", len(x))


def guide_list(toy, other):
    """The builder's q(z | x) (on the model with w hidden) beside ``other``'s q(w): "hand", a function of x in the
    list's plate; "AutoNormal", one factor per datapoint, its locs moved from 0."""
    guide = AutoGuideList(toy.model, create_plates=plates)
    guide.append(AutoAmortizedNormal(poutine.block(toy.model, hide=["w"])))
    if other == "hand":
        def guide_w(x):
            with guide.plates["data"]:
                pyro.sample("w", dist.Normal(0.3 * (x[:, 0] - x[:, -1]), 0.5))
        guide.append(guide_w)
    else:
        guide.append(AutoNormal(poutine.block(toy.model, expose=["w"]), init_scale=0.5))
    guide(toy.x)
    if other == "AutoNormal":
        with torch.no_grad():
            guide[1].locs.w.copy_(torch.linspace(-2.0, 2.0, N))
    return guide


def elbo_se(joint, loc, scale, samples, seed):
    """Standard error of a local-ELBO estimate with ``samples`` z draws, from an independent sample."""
    draws = log_weights(joint, None, loc, scale, {}, samples, torch.Generator().manual_seed(seed))
    return draws.std(0) / math.sqrt(samples)


def iwae_se(joint, loc, scale, samples, seed):
    """Delta-method standard error of IWAE's log (1/K) Σ_k w_k with K = ``samples`` draws from the factor."""
    log_w = log_weights(joint, None, loc, scale, {}, samples, torch.Generator().manual_seed(seed))
    w = (log_w - log_w.max(0).values).exp()
    return w.std(0) / w.mean(0) / math.sqrt(samples)


@pytest.mark.parametrize("other", ["hand", "AutoNormal"])
def test_the_builder_parts_gap_at_the_held_draw_matches_closed_forms(other):
    torch.set_default_dtype(torch.float64)
    try:
        with pyro.settings.context(module_local_params=True):
            toy = HeldLinearGaussian()
            guide = guide_list(toy, other)
            part = guide[0]
            report = measure_gap(toy.model, guide, toy.x, settings=SETTINGS)
            w = held_draws(guide, part, (toy.x,), {}, SETTINGS.seed)["w"]  # the draw measure_gap held
            with torch.no_grad():
                factor = part.local_factor(part.indices_of(toy.x), (toy.x,), {}, {})
            joint = LocalJoint(poutine.condition(toy.model, data={"w": w}), part.structure, (toy.x,), {})
            best = (toy.posterior_mean(toy.shifted(w)), toy.best_scale().expand(N, DZ))
            se = {"elbo_guide": elbo_se(joint, *factor, SETTINGS.samples, 7),
                  "elbo_optimized": elbo_se(joint, *best, SETTINGS.samples, 7),
                  "log_px": iwae_se(joint, *best, SETTINGS.importance_samples, 8)}
            other_w = held_draws(guide, part, (toy.x,), {}, SETTINGS.seed + 10)["w"]
    finally:
        torch.set_default_dtype(torch.float32)
    assert report["held_at_draws"] == ["w"]
    got = {k: torch.tensor(v) for k, v in report["per_image"].items() if v is not None}
    prior_w = dist.Normal(0.0, 1.0).log_prob(w)

    def exact(at):
        return {"log_px": dist.Normal(0.0, 1.0).log_prob(at) + toy.log_px(toy.shifted(at)),
                "elbo_guide": dist.Normal(0.0, 1.0).log_prob(at) + toy.elbo(toy.shifted(at), *factor),
                "elbo_optimized": dist.Normal(0.0, 1.0).log_prob(at) + toy.elbo(
                    toy.shifted(at), toy.posterior_mean(toy.shifted(at)), toy.best_scale().expand(N, DZ))}

    want = exact(w)
    assert torch.allclose(want["elbo_optimized"], prior_w + toy.elbo(toy.shifted(w), *best))
    amortization = want["elbo_optimized"] - want["elbo_guide"]
    assert amortization.mean() > 1 and (amortization > 0.1).all() and toy.approximation_gap() > 0.1  # not 0
    assert ((got["log_px"] - want["log_px"]).abs() < 4 * se["log_px"] + 1e-6).all()
    assert ((got["elbo_guide"] - want["elbo_guide"]).abs() < 4 * se["elbo_guide"]).all()
    assert (got["elbo_optimized"] < want["elbo_optimized"] + 4 * se["elbo_optimized"]).all()
    assert (got["elbo_optimized"] > want["elbo_optimized"] - 4 * se["elbo_optimized"] - OPT).all()
    assert ((got["amortization_gap"] - amortization).abs()
            < 4 * torch.hypot(se["elbo_guide"], se["elbo_optimized"]) + OPT).all()
    assert ((got["approximation_gap"] - toy.approximation_gap()).abs() < 4 * se["log_px"] + OPT).all()
    # at another draw of w the closed form is another: what matched is the draw of the measurement's seed
    elsewhere = exact(other_w)
    assert ((got["log_px"] - elsewhere["log_px"]).abs() > 4 * se["log_px"] + 1e-6).any()


def test_the_held_draw_is_the_measurements_seeds_and_leaves_the_global_stream():
    with pyro.settings.context(module_local_params=True):
        toy = HeldLinearGaussian()
        guide = guide_list(toy, "AutoNormal")
        part = guide[0]
        torch.manual_seed(1)
        before = torch.get_rng_state()
        first = held_draws(guide, part, (toy.x,), {}, 5)["w"]
        assert torch.equal(torch.get_rng_state(), before)  # the global stream as it was
        torch.manual_seed(2)  # another global stream: the same draw
        assert torch.equal(held_draws(guide, part, (toy.x,), {}, 5)["w"], first)
        assert not torch.equal(held_draws(guide, part, (toy.x,), {}, 6)["w"], first)
        report = measure_gap(toy.model, guide, toy.x, settings=TINY, seed=5)
        hand = guide_list(toy, "hand")  # its q(w | x) amortized, as M2's classifier: new data of another size
        other = measure_gap(toy.model, hand, toy.x[:3], settings=TINY, seed=5)
    assert report["held_at_draws"] == ["w"] and len(report["per_image"]["amortization_gap"]) == N
    assert other["held_at_draws"] == ["w"] and len(other["per_image"]["amortization_gap"]) == 3


def one_line_refusal(model, guide, x, match):
    with pytest.raises(GuideError, match=match) as refusal:
        measure_gap(model, guide, x, settings=TINY)
    assert "\n" not in str(refusal.value)
    return str(refusal.value)


def test_a_list_with_no_builder_part_or_two_is_refused_in_one_line():
    with pyro.settings.context(module_local_params=True):
        toy = HeldLinearGaussian()
        none = AutoGuideList(toy.model, create_plates=plates)
        none.append(AutoNormal(poutine.block(toy.model, expose=["z"])))
        none.append(AutoNormal(poutine.block(toy.model, expose=["w"])))
        none(toy.x)
        one_line_refusal(toy.model, none, toy.x, "not AutoGuideList, except a list with exactly one builder part "
                                                 r".*this one has 0 of its 2 parts \(AutoNormal, AutoNormal\)")
        two = AutoGuideList(toy.model, create_plates=plates)
        two.append(AutoAmortizedNormal(poutine.block(toy.model, hide=["w"])))
        two.append(AutoAmortizedNormal(poutine.block(toy.model, hide=["z"])))
        two(toy.x)
        one_line_refusal(toy.model, two, toy.x, "this one has 2 of its 2 parts")


def test_a_held_site_outside_the_builders_data_plate_is_refused_in_one_line():
    """A global site guided by another part: one draw shared by every datapoint, refused (the line says why)."""
    toy = HeldLinearGaussian()

    def model(x):
        scale = pyro.sample("scale", dist.LogNormal(0.0, 0.3))
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
            pyro.sample("x", dist.Normal(z @ toy.W.T + toy.b, scale).to_event(1), obs=x)

    with pyro.settings.context(module_local_params=True):
        guide = AutoGuideList(model, create_plates=plates)
        guide.append(AutoAmortizedNormal(poutine.block(model, hide=["scale"])))
        guide.append(AutoDelta(poutine.block(model, expose=["scale"])))
        guide(toy.x)
        line = one_line_refusal(model, guide, toy.x, "the site 'scale' is outside it")
    assert "data plate 'data'" in line and "one draw shared by every datapoint" in line


def test_a_hand_written_guide_keeps_its_refusal():
    toy = HeldLinearGaussian()

    def hand(x):
        with pyro.plate("data", len(x)):
            pyro.sample("w", dist.Normal(0.0, 1.0))
            pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))

    line = one_line_refusal(toy.model, hand, toy.x, "measure_gap takes a guide builder of amortized_pyro.autoguides, "
                                                    "not function: it reads the guide's factor of each datapoint")
    assert "AutoGuideList" not in line
