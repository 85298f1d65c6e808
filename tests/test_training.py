"""Training on the shipped real MNIST sample: every guide improves its ELBO; runs reload; bad configs fail."""
import math

import pytest
import torch

from amortized_pyro import AmortizedPyroError, FitConfig, fit, load_run
from amortized_pyro.inference.evaluation import evaluate
from amortized_pyro.inference.evaluation import factor
from amortized_pyro.inference.svi import make_elbo
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.estimates import local_elbo
from amortized_pyro.models.guides import GUIDES

from conftest import requires_cuda, same_records

SMALL = FitConfig(dataset="mnist-sample", n_obs=120, n_test=30, epochs=12, batch_size=40, hidden=32, z_dim=8,
                  width=16, lr=1e-2, device="cpu", seed=0)


@pytest.mark.parametrize("guide", GUIDES)
def test_every_guide_improves_its_elbo(guide, tiny_data):
    result = fit(SMALL, data=tiny_data, guide=guide, progress=False)
    elbos = [r["elbo"] for r in result.history]
    assert len(elbos) == SMALL.epochs and all(math.isfinite(e) for e in elbos)
    assert sum(elbos[-3:]) / 3 > sum(elbos[:3]) / 3
    final = result.final
    assert final["elbo_per_obs"] == pytest.approx(final["elbo"] / 120)
    assert all(math.isfinite(final[k]) for k in ("train_plugin_mse", "train_predictive_mse"))
    for key in ("test_plugin_mse", "test_predictive_mse"):  # F-VI has no q(z) for unseen images
        assert math.isnan(final[key]) == (guide == "per-datapoint")


def test_same_seed_same_run(tiny_data):
    runs = [fit(SMALL, data=tiny_data, epochs=3, progress=False).history for _ in range(2)]
    assert [r["elbo"] for r in runs[0]] == [r["elbo"] for r in runs[1]]


def test_particles_train(tiny_data):
    result = fit(SMALL, data=tiny_data, epochs=3, particles=3, progress=False)
    assert all(math.isfinite(r["elbo"]) for r in result.history)
    assert [r["elbo"] for r in result.history] != [r["elbo"] for r in fit(SMALL, data=tiny_data, epochs=3,
                                                                            progress=False).history]


@pytest.mark.parametrize("guide", GUIDES)
def test_run_directory_reloads_to_the_same_evaluation(guide, tiny_data, tmp_path):
    result = fit(SMALL, data=tiny_data, guide=guide, epochs=3, out=tmp_path, progress=False)
    for name in ("config.json", "metrics.jsonl", "params.pt", "summary.json"):
        assert (tmp_path / name).stat().st_size > 0
    reloaded = load_run(tmp_path)
    assert same_records(reloaded.history, result.history)
    again = evaluate(reloaded.model, reloaded.guide, tiny_data)  # the plug-in MSEs (no random draws)
    assert again == pytest.approx({k: result.final[k] for k in again}, nan_ok=True, rel=1e-6)


@pytest.mark.parametrize("bad", [dict(guide="nope"), dict(width=0), dict(epochs=0), dict(lr=-1.0),
                                 dict(device="cuda:99"), dict(device="tpu")])
def test_bad_config_is_refused(bad, tiny_data):
    if bad.get("device") == "cuda:99" and torch.cuda.device_count() > 99:
        pytest.skip("this machine has 100 GPUs")
    with pytest.raises(AmortizedPyroError):
        fit(SMALL, data=tiny_data, progress=False, **bad)


def test_divergence_stops_with_a_clear_error_and_keeps_metrics(tiny_data, tmp_path):
    with pytest.raises(AmortizedPyroError, match="diverged at epoch"):
        fit(SMALL, data=tiny_data, lr=1e9, batch_size=120, epochs=5, out=tmp_path, progress=False)
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") >= 1
    assert not (tmp_path / "summary.json").exists()


@requires_cuda
@pytest.mark.parametrize("guide", GUIDES)
def test_trains_on_cuda(guide, tiny_data):
    result = fit(SMALL, data=tiny_data, guide=guide, device="cuda", epochs=4, progress=False)
    assert result.device.startswith("cuda") and math.isfinite(result.final["elbo"])
    assert result.history[-1]["elbo"] > result.history[0]["elbo"]


def test_semi_amortized_with_no_refinement_is_the_amortized_guide(tiny_data):
    amortized = fit(SMALL, data=tiny_data, guide="amortized", epochs=3, progress=False)
    semi = fit(SMALL, data=tiny_data, guide="semi-amortized", refine_steps=0, epochs=3, progress=False)
    assert [r["elbo"] for r in semi.history] == [r["elbo"] for r in amortized.history]


def test_refinement_raises_the_local_elbo_and_the_encoder_still_learns(tiny_data):
    """SA-VI's refined factor has a higher local ELBO than its encoder's (beyond 4 standard errors), and the
    ELBO at the refined factor sends gradients to the encoder (straight through the refinement)."""
    result = fit(SMALL, data=tiny_data, guide="semi-amortized", refine_steps=20, refine_lr=0.05, epochs=4,
                 progress=False)
    x = tiny_data.test
    generator = torch.Generator().manual_seed(0)
    thetas = Draws.of([result.guide.global_mean()], generator).at("score")  # the same z draws for both
    raw = [t.detach() for t in result.guide.q_z.encoder(x)]
    refined = factor(result.guide, x)
    log_joint = result.model.local_log_joint
    gain = local_elbo(log_joint, x, *refined, thetas, 200) - local_elbo(log_joint, x, *raw, thetas, 200)
    assert gain.mean() > 4 * gain.std() / math.sqrt(len(gain))
    loss = make_elbo()(result.model, result.guide)(tiny_data.train[:40], torch.arange(40))
    grads = torch.autograd.grad(loss, list(result.guide.q_z.encoder.parameters()))
    assert all(torch.isfinite(g).all() for g in grads) and sum(g.abs().sum() for g in grads) > 0


def test_the_early_stopping_rule_compares_window_means():
    from amortized_pyro.inference.training import flat
    rule = FitConfig(stop_window=2, stop_gain=0.5)
    assert not flat([0.0, 1.0, 2.0, 3.0], rule)  # windows (0.5, 2.5): rose by 2
    assert not flat([0.0, 1.0, 1.2, 1.0], rule)  # windows (0.5, 1.1): rose by 0.6
    assert flat([0.0, 1.0, 0.8, 1.0], rule)  # windows (0.5, 0.9): rose by 0.4
    assert not flat([0.0, 1.0, 1.0], rule)  # not at a window's end
    assert not flat([5.0, 5.0, 5.0, 5.0], FitConfig(stop_window=2, kl_warmup=1))  # the window before meets the warm-up
    assert flat([5.0, 5.0, 5.0, 5.0, 5.0, 5.0], FitConfig(stop_window=2, kl_warmup=2))
    assert not flat([5.0] * 8, FitConfig(stop_window=0))


def test_early_stopping_ends_the_run_at_the_rules_first_stop(tiny_data, tmp_path):
    full = fit(SMALL, data=tiny_data, epochs=40, progress=False)
    values = [r["elbo_per_obs"] for r in full.history]
    from amortized_pyro.inference.training import flat
    rule = FitConfig(stop_window=3, stop_gain=16.0)
    expected = next(e for e in range(1, 41) if flat(values[:e], rule))
    assert 6 <= expected < 40  # the rule stops this run, and not at its first chance only by construction
    stopped = fit(SMALL, data=tiny_data, epochs=40, stop_window=3, stop_gain=16.0, progress=False, out=tmp_path / "run")
    assert len(stopped.history) == expected
    assert [r["elbo"] for r in stopped.history] == [r["elbo"] for r in full.history[:expected]]
    assert math.isfinite(stopped.final["train_plugin_mse"]) and (tmp_path / "run" / "summary.json").exists()
    assert "stopped at epoch %d of at most 40" % expected in stopped.summary()
