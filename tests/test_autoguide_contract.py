"""Pyro's autoguide contract for every builder, with and without a flow where it has one: the ideas of Pyro's own
generic tests (tests/infer/test_autoguide.py: test_shapes over supports × init_loc_fn × ELBOs, test_median,
test_quantiles, test_serialization, test_init_loc_fn, test_init_scale, test_predictive, test_replay_plates,
test_subsample_model/guide, test_exact_batch, test_discrete_helpful_error, a model whose data change size),
written here for models whose local sites sit in a data plate."""
import io
import math
import pickle

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import (SVI, JitTrace_ELBO, JitTraceMeanField_ELBO, Predictive, Trace_ELBO, TraceGraph_ELBO,
                        TraceMeanField_ELBO)
from pyro.infer.autoguide import init_to_feasible, init_to_mean, init_to_median, init_to_sample, init_to_value

from amortized_pyro.autoguides import (AutoAmortizedNormal, AutoIterativeAmortizedNormal, AutoPerDatapointNormal,
                                       AutoSemiAmortizedNormal, AutoSharedNormal)
from amortized_pyro.autoguides.posterior import FLOW_DRAWS
from amortized_pyro.autoguides.encoders import SCALE_LINKS
from amortized_pyro.errors import AmortizedPyroError

N, DX = 6, 3
BUILDERS = {
    "amortized": lambda model, **k: AutoAmortizedNormal(model, width=8, **k),
    "semi-amortized": lambda model, **k: AutoSemiAmortizedNormal(model, width=8, steps=2, **k),
    "iterative": lambda model, **k: AutoIterativeAmortizedNormal(model, width=8, iterations=2, **k),
    "per-datapoint": lambda model, **k: AutoPerDatapointNormal(model, **k),
    "shared": lambda model, **k: AutoSharedNormal(model, **k),
    "amortized+flow": lambda model, **k: AutoAmortizedNormal(model, width=8, **{"flow": 1, "flow_width": 8, **k}),
    "per-datapoint+flow": lambda model, **k: AutoPerDatapointNormal(model, **{"flow": 1, "flow_width": 8, **k}),
    "shared+flow": lambda model, **k: AutoSharedNormal(model, **{"flow": 1, "flow_width": 8, **k}),
}
FREE = ("per-datapoint", "shared", "per-datapoint+flow", "shared+flow")


@pytest.fixture(autouse=True)
def clean_store():
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


def data(n=N, seed=0):
    return torch.randn(n, DX, generator=torch.Generator().manual_seed(seed))


def supports(x):
    """Local sites of four supports (real vector, positive, simplex, unit interval) beside a global one."""
    w = pyro.sample("w", dist.Normal(torch.zeros(2, DX), 1.0).to_event(2))
    with pyro.plate("data", len(x)):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        s = pyro.sample("s", dist.LogNormal(0.0, 0.5))
        p = pyro.sample("p", dist.Dirichlet(torch.ones(3)))
        b = pyro.sample("b", dist.Beta(2.0, 2.0))
        mean = (z.unsqueeze(-2) @ w).squeeze(-2) + p[..., :1] + b.unsqueeze(-1)
        pyro.sample("x", dist.Normal(mean, s.unsqueeze(-1)).to_event(1), obs=x)


def prior_only(x):
    """No likelihood: the posterior is the prior, whose medians and quantiles are known (x feeds the encoders)."""
    pyro.sample("g", dist.Normal(-1.0, 1.0))
    with pyro.plate("data", len(x)):
        pyro.sample("z", dist.Normal(1.0, 1.0))
        pyro.sample("y", dist.LogNormal(0.0, 1.0))
        pyro.sample("b", dist.Beta(4.0, 2.0))


def latent_shapes(trace):
    return {name: tuple(site["value"].shape) for name, site in trace.nodes.items()
            if site["type"] == "sample" and not site["is_observed"] and not name.startswith("_")
            and name != "data" and not name.endswith("_unconstrained")}


@pytest.mark.parametrize("init_loc_fn", [init_to_feasible, init_to_mean, init_to_median, init_to_sample],
                         ids=["feasible", "mean", "median", "sample"])
@pytest.mark.parametrize("name", BUILDERS)
def test_shapes(name, init_loc_fn):
    """Every support, every init strategy: a finite loss, and the guide's sites shaped as the model's."""
    pyro.set_rng_seed(0)
    x = data()
    guide = BUILDERS[name](supports, init_loc_fn=init_loc_fn)
    assert math.isfinite(Trace_ELBO().loss(supports, guide, x))
    guide_trace = poutine.trace(guide).get_trace(x)
    model_trace = poutine.trace(poutine.replay(supports, trace=guide_trace)).get_trace(x)
    assert latent_shapes(guide_trace) == latent_shapes(model_trace)


@pytest.mark.parametrize("Elbo", [Trace_ELBO, TraceGraph_ELBO, TraceMeanField_ELBO, JitTrace_ELBO,
                                  JitTraceMeanField_ELBO])
@pytest.mark.parametrize("name", BUILDERS)
def test_elbos(name, Elbo):
    """Each of Pyro's ELBOs (the JIT ones included) trains each builder, SA-VI and IA-VI too (their steps inside
    the guide run as one Python node of the trace): finite steps, and the JIT loss is the plain one's estimator
    (tests/test_jit.py: the same number at the same seed, on calls with other data than the traced one)."""
    x = data()
    pyro.set_rng_seed(0)
    guide = BUILDERS[name](supports)
    guide(x)
    elbo = Elbo(ignore_jit_warnings=True) if Elbo.__name__.startswith("Jit") else Elbo()
    if Elbo.__name__.startswith("Jit"):
        # the same estimator: the means of their losses within 4 standard errors of their difference (the JIT
        # mean-field ELBO traces again on each call, so its draws are not the plain one's at the same seed). Each
        # of its calls costs 10-20 plain ones: 12 of them, beside 30 plain calls of 20 vectorized particles each
        # (the same mean; 600 draws), a standard error 1.13× that of 30 calls beside 30, in half the time
        mean_field = "MeanField" in Elbo.__name__
        plain = TraceMeanField_ELBO(num_particles=20, vectorize_particles=True, max_plate_nesting=1) if mean_field \
            else Trace_ELBO()
        pyro.set_rng_seed(1)
        losses = [torch.tensor([e.differentiable_loss(supports, guide, x).item() for _ in range(n)])
                  for e, n in zip((plain, elbo), (30, 12) if mean_field else (30, 30))]
        se = math.hypot(*(loss.std().item() / math.sqrt(len(loss)) for loss in losses))
        assert abs(losses[0].mean() - losses[1].mean()) < 4 * se
    svi = SVI(supports, guide, pyro.optim.Adam({"lr": 0.01}), elbo)
    assert all(math.isfinite(svi.step(x)) for _ in range(3))


def trained_on_the_prior(name):
    # a flow's transforms train too; the free factors' σ start at init_scale 0.1 and need 300 steps to reach the
    # prior's (their 10-90% spread is 3.4 times its tolerance off at 150); an encoder's heads are there by 150
    # (the worst median then 0.6 of its tolerance, a flow's at 250 as well)
    steps = 250 if "flow" in name else 300 if name in FREE else 150
    x = data()
    pyro.set_rng_seed(0)
    guide = BUILDERS[name](prior_only, **({} if name in FREE else {"encoder_input": 0}))  # x is not observed
    elbo = Trace_ELBO(num_particles=20, vectorize_particles=True, max_plate_nesting=1)
    optim = pyro.optim.ClippedAdam({"lr": 0.05, "betas": (0.8, 0.99), "lrd": 0.01 ** (1 / steps)})  # to 5e-4
    svi = SVI(prior_only, guide, optim, elbo)
    for _ in range(steps):
        svi.step(x)
    return guide, x


MEDIANS = {"g": -1.0, "z": 1.0, "y": 1.0, "b": 0.6861}  # Beta(4, 2)'s median: I_b(4, 2) = 1/2


@pytest.mark.parametrize("name", BUILDERS)
def test_median_and_quantiles(name):
    """Trained where the posterior is the prior: the medians are the prior's (each datapoint's, within 0.1, as
    Pyro's test_median asks); the quantiles are ordered, in the support, their middle one the median."""
    guide, x = trained_on_the_prior(name)
    median = guide.median(x)
    for site, expected in MEDIANS.items():
        assert median[site].shape == (() if site == "g" else (N,))
        # a flow's median is that of FLOW_DRAWS draws: 3 of its standard errors (1.2533 σ/√draws, σ ≤ 1 in
        # unconstrained space here) on top of Pyro's 0.1
        atol = 0.1 + (3 * 1.2533 / math.sqrt(FLOW_DRAWS) if "flow" in name and site != "g" else 0)
        torch.testing.assert_close(median[site], torch.full_like(median[site], expected), atol=atol, rtol=0)
    quantiles = guide.quantiles([0.1, 0.5, 0.9], x)
    for site in MEDIANS:
        q = quantiles[site]
        assert q.shape == (3,) + median[site].shape
        assert (q[0] < q[1]).all() and (q[1] < q[2]).all()
        torch.testing.assert_close(q[1], median[site], atol=1e-6, rtol=0)
    assert (quantiles["y"] > 0).all() and ((quantiles["b"] > 0) & (quantiles["b"] < 1)).all()
    # the prior's own 10% and 90% quantiles of z ~ N(1, 1): 1 ∓ 1.2816
    torch.testing.assert_close(quantiles["z"][2] - quantiles["z"][0], torch.full((N,), 2 * 1.2816), atol=0.4, rtol=0)


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
@pytest.mark.parametrize("name", BUILDERS)
def test_serialization(name, how):
    """pickle and torch.save round-trip a set-up guide, its model kept (a module-level function; the guide reads
    the model's plate at each call): the same parameters, medians and draws."""
    x = data()
    pyro.set_rng_seed(0)
    guide = BUILDERS[name](supports)
    guide(x)
    if how == "pickle":
        loaded = pickle.loads(pickle.dumps(guide))
    else:
        buffer = io.BytesIO()
        torch.save(guide, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
    assert loaded.model is supports  # pickled by reference
    for (key, a), (_, b) in zip(guide.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), key
    pyro.set_rng_seed(3)
    expected = (guide.median(x), guide(x))
    pyro.set_rng_seed(3)
    got = (loaded.median(x), loaded(x))
    for one, other in zip(expected, got):
        assert one.keys() == other.keys()
        for site in one:
            assert torch.equal(one[site], other[site]), site


@pytest.mark.parametrize("name", BUILDERS)
def test_init_loc_fn(name):
    """init_to_value sets the global part, and the free factors' every datapoint (an encoder starts at torch's
    initialization)."""
    values = {"g": torch.tensor(0.7), "y": torch.linspace(0.5, 3.0, N)}
    guide = BUILDERS[name](prior_only, init_loc_fn=init_to_value(values=values),
                           **({} if name in FREE else {"encoder_input": 0}))  # x is not observed
    x = data()
    guide(x)
    median = guide.median(x)
    torch.testing.assert_close(median["g"], values["g"])
    if name in FREE and "flow" not in name:
        expected = values["y"] if name.startswith("per-datapoint") else values["y"].log().mean().exp().expand(N)
        torch.testing.assert_close(median["y"], expected)


def test_init_loc_fn_over_a_subsampled_plate():
    """A per-datapoint factor set up on a minibatch: its values repeated over the plate's full size, as Pyro's
    AutoNormal repeats them."""
    def model(x, idx):
        with pyro.plate("data", 10, subsample=idx):
            pyro.sample("z", dist.Normal(0.0, 1.0))

    guide = AutoPerDatapointNormal(model, init_loc_fn=init_to_value(values={"z": torch.tensor([1.0, 2.0, 3.0, 4.0])}))
    guide(torch.zeros(4, 1), torch.arange(4))
    torch.testing.assert_close(guide.q_z.loc.squeeze(-1), torch.tensor([1.0, 2, 3, 4, 1, 2, 3, 4, 1, 2]))


@pytest.mark.parametrize("init_scale", [1e-1, 1e-4])
@pytest.mark.parametrize("name", BUILDERS)
def test_init_scale(name, init_scale):
    """The free factors' σ and the global part's start at init_scale; an encoder's scale head is shifted by
    its link's inverse at init_scale, less its inverse at 1 (the same weights otherwise)."""
    x = data()
    pyro.set_rng_seed(0)
    guide = BUILDERS[name](supports, init_scale=init_scale)
    guide(x)
    torch.testing.assert_close(guide.q_theta.scales.w, torch.full((2, DX), init_scale))
    if name in FREE:
        torch.testing.assert_close(guide.q_z.log_scale.exp(), torch.full_like(guide.q_z.log_scale, init_scale))
    else:
        pyro.set_rng_seed(0)
        unit = BUILDERS[name](supports, init_scale=1.0)
        unit(x)
        inverse = SCALE_LINKS[guide.scale_link][1]  # σ → the head's output that gives it
        torch.testing.assert_close(guide.q_z.encoder.log_scale.bias - unit.q_z.encoder.log_scale.bias,
                                   torch.full((guide.structure.size,), inverse(init_scale) - inverse(1.0)))


@pytest.mark.parametrize("name", BUILDERS)
def test_predictive(name):
    """Predictive with the guide gives every latent site of the model; on new data of another size where the
    family has a factor for it, and a clear refusal where it has none (per-datapoint)."""
    x = data()
    guide = BUILDERS[name](supports)
    guide(x)
    samples = Predictive(supports, guide=guide, num_samples=5)(x)
    assert samples["z"].shape == (5, N, 2) and samples["w"].shape == (5, 1, 2, DX)  # Pyro's: the plate's dim kept
    new = data(4, seed=1)
    if name.startswith("per-datapoint"):
        with pytest.raises(ValueError, match="built for the 6 datapoints"):
            Predictive(supports, guide=guide, num_samples=5)(new)
    else:
        assert Predictive(supports, guide=guide, num_samples=5)(new)["p"].shape == (5, 4, 3)


def minibatch_model(x, batch=None, idx=None):
    """All N datapoints given; the plate draws the minibatch (``batch``) or takes it (``idx``)."""
    with pyro.plate("data", len(x), subsample_size=batch, subsample=idx) as rows:
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        pyro.sample("x", dist.Normal(z.sum(-1, keepdim=True), 1.0).to_event(1), obs=x[rows])


@pytest.mark.parametrize("style", ["subsample_size", "subsample=idx", "exact batch"])
@pytest.mark.parametrize("name", BUILDERS)
def test_replay_plates(name, style):
    """The model's plate takes the guide's datapoints (Pyro's replay): the minibatch the plate draws, the one it
    is given, or every datapoint; the factors are those datapoints' own (per-datapoint: their rows)."""
    x = data(10)
    calls = {"subsample_size": lambda step: ((x, 4), {}),
             "subsample=idx": lambda step: ((x,), {"idx": torch.tensor([step, 9, 3 + step, 0])}),
             "exact batch": lambda step: ((x, 10), {})}
    kwargs = {"encoder_input": lambda x, batch=None, idx=None: x} if name not in FREE else {}
    guide = BUILDERS[name](minibatch_model, **kwargs)
    svi = SVI(minibatch_model, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
    for step in range(3):
        args, kw = calls[style](step)
        assert math.isfinite(svi.step(*args, **kw))
        guide_trace = poutine.trace(guide).get_trace(*args, **kw)
        model_trace = poutine.trace(poutine.replay(minibatch_model, trace=guide_trace)).get_trace(*args, **kw)
        rows = model_trace.nodes["data"]["value"]
        assert torch.equal(rows, guide_trace.nodes["data"]["value"])
        if style == "subsample=idx":
            assert torch.equal(rows, kw["idx"])
        if style == "exact batch":
            assert torch.equal(rows, torch.arange(10))
        if name == "per-datapoint":
            torch.testing.assert_close(guide_trace.nodes["z"]["fn"].base_dist.loc, guide.q_z.loc[rows])


def test_discrete_helpful_error():
    def model(x):
        with pyro.plate("data", len(x)):
            pyro.sample("c", dist.Categorical(torch.ones(3)))

    for build in BUILDERS.values():
        with pytest.raises(ValueError, match="the local site 'c' is discrete") as caught:
            build(model)(data())
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("options", [{"init_scale": -1.0}, {"flow": -1}, {"global_guide": "laplace"}, {"init_loc_fn": 3},
                                     {"plate": "images"}])
@pytest.mark.parametrize("name", BUILDERS)
def test_bad_options_are_value_errors(name, options):
    """A bad option is a ValueError, as Pyro's autoguides raise, and the package's own error, in one line."""
    with pytest.raises(ValueError) as caught:
        BUILDERS[name](supports, **options)(data())
    assert isinstance(caught.value, AmortizedPyroError) and "\n" not in str(caught.value)


@pytest.mark.parametrize("name", BUILDERS)
def test_the_model_runs_once_at_setup_and_to_its_first_local_site_after(name):
    """Setting up reads everything off one run of the model (and its plate off one more, to its first local
    site); a call after runs the model only to its first local site (its plate: nothing drawn there), but where
    the family refines on the model's own local ELBO (SA-VI, IA-VI)."""
    runs = []

    def counted(x):
        runs.append("start")
        supports(x)
        runs.append("end")

    x = data()
    guide = BUILDERS[name](counted)
    guide._setup_prototype(x)
    assert runs == ["start", "end", "start"]
    state = torch.get_rng_state()
    guide._create_plates(x)  # the plate read: no random stream moved (w replayed, no index drawn)
    assert torch.equal(torch.get_rng_state(), state)
    del runs[:]
    guide(x)
    refining = name in ("semi-amortized", "iterative")  # their steps evaluate the model's local ELBO
    assert runs.count("end") > 0 if refining else runs == ["start"]
