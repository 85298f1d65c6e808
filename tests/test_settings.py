"""The study settings: presets and their overrides, binarized data and the Bernoulli likelihood, KL warm-up,
AdamW's decay on q(z)'s matrices only, and the evaluation (plug-in vs predictive, never perturbing training)."""
import json
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner


from amortized_pyro import AmortizedPyroError, FitConfig, fit
from amortized_pyro.cli.commands import cli
from amortized_pyro.inference.evaluation import evaluate, mean_image_mse
from amortized_pyro.inference.svi import decays
from amortized_pyro.runs.config import read_preset

EXPERIMENTS = Path(__file__).parents[1] / "experiments"
SMALL = FitConfig(dataset="mnist-sample", n_obs=120, n_test=30, epochs=4, batch_size=40, hidden=16, z_dim=4,
                  width=8, device="cpu", seed=0, predictive_draws=4)


@pytest.mark.parametrize("preset", ["seed-study", "seed-study-elbo", "original-study", "original-study-elbo",
                                    "informative"])
def test_every_shipped_preset_loads_and_checks(preset):
    """Each preset's settings reach the FitConfig (not the defaults), and the result passes the checks."""
    path = EXPERIMENTS / ("%s.toml" % preset)
    settings, _ = read_preset(path)
    config = FitConfig.from_toml(path)
    assert settings and {k: getattr(config, k) for k in settings} == pytest.approx(settings)
    assert any(getattr(FitConfig(), k) != v for k, v in settings.items())


def test_preset_with_command_line_overrides_is_recorded(tmp_path):
    """The issue's own example: the preset's values, the command line's overrides, in config.json."""
    result = CliRunner().invoke(cli, ["fit", "--config", str(EXPERIMENTS / "original-study.toml"), "--dataset",
                                      "mnist-sample", "--n-obs", "1000", "--epochs", "2", "--n-test", "50",
                                      "--eval-every", "2", "--no-progress", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    recorded = json.loads((tmp_path / "config.json").read_text())["config"]
    assert (recorded["n_obs"], recorded["epochs"], recorded["dataset"]) == (1000, 2, "mnist-sample")  # overrides
    assert recorded["prior_scale"] == recorded["obs_scale"] == pytest.approx(2 ** -0.5)  # the preset's
    assert (recorded["qz_init"], recorded["batch_size"], recorded["encoder_layers"]) == ("random", 1000, 2)
    assert (recorded["objective"], recorded["local_terms"], recorded["batch_order"]) == ("reference", "all", "blocks")
    assert FitConfig().prior_scale == 1.0 and FitConfig().objective == "elbo"  # ... which differ from the defaults
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["elbo"] is None and metrics[0]["objective"] is not None  # not an ELBO: recorded apart
    final = metrics[-1]  # at the evaluation: the true ELBO, estimated separately, and q(θ)'s mean scale
    assert final["elbo"] is not None and final["elbo"] != final["objective"] and 0 < final["theta_scale_mean"] < 1


@pytest.mark.parametrize("text, expected", [("epochs = 'ten'", "epochs expects a whole number, got 'ten'"),
                                            ("no_such_thing = 1", "unknown setting"),
                                            ("epochs = [", "cannot read config file")])
def test_bad_preset_is_a_usage_error(tmp_path, text, expected):
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    result = CliRunner().invoke(cli, ["fit", "--config", str(path)])
    assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output


def test_binarized_data_is_binary_reproducible_and_keeps_the_intensities(sample_data):
    once, again = sample_data.binarize(5), sample_data.binarize(5)
    assert once.is_binary() and not sample_data.is_binary() and torch.equal(once.train, again.train)
    assert not torch.equal(once.train, sample_data.binarize(6).train)
    # each pixel is Bernoulli(intensity): the mean over all pixels agrees within 4 standard errors
    p = sample_data.train
    se = math.sqrt((p * (1 - p)).sum().item()) / p.numel()
    assert abs(once.train.mean().item() - p.mean().item()) < 4 * se


def test_bernoulli_needs_binary_images(tiny_data):
    with pytest.raises(AmortizedPyroError, match="binar"):
        fit(SMALL, data=tiny_data, likelihood="bernoulli", progress=False)
    result = fit(SMALL, data=tiny_data, likelihood="bernoulli", binarize=True, progress=False)
    assert math.isfinite(result.final["elbo"])
    assert 0 <= result.final["train_plugin_mse"] <= 1  # reconstructions are sigmoid means, pixel space


def test_warmup_records_its_objective_and_no_elbo_until_the_scale_is_one(tiny_data):
    result = fit(SMALL, data=tiny_data, kl_warmup=3, epochs=4, progress=False)
    assert [r["kl_scale"] for r in result.history] == pytest.approx([1 / 3, 2 / 3, 1, 1])
    assert [math.isnan(r["elbo"]) for r in result.history] == [True, True, False, False]
    assert result.history[-1]["elbo"] == result.history[-1]["objective"]


def test_weight_decay_applies_to_q_z_matrices_only():
    table, vector = torch.zeros(5, 3), torch.zeros(3)
    assert decays("q_z.loc", table) and decays("q_z.encoder.body.0.weight", table)
    assert not decays("q_z.loc", vector) and not decays("q_z.encoder.body.0.bias", vector)
    assert not decays("q_theta.loc", table) and not decays("q_theta.log_scale", table)


def test_evaluating_does_not_change_training(tiny_data):
    often = fit(SMALL, data=tiny_data, eval_every=1, progress=False)
    rarely = fit(SMALL, data=tiny_data, eval_every=4, predictive_draws=0, progress=False)
    assert [r["elbo"] for r in often.history] == [r["elbo"] for r in rarely.history]


def test_predictive_mse_meets_plug_in_only_when_q_is_nearly_a_point(tiny_data):
    """With q(θ) and q(z) almost deterministic, E_q[Ω(z; θ)] is Ω(E z; E θ) and both MSEs agree; with the
    studies' wide q(θ) they do not (Ω is nonlinear and the weight noise is large)."""
    point = fit(SMALL, data=tiny_data, guide="shared", init_scale=1e-6, epochs=1, progress=False)
    with torch.no_grad():
        point.guide.q_z.log_scale.fill_(-14.0)
    values = evaluate(point.model, point.guide, tiny_data, predictive_draws=3, generator=torch.Generator())
    assert values["train_predictive_mse"] == pytest.approx(values["train_plugin_mse"], rel=1e-4)
    wide = fit(SMALL, data=tiny_data, guide="shared", epochs=1, progress=False).final
    assert abs(wide["train_predictive_mse"] - wide["train_plugin_mse"]) > 100 * 1e-4 * wide["train_plugin_mse"]


def test_mean_image_baseline_is_recorded(tiny_data, tmp_path):
    fit(SMALL, data=tiny_data, out=tmp_path, progress=False)
    recorded = json.loads((tmp_path / "summary.json").read_text())["mean_image_mse"]
    assert recorded == pytest.approx(mean_image_mse(tiny_data))
    mean = tiny_data.train.mean(0)
    assert recorded["train_mse"] == pytest.approx((tiny_data.train - mean).pow(2).mean().item())


def test_meanfield_estimator_trains_and_refuses_the_reference_objective(tiny_data):
    result = fit(SMALL, data=tiny_data, estimator="meanfield", progress=False)
    sampled = fit(SMALL, data=tiny_data, progress=False)
    assert all(math.isfinite(r["elbo"]) for r in result.history)
    assert [r["elbo"] for r in result.history] != [r["elbo"] for r in sampled.history]
    with pytest.raises(AmortizedPyroError, match="meanfield"):
        FitConfig(estimator="meanfield", objective="reference").check()


def test_a_run_that_ends_inside_its_warmup_says_so(tiny_data):
    result = fit(SMALL, data=tiny_data, kl_warmup=10, epochs=2, progress=False)
    summary = result.summary()
    assert "ended inside its KL warm-up (scale 0.20 < 1)" in summary and "nan" not in summary.split("\n")[1]
