"""Issue 68, item 1: the encoder builders' default start trains as well as the guide a user writes by hand (Pyro's
VAE), cannot blow up on inputs of any scale, and trains a count model with two local sites. The full measurement
(examples/vae's sizes, seeds 0–2, 5 and 25 epochs; the count model against its hand-written guide) is
experiments/defaults_vs_hand.py and experiments/count_model.py, their runs in figures/defaults-vs-hand."""
import math

import pytest
import torch

import pyro
from pyro.infer import SVI, Trace_ELBO
from pyro.optim import ClippedAdam

from amortized_pyro import load_data
from amortized_pyro.autoguides import AUTOGUIDES, AutoAmortizedNormal
from amortized_pyro.errors import GuideError
from toy_models import VAE, CountModel

ENCODER_BUILDERS = ["amortized", "semi-amortized", "iterative"]


@pytest.fixture(autouse=True)
def users_param_store():
    """These tests train as a user does, with pyro.module and pyro.param in Pyro's global store: cleared after."""
    yield
    pyro.clear_param_store()


def test_the_encoders_body_gets_a_gradient_at_the_first_step():
    """Zero-weight heads pass no gradient to the body at the first step, and on a body whose features hardly
    vary across images (softplus of a first layer) the features start alike; the centred heads pass one."""
    pyro.set_rng_seed(0)
    vae = VAE(x_dim=12, z_dim=3, hidden=8)
    x = torch.bernoulli(torch.full((20, 12), 0.3), generator=torch.Generator().manual_seed(0))
    guide = AutoAmortizedNormal(vae.model, encoder=vae.body)
    Trace_ELBO().differentiable_loss(vae.model, guide, x).backward()
    assert vae.body[0].weight.grad.abs().max() > 0


@pytest.mark.parametrize("scale", [1.0, 1e3, 1e6])
@pytest.mark.parametrize("standardize", [True, False])
def test_the_start_is_tame_on_inputs_of_any_scale(scale, standardize):
    """On counts of any scale, through the default encoder standardized or raw: the factors of the prototype's
    datapoints average μ = init_loc_fn's (0) and, in the scale head's space (the default softplus link's inverse),
    the output that gives σ = init_scale, each coordinate within a root mean square of 1; the default encoder's
    input stays within a few units (symlog, then standardized)."""
    pyro.set_rng_seed(0)
    x = (1 + torch.poisson(torch.full((50, 40), scale), generator=torch.Generator().manual_seed(1))
         * torch.linspace(0.1, 10.0, 50).unsqueeze(-1)).round()  # cells over two orders of magnitude
    model = CountModel.for_data(x, batch=50).model
    guide = AutoAmortizedNormal(model, plate="cells", standardize=standardize)
    with torch.no_grad():
        guide(x)
        loc, scale_ = guide.q_z.encoder(x)  # the plate of all 50 cells: the prototype's datapoints
        if standardize:
            assert guide.q_z.encoder.body[1](x).abs().max() < 10
    torch.testing.assert_close(loc.mean(0), torch.zeros(loc.shape[-1]))
    assert guide.scale_link == "softplus"
    head, target = scale_.expm1().log(), math.log(math.expm1(guide.init_scale))  # softplus⁻¹(σ)
    torch.testing.assert_close(head.mean(0), torch.full((loc.shape[-1],), target))
    assert loc.pow(2).mean(0).sqrt().max() <= 1 + 1e-5
    assert (head - target).pow(2).mean(0).sqrt().max() <= 1 + 1e-5


@pytest.mark.parametrize("name", ENCODER_BUILDERS)
def test_the_defaults_train_a_count_model_with_two_local_sites(name):
    """The scANVI-style model (library sizes over 500–20,000, z and a LogNormal library size per cell, minibatches
    of 100): with ClippedAdam at 1e-3, as its hand-written guide trains, every encoder builder's defaults take 60
    steps with finite losses and a falling loss (the input standardized without symlog: a factor that is not finite
    within them, refused in one line)."""
    train, _ = CountModel.simulate(500, 0)
    pyro.set_rng_seed(0)
    counts = CountModel.for_data(train)
    guide = AUTOGUIDES[name](counts.model, plate="cells")
    svi = SVI(counts.model, guide, ClippedAdam({"lr": 1e-3}), Trace_ELBO())
    losses = [svi.step(train) for _ in range(60)]
    assert all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-10:]) < sum(losses[:10])


def held_out_per_image(model, guide, x, particles=20):
    """Each image's ELBO (``particles`` draws), [len(x)]."""
    elbo = Trace_ELBO(num_particles=particles, vectorize_particles=True, max_plate_nesting=1)
    with torch.no_grad():
        return torch.tensor([-elbo.loss(model, guide, x[i:i + 1]) for i in range(len(x))])


def test_the_default_start_trains_pyros_vae_as_well_as_its_hand_written_guide():
    """Pyro's VAE (z 8 → 64 → 784, softplus) on 1,000 shipped real-MNIST images, binarized, 40 epochs of
    minibatches of 100, Adam 1e-3, seed 0: the builder around the hand-written guide's body ends within 3 nats
    per held-out image of that guide (paired over 200 test images, 3 standard errors of room); zero heads, the
    default before, fail it."""
    data = load_data("mnist-sample", n_obs=1000, n_test=200, log=lambda *_: None)
    x, test = data.train.round(), data.test.round()
    results = {}
    for kind in ("hand", "builder"):
        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        vae = VAE(x_dim=784, z_dim=8, hidden=64)
        guide = vae.guide if kind == "hand" else AutoAmortizedNormal(vae.model, encoder=vae.body)
        svi = SVI(vae.model, guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())
        order = torch.Generator().manual_seed(0)
        for _ in range(40):
            for batch in x[torch.randperm(len(x), generator=order)].split(100):
                svi.step(batch)
        results[kind] = held_out_per_image(vae.model, guide, test)
    difference = results["builder"] - results["hand"]
    stderr = difference.std() / math.sqrt(len(difference))
    assert difference.mean() + 3 * stderr >= -3.0, (float(difference.mean()), float(stderr))


@pytest.mark.parametrize("name", ["semi-amortized", "iterative"])
def test_values_the_model_refuses_inside_the_steps_are_said_in_one_line(name):
    """A finite factor whose steps on the local ELBO reach values the model refuses (a library size of e^200: a
    GammaPoisson rate of 0) is one GuideError line naming the guide's steps, not torch's multi-line ValueError."""
    x, _ = CountModel.simulate(40, 0)
    counts = CountModel.for_data(x, batch=40)
    guide = AUTOGUIDES[name](counts.model, plate="cells")
    guide(x)
    with torch.no_grad():
        guide.q_z.encoder.loc.bias[-1] = 200.0  # log l of every cell
    with pytest.raises(GuideError, match=r"^the %s guide's steps on the local ELBO, from a finite factor of 'z', "
                                         r"'l', reached values the model refuses \((Expected parameter|the local ELBO of no datapoint)" % name):
        guide(x)


@pytest.mark.parametrize("head_init", ["centred", "zero", "torch"])
def test_a_softplus_scale_link_starts_where_exp_does_and_reads_softplus(head_init):
    """scale_link="softplus": σ_n = softplus(the scale head's output) (checked against the head by hand), starting at
    the same σ as the exp link (init_scale: the mean over the first call's datapoints of the head's output, centred;
    every datapoint's, zero); torch's start shifted by the inverse link alike. IA-VI's log σ is its log."""
    x, _ = CountModel.simulate(40, 0)
    counts = CountModel.for_data(x, batch=40)
    found = {}
    for link in ("exp", "softplus"):
        pyro.set_rng_seed(0)
        guide = AUTOGUIDES["amortized"](counts.model, plate="cells", scale_link=link, head_init=head_init)
        guide(x)
        encoder = guide.q_z.encoder
        with torch.no_grad():
            data = guide.encoder_data(torch.arange(40), (x,), {})
            h = encoder.body(data)
            scale = encoder(data)[1]
            by_hand = torch.nn.functional.softplus(encoder.log_scale(h)) if link == "softplus" else \
                encoder.log_scale(h).exp()
            torch.testing.assert_close(scale, by_hand)
            torch.testing.assert_close(encoder.log_scale_of(h), scale.log())
            if head_init == "centred":  # the head's mean output is the one the link turns into init_scale
                target = math.log(0.1) if link == "exp" else math.log(math.expm1(0.1))
                torch.testing.assert_close(encoder.log_scale(h).mean(0), torch.full((scale.shape[1],), target))
        found[link] = scale
    if head_init == "zero":
        torch.testing.assert_close(found["softplus"], torch.full_like(found["softplus"], 0.1))
    if head_init == "torch":  # the same weights, each bias shifted to give σ = init_scale at a zero output
        assert not torch.allclose(found["exp"], found["softplus"])
