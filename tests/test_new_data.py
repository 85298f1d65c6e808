"""A trained guide serves every call its model accepts (issue 59): models written as Pyro's examples write them,
in every plate layout a user writes, trained with stock SVI on minibatches of one size, then used on the whole
data set, on new data larger and smaller than a batch, in ``Predictive``, ``median``/``quantiles``,
``measure_gap`` and after pickling. Each cell is served with the model's own plate and scale (the guide's and
the model's traces compared site by site) or refused in one line."""
import math
import pickle

import pytest
import torch
from torch import nn

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import SVI, Predictive, Trace_ELBO
from pyro.infer.autoguide import AutoDelta, AutoGuideList
from pyro.poutine.util import site_is_subsample

from amortized_pyro.autoguides import (AutoAmortizedNormal, AutoIterativeAmortizedNormal, AutoPerDatapointNormal,
                                       AutoSemiAmortizedNormal, AutoSharedNormal, measure_gap)
from amortized_pyro.errors import GuideError
from amortized_pyro.local.gaps import GapSettings
from toy_models import LinearGaussian

N, B, DX, DZ = 24, 8, 4, 2
SIZES = {"whole": N, "larger": 37, "smaller": 5}  # new data of other sizes than the batch, both sides of it
TINY_GAP = GapSettings(importance_samples=8, theta_draws=2, score_draws=2, select_draws=2, samples=4, step_samples=2,
                       window=5, patience=1, max_steps=10, ais_steps=0)
W = torch.randn(DX, DZ, generator=torch.Generator().manual_seed(0))


def local(x):
    z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
    pyro.sample("x", dist.Normal(z @ W.T, 0.5).to_event(1), obs=x)


def plain(x):
    with pyro.plate("data", len(x)):  # Pyro's examples/vae
        local(x)


def subsampled(x_batch, idx, n):  # N as an argument
    with pyro.plate("data", n, subsample=idx):
        local(x_batch)


def drawn(x, batch):
    with pyro.plate("data", len(x), subsample_size=batch) as idx:
        local(x[idx])


def keyword(*, data):
    with pyro.plate("data", data.shape[0]):
        local(data)


def nested(x):  # the data plate at dim -2, the observations' coordinates in a plate nested inside it
    with pyro.plate("data", len(x), dim=-2):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        with pyro.plate("coordinates", DX, dim=-1):
            pyro.sample("x", dist.Normal((z @ W.T).squeeze(-2), 0.5), obs=x)  # z: [N, 1, DZ]


def closure(n):
    def model(x_batch, idx):  # N held in a closure
        with pyro.plate("data", n, subsample=idx):
            local(x_batch)
    return model


def keyword_data(*args, data):
    """The keyword layout's encoder input (module-level: the guide pickles with it)."""
    return data


LAYOUTS = {  # name → (model, training call (x_all, idx) → (args, kwargs), use on x → (args, kwargs), encoder input)
    "plain": (plain, lambda x, idx: ((x[idx],), {}), lambda x: ((x,), {}), 0),
    "subsample": (subsampled, lambda x, idx: ((x[idx], idx, N), {}), lambda x: ((x, torch.arange(len(x)), len(x)), {}),
                  0),
    "subsample_size": (drawn, lambda x, idx: ((x, B), {}), lambda x: ((x, min(B, len(x))), {}), 0),
    "keyword": (keyword, lambda x, idx: ((), {"data": x[idx]}), lambda x: ((), {"data": x}),
                keyword_data),
    "nested": (nested, lambda x, idx: ((x[idx],), {}), lambda x: ((x,), {}), 0),
    "closure": (closure(N), lambda x, idx: ((x[idx], idx), {}), lambda x: ((x, torch.arange(len(x))), {}), 0),
}
BUILDERS = {
    "amortized": lambda model, first: AutoAmortizedNormal(model, encoder_input=first, width=8),
    "semi-amortized": lambda model, first: AutoSemiAmortizedNormal(model, encoder_input=first, width=8, steps=2),
    "iterative": lambda model, first: AutoIterativeAmortizedNormal(model, encoder_input=first, width=8, iterations=2),
    "amortized+flow": lambda model, first: AutoAmortizedNormal(model, encoder_input=first, width=8, flow=1,
                                                               flow_width=8),
    "shared": lambda model, first: AutoSharedNormal(model),
    "per-datapoint": lambda model, first: AutoPerDatapointNormal(model),
}


@pytest.fixture(autouse=True)
def global_param_store():
    """Pyro's defaults, as its examples train: parameters in its global param store (emptied again afterwards)."""
    yield
    pyro.clear_param_store()


def data(n, seed):
    return torch.randn(n, DX, generator=torch.Generator().manual_seed(seed))


def trained(layout, builder):
    """A guide trained with stock SVI on minibatches of B (shuffled, the last one short); a per-datapoint guide
    on a plate of len(x) on the whole data (there every batch is a plate of its own)."""
    model, train, _, first = LAYOUTS[layout]
    pyro.set_rng_seed(0)
    guide = BUILDERS[builder](model, first)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
    x = data(N, 1)
    whole = builder == "per-datapoint" and layout in ("plain", "keyword", "nested")  # its N: the plate's len(x)
    for _ in range(2):
        for idx in [torch.arange(N)] if whole else torch.randperm(N).split(B + 1):  # batches of 9, 9 and 6
            args, kwargs = train(x, idx)
            assert math.isfinite(svi.step(*args, **kwargs))
    return model, guide


def rescored_elbo(model, guide, args, kwargs, scale, masks):
    """One draw's ELBO scored by hand from the guide's trace and the model's replayed on it: Σ log p − Σ log q
    over every sample site but the plates', each site's terms times the model's own scale written here, not read
    off the traces (``scale`` = N/B in the data plate: z, x and a flow's auxiliary site; IA-VI's terms site has
    value 0), the rows ``masks`` (site → bool [B], written by the caller as the model masks) leaves out."""
    guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
    model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)

    def scored(trace):
        return sum((site["fn"].log_prob(site["value"]) * scale * masks.get(name, 1.0)).sum()
                   for name, site in trace.nodes.items() if site["type"] == "sample" and not site_is_subsample(site))

    return scored(model_trace) - scored(guide_trace)


def assert_the_models_plate_and_scale(model, guide, args, kwargs, scale=1.0, masks=None):
    """The guide's and the model's traces of one call, with Pyro's validation and without: every local site in
    the same data plate (size, full size, dim) with the same scale; Trace_ELBO's loss minus the ELBO scored by hand
    (:func:`rescored_elbo`, the plate's N/B ``scale`` and the model's ``masks`` written by the caller) at the same
    draw (issue 68, item 7)."""
    for validating in (True, False):
        with pyro.validation_enabled(validating):
            guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
            model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
        for name in ["z"]:  # every model here: its one local site
            ours, theirs = guide_trace.nodes[name], model_trace.nodes[name]
            frame = [(f.name, f.size, f.full_size, f.dim) for f in ours["cond_indep_stack"] if f.name == "data"]
            assert frame == [(f.name, f.size, f.full_size, f.dim) for f in theirs["cond_indep_stack"]
                             if f.name == "data"], validating
            assert ours["scale"] == theirs["scale"], (name, validating, ours["scale"], theirs["scale"])
            pyro.set_rng_seed(11)
            expected = rescored_elbo(model, guide, args, kwargs, scale, masks or {}).item()
            pyro.set_rng_seed(11)
            loss = Trace_ELBO().loss(model, guide, *args, **kwargs)
            assert math.isfinite(loss) and abs(loss + expected) <= 1e-5 * abs(expected), (validating, loss, expected)


@pytest.mark.parametrize("builder", BUILDERS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_trained_guide_serves_new_data(layout, builder):
    model, guide = trained(layout, builder)
    _, _, use, _ = LAYOUTS[layout]
    for name, n in SIZES.items():
        x = data(n, 2)
        args, kwargs = use(x)
        if layout == "closure" and n > N:  # the closure's N: the model itself refuses more datapoints
            continue
        plate_size = N if layout == "closure" else n  # the closure's plate: always its N (n of them picked)
        if builder == "per-datapoint" and plate_size != N:  # factors for the N training datapoints only
            with pytest.raises(GuideError, match="per-datapoint guide was built for the %d datapoints" % N):
                guide(*args, **kwargs)
            continue
        rows = min(B, n) if layout == "subsample_size" else n
        assert_the_models_plate_and_scale(model, guide, args, kwargs, plate_size / rows)
        draws = Predictive(model, guide=guide, num_samples=3)(*args, **kwargs)
        assert draws["z"].shape[:2] == (3, rows) and draws["x"].shape[:2] == (3, rows), name
        median = guide.median(*args, **kwargs)["z"]
        quantiles = guide.quantiles([0.25, 0.75], *args, **kwargs)["z"]
        assert median.shape[0] == rows and quantiles.shape[:2] == (2, rows)
    x = data(SIZES["larger" if layout != "closure" else "smaller"], 3)
    args, kwargs = use(x)
    scale = N / len(x) if layout == "closure" else len(x) / min(B, len(x)) if layout == "subsample_size" else 1.0
    if builder != "per-datapoint":  # after pickling: the same numbers (the model kept with the guide)
        loaded = pickle.loads(pickle.dumps(guide))
        if layout == "closure":  # a closure does not pickle: dropped, said in one line, given back
            with pytest.raises(GuideError, match="pickled without its model .* guide.model = model"):
                loaded(*args, **kwargs)
            loaded.model = model
        assert_the_models_plate_and_scale(model, loaded, args, kwargs, scale)
        if builder != "amortized+flow":  # a flow's median is by sampling: compared in test_autoguide_contract
            medians = []
            for one in (loaded, guide):
                pyro.set_rng_seed(7)  # the same datapoints where the plate draws them (subsample_size)
                medians.append(one.median(*args, **kwargs)["z"])
            torch.testing.assert_close(*medians)
        if layout in ("plain", "subsample", "nested") and builder in ("amortized", "shared"):
            report = measure_gap(model, guide, *args, settings=TINY_GAP, seen=False, **kwargs)
            assert len(report["per_image"]["amortization_gap"]) == len(x)


def test_a_closure_of_another_n_is_given_to_the_guide():
    """The guide reads the plate of the model it holds: for a closure of another N, give it that model."""
    model, guide = trained("closure", "amortized")
    x = data(SIZES["larger"], 2)
    other = closure(len(x))
    guide.model = other
    assert_the_models_plate_and_scale(other, guide, (x, torch.arange(len(x))), {})


@pytest.mark.parametrize("builder", ["shared", "per-datapoint"])
def test_generation_without_data(builder):
    """Predictive with no data where the model runs without it (x=None, n=...): the free factors serve it."""
    def model(x=None, n=None):
        with pyro.plate("data", len(x) if x is not None else n):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
            pyro.sample("x", dist.Normal(z @ W.T, 0.5).to_event(1), obs=x)

    guide = BUILDERS[builder](model, 0)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
    svi.step(data(N, 1))
    n = 12 if builder == "shared" else N
    draws = Predictive(model, guide=guide, num_samples=2)(None, n=n)
    assert draws["x"].shape == (2, n, DX)


def test_an_encoder_without_its_data_says_so():
    def model(x=None, n=None):
        with pyro.plate("data", len(x) if x is not None else n):
            local(x)

    guide = AutoAmortizedNormal(model, width=8)
    guide(data(N, 1))
    with pytest.raises(GuideError, match="the encoder's input .* is not a tensor of datapoints"):
        Predictive(model, guide=guide, num_samples=2)(None, n=12)


def test_a_given_plate_that_is_not_the_models_is_refused():
    """create_plates of another size than the model's plate (the silently mis-scaled ELBO of issue 59): refused
    in one line, with Pyro's validation or without (issue 68, item 8: one read, one path); an AutoGuideList
    without create_plates on data of a new size too."""
    guide = AutoAmortizedNormal(subsampled, width=8, create_plates=lambda x, idx, n: pyro.plate("data", 2 * n,
                                                                                                subsample=idx))
    x = data(B, 1)
    with pytest.raises(GuideError, match="guide's plate 'data' \\(size 16, 8 datapoints\\) is not the "
                                         "model's at its site 'z' \\(size 8, 8 datapoints, dim -1\\)"):
        guide(x, torch.arange(B), B)
    with pyro.validation_enabled(False), pytest.raises(GuideError, match="guide's plate 'data' \\(size 16"):
        guide(x, torch.arange(B), B)  # unchecked before, as Pyro's autoguides take the user's plates

    def with_global(x):
        sigma = pyro.sample("sigma", dist.LogNormal(0.0, 0.3))
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
            pyro.sample("x", dist.Normal(z @ W.T, sigma).to_event(1), obs=x)

    parts = AutoGuideList(with_global)
    parts.append(AutoAmortizedNormal(poutine.block(with_global, hide=["sigma"]), width=8))
    parts.append(AutoDelta(poutine.block(with_global, expose=["sigma"])))
    parts(data(B, 1))
    parts(data(B, 2))  # the same size: served
    with pytest.raises(GuideError, match="give the AutoGuideList create_plates"):
        parts(data(N, 2))
    served = AutoGuideList(with_global, create_plates=lambda x: pyro.plate("data", len(x)))
    served.append(AutoAmortizedNormal(poutine.block(with_global, hide=["sigma"]), width=8))
    served.append(AutoDelta(poutine.block(with_global, expose=["sigma"])))
    served(data(B, 1))
    assert_the_models_plate_and_scale(with_global, served, (data(N, 2),), {})


def test_the_linear_gaussian_optimum_on_held_out_data_of_another_size():
    """Probabilistic PCA, N as an argument (plate(N, subsample=idx)), trained on minibatches of 50 of 400: a
    linear encoder reaches the best mean-field ELBO (closed form) on 200 held-out points, evaluated through
    Trace_ELBO at the call's own plate (200, scale 1: the case that read below the optimum when the guide kept
    the training plate's N, scale 2), and on 150 of the training points (plate of 400, scale 400/150). Tolerance: 4 s.e. of the Monte Carlo estimate, plus 0.1 nat
    per point left by training (the optimum's closed form, at the learned factor, says how much)."""
    toy = LinearGaussian(400, DX, DZ, sigma=0.5, correlation=0.0, seed=4)
    generator = torch.Generator().manual_seed(5)
    z = torch.randn(200, DZ, generator=generator)
    x_new = z @ toy.W.T + toy.b + 0.5 * torch.randn(200, DX, generator=generator)

    def model(x_batch, idx, n):
        with pyro.plate("data", n, subsample=idx):
            toy.local(x_batch)

    pyro.set_rng_seed(0)
    guide = AutoAmortizedNormal(model, encoder=nn.Identity())
    svi = SVI(model, guide, pyro.optim.ClippedAdam({"lr": 0.03, "lrd": 0.999}),
              Trace_ELBO(num_particles=8, vectorize_particles=True))
    for _ in range(150):
        for idx in torch.randperm(400).split(50):
            svi.step(toy.x[idx], idx, 400)
    for x, idx, n in ((x_new, torch.arange(200), 200), (toy.x[:150], torch.arange(150), 400)):  # held out; training
        with torch.no_grad():
            loc, scale = guide.local_factor(idx, (x, idx, n), {}, {})
            reached = toy.elbo(x, loc, scale).sum() * n / len(idx)  # the plate's scale N/B, as the model's
            best = toy.elbo(x, toy.posterior_mean(x), toy.best_scale().expand(len(idx), DZ)).sum() * n / len(idx)
            elbo = Trace_ELBO(num_particles=256, vectorize_particles=True, max_plate_nesting=1)
            estimates = torch.tensor([-elbo.loss(model, guide, x, idx, n) for _ in range(20)])
        se = estimates.std() / math.sqrt(len(estimates))
        assert abs(estimates.mean() - reached) < 4 * se, (n, estimates.mean(), reached, se)  # the call's own scale
        assert (best - reached) / n < 0.1, (n, best, reached)  # the encoder near the optimum, per point


def test_a_mask_that_keeps_everything_is_no_mask():
    """.mask(True), Pyro's idiom for an optional mask, and an all-true mask need no local_mask; a mask all true at
    the first call that masks rows in a later one is refused there, in one line (under Pyro's validation)."""
    def optional(x, keep=True):
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1).mask(keep))
            pyro.sample("x", dist.Normal(z @ W.T, 0.5).to_event(1), obs=x)

    x = data(B, 1)
    guide = AutoAmortizedNormal(optional, width=8)
    assert_the_models_plate_and_scale(optional, guide, (x,), {})
    assert_the_models_plate_and_scale(optional, guide, (x, torch.ones(B, dtype=torch.bool)), {})
    keep = torch.arange(B) < B - 2
    with pytest.raises(GuideError, match="the model masks the local site 'z': give local_mask="):
        guide(x, keep)
    masked = AutoAmortizedNormal(optional, width=8, local_mask=lambda x, keep=True: torch.as_tensor(keep).expand(len(x)))
    assert_the_models_plate_and_scale(optional, masked, (x, keep), {}, masks={"z": keep.float()})
