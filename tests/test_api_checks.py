"""The Python API checks what the command line checks (issue 71: "the Python API lacks the CLI's checks"): an
argument that cannot give an answer is refused in one line of the package's own error, before anything is read or
measured, never taken silently (a step count of -1 measured as a refinement row, ``resume(epochs=-5)`` or an
unknown keyword returning the run as if nothing were asked) nor ended by Python's or torch's own error (a
ZeroDivisionError for ``diagnose_run(n_images=0)``, an AttributeError for settings given as a dict)."""
import math
import re

import pytest
import torch

import pyro

from amortized_pyro import (GapSettings, compare, fit, load_data, load_run, make_guide, measure_gap, measure_run,
                            resume)
from amortized_pyro.autoguides import AutoAmortizedNormal
from amortized_pyro.autoguides.diagnose import importance_diagnostics
from amortized_pyro.autoguides.inference_data import to_inference_data
from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.gap.diagnose import diagnose_run
from amortized_pyro.models.decoder import BayesianDecoderModel
from conftest import tiny_finished_run
from toy_models import LinearGaussian

QUIET = dict(progress=False, log=lambda *a: None)
SMALL = GapSettings(ais_steps=0, max_steps=20, samples=2, importance_samples=2, theta_draws=1)


@pytest.fixture(scope="module")
def toy():
    pyro.clear_param_store()
    model = LinearGaussian(10, 4, 2, 0.5)
    guide = AutoAmortizedNormal(model.model)
    guide(model.x)
    yield model, guide
    pyro.clear_param_store()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return tiny_finished_run(tmp_path_factory.mktemp("runs") / "run")


@pytest.mark.parametrize("given, said", [
    (dict(refine_steps=[-1]), "refine_steps must be whole numbers >= 0, got [-1]"),
    (dict(refine_steps=[2.5]), "refine_steps must be whole numbers >= 0, got [2.5]"),
    (dict(refine_steps=5), "refine_steps must be a list of whole numbers >= 0, got 5"),
    (dict(settings={"max_steps": 3}), "settings must be a GapSettings, got dict"),
    (dict(seed=-1), "seed must be a whole number >= 0, got -1"),
    (dict(seed="a"), "seed must be a whole number >= 0, got 'a'"),
    (dict(seed=2 ** 70), "seed must be at most 9223372036854775807 (int64), got 1180591620717411303424"),
])
def test_measure_gap_refuses_what_the_gap_command_refuses(toy, given, said):
    model, guide = toy
    with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
        measure_gap(model.model, guide, model.x, **{"settings": SMALL, **given})


@pytest.mark.parametrize("given, said", [
    (dict(refine_steps=[-1]), "refine_steps must be whole numbers >= 0, got [-1]"),
    (dict(refine_steps=[2], refine_lr=-1), "refine_lr must be a finite number > 0, got -1"),
    (dict(refine_steps=[2], refine_lr=math.nan), "refine_lr must be a finite number > 0, got nan"),
    (dict(chunk=0), "chunk must be a whole number >= 1, got 0"),
])
def test_importance_diagnostics_refuses_what_the_diagnose_command_refuses(toy, given, said):
    model, guide = toy
    with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
        importance_diagnostics(model.model, guide, model.x, samples=100, **given)


@pytest.mark.parametrize("given, said", [
    (dict(n_images=0), "n_images must be a whole number >= 1, got 0"),
    (dict(n_images=-2), "n_images must be a whole number >= 1, got -2"),  # measured 58 of 60 images before
    (dict(n_images=2.5), "n_images must be a whole number >= 1, got 2.5"),
    (dict(seed="a"), "seed must be a whole number >= 0, got 'a'"),
    (dict(seed=2 ** 70), "seed must be at most 9223372036854775807 (int64), got 1180591620717411303424"),
    (dict(refine_steps=[-1]), "refine_steps must be whole numbers >= 0, got [-1]"),
    (dict(refine_steps=[2], refine_lr=0), "refine_lr must be a finite number > 0, got 0"),
])
def test_diagnose_run_refuses_before_reading_the_run(tmp_path, given, said):
    """Refused before the run is read: a folder that holds no run gets the argument's line, not the folder's."""
    with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
        diagnose_run(tmp_path / "no-run", **{"n_images": 2, "samples": 100, "log": lambda *a: None, **given})


@pytest.mark.parametrize("given, said", [
    (dict(refine_steps=[-1]), "refine_steps must be whole numbers >= 0, got [-1]"),
    (dict(settings={"max_steps": 3}), "settings must be a GapSettings, got dict"),
])
def test_measure_run_refuses_before_reading_the_run(tmp_path, given, said):
    with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
        measure_run(tmp_path / "no-run", **{"n_images": 2, "settings": SMALL, **QUIET, **given})


@pytest.mark.parametrize("given, said", [
    (dict(bogus=1), "resume takes no setting bogus"),
    (dict(epochs=-5), "epochs must be >= 1, got -5"),  # returned the finished run as if nothing were asked
    (dict(epochs=2.5), "epochs expects a whole number, got 2.5"),
])
def test_resume_refuses_a_setting_it_cannot_apply(finished, given, said):
    config = (finished / "config.json").read_bytes()
    with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
        resume(finished, **QUIET, **given)
    assert (finished / "config.json").read_bytes() == config


def test_fit_and_load_run_refuse_data_and_config_of_another_kind(finished):
    with pytest.raises(AmortizedPyroError, match=r"^data must be a Data \(load_data\(\.\.\.\)\), got str"):
        fit(guide="amortized", data="mnist-sample", epochs=1, **QUIET)
    with pytest.raises(AmortizedPyroError, match=r"^config must be a FitConfig .*got dict"):
        fit({"guide": "amortized"}, epochs=1, **QUIET)
    with pytest.raises(AmortizedPyroError, match=r"^data must be a Data \(load_data\(\.\.\.\)\), got str"):
        load_run(finished, data="mnist-sample")
    # what a user means is taken: a Data, or None
    assert load_run(finished, data=None).config.guide == "amortized"
    data = load_data("mnist-sample", n_obs=10, n_test=2, log=lambda *a: None)
    assert fit(guide="shared", data=data, epochs=1, batch_size=10, hidden=8, z_dim=2, eval_every=1,
               **QUIET).config.guide == "shared"


@pytest.mark.parametrize("given, said", [
    (dict(predictive_draws=-1), "predictive_draws must be a whole number >= 0, got -1"),  # evaluated none before
    (dict(predictive_draws=2.5), "predictive_draws must be a whole number >= 0, got 2.5"),
    (dict(seed="a"), "seed must be a whole number >= 0, got 'a'"),
    (dict(data="mnist-sample"), "data must be a Data (load_data(...)), got str"),
])
def test_a_runs_evaluate_refuses_what_it_cannot_evaluate(finished, given, said):
    run = load_run(finished)
    data = load_data("mnist-sample", n_obs=60, n_test=20, log=lambda *a: None)
    with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
        run.evaluate(**{"data": data, **given})


@pytest.mark.parametrize("given, said", [
    (dict(n_obs=2.5), "n_obs must be a whole number >= 1, got 2.5"),
    (dict(n_test=-1), "n_test must be a whole number >= 0, got -1"),
    (dict(seed=-1), "seed must be a whole number >= 0, got -1"),
    (dict(binarize="yes"), "binarize must be True or False, got 'yes'"),  # taken as True before
])
def test_load_data_refuses_sizes_and_switches_of_another_kind(given, said):
    with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
        load_data("mnist-sample", **{"n_obs": 10, "n_test": 2, "log": lambda *a: None, **given})


def test_fit_refuses_an_empty_out_which_wrote_nothing_without_a_word():
    data = load_data("mnist-sample", n_obs=10, n_test=2, log=lambda *a: None)
    with pytest.raises(AmortizedPyroError, match="^out must name a folder"):
        fit(guide="shared", data=data, epochs=1, out="", **QUIET)


@pytest.mark.parametrize("x, said", [
    (torch.zeros(3, 10), "x must be a tensor of rows of 784 numbers (this model's images), got shape [3, 10]"),
    (torch.zeros(784), "x must be a tensor of rows of 784 numbers (this model's images), got shape [784]"),
    ([[0.0] * 784], "x must be a tensor of rows of 784 numbers (this model's images), got list"),
])
def test_factor_and_reconstruct_refuse_images_of_another_size(finished, x, said):
    """torch's "mat1 and mat2 shapes cannot be multiplied (3x10 and 784x4)" before, or an AttributeError."""
    from amortized_pyro.inference.evaluation import factor, reconstruct

    run = load_run(finished)
    for call in (lambda: factor(run.guide, x), lambda: reconstruct(run.model, run.guide, x)):
        with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
            call()
    assert factor(run.guide, torch.zeros(3, 784))[0].shape == (3, 3)  # z of 3 dimensions


@pytest.mark.parametrize("given, said", [
    (dict(seeds=[-1]), "seed must be >= 0, got -1"),  # trained a run of seed -1 before
    (dict(seeds=[1.5]), "seed expects a whole number, got 1.5"),
    (dict(seeds=[0, 0]), "seeds: 0 is given twice in [0, 0]"),  # the same run twice, in one folder
    (dict(seeds=5), "seeds must be a list, got 5"),  # Python's TypeError before
    (dict(guides="shared"), "guides must be a list, got 'shared'"),  # read as the guides 's', 'h', ... before
    (dict(guides=["amortized"], widths=[0]), "width must be >= 1, got 0"),
    (dict(guides=["amortized"], widths=[4, 4]), "widths: 4 is given twice in [4, 4]"),  # dropped without a word
    (dict(datasets=[]), "give at least one dataset"),  # returned an empty table
    (dict(gap_images=-1), "gap_images must be a whole number >= 0, got -1"),  # measured after training
    (dict(replicas=0), "replicas must be a whole number >= 1, got 0"),
    (dict(data_seed="a"), "data_seed must be a whole number >= 0, got 'a'"),
    (dict(data_seed=2 ** 70), "data_seed must be at most 9223372036854775807 (int64), got 1180591620717411303424"),
    (dict(gap_images=1, gap_settings={"max_steps": 3}), "gap_settings must be a GapSettings, got dict"),
    (dict(overwrite="no"), "overwrite must be True or False, got 'no'"),  # read as True: the runs cleared
    (dict(log="x"), "log must be a function taking a line (print, say), got 'x'"),
    (dict(seed=3), "compare takes no setting seed (its settings are FitConfig's fields; guide, width, seed"),
    (dict(out=""), "out must name a folder for the runs and results (None: nothing is written), got ''"),
    (dict(ray_options={"cpus": 1}), "ray_options must be a dict of address, cpus_per_run, gpus_per_run, retries"),
])
def test_compare_refuses_before_reading_or_writing_anything(tmp_path, given, said):
    out = tmp_path / "comparison"
    grid = dict(guides=("shared",), widths=(4,), seeds=(0,), datasets=("mnist-sample",), out=out, epochs=1, n_obs=10,
                n_test=2, allow_sample=True, **QUIET)
    with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
        compare(**{**grid, **given})
    assert not out.exists()


def test_compare_refuses_two_datasets_of_the_same_images(tmp_path):
    """mnist, not in data_dir, falls back to the sample: mnist-sample's runs twice, in one folder, before."""
    with pytest.raises(AmortizedPyroError, match="^datasets 'mnist' and 'mnist-sample' both load mnist-sample"):
        compare(guides=("shared",), seeds=(0,), datasets=("mnist", "mnist-sample"), data_dir=str(tmp_path),
                download=False, epochs=1, n_obs=10, n_test=2, allow_sample=True, **QUIET)


@pytest.mark.parametrize("given, said", [
    (dict(num_samples=0), "num_samples must be a whole number >= 2, got 0"),  # an IndexError before
    (dict(num_samples=1), "num_samples must be a whole number >= 2, got 1"),  # ArviZ's IndexError before
    (dict(num_samples=2.5), "num_samples must be a whole number >= 2, got 2.5"),
    (dict(seed=-1), "seed must be a whole number >= 0, got -1"),  # taken before
    (dict(seed=None), "seed must be a whole number >= 0, got None"),  # torch's RuntimeError before
    (dict(seed=2 ** 70), "seed must be at most 9223372036854775807 (int64), got 1180591620717411303424"),
    (dict(draws="nope"), "draws must be one of 'auto', 'stacked', 'one-at-a-time'; got 'nope'"),
    (dict(chunk=0), "chunk must be a whole number >= 1, got 0"),  # taken before
    (dict(model="x"), "to_inference_data takes the Pyro model first (a callable), got str"),
])
def test_to_inference_data_refuses_before_drawing(toy, given, said):
    model, guide = toy
    given = dict(given)
    with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
        to_inference_data(given.pop("model", model.model), guide, model.x, **{"num_samples": 4, **given})


@pytest.mark.parametrize("family, given, said", [
    (["amortized"], {}, "unknown guide ['amortized']: choose one of amortized, semi-amortized, iterative"),
    ("shared", dict(width=0), "width must be >= 1, got 0"),  # taken by the guides without an encoder before
    ("amortized", dict(width="x"), "width expects a whole number, got 'x'"),  # Python's TypeError before
    ("amortized", dict(encoder="nope"), "encoder must be one of mlp, conv, got 'nope'"),  # a KeyError before
    ("amortized", dict(encoder_layers=0), "encoder_layers must be >= 1, got 0"),  # an encoder of no layer before
    ("amortized", dict(encoder_slope=math.nan), "encoder_slope must be a finite number"),
    ("amortized", dict(flow="two"), "flow expects a whole number, got 'two'"),
    ("semi-amortized", dict(refine_lr=math.nan), "refine_lr must be a finite number"),
    ("iterative", dict(iterations=-1), "iterations must be >= 0, got -1"),
    ("shared", dict(init_scale=0), "init_scale must be > 0, got 0.0"),  # taken before
    ("shared", dict(qz_init="x"), "qz_init must be one of prior, random, got 'x'"),
    ("shared", dict(objective="x"), "objective must be one of elbo, reference, got 'x'"),
    ("per-datapoint", dict(seed=-1), "seed must be >= 0, got -1"),  # taken before
    ("amortized", dict(encoder_label="no"), "encoder_label expects true or false, got 'no'"),  # read as True
    ("amortized", dict(model="x"), "model must be the package's BayesianDecoderModel, got str"),  # AttributeError
])
def test_make_guide_refuses_what_a_fit_config_refuses(family, given, said):
    given = dict(given)
    model = given.pop("model", BayesianDecoderModel(10, 12, 2, 4))
    with pytest.raises(AmortizedPyroError, match="^%s" % re.escape(said)):
        make_guide(family, model, **{"width": 4, **given})
