"""The gallery's models (experiments/gallery: Pyro's amortized examples): every model builds with every guide it
lists, trains 10 steps with finite losses that fall, serves held-out data and ``pyro.infer.Predictive``; and the
ELBO of each hand-written guide is the one an independent re-scoring of its traces gives (each site's
log-density summed by hand with its scale); every guide's name says the scale link it is built with, and the report
names every recorded line's link truthfully; the default A-VI guide's run records its training-split gap and what
diagnose says. Seconds each; the full runs live in experiments/gallery/run.py."""
import dataclasses
import functools
import importlib
import inspect
import json
import math
import re
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
import common  # noqa: E402
import report  # noqa: E402
from common import BUILDERS, DEFAULT, LINKS, RECORDED_EXP, label, link_of, run_one, train  # noqa: E402
from run import MODELS  # noqa: E402

from amortized_pyro.autoguides import AutoAmortizedNormal  # noqa: E402
from amortized_pyro.errors import GuideError  # noqa: E402

RUNS = Path(__file__).resolve().parents[1] / "figures" / "gallery" / "runs.jsonl"

SPECS = {name: importlib.import_module(name) for name in MODELS}
CASES = [(name, guide) for name, spec in SPECS.items() for guide in spec.GUIDES
         if guide not in getattr(spec, "REFUSED", {})]
REFUSALS = [(name, guide) for name, spec in SPECS.items() for guide in getattr(spec, "REFUSED", {})]
STEPS = 10  # the first five steps' losses against the last five's: every case falls within 10 steps (the
# smallest margin 0.6 %, sparse_gamma's per-datapoint guide; 20 steps took twice the time for the same checks)


@pytest.fixture(scope="module")
def datasets():
    return {}


@pytest.fixture(autouse=True)
def cleared():
    """The trained runs' parameters leave Pyro's param store with each test (conftest checks that none leak)."""
    yield
    pyro.clear_param_store()


DATA_OPTIONS = {"cvae": {"epochs": 5}}
"""Options of a model's ``data()`` here: the CVAE's baseline net trained 5 epochs, not 40 (3 s; these tests read
no prediction of it, and every CVAE case's losses fall by the same margins with it)."""


def data_of(datasets, name):
    if name not in datasets:
        datasets[name] = SPECS[name].data(**DATA_OPTIONS.get(name, {}))
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


def said_link(name):
    """The scale link a guide's name says (its last ``+`` part), or None."""
    last = name.rsplit("+", 1)[-1]
    return last if "+" in name and last in LINKS else None


def test_the_default_guide_is_the_builders_default():
    """common.DEFAULT names AutoAmortizedNormal(model) as it stands: its link is the builder's default."""
    default = inspect.signature(AutoAmortizedNormal.__init__).parameters["scale_link"].default
    assert DEFAULT == "amortized+" + default


@pytest.mark.parametrize("name", MODELS)
def test_every_guide_name_says_the_link_it_is_built_with(datasets, name):
    """Each guide a model lists, built as its runs build it, has the scale link its name says (``defaults``: the
    builder's own default); a name that says none builds no scale head (a hand-written or per-datapoint guide)."""
    spec, data = SPECS[name], data_of(datasets, name)
    for guide in spec.GUIDES:
        if guide in getattr(spec, "REFUSED", {}) and guide != "defaults":
            continue  # refused at construction or first call: no guide to read
        pyro.clear_param_store()
        built = link_of(spec.build(guide, data).guide)
        expected = "softplus" if guide == "defaults" else said_link(guide)
        assert built == expected, (guide, built)
    for guide, builder in BUILDERS.items():  # the names' builders, on a model of one local site
        assert link_of(builder(toy_model)) == said_link(guide), guide


def toy_model(x):
    with pyro.plate("data", len(x)):
        z = pyro.sample("z", pyro.distributions.Normal(0.0, 1.0).expand([2]).to_event(1))
        pyro.sample("x", pyro.distributions.Normal(z, 1.0).to_event(1), obs=x)


def test_the_report_names_each_recorded_lines_link_truthfully():
    """Every line of the gallery's runs is read under a name that says its link where it has one: the link the
    line records, or for a line recorded before lines said it, exp (the builders' default until then); and the
    page's tables name no guide without it."""
    records = [json.loads(line) for line in RUNS.read_text().splitlines() if line.strip()]
    for r in records:
        name = label(r)
        if "scale_link" in r:
            refused = r["scale_link"] is None and r["stopped"] and r["steps"] == 0  # refused as it was built
            assert said_link(name) == r["scale_link"] or refused, (r["model"], r["guide"], r["scale_link"])
        elif r["guide"] in RECORDED_EXP:
            assert said_link(name) == "exp", (r["model"], r["guide"])
        else:  # recorded with its link in its name, or a guide without a scale head
            assert said_link(name) in ("softplus", None) and name == r["guide"]
    page = report.page(records, "runs.jsonl", "figure.png")
    optimizers = "|".join(re.escape(o) for spec in SPECS.values() for o in spec.OPTIMIZERS)
    models = "|".join(spec.NAME for spec in SPECS.values())
    in_tables = re.findall(r"^\| ([^|]+?) \| (?:%s) \| \d" % optimizers, page, flags=re.M)  # a model's table
    in_tables += re.findall(r"^\| (?:%s) \| (?:%s) \| ([^|]+?) \|" % (models, optimizers), page, flags=re.M)
    named = {n.strip("*") for n in in_tables}
    assert named, "no table rows found"
    assert not named & set(RECORDED_EXP), named & set(RECORDED_EXP)
    unlinked = {n for n in named if said_link(n) is None}
    assert unlinked <= {"hand", "hand-named", "per-datapoint", "defaults"}, unlinked  # no scale head, or refused


@pytest.mark.parametrize("name", ["vae", "ss_vae_m2"])
def test_the_default_guides_run_records_its_training_gap_and_diagnose(datasets, name, monkeypatch):
    """run_one of the default A-VI guide, on a tiny budget: the amortization gap on training datapoints beside the
    held-out one, and diagnose's k̂ per datapoint and calibration p-value. The M2's AutoGuideList: its gaps are its
    builder part's, the classifier's y held at its draws (``gap_held``); diagnose refuses it, in one line each."""
    monkeypatch.setattr(common, "GAP_SETTINGS", dataclasses.replace(
        common.GAP_SETTINGS, samples=8, importance_samples=8, max_steps=10, window=5, theta_draws=1,
        score_draws=1, select_draws=1))
    monkeypatch.setattr(common, "GAP_POINTS", 4)
    monkeypatch.setattr(common, "DIAGNOSE", {"samples": 25, "theta_draws": 1, "simulations": 12, "sbc_draws": 9})
    # the held-out and training ELBOs' scoring on a tiny budget too (1 θ draw × 2 z draws, not 4 × 16): their
    # numbers are not what this test reads, and they took most of its time
    monkeypatch.setattr(common, "local_weights", functools.partial(common.local_weights, theta_draws=1, z_draws=2))
    spec, data = SPECS[name], data_of(datasets, name)
    record = run_one(spec, DEFAULT, 0, data, steps=3)
    assert record["stopped"] is None and record["scale_link"] == "softplus"
    assert record["diagnose_split"] == "test"
    assert math.isfinite(record["gap"]) and math.isfinite(record["train_gap"]) and record["gap_refused"] is None
    assert record["train_gap_refused"] is None and record["train_gap_stderr"] >= 0
    if name == "vae":
        assert "gap_held" not in record
        assert len(record["khat"]) == 4 and all(math.isfinite(k) for k in record["khat"])
        assert record["khat_threshold"] > 0 and "datapoints" in record["khat_reading"]
        assert 0 <= record["calibration_p"] <= 1 and len(record["calibration_p_values"]) == 16
    else:
        assert record["gap_held"] == ["y"]  # conditional on the classifier's draws of y
        for field in ("khat_refused", "calibration_refused"):
            assert record[field] and "\n" not in record[field], field
    json.dumps(record)  # one JSON line
    other = run_one(spec, "amortized+exp", 0, data, steps=3)  # any other guide: as before
    assert other["scale_link"] == "exp" and "train_gap" not in other and "khat" not in other


def test_a_run_again_of_the_default_is_added_beside_the_earlier_line_and_compared():
    """run.py counts a default-guide line as finished only where it holds the training-split gap and diagnose (or
    it stopped), and, for M2's AutoGuideList, a gap not refused as measure_gap refused a list before; the report
    reads the latest line of a key run again and says whether the earlier one's numbers were repeated (a gap
    refused before not compared)."""
    from run import LIST_REFUSED, complete
    old = {"model": "vae", "guide": DEFAULT, "seed": 0, "optimizer": "example", "budget": 600, "stopped": None,
           "steps": 600, "heldout_elbo": -119.0, "gap": 4.0}
    assert not complete(old) and complete(dict(old, stopped="loss nan at step 2"))
    new = dict(old, scale_link="softplus", train_gap=3.0, khat=[0.4], ms_per_step=9.0)
    assert complete(new) and complete(dict(old, guide="amortized"))  # an exp line: measured as it was
    runs, repeats = report.read([old, new])
    assert len(runs) == 1 and runs[0]["train_gap"] == 3.0
    assert repeats == [(("vae", DEFAULT, 0, "example", 600), True, None, False)]  # the earlier line: no ms/step
    runs, repeats = report.read([old, dict(new, heldout_elbo=-118.0)])
    assert repeats[0][1] is False
    runs, _ = report.read([dict(old, guide="amortized")])
    assert runs[0]["guide"] == "amortized+exp" and runs[0]["heldout_elbo"] == -119.0  # relabelled, numbers untouched
    refused = "GuideError: measure_gap takes a guide builder of amortized_pyro.autoguides, not AutoGuideList: %s, " \
              "which it does not do" % LIST_REFUSED  # the line M2's default lines hold before
    listed = dict(new, model="ss_vae_m2", gap=None, gap_stderr=None, gap_refused=refused, train_gap=None,
                  train_gap_refused=refused, khat=None, khat_refused="GuideError: importance_diagnostics ...")
    assert not complete(listed) and not complete(dict(listed, khat=[0.4])) and complete(dict(listed, guide="flow+exp"))
    measured = dict(listed, gap=2.0, gap_stderr=0.1, gap_refused=None, train_gap=1.0, train_gap_refused=None,
                    gap_held=["y"], ms_per_step=18.0)
    assert complete(measured)
    runs, repeats = report.read([listed, measured])
    assert runs[0]["gap"] == 2.0
    assert repeats == [(("ss_vae_m2", DEFAULT, 0, "example", 600), True, 2.0, True)]  # its gap: not compared
    assert report.read([listed, dict(measured, heldout_elbo=-118.0)])[1][0][1] is False
