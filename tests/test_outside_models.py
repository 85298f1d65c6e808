"""Models nobody here wrote, as Pyro's examples write them (issue 59, items 5-6): Pyro's sparse gamma deep exponential
family (Gamma locals, Poisson counts, Gamma weights), whose raw counts put a torch-initialized encoder's σ at
hundreds in unconstrained space (NaN from the first step); a NaN in a factor or a gap said in one line."""
import math

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import SVI, Trace_ELBO

from amortized_pyro.autoguides import (AutoAmortizedNormal, AutoIterativeAmortizedNormal, AutoSemiAmortizedNormal,
                                       measure_gap)
from amortized_pyro.errors import GuideError
from amortized_pyro.local.gaps import GapSettings
from toy_models import SparseGammaDEF

N, PIXELS = 16, 20
TINY_GAP = GapSettings(importance_samples=8, theta_draws=2, score_draws=2, select_draws=2, samples=4, step_samples=2,
                       window=5, patience=1, max_steps=10, ais_steps=0)


def counts():
    return torch.poisson(torch.full((N, PIXELS), 10.0), generator=torch.Generator().manual_seed(0))


ENCODER_GUIDES = {
    "amortized": lambda model, **kw: AutoAmortizedNormal(model, **kw),
    "semi-amortized": lambda model, **kw: AutoSemiAmortizedNormal(model, steps=2, **kw),
    "iterative": lambda model, **kw: AutoIterativeAmortizedNormal(model, iterations=2, **kw),
    "amortized+flow": lambda model, **kw: AutoAmortizedNormal(model, flow=2, flow_width=16, **kw),
}


@pytest.fixture(autouse=True)
def global_param_store():
    yield
    pyro.clear_param_store()


def losses(guide, model, x, steps):
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
    return [svi.step(x) for _ in range(steps)]


@pytest.mark.parametrize("name", ENCODER_GUIDES)
def test_encoder_guides_start_where_init_loc_fn_puts_them_on_raw_counts(name):
    """Every encoder guide's factors start on average over the prototype's datapoints at σ = init_scale (in the
    scale head's space: softplus⁻¹(σ), the default link) and μ = init_loc_fn's, each coordinate's μ and head
    output within a root mean square of 1 about it, for any input scale (its
    centred heads), and its default encoder reads symlog of the counts standardized: on raw counts of about 10, A-VI trains 30 steps with
    finite losses, SA-VI, IA-VI and the flow their first 3 (their later divergence on this model, whose Gamma(0.1)
    locals have an unbounded density at 0, is a limit docs/your-model.md states, measured); with the builders' start before (torch's default heads, the raw
    counts, exp's σ: ``head_init="torch", standardize=False, scale_link="exp"``) the first steps are not finite, or refused as such."""
    deff, x = SparseGammaDEF(PIXELS), counts()
    pyro.set_rng_seed(0)
    guide = ENCODER_GUIDES[name](deff.model)
    with torch.no_grad():
        guide(x)
        loc, scale = guide.q_z.encoder(guide.encoder_data(torch.arange(N), (x,), {}))  # before any refinement
    assert guide.scale_link == "softplus"
    head, target = scale.expm1().log(), math.log(math.expm1(guide.init_scale))  # softplus⁻¹(σ)
    torch.testing.assert_close(head.mean(0), torch.full_like(head[0], target))
    torch.testing.assert_close(loc.mean(0), torch.zeros_like(loc[0]))  # init_to_feasible: μ = 0 unconstrained
    for value, centre in ((loc, 0.0), (head, target)):
        assert (value - centre).pow(2).mean(0).sqrt().max() <= 1 + 1e-5
    steps = 30 if name == "amortized" else 3
    assert all(math.isfinite(loss) for loss in losses(guide, deff.model, x, steps))
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    old = ENCODER_GUIDES[name](deff.model, head_init="torch", standardize=False, scale_link="exp")
    try:
        first = losses(old, deff.model, x, 3)
    except (GuideError, ValueError):  # the factor's check, or Pyro's own argument checks (a Gamma's rate 0)
        pass
    else:
        assert not all(math.isfinite(loss) for loss in first), first


def test_a_factor_that_is_not_finite_is_said_in_one_line():
    """Under Pyro's validation a NaN factor is refused at the guide's call, naming the site; measure_gap never
    returns NaN as numbers."""
    deff, x = SparseGammaDEF(PIXELS), counts()
    guide = AutoAmortizedNormal(deff.model)
    guide(x)
    with torch.no_grad():
        guide.q_z.encoder.loc.bias[0] = float("nan")  # z_top's first coordinate
    with pytest.raises(GuideError, match="factor of the local site 'z_top' is not finite for 16 of 16 datapoints"):
        guide(x)
    with pytest.raises(GuideError, match="the gap's .* is NaN for"):
        with pyro.validation_enabled(False):
            measure_gap(deff.model, guide, x[:4], settings=TINY_GAP, draws="one-at-a-time")


DZ, DX, B = 2, 4, 6
W = torch.randn(DX, DZ, generator=torch.Generator().manual_seed(1))


def flat(x):
    with pyro.plate("data", len(x)):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        pyro.sample("x", dist.Normal(z @ W.T, 0.5).to_event(1), obs=x)


def nested(x):  # the same model, its data plate at dim -2 and the coordinates in a plate nested inside it
    with pyro.plate("data", len(x), dim=-2):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([DZ]).to_event(1))
        with pyro.plate("coordinates", DX, dim=-1):
            pyro.sample("x", dist.Normal((z @ W.T).squeeze(-2), 0.5), obs=x)


@pytest.mark.parametrize("vectorized", [False, True])
@pytest.mark.parametrize("name", ["iterative", "amortized+flow", "semi-amortized"])
def test_every_builders_own_sites_sit_at_the_plates_dim(name, vectorized):
    """A builder's own sites (IA-VI's terms, a flow's auxiliary draw) live in the data plate at its own dim: the
    same model with its plate at dim -2 gives the loss and every gradient of the plate at dim -1, from the same
    draws, with vectorized particles and without (IA-VI's terms at dim -1 under a plate at -2 broadcast to B × B,
    or crashed with particles)."""
    x = torch.randn(B, DX, generator=torch.Generator().manual_seed(2))
    grads = []
    for model in (flat, nested):
        pyro.set_rng_seed(0)
        with pyro.settings.context(module_local_params=True):
            guide = ENCODER_GUIDES[name](model)
            guide(x)
            elbo = Trace_ELBO(num_particles=3, vectorize_particles=vectorized, max_plate_nesting=2)
            pyro.set_rng_seed(1)
            loss = elbo.differentiable_loss(model, guide, x)
            loss.backward()
        grads.append((loss.detach(), {k: p.grad.clone() for k, p in guide.named_parameters() if p.grad is not None}))
    (loss_a, a), (loss_b, b) = grads
    torch.testing.assert_close(loss_b, loss_a)
    assert a.keys() == b.keys() and a
    for key in a:
        torch.testing.assert_close(b[key], a[key], msg=key)


GROUPS, OBS = 5, 40
GROUP_OF = torch.arange(OBS) % GROUPS


def radon(group, y, n_groups):
    """A radon-style hierarchical regression: per-group intercepts in plate "groups", the observations in a plate
    of their own, each indexed by its group (the most common hierarchical layout)."""
    mu = pyro.sample("mu", dist.Normal(0.0, 3.0))
    sigma_y = pyro.sample("sigma_y", dist.HalfNormal(1.0))
    with pyro.plate("groups", n_groups):
        a = pyro.sample("a", dist.Normal(mu, 1.0))
    with pyro.plate("obs", len(y)):
        pyro.sample("y", dist.Normal(a[..., group], sigma_y), obs=y)


def group_summaries(group, y, n_groups):
    """The encoder's input per group: the mean of its observations and their count."""
    count = torch.zeros(n_groups).index_add(0, group, torch.ones_like(y))
    total = torch.zeros(n_groups).index_add(0, group, y)
    return torch.stack([total / count.clamp(min=1), count], -1)


def test_observations_in_their_own_plate_are_served():
    """The radon layout: SA-VI and IA-VI refine on, and measure_gap measures, each group's log joint with its
    observations (found per call by forward-mode differentiation): checked against the log joint written by hand,
    at fixed global values."""
    y = torch.randn(OBS, generator=torch.Generator().manual_seed(3)) + GROUP_OF.float()
    args = (GROUP_OF, y, GROUPS)
    for make in (AutoSemiAmortizedNormal, AutoIterativeAmortizedNormal, AutoAmortizedNormal):
        pyro.clear_param_store()
        guide = make(radon, plate="groups", encoder_input=group_summaries, width=8)
        svi = SVI(radon, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
        assert all(math.isfinite(svi.step(*args)) for _ in range(5))
    theta = {"mu": torch.tensor(0.3), "sigma_y": torch.tensor(0.7)}
    u = torch.randn(3, GROUPS, 1, generator=torch.Generator().manual_seed(4))  # 3 draws of a
    from amortized_pyro.autoguides import LocalJoint
    got = LocalJoint(radon, guide.structure, args, {})(None, u, theta)
    a = u[..., 0]
    expected = dist.Normal(0.3, 1.0).log_prob(a) + torch.zeros(3, GROUPS).index_add(
        1, GROUP_OF, dist.Normal(a[:, GROUP_OF], 0.7).log_prob(y))
    torch.testing.assert_close(got, expected)
    report = measure_gap(radon, guide, *args, settings=TINY_GAP)
    assert len(report["per_image"]["amortization_gap"]) == GROUPS


def test_an_observation_of_several_datapoints_is_refused():
    def pairs(y, n_groups):
        with pyro.plate("groups", n_groups):
            a = pyro.sample("a", dist.Normal(0.0, 1.0))
        with pyro.plate("obs", len(y)):
            pyro.sample("y", dist.Normal(a[..., :len(y)] + a[..., 1:len(y) + 1], 1.0), obs=y)

    guide = AutoAmortizedNormal(pairs, plate="groups", encoder_input=lambda y, n: torch.ones(n, 1), width=8)
    guide(torch.zeros(3), 4)
    with pytest.raises(GuideError, match="depends on several of its datapoints"):
        measure_gap(pairs, guide, torch.zeros(3), 4, settings=TINY_GAP)


def test_measure_gap_refuses_a_guide_list_in_one_line():
    from pyro.infer.autoguide import AutoDelta, AutoGuideList
    from pyro import poutine
    y = torch.randn(OBS)
    parts = AutoGuideList(radon)
    parts.append(AutoAmortizedNormal(poutine.block(radon, hide=["sigma_y"]), plate="groups",
                                     encoder_input=group_summaries, width=8))
    parts.append(AutoDelta(poutine.block(radon, expose=["sigma_y"])))
    parts(GROUP_OF, y, GROUPS)
    with pytest.raises(GuideError, match="measure_gap takes a guide builder of amortized_pyro.autoguides, not "
                                         "AutoGuideList"):
        measure_gap(radon, parts, GROUP_OF, y, GROUPS, settings=TINY_GAP)


def test_a_semi_supervised_vae_through_a_guide_list():
    """Pyro's semi-supervised VAE (examples/vae/ss_vae_M2.py, small): a class y observed where labelled and latent
    where not, guided by a classifier of one's own beside the builder's q(z | x) in an AutoGuideList (the list's
    create_plates: the model's plate at each call); trained on labelled and unlabelled minibatches, then served
    on new data of another size, with the model's plate and scale."""
    from pyro import poutine
    from pyro.infer import Predictive
    from pyro.infer.autoguide import AutoGuideList
    classes, latent, pixels = 3, 2, 6
    decoder = torch.nn.Linear(latent + classes, pixels)
    classifier = torch.nn.Linear(pixels, classes)

    def model(x, y=None):
        pyro.module("decoder", decoder)
        with pyro.plate("data", len(x)):
            y = pyro.sample("y", dist.Categorical(logits=torch.zeros(classes)), obs=y)
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([latent]).to_event(1))
            codes = torch.nn.functional.one_hot(y, classes).to(z.dtype).expand(z.shape[:-1] + (classes,))
            pyro.sample("x", dist.Normal(decoder(torch.cat([z, codes], -1)), 1.0).to_event(1), obs=x)

    def guide_y(x, y=None):  # a part of the list: in the list's plate, as its autoguide parts are
        pyro.module("classifier", classifier)
        if y is None:
            with guide.plates["data"]:
                pyro.sample("y", dist.Categorical(logits=classifier(x)))

    guide = AutoGuideList(model, create_plates=lambda x, y=None: pyro.plate("data", len(x)))
    guide.append(AutoAmortizedNormal(poutine.block(model, hide=["y"]), width=8))
    guide.append(guide_y)
    generator = torch.Generator().manual_seed(5)
    x, labels = torch.randn(40, pixels, generator=generator), torch.randint(classes, (40,), generator=generator)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
    for start in range(0, 40, 10):
        batch = slice(start, start + 10)
        assert math.isfinite(svi.step(x[batch], labels[batch]))  # labelled
        assert math.isfinite(svi.step(x[batch]))  # unlabelled: y guided by the classifier
    new = torch.randn(23, pixels, generator=generator)
    guide_trace = poutine.trace(guide).get_trace(new)
    model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(new)
    for name in ("y", "z"):
        assert guide_trace.nodes[name]["value"].shape[0] == 23
        assert guide_trace.nodes[name]["scale"] == model_trace.nodes[name]["scale"] == 1.0
    assert Predictive(model, guide=guide, num_samples=2)(new)["x"].shape == (2, 23, pixels)


def padded_groups(y, mask):
    """A nested and padded per-group model: each group's intercept in plate "groups" at dim -2, its observations
    padded to one length in a plate nested inside it, the padding masked out."""
    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    with pyro.plate("groups", y.shape[0], dim=-2):
        a = pyro.sample("a", dist.Normal(0.0, 2.0))
        with pyro.plate("steps", y.shape[1], dim=-1):
            pyro.sample("y", dist.Normal(a, sigma).mask(mask), obs=y)


def padded_data(groups, seed):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 6, (groups,), generator=generator)
    mask = torch.arange(5) < lengths.unsqueeze(-1)
    y = (torch.randn(groups, 1, generator=generator) + 0.5 * torch.randn(groups, 5, generator=generator)) * mask
    return y, mask


def padded_input(y, mask):
    """The encoder's input per group: its padded observations and their mask."""
    return torch.cat([y, mask.to(y.dtype)], -1)


@pytest.mark.parametrize("make", [AutoAmortizedNormal, AutoSemiAmortizedNormal, AutoIterativeAmortizedNormal])
def test_a_nested_and_padded_per_group_model(make):
    """Trained on minibatches of groups, served on new groups of another number (the plate at dim -2, its
    observations padded and masked): the guide's plate and scale are the model's, and measure_gap measures it,
    its per-group log joint the masked one written by hand."""
    y, mask = padded_data(12, 0)
    guide = make(padded_groups, plate="groups", encoder_input=padded_input, width=8)
    svi = SVI(padded_groups, guide, pyro.optim.Adam({"lr": 0.01}), Trace_ELBO())
    for idx in torch.randperm(12).split(5):
        assert math.isfinite(svi.step(y[idx], mask[idx]))
    from pyro import poutine
    new_y, new_mask = padded_data(7, 1)
    guide_trace = poutine.trace(guide).get_trace(new_y, new_mask)
    model_trace = poutine.trace(poutine.replay(padded_groups, trace=guide_trace)).get_trace(new_y, new_mask)
    assert guide_trace.nodes["a"]["value"].shape == model_trace.nodes["a"]["value"].shape == (7, 1)
    assert guide_trace.nodes["a"]["scale"] == model_trace.nodes["a"]["scale"] == 1.0
    from amortized_pyro.autoguides import LocalJoint
    u = torch.randn(3, 7, 1, generator=torch.Generator().manual_seed(2))
    got = LocalJoint(padded_groups, guide.structure, (new_y, new_mask), {})(None, u, {"sigma": torch.tensor(0.8)})
    expected = dist.Normal(0.0, 2.0).log_prob(u[..., 0]) + (dist.Normal(u, 0.8).log_prob(new_y) * new_mask).sum(-1)
    torch.testing.assert_close(got, expected)
    report = measure_gap(padded_groups, guide, new_y, new_mask, settings=TINY_GAP, seen=False)
    assert len(report["per_image"]["amortization_gap"]) == 7


def test_iterative_terms_sit_at_the_particles_dim_beside_a_global_plate():
    """IA-VI's terms with vectorized particles beside a global plate at dim -2 (the data plate at -1): one term per
    particle and datapoint, [P, 1, B], not P × P copies (the gradient counted P times)."""
    from pyro import poutine

    def model(x):
        with pyro.plate("components", 2, dim=-2):
            w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([DX]).to_event(1))
        with pyro.plate("data", len(x), dim=-1):
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
            loc = z.unsqueeze(-1) * w.sum(-3).unsqueeze(-2)  # w [.., 2, 1, DX] summed over the components
            pyro.sample("x", dist.Normal(loc, 1.0).to_event(1), obs=x)

    x = torch.randn(B, DX, generator=torch.Generator().manual_seed(3))
    with pyro.settings.context(module_local_params=True):
        guide = ENCODER_GUIDES["iterative"](model)
        guide(x)
        elbo = Trace_ELBO(num_particles=3, vectorize_particles=True, max_plate_nesting=2)
        wrapped = elbo._vectorized_num_particles(guide)
        trace = poutine.trace(wrapped).get_trace(x)
    terms = trace.nodes["_family_terms"]["fn"]
    assert terms.batch_shape == (3, 1, B), terms.batch_shape
    assert math.isfinite(elbo.differentiable_loss(model, guide, x).item())


def test_measure_gap_refuses_a_hand_written_guide_in_one_line_naming_what_it_lacks():
    """A plain function as the guide (a gallery's hand-written one): the line says what measure_gap reads and
    what to do, not an AutoGuideList's reason."""
    def hand(group, y, n_groups):
        pyro.sample("sigma_y", dist.LogNormal(0.0, 1.0))
        with pyro.plate("groups", n_groups):
            pyro.sample("z", dist.Normal(0.0, 1.0).expand([2]).to_event(1))

    with pytest.raises(GuideError, match="not function: it reads the guide's factor of each datapoint, which a "
                                         "hand-written guide does not expose") as refusal:
        measure_gap(radon, hand, GROUP_OF, torch.randn(OBS), GROUPS, settings=TINY_GAP)
    assert "AutoGuideList" not in str(refusal.value) and "\n" not in str(refusal.value)
