"""A builder's local sites take the model's own scale and datapoints at every call, or the call is refused in one
line (issue 68, items 2 and 4).

Item 2: a model that scales its local site inside (a KL warm-up, ``poutine.scale(scale=beta)`` around ``z``, as
Pyro's examples/dmm.py anneals), in a subsampled plate: Trace_ELBO's loss equals minus an independent re-scoring
of the guide's and the model's traces, each site's log-density times the model's own scale written by hand
(β·N/B at the local site, for log p and for log q alike; N/B at the observations; 1 at the global site), with
Pyro's validation on and off. Item 4: a model that gives its plate's indices (``subsample=idx``): the
per-datapoint factors that move in an SVI step are exactly the rows idx, or the call is refused in one line."""
import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import AutoGuideList, AutoNormal
from pyro.poutine.util import is_validation_enabled, site_is_subsample

from amortized_pyro.autoguides import (AutoAmortizedNormal, AutoIterativeAmortizedNormal, AutoPerDatapointNormal,
                                       AutoSemiAmortizedNormal, AutoSharedNormal)
from amortized_pyro.autoguides.flows import LOCAL_FLOW
from amortized_pyro.errors import GuideError

N, DX, DZ = 40, 3, 2
IDX = torch.arange(3, N, 4)  # the model's minibatch: rows 3, 7, ..., 39 (B = 10)
B = len(IDX)
W = torch.randn(DX, DZ, generator=torch.Generator().manual_seed(0))
X = torch.randn(N, DX, generator=torch.Generator().manual_seed(1))
WEIGHTS = torch.linspace(0.1, 0.9, N)  # a per-datapoint scale, indexed by the model's rows


def annealed(x, idx, beta):
    """A global σ, and z under the model's own poutine.scale inside its subsampled plate (dmm's KL annealing)."""
    sigma = pyro.sample("sigma", dist.LogNormal(0.0, 0.3))
    with pyro.plate("data", N, subsample=idx):
        with poutine.scale(scale=beta(idx) if callable(beta) else beta):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        pyro.sample("x", dist.Normal(z @ W.T, sigma).to_event(1), obs=x)


def all_annealed(x, idx, beta):
    """σ under the warm-up's scale too (a Bayesian decoder's weights annealed with z, as the package's studies)."""
    with poutine.scale(scale=beta):
        sigma = pyro.sample("sigma", dist.LogNormal(0.0, 0.3))
    with pyro.plate("data", N, subsample=idx):
        with poutine.scale(scale=beta):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        pyro.sample("x", dist.Normal(z @ W.T, sigma).to_event(1), obs=x)


def two_scales(x, idx, beta):
    """Two local sites, z under the warm-up's scale and l not."""
    with pyro.plate("data", N, subsample=idx):
        with poutine.scale(scale=beta):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        l = pyro.sample("l", dist.Normal(0.0, 1.0))
        pyro.sample("x", dist.Normal(z @ W.T + l.unsqueeze(-1), 1.0).to_event(1), obs=x)


@pytest.fixture(autouse=True)
def global_param_store():
    """Pyro's defaults, as its examples train: parameters in its global param store (emptied again afterwards)."""
    yield
    pyro.clear_param_store()


@pytest.fixture(params=[True, False], ids=["validation", "no-validation"])
def validating(request):
    before = is_validation_enabled()
    pyro.enable_validation(request.param)
    try:
        yield request.param
    finally:
        pyro.enable_validation(before)


def rescored_elbo(model, guide, args, beta):
    """The annealed ELBO of one draw, scored by hand: Σ_model log p × its own scale − Σ_guide log q × the
    model's scale of the same site, the scales written here (not read off the traces' ``scale``): β·N/B at z,
    N/B at x, at σ and at the global part's auxiliary site (AutoNormal's ``sigma_unconstrained``) 1, or β where
    the model anneals σ too."""
    x, idx, _ = args
    theta = beta if model is all_annealed else 1.0
    local = (beta(idx) if callable(beta) else torch.as_tensor(beta)) * N / len(idx)
    own = {"z": local, LOCAL_FLOW: local,  # a flow's auxiliary site of u_n, whose log q is z's
           "x": torch.tensor(N / len(idx)), "sigma": theta, "sigma_unconstrained": theta}
    guide_trace = poutine.trace(guide).get_trace(*args)
    model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args)

    def scored(trace):
        return sum((site["fn"].log_prob(site["value"]) * own.get(name, 1.0)).sum()
                   for name, site in trace.nodes.items() if site["type"] == "sample" and not site_is_subsample(site))

    assert {"sigma", "z", "x"} <= set(model_trace.nodes) and {"sigma", "z"} <= set(guide_trace.nodes)
    return scored(model_trace) - scored(guide_trace)


def assert_the_annealed_elbo(model, guide, beta, seed):
    args = (X[IDX], IDX, beta)
    guide(*args)  # set up (its parameters' initialization draws) before the two seeded scorings
    pyro.set_rng_seed(seed)
    expected = rescored_elbo(model, guide, args, beta)
    pyro.set_rng_seed(seed)
    loss = Trace_ELBO().loss(model, guide, *args)
    assert abs(-loss - expected.item()) <= 1e-5 * abs(expected.item()), (beta, -loss, expected.item())


BETAS = {"float": (0.2, 0.7), "tensor": (torch.tensor(0.2), torch.tensor(0.7)),
         "per-datapoint": (lambda idx: WEIGHTS[idx], lambda idx: 1.0 - WEIGHTS[idx])}


@pytest.mark.parametrize("kind", BETAS)
def test_the_guide_takes_the_models_scale_at_its_local_site(kind, validating):
    """At two warm-up factors in turn (read at each call), a float, a tensor or one per datapoint; the
    builder's own plate (read from the model)."""
    guide = AutoAmortizedNormal(annealed, width=8)
    for seed, beta in enumerate(BETAS[kind]):
        assert_the_annealed_elbo(annealed, guide, beta, seed)


BUILDERS = {
    "per-datapoint": lambda model: AutoPerDatapointNormal(model),
    "shared": lambda model: AutoSharedNormal(model),
    "semi-amortized": lambda model: AutoSemiAmortizedNormal(model, width=8, steps=2),
    "iterative": lambda model: AutoIterativeAmortizedNormal(model, width=8, iterations=2),
    "amortized+flow": lambda model: AutoAmortizedNormal(model, width=8, flow=1, flow_width=8),
}


@pytest.mark.parametrize("builder", BUILDERS)
def test_every_builder_takes_the_models_scale(builder, validating):
    """Every family, a flow's auxiliary site of u_n included (its log q at the model's scale of z)."""
    guide = BUILDERS[builder](annealed)
    for seed, beta in enumerate((0.2, 0.7)):
        assert_the_annealed_elbo(annealed, guide, beta, seed)


@pytest.mark.parametrize("global_guide", ["normal", "delta"])
def test_the_guide_takes_the_models_scale_at_its_global_sites_too(global_guide, validating):
    """σ and z under the warm-up's scale: the global part (AutoNormal, AutoDelta) takes the model's scale of σ,
    the guide not called under a poutine.scale of its own (that would scale its sites twice)."""
    guide = AutoAmortizedNormal(all_annealed, width=8, global_guide=global_guide)
    for seed, beta in enumerate((0.2, 0.7)):
        assert_the_annealed_elbo(all_annealed, guide, beta, seed)


def list_of_parts(model, create_plates):
    guide = AutoGuideList(model, create_plates=create_plates)
    guide.append(AutoNormal(poutine.block(model, expose=["sigma"])))
    guide.append(AutoAmortizedNormal(poutine.block(model, hide=["sigma"]), width=8))
    return guide


@pytest.mark.parametrize("given", ["create_plates", "AutoGuideList"])
def test_a_given_plate_takes_the_models_scale(given, validating):
    """The plate given by the user's create_plates, or an AutoGuideList's (with create_plates: the model gives
    its indices), at the first call's warm-up factor and at another; without validation too (the guide reads the
    scale at each call wherever the model scaled its local sites at the first)."""
    plates = lambda x, idx, beta: pyro.plate("data", N, subsample=idx)  # noqa: E731
    guide = (AutoAmortizedNormal(annealed, width=8, create_plates=plates) if given == "create_plates"
             else list_of_parts(annealed, plates))
    for seed, beta in enumerate((0.2, 0.7)):
        assert_the_annealed_elbo(annealed, guide, beta, seed)


def test_sites_under_different_scales_are_refused_in_one_line():
    """Local sites under two scales, global sites under two, a scaled global site drawn after the first local
    site (where the read stops): each refused at the first call, naming the sites and the scales."""
    def global_after(x, idx, beta):
        data = pyro.plate("data", N, subsample=idx)
        with data:
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        with poutine.scale(scale=beta):
            sigma = pyro.sample("sigma", dist.LogNormal(0.0, 0.3))
        with data:
            pyro.sample("x", dist.Normal(z @ W.T, sigma).to_event(1), obs=x)

    def two_globals(x, idx, beta):
        with poutine.scale(scale=beta):
            sigma = pyro.sample("sigma", dist.LogNormal(0.0, 0.3))
        shift = pyro.sample("shift", dist.Normal(0.0, 1.0))
        with pyro.plate("data", N, subsample=idx):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
            pyro.sample("x", dist.Normal(z @ W.T + shift, sigma).to_event(1), obs=x)

    for model, message in ((two_scales, r"scales its local sites 'z' \(1\.25\) and 'l' \(1\) differently"),
                           (two_globals, r"scales its global sites 'sigma' \(0\.5\) and 'shift' \(1\) differently"),
                           (global_after, r"scales its global site 'sigma' \(0\.5\) but draws it after its first "
                                          r"local site 'z'")):
        guide = AutoAmortizedNormal(model, width=8)
        with pytest.raises(GuideError, match=message) as error:
            guide(X[IDX], IDX, 1.25 if model is two_scales else 0.5)
        assert "\n" not in str(error.value)


def test_a_guide_called_under_the_models_scale_too_is_refused_in_one_line():
    """The pattern the docs gave before (the guide called under the model's poutine.scale) would now scale the
    guide's sites twice, β² where the model has β: refused in one line, not a wrong loss."""
    guide = AutoAmortizedNormal(annealed, width=8)
    guide(X[IDX], IDX, 0.2)
    with pytest.raises(GuideError, match="^the model scales its latent sites .* call it under no poutine.scale, "
                                         "which would scale them twice$"):
        with poutine.scale(scale=0.2):
            guide(X[IDX], IDX, 0.2)


def test_a_per_datapoint_scale_in_a_plate_that_draws_its_rows_is_refused_in_one_line():
    def drawn(x):
        with pyro.plate("data", N, subsample_size=B) as idx:
            with poutine.scale(scale=WEIGHTS[idx]):
                z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
            pyro.sample("x", dist.Normal(z @ W.T, 1.0).to_event(1), obs=x[idx])

    guide = AutoAmortizedNormal(drawn, encoder_input=lambda x: x[:B], width=8)
    with pytest.raises(GuideError, match="scales its local site 'z' per datapoint .* draws its own minibatch, "
                                         "whose rows the guide cannot read: give the plate subsample=idx"):
        guide(X)


def indexed(x, idx):
    sigma = pyro.sample("sigma", dist.LogNormal(0.0, 0.3))
    with pyro.plate("data", N, subsample=idx):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        pyro.sample("x", dist.Normal(z @ W.T, sigma).to_event(1), obs=x)


def per_datapoint_list(create_plates):
    guide = AutoGuideList(indexed, create_plates=create_plates)
    guide.append(AutoNormal(poutine.block(indexed, expose=["sigma"])))
    guide.append(AutoPerDatapointNormal(poutine.block(indexed, hide=["sigma"])))
    return guide


def moved_rows(guide, part):
    """The rows of the per-datapoint factors that one SVI step on the model's minibatch IDX moves."""
    guide(X[IDX], IDX)
    before = part.q_z.loc.detach().clone(), part.q_z.log_scale.detach().clone()
    pyro.set_rng_seed(0)
    SVI(indexed, guide, pyro.optim.Adam({"lr": 0.1}), Trace_ELBO()).step(X[IDX], IDX)
    after = part.q_z.loc.detach(), part.q_z.log_scale.detach()
    moved = ((after[0] != before[0]) | (after[1] != before[1])).any(-1)
    return moved.nonzero().flatten()


@pytest.mark.parametrize("layout", ["builder", "create_plates", "AutoGuideList"])
def test_the_factors_that_move_are_the_models_rows(layout, validating):
    """The builder's own plate, the user's create_plates and an AutoGuideList's create_plates that give the
    model's indices: one step moves exactly the factors of rows IDX."""
    plates = lambda x, idx: pyro.plate("data", N, subsample=idx)  # noqa: E731
    if layout == "AutoGuideList":
        guide = per_datapoint_list(plates)
        part = guide[1]
    else:
        guide = part = AutoPerDatapointNormal(indexed, create_plates=plates if layout == "create_plates" else None)
    assert moved_rows(guide, part).tolist() == IDX.tolist()


def test_a_guide_list_that_draws_its_own_rows_is_refused_in_one_line(validating):
    """Without create_plates the list's plate draws its own rows (Pyro's AutoGuideList), not the model's
    IDX: refused whatever Pyro's validation flag, before a step trains the factors of rows the model never
    observed in that call."""
    guide = per_datapoint_list(None)
    with pytest.raises(GuideError, match="the guide's plate 'data' takes other datapoints \\(rows .*\\) than the "
                                         "model gives its plate at its site 'z' \\(rows 3, 7, 11, 15, 19, ...\\): "
                                         "give the AutoGuideList create_plates") as error:
        guide(X[IDX], IDX)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("layout", ["create_plates", "AutoGuideList"])
def test_given_indices_that_are_not_the_models_are_refused_in_one_line(layout, validating):
    """A create_plates (the builder's or the list's) whose plate takes other rows than the model's: refused
    whatever Pyro's validation flag (without it the rows were served unchecked before: issue 68, item 8)."""
    other = lambda x, idx: pyro.plate("data", N, subsample=torch.arange(B))  # noqa: E731
    guide = per_datapoint_list(other) if layout == "AutoGuideList" else AutoPerDatapointNormal(indexed,
                                                                                                create_plates=other)
    with pytest.raises(GuideError, match="takes other datapoints \\(rows 0, 1, 2, 3, 4, ...\\) than the model "
                                         "gives its plate at its site 'z' \\(rows 3, 7, 11, 15, 19, ...\\)"):
        guide(X[IDX], IDX)


def test_a_scale_of_plates_alone_is_no_scale_of_the_models():
    """Dividing Pyro's product of plate ratios back out can leave 1 − 2⁻⁵²: read as 1 (no poutine.scale of the
    model's), so an unscaled model is not taken for a scaled one."""
    from pyro.poutine.indep_messenger import CondIndepStackFrame
    from amortized_pyro.autoguides.plates import beyond_plates

    frames = (CondIndepStackFrame("data", -1, 3, 0, full_size=1000),  # (name, dim, size: rows, counter, full size)
              CondIndepStackFrame("feat", -2, 7, 0, full_size=50))
    assert beyond_plates({"scale": 1.0 * (1000 / 3) * (50 / 7), "cond_indep_stack": frames}) == 1.0
    assert beyond_plates({"scale": 0.2 * (1000 / 3) * (50 / 7), "cond_indep_stack": frames}) == pytest.approx(0.2)
