"""The gallery's models (experiments/gallery: Pyro's amortized examples): every model builds with every guide it
lists, trains 20 steps with finite losses that fall, serves held-out data and ``pyro.infer.Predictive``; and the
ELBO of each hand-written guide is the one an independent re-scoring of its traces gives (each site's
log-density summed by hand with its scale). Seconds each; the full runs live in experiments/gallery/run.py."""
import importlib
import math
import sys
from pathlib import Path

import pytest
import torch

import pyro
from pyro import poutine
from pyro.contrib.cevae import TraceCausalEffect_ELBO
from pyro.infer import Predictive, Trace_ELBO, TraceMeanField_ELBO
from pyro.poutine.util import site_is_subsample

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments" / "gallery"))
from common import train  # noqa: E402
from run import MODELS  # noqa: E402

from amortized_pyro.errors import GuideError  # noqa: E402

SPECS = {name: importlib.import_module(name) for name in MODELS}
CASES = [(name, guide) for name, spec in SPECS.items() for guide in spec.GUIDES
         if guide not in getattr(spec, "REFUSED", {})]
REFUSALS = [(name, guide) for name, spec in SPECS.items() for guide in getattr(spec, "REFUSED", {})]
STEPS = 20


@pytest.fixture(scope="module")
def datasets():
    return {}


@pytest.fixture(autouse=True)
def cleared():
    """The trained runs' parameters leave Pyro's param store with each test (conftest checks that none leak)."""
    yield
    pyro.clear_param_store()


def data_of(datasets, name):
    if name not in datasets:
        datasets[name] = SPECS[name].data()
    return datasets[name]


def trained(name, guide, data, seed=0):
    """(setup, losses) after ``STEPS`` steps: a hand-written guide under its example's optimizer, a builder under the
    model's last one (the sparse gamma DEF's Adam 1e-3, under which its encoders train; every other model's own)."""
    spec = SPECS[name]
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    setup = spec.build(guide, data)
    optimizer = spec.OPTIMIZERS["example" if guide == "hand" else list(spec.OPTIMIZERS)[-1]]()
    taken, stopped, _, losses = train(setup, optimizer, spec.batches(data, STEPS, torch.Generator().manual_seed(seed)))
    assert stopped is None, stopped
    return setup, losses


@pytest.mark.parametrize("name, guide", REFUSALS)
def test_a_refused_builder_stops_at_its_first_step_in_one_line(datasets, name, guide):
    """A builder the model's file lists as refused (ProdLDA's dropout under SA-VI and IA-VI) stops at the first
    step with its one line, named in the tables."""
    spec, data = SPECS[name], data_of(datasets, name)
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    setup = spec.build(guide, data)
    optimizer = spec.OPTIMIZERS[list(spec.OPTIMIZERS)[-1]]()
    taken, stopped, _, _ = train(setup, optimizer, spec.batches(data, STEPS, torch.Generator().manual_seed(0)))
    assert taken == 0 and stopped is not None and spec.REFUSED[guide] in stopped and "\n" not in stopped


@pytest.mark.parametrize("name, guide", CASES)
def test_trains_and_serves(datasets, name, guide):
    spec, data = SPECS[name], data_of(datasets, name)
    setup, losses = trained(name, guide, data)
    assert len(losses) == STEPS and all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) < sum(losses[:5]), losses  # falls: the last five steps' losses below the first five's
    if setup.module is not None:
        setup.module.eval()
    first = getattr(spec, "first", lambda x, n: x[:n])
    new = spec.chunks(first(data["test"], 8 if name != "scanvi" else 100))[0]
    if setup.serves_new:
        with torch.no_grad():
            drawn = poutine.trace(setup.guide).get_trace(*new)
        local = [s for s in drawn.nodes.values() if s["type"] == "sample" and not s["is_observed"]
                 and any(f.name == spec.PLATE for f in s["cond_indep_stack"])]
        assert local and all(torch.isfinite(s["value"]).all() for s in local)
    else:  # a per-datapoint guide has no factor for new datapoints: said in one line
        with pytest.raises(GuideError):
            setup.guide(*new) if guide != "hand" else (_ for _ in ()).throw(GuideError("hand: per-datapoint"))
        new = spec.chunks(data["train"])[0]
    samples = Predictive(setup.model, guide=setup.guide, num_samples=2)(*new)
    assert samples and all(torch.isfinite(v.float()).all() for v in samples.values())


def rescored(model, guide, args, auxiliary=False):
    """−ELBO of one draw, by hand: Σ over the model's sites minus Σ over the guide's latent sites of
    scale · log-density (masked where the site is), the guide drawn, the model replayed on it; ``auxiliary``: minus
    also Σ over the guide's observed sites (the CEVAE's TraceCausalEffect_ELBO adds their log q to the ELBO)."""
    drawn = poutine.trace(guide).get_trace(*args)
    replayed = poutine.trace(poutine.replay(model, trace=drawn)).get_trace(*args)

    def total(trace, observed_too, latent_too=True):
        out = 0.0
        for site in trace.nodes.values():
            if site["type"] != "sample" or site_is_subsample(site) or (site["is_observed"] and not observed_too) \
                    or (not site["is_observed"] and not latent_too):
                continue
            log_p = site["fn"].log_prob(site["value"])
            if site["mask"] is not None:
                log_p = log_p * site["mask"]
            out = out + site["scale"] * log_p.sum()
        return out

    return float(total(drawn, False) - total(replayed, True)
                 - (total(drawn, True, latent_too=False) if auxiliary else 0.0))


@pytest.mark.parametrize("name", MODELS)
def test_hand_guide_elbo_is_its_traces(datasets, name):
    data = data_of(datasets, name)
    setup, _ = trained(name, "hand", data)
    args = SPECS[name].batches(data, 1, torch.Generator().manual_seed(1)).__next__()
    with torch.no_grad():
        pyro.set_rng_seed(5)  # TraceMeanField_ELBO's analytic KL is another estimator: its Monte Carlo one here
        elbo = Trace_ELBO() if isinstance(setup.loss, TraceMeanField_ELBO) else setup.loss
        loss = elbo.loss(setup.model, setup.guide, *args)
        pyro.set_rng_seed(5)
        by_hand = rescored(setup.score_model, setup.guide, args, auxiliary=isinstance(setup.loss,
                                                                                    TraceCausalEffect_ELBO))
    assert by_hand == pytest.approx(loss, rel=1e-5, abs=1e-3)
