"""experiments/cvae_probe.py (issue 71, item 1): its pieces against closed forms and constructed data (the KL per
dimension against torch's, the I(z; c) bound at its two ends, a linear probe on separable and on label-blind
features), and the whole measure on a tiny finished CVAE run: a resumable record per run and the table."""
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("cvae_probe", ROOT / "experiments" / "cvae_probe.py")
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_the_kl_per_dimension_is_torch_s_closed_form():
    g = torch.Generator().manual_seed(0)
    loc, prior_loc = torch.randn(50, 6, generator=g, dtype=torch.float64), torch.randn(50, 6, generator=g,
                                                                                       dtype=torch.float64)
    scale, prior_scale = (torch.rand(50, 6, generator=g, dtype=torch.float64) + 0.1 for _ in range(2))
    expected = torch.distributions.kl_divergence(torch.distributions.Normal(loc, scale),
                                                 torch.distributions.Normal(prior_loc, prior_scale))
    torch.testing.assert_close(probe.kl_normal(loc, scale, prior_loc, prior_scale), expected)
    zero = probe.kl_normal(loc, scale, loc, scale)
    assert zero.abs().max() < 1e-12


def test_the_bound_reaches_h_c_on_separable_codes_and_about_zero_on_codes_blind_to_the_label():
    """Codes whose coordinate c is 8 for class c, 0 for the others, plus N(0, 1) noise (separable): accuracy 1,
    I(z; c) ≥ H(c) − ε with H(c) = log 10 for balanced labels; codes independent of the label: accuracy near
    chance, the bound at most about 0 (a lower bound; the probe's held-out cross-entropy is then about H(c) or
    more)."""
    g = torch.Generator().manual_seed(1)
    labels = torch.arange(10).repeat(60)
    noise = torch.randn(600, 4, generator=g, dtype=torch.float64)
    separable = 8 * torch.nn.functional.one_hot(labels, 10).double() + torch.randn(600, 10, generator=g,
                                                                                  dtype=torch.float64)
    assert probe.entropy(labels, 10) == pytest.approx(math.log(10))
    found = probe.linear_probe(separable[:500], labels[:500], separable[500:], labels[500:], 10)
    assert found["accuracy"] == 1.0 and found["bound"] > math.log(10) - 0.1, found
    blind = probe.linear_probe(noise[:500], labels[:500], noise[500:], labels[500:], 10)
    assert blind["accuracy"] < 0.3 and blind["bound"] < 0.05, blind


def test_draws_are_draw_grid_s_under_either_prior():
    """prior_draws gives the z that draw_grid decodes (the same generator calls), standard or learned p(z | c)."""
    from amortized_pyro.models.decoder import BayesianDecoderModel
    from amortized_pyro.models.generation import draw_grid
    from amortized_pyro.models.guides import make_guide

    for prior in ("standard", "learned"):
        torch.manual_seed(0)
        model = BayesianDecoderModel(100, 784, 3, 16, n_classes=10, decoder_prior="none", class_prior=prior)
        theta = make_guide("amortized", model, width=4).global_mean()
        if prior == "learned":  # a prior away from N(0, I)
            theta = dict(theta, **{name: torch.randn(theta[name].shape) for name in ("prior.loc", "prior.log_scale")})
        for same in (False, True):
            z = probe.prior_draws(model, theta, 5, torch.Generator().manual_seed(3), same)
            codes = torch.nn.functional.one_hot(torch.arange(10)[:, None].expand(10, 5), 10).float()
            torch.testing.assert_close(model.mean_image(z, theta, codes),
                                       draw_grid(model, theta, 5, torch.Generator().manual_seed(3), same_z=same))


def test_a_tiny_run_is_measured_once_and_tabled(tmp_path, monkeypatch, capsys):
    """A CVAE of 300 images trained for seconds (in this process): one record (probe, bound, KL, analogies,
    codes), a second measure skips it (resumable), and the table's row holds its values."""
    from amortized_pyro import fit

    run = tmp_path / "tiny-seed0"
    fit(dataset="mnist-sample", n_obs=300, n_test=100, conditional=True, decoder_prior="none", z_dim=4, hidden=32,
        width=16, epochs=20, batch_size=100, eval_every=20, predictive_draws=0, progress=False, out=run,
        log=lambda line: None)
    monkeypatch.setattr(sys, "argv", ["cvae_probe.py", "measure", str(run), "--out", str(tmp_path / "out")])
    probe.main()
    assert "tiny-seed0: probe" in capsys.readouterr().out
    probe.main()  # again: the run is recorded already
    assert "tiny-seed0: probe" not in capsys.readouterr().out
    records = (tmp_path / "out" / "probe.jsonl").read_text().splitlines()
    assert len(records) == 1
    record = json.loads(records[0])
    assert (record["variant"], record["seed"], record["z_dim"], record["test_images"]) == ("tiny", 0, 4, 100)
    assert len(record["kl_per_dim"]) == 4 and record["kl_total"] == pytest.approx(sum(record["kl_per_dim"]))
    assert record["active"]["0.01"] >= record["active"]["0.1"]
    for name in ("probe_means", "probe_draws"):
        assert record[name]["bound"] == pytest.approx(record[name]["entropy"] - record[name]["cross_entropy"])
        assert 0 <= record[name]["accuracy"] <= 1
    for name in ("analogy_accuracy", "draw_accuracy", "codes_own_class", "codes_swapped_as_asked",
                 "codes_swapped_as_image", "knn_accuracy", "misread_as_nearest_codes", "misread_as_probed",
                 "misread_as_probed_independent", "misread_as_nearest_codes_independent", "draws_near_codes_of_row"):
        assert 0 <= record[name] <= 1
    assert record["draw_distance_ratio"] > 0
    table = (tmp_path / "out" / "probe.md").read_text()
    assert table.startswith("Command: `python experiments/cvae_probe.py table ")
    row = next(line for line in table.splitlines() if line.startswith("| tiny |"))
    assert "%.1f ± nan" % (100 * record["probe_means"]["accuracy"]) in row


def test_the_committed_table_is_made_again_from_the_committed_records(tmp_path, monkeypatch, capsys):
    """figures/cvae-accuracy/probe.md is what `table` makes of figures/cvae-accuracy/probe.jsonl (its command line
    aside, which names the output folder): a number edited by hand in either fails here."""
    committed = ROOT / "figures" / "cvae-accuracy"
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["cvae_probe.py", "table", "figures/cvae-accuracy/probe.jsonl", "--out",
                                      str(tmp_path)])
    probe.main()
    capsys.readouterr()
    body = lambda text: [line for line in text.splitlines() if not line.startswith("Command:")]  # noqa: E731
    assert body((tmp_path / "probe.md").read_text()) == body((committed / "probe.md").read_text())
    assert (committed / "probe.md").read_text().startswith(
        "Command: `python experiments/cvae_probe.py table figures/cvae-accuracy/probe.jsonl --out figures/cvae-accuracy`")
    records = [json.loads(line) for line in (committed / "probe.jsonl").read_text().splitlines()]
    assert sorted((r["variant"], r["seed"]) for r in records) == sorted(
        (v, s) for v in ("base", "z8", "recipe", "obs3", "bernoulli", "learned", "every", "noenc") for s in (0, 1, 2))
