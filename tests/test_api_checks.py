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

from amortized_pyro import GapSettings, fit, load_data, load_run, measure_gap, measure_run, resume
from amortized_pyro.autoguides import AutoAmortizedNormal
from amortized_pyro.autoguides.diagnose import importance_diagnostics
from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.gap.diagnose import diagnose_run
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
