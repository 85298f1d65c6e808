"""The gap of a model that is not broadcast-safe over the estimators' draws (autoguides/local_joint.py, ``draws``):
a CVAE whose decoder takes ``torch.cat([z, y], -1)`` with the label y [B, C] (z then has leading draw dims) and
a decoder with BatchNorm1d in eval mode (it takes 2-D or [N, C, L] input only). measure_gap, capacity_sweep and an
SA-VI guide's own steps run on both, one draw at a time (automatically, saying so once, or forced), and give the
numbers of a broadcast-safe rewrite of the same model (y expanded to z's leading dims; BatchNorm's eval-mode
affine map written out).

Tolerances, in float64: against the rewrite run one draw at a time the numbers are equal exactly (the same
operations on the same values, draw by draw). Against the rewrite run stacked (its default) the per-draw values
are the same functions computed in another batch layout, so they differ by rounding (≤ 2e-15 seen, for log
densities of order 10); the optimizers' stopping rules would turn such a difference into a different stop only
where a window's mean sat within 1e-14 nats of its threshold, so 1e-9 is the stated tolerance: wide against
rounding, a millionth of any real discrepancy (a wrong θ or z draw moves these numbers by 0.01 nats or more)."""
import copy
import warnings

import pytest
import torch
from torch import nn

import pyro
import pyro.distributions as dist
from pyro.infer import Trace_ELBO

from amortized_pyro import AmortizedPyroError
from amortized_pyro.autoguides import (AutoAmortizedNormal, AutoSemiAmortizedNormal, EncoderTraining, LocalJoint,
                                       capacity_sweep, measure_gap)
from amortized_pyro.autoguides.local_joint import NotBroadcastSafe
from amortized_pyro.local.gaps import GapSettings

N, DX, DZ, C, H = 7, 6, 2, 3, 5  # N != H: BatchNorm1d would read stacked draws [D, N, H] as N channels and fail
# select_draws=3, not the default 32: q*'s choice among its candidates on the selection draws runs one draw at a
# time as every phase does, the same code at 3 draws as at 32, which were a third of these tests' time
SETTINGS = GapSettings(theta_draws=2, score_draws=3, select_draws=3, samples=20, importance_samples=20, ais_steps=3,
                       ais_chains=2, leapfrog=2, max_steps=60, window=10, patience=2, step_samples=4)
ROUNDING = 1e-9  # the module docstring's tolerance against the rewrite run stacked


class Models:
    """The two non-broadcast-safe models and their broadcast-safe rewrites, on shared fixed decoders (float64)."""

    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        torch.manual_seed(0)
        self.x = torch.randn(N, DX, generator=generator)
        self.y = nn.functional.one_hot(torch.arange(N) % C, C).to(torch.float64)
        self.cat_decoder = nn.Sequential(nn.Linear(DZ + C, H), nn.Softplus(), nn.Linear(H, DX))
        self.bn_decoder = nn.Sequential(nn.Linear(DZ, H), nn.BatchNorm1d(H), nn.Softplus(), nn.Linear(H, DX)).eval()
        norm = self.bn_decoder[1]
        with torch.no_grad():  # running statistics and an affine part away from the identity
            norm.running_mean.copy_(torch.randn(H, generator=generator))
            norm.running_var.copy_(torch.rand(H, generator=generator) + 0.5)
            norm.weight.copy_(torch.randn(H, generator=generator))
            norm.bias.copy_(torch.randn(H, generator=generator))
        scale = norm.weight / (norm.running_var + norm.eps).sqrt()
        affine = nn.Linear(H, H)  # BatchNorm1d in eval mode: the same affine map on every row, written out
        with torch.no_grad():
            affine.weight.copy_(torch.diag(scale))
            affine.bias.copy_(norm.bias - norm.running_mean * scale)
        self.affine_decoder = nn.Sequential(self.bn_decoder[0], affine, nn.Softplus(), self.bn_decoder[3])

    def cvae(self, x, y):
        sigma = pyro.sample("sigma", dist.LogNormal(-1.0, 0.3))
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
            pyro.sample("x", dist.Normal(self.cat_decoder(torch.cat([z, y], -1)), sigma).to_event(1), obs=x)

    def cvae_safe(self, x, y):
        sigma = pyro.sample("sigma", dist.LogNormal(-1.0, 0.3))
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
            loc = self.cat_decoder(torch.cat([z, y.expand(z.shape[:-1] + y.shape[-1:])], -1))
            pyro.sample("x", dist.Normal(loc, sigma[..., None]).to_event(1), obs=x)

    def _with_decoder(self, x, decoder):
        """A global σ, per datapoint z and a positive τ (a local site with a Jacobian term)."""
        sigma = pyro.sample("sigma", dist.LogNormal(-1.0, 0.3))
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
            tau = pyro.sample("tau", dist.Gamma(4.0, 4.0))
            pyro.sample("x", dist.Normal(decoder(z), (sigma * tau).unsqueeze(-1)).to_event(1), obs=x)

    def batchnorm(self, x):
        self._with_decoder(x, self.bn_decoder)

    def batchnorm_safe(self, x):
        self._with_decoder(x, self.affine_decoder)


@pytest.fixture
def models():
    torch.set_default_dtype(torch.float64)  # conftest's fixture restores float32
    return Models()


def cvae_guide(model):
    guide = AutoAmortizedNormal(model, encoder_input=lambda x, y: torch.cat([x, y], -1), width=4, layers=1)
    torch.manual_seed(1)
    with torch.no_grad():
        guide(torch.zeros(N, DX), torch.zeros(N, C))
    return guide


def measured(model, guide, *args, **options):
    """measure_gap's per-datapoint values as tensors, and the NotBroadcastSafe warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = measure_gap(model, guide, *args, settings=SETTINGS, **options)
    values = {k: torch.tensor(v) for k, v in report["per_image"].items() if v is not None}
    values.update({"refined %d" % r["steps"]: torch.tensor(r["per_image"]) for r in report["refinement"]})
    return values, [str(w.message) for w in caught if issubclass(w.category, NotBroadcastSafe)]


def assert_same(got, expected, atol=0.0):
    assert got.keys() == expected.keys()
    for name in got:
        assert torch.allclose(got[name], expected[name], rtol=0, atol=atol), (name, got[name] - expected[name])


def says_one_line(said):
    assert len(said) == 1, said
    assert "\n" not in said[0] and "not broadcast-safe" in said[0] and "one at a time" in said[0], said[0]


def test_a_cvae_measures_as_its_broadcast_safe_rewrite(models):
    with pyro.settings.context(module_local_params=True):
        guide = cvae_guide(models.cvae)
        args = (models.x, models.y)
        with pytest.raises(RuntimeError):  # the model as it is, stacked: the raw error
            measure_gap(models.cvae, guide, *args, settings=SETTINGS, draws="stacked")
        auto, said = measured(models.cvae, guide, *args)
        forced, said_forced = measured(models.cvae, guide, *args, draws="one-at-a-time")
        rewrite, said_rewrite = measured(models.cvae_safe, guide, *args)
        rewrite_one, _ = measured(models.cvae_safe, guide, *args, draws="one-at-a-time")
    says_one_line(said)
    assert "RuntimeError" in said[0] and not said_forced and not said_rewrite
    assert_same(auto, forced)
    assert_same(forced, rewrite_one)  # exactly: the same operations draw by draw
    assert_same(forced, rewrite, ROUNDING)
    assert auto["amortization_gap"].abs().min() > 0.01  # numbers that a wrong draw would move


def test_an_sa_vi_guide_on_a_batchnorm_decoder_measures_as_the_affine_rewrite(models):
    """SA-VI refines inside the guide on the log joint read off the model's trace: that one falls back too, and
    measure_gap's forced option reaches it."""
    with pyro.settings.context(module_local_params=True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        guides = {}
        for model in (models.batchnorm, models.batchnorm_safe):
            guides[model] = AutoSemiAmortizedNormal(model, steps=2, width=4, layers=1)
            torch.manual_seed(1)
            with torch.no_grad():
                guides[model](models.x)  # the guide's first call refines (at its own θ draw): the first stacked call
        guide = guides[models.batchnorm]
        guides[models.batchnorm_safe].load_state_dict(guide.state_dict())
        said_setup = [str(w.message) for w in caught if issubclass(w.category, NotBroadcastSafe)]
        options = dict(refine_steps=(0, 2))
        guide.structure = copy.copy(guide.structure)  # as a guide restored in a fresh process: not known unsafe
        forced, said_forced = measured(models.batchnorm, guide, models.x, draws="one-at-a-time", **options)
        auto, said = measured(models.batchnorm, guide, models.x, **options)
        rewrite, said_rewrite = measured(models.batchnorm_safe, guides[models.batchnorm_safe], models.x, **options)
    says_one_line(said_setup)
    assert "running_mean" in said_setup[0]
    says_one_line(said)  # the guide's steps and the measure: one model, one guide, one line
    assert not said_forced and not said_rewrite  # forced: the guide's own steps take the option too
    assert_same(auto, forced)
    assert_same(forced, rewrite, ROUNDING)
    assert auto["refined 2"].abs().min() > 0.01


def test_gradients_flow_through_the_draws_one_at_a_time(models):
    """q*'s optimizers need ∂ log p / ∂u: one draw at a time gives the stacked rewrite's values and gradients,
    for the gap's stacked θ draws and for particles (SA-VI's refinement inside the guide)."""
    with pyro.settings.context(module_local_params=True):
        guide = cvae_guide(models.cvae)
    generator = torch.Generator().manual_seed(3)
    cases = [(True, (2, 3), {"sigma": torch.rand(2, generator=generator) + 0.2}),  # M = 2 draws, S = 3 z draws each
             (False, (1, 4), {"sigma": torch.rand(4, 1, generator=generator) + 0.2}),  # 4 particles [P, 1]
             (False, (), {"sigma": torch.tensor(0.4)})]  # one plain θ, u [B, size]
    for stacked, lead, theta in cases:
        u = torch.randn(lead + (N, DZ), generator=generator)
        results = []
        for model, draws in ((models.cvae, "one-at-a-time"), (models.cvae_safe, "stacked")):
            leaf = u.clone().requires_grad_()
            joint = LocalJoint(model, guide.structure, (models.x, models.y), stacked=stacked, draws=draws)
            value = joint(None, leaf, theta)
            value.sum().backward()
            results.append((value.detach(), leaf.grad))
        (value, grad), (expected, expected_grad) = results
        assert value.shape == lead + (N,) and grad.abs().min() > 0
        assert torch.allclose(value, expected, rtol=0, atol=ROUNDING) and torch.allclose(grad, expected_grad,
                                                                                          rtol=0, atol=ROUNDING)


def test_the_fallback_says_its_line_once_per_model_and_guide(models):
    with pyro.settings.context(module_local_params=True):
        guide = cvae_guide(models.cvae)
    u, theta, args = torch.randn(2, 3, N, DZ), {"sigma": torch.rand(2) + 0.2}, (models.x, models.y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = LocalJoint(models.cvae, guide.structure, args, stacked=True)(None, u, theta)
        LocalJoint(models.cvae, guide.structure, args, stacked=True)(None, u, theta)  # known: no stacked attempt
        LocalJoint(models.cvae_safe, guide.structure, args, stacked=True)(None, u, theta)  # another model: stacked
    said = [str(w.message) for w in caught if issubclass(w.category, NotBroadcastSafe)]
    says_one_line(said)
    assert "RuntimeError" in said[0] and "about 6 times slower" in said[0]  # 2 θ draws × 3 z draws
    assert first.shape == (2, 3, N)
    for bad in ("each", None):
        with pytest.raises(AmortizedPyroError, match="draws must be one of"):
            LocalJoint(models.cvae, guide.structure, args, draws=bad)
    with pytest.raises(AmortizedPyroError, match="draws must be one of"):
        measure_gap(models.cvae, guide, *args, settings=SETTINGS, draws="loop")
    with pytest.raises(AmortizedPyroError, match="draws must be one of"):
        capacity_sweep(models.cvae, guide, args, draws="loop")


def test_sa_vi_trains_on_a_model_that_is_not_broadcast_safe(models):
    with pyro.settings.context(module_local_params=True):
        guide = AutoSemiAmortizedNormal(models.cvae, steps=2, encoder_input=lambda x, y: torch.cat([x, y], -1),
                                        width=4, layers=1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            guide(models.x, models.y)
            before = [p.detach().clone() for p in guide.q_z.encoder.parameters()]
            optimizer, loss_fn = torch.optim.Adam(guide.parameters(), lr=1e-2), Trace_ELBO()(models.cvae, guide)
            losses = []
            for _ in range(3):
                optimizer.zero_grad()
                loss = loss_fn(models.x, models.y)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
    said = [str(w.message) for w in caught if issubclass(w.category, NotBroadcastSafe)]
    says_one_line(said)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert all(not torch.equal(b, p) for b, p in zip(before, guide.q_z.encoder.parameters()))  # the encoder learns


def test_a_capacity_sweep_runs_as_on_the_rewrite(models):
    training = EncoderTraining(max_epochs=4, encoder_window=2, lr_halvings=0)
    sweep = dict(widths=(3,), training=training, settings=SETTINGS, log=lambda line: None)
    with pyro.settings.context(module_local_params=True):
        guide = cvae_guide(models.cvae)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            auto = capacity_sweep(models.cvae, guide, (models.x, models.y), **sweep)
        forced = capacity_sweep(models.cvae, guide, (models.x, models.y), draws="one-at-a-time", **sweep)
        rewrite = capacity_sweep(models.cvae_safe, guide, (models.x, models.y), **sweep)
    says_one_line([str(w.message) for w in caught if issubclass(w.category, NotBroadcastSafe)])
    assert len(auto) == len(forced) == len(rewrite) == 1
    for row, atol in ((forced[0], 0.0), (rewrite[0], ROUNDING)):
        assert row["epochs"] == auto[0]["epochs"] and abs(row["encoder_elbo"] - auto[0]["encoder_elbo"]) <= atol
        for name, values in row["per_image"].items():
            if values is not None:
                assert torch.allclose(torch.tensor(values), torch.tensor(auto[0]["per_image"][name]), rtol=0,
                                      atol=atol), name
