"""The conditional model (issue 50, item 2): Pyro's ELBO of the CVAE equals a handwritten one with labels
(tests/oracle.py), the decoder and the encoder read the label, a conditional run trains on the shipped sample
for every family of the studies and its gap is measured, and a source without labels is refused in one line."""
import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import pyro
from pyro import poutine
from pyro.infer import Trace_ELBO

from amortized_pyro import fit
from amortized_pyro.errors import InvalidSettings
from amortized_pyro.cli.commands import cli
from amortized_pyro.inference.evaluation import factor
from amortized_pyro.inference.svi import make_elbo
from amortized_pyro.models.decoder import BayesianDecoderModel
from amortized_pyro.models.guides import make_guide

from conftest import STUDY_GUIDES
from oracle import LAYERS, conditional_elbo, encoder_factor
from test_elbo import split_theta

N, B, X_DIM, Z_DIM, HIDDEN, WIDTH, K = 30, 6, 12, 3, 5, 4, 4
PRIOR_SCALE, OBS_SCALE = 1.3, 0.7
quiet = dict(log=lambda line: None)


def oracle_q(guide, rows, idx, learned, every_layer=False, images_only=False):
    """(m, s) of every θ site (the learned prior's M and S too) and (μ, σ) of q(z) for the batch, read from the
    guide's state_dict by name; the encoder's (μ, σ) by the oracle from the rows [x, e_c] (``images_only``: from
    x alone, the encoder's body behind the module that cuts the label off)."""
    p = {name: value.detach() for name, value in guide.state_dict().items()}
    label = K if every_layer else 0
    shapes = [(HIDDEN, Z_DIM + K), (HIDDEN,), (HIDDEN, HIDDEN + label), (HIDDEN,), (X_DIM, HIDDEN + label), (X_DIM,)]
    names = list(LAYERS) + (["prior_loc", "prior_log_scale"] if learned else [])
    shapes += [(Z_DIM, K), (Z_DIM, K)] if learned else []
    locs, scales = split_theta(p["q_theta.loc"], shapes), split_theta(p["q_theta.log_scale"].exp(), shapes)
    q_theta = {l: (m, s) for l, m, s in zip(names, locs, scales)}
    if guide.family == "amortized":
        encoder = {k[len("q_z.encoder."):].replace("body.1." if images_only else "-", "body."): v
                   for k, v in p.items() if k.startswith("q_z.encoder.")}
        return q_theta, encoder_factor(rows[:, :X_DIM] if images_only else rows, encoder)
    if guide.family == "per-datapoint":
        return q_theta, (p["q_z.loc"][idx], p["q_z.log_scale"][idx].exp())
    return q_theta, (p["q_z.loc"].expand(len(idx), -1), p["q_z.log_scale"].exp().expand(len(idx), -1))


@pytest.fixture
def setup(request):
    """A conditional model and guide (every variational parameter moved off its start), labels and a minibatch."""
    torch.set_default_dtype(torch.float64)
    guide_name, prior = request.param
    pyro.set_rng_seed(0)
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, PRIOR_SCALE, OBS_SCALE, n_classes=K, class_prior=prior)
    guide = make_guide(guide_name, model, width=WIDTH)
    labels = torch.randint(0, K, (N,))
    rows = model.inputs(torch.rand(N, X_DIM), labels)
    idx = torch.tensor([3, 17, 5, 29, 0, 11])
    with torch.no_grad():
        for unconstrained in guide.parameters():
            unconstrained.add_(0.3 * torch.randn_like(unconstrained))
    return model, guide, rows[idx], idx, prior == "learned"


@pytest.mark.parametrize("setup", [(g, p) for g in STUDY_GUIDES for p in ("standard", "learned")], indirect=True,
                         ids=str)
def test_pyro_elbo_of_the_conditional_model_equals_handwritten_on_the_same_draw(setup):
    model, guide, rows, idx, learned = setup
    pyro.set_rng_seed(1)
    guide_trace = poutine.trace(guide).get_trace(rows, idx)
    replayed = poutine.replay(guide, trace=guide_trace)
    theta = {l: guide_trace.nodes["decoder." + l]["value"] for l in LAYERS}
    if learned:
        theta.update(prior_loc=guide_trace.nodes["prior.loc"]["value"],
                     prior_log_scale=guide_trace.nodes["prior.log_scale"]["value"])
    z = guide_trace.nodes["z"]["value"]
    x, codes = rows[:, :X_DIM], rows[:, X_DIM:]
    q_theta, q_z = oracle_q(guide, rows, idx, learned)
    expected = conditional_elbo(x, codes, q_theta, q_z, theta, z, N / B, PRIOR_SCALE, OBS_SCALE).item()
    assert -Trace_ELBO().loss(model, replayed, rows, idx) == pytest.approx(expected, rel=1e-6)
    assert -make_elbo(1).differentiable_loss(model, replayed, rows, idx).item() == pytest.approx(expected, rel=1e-6)
    # power: the oracle with other labels (each shifted by one class) is another number
    shifted = torch.roll(codes, 1, dims=1)
    q_other = q_z if guide.family != "amortized" else oracle_q(guide, torch.cat([x, shifted], 1), idx, learned)[1]
    other = conditional_elbo(x, shifted, q_theta, q_other, theta, z, N / B, PRIOR_SCALE, OBS_SCALE).item()
    assert abs(other - expected) > 1e-3 * abs(expected)


def test_the_label_at_every_decoder_layer_and_an_encoder_of_the_image_alone():
    """--decoder-label every-layer: Pyro's ELBO equals the oracle whose layers each read [h, e_c] (and not the
    oracle that reads e_c at the input only); --no-encoder-label: q(z | x), the factor the same whatever the label,
    the oracle's encoder of the image alone."""
    torch.set_default_dtype(torch.float64)
    pyro.set_rng_seed(0)
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, PRIOR_SCALE, OBS_SCALE, n_classes=K,
                                 decoder_label="every-layer")
    guide = make_guide("amortized", model, width=WIDTH, encoder_label=False)
    with torch.no_grad():
        for unconstrained in guide.parameters():
            unconstrained.add_(0.3 * torch.randn_like(unconstrained))
    labels = torch.randint(0, K, (N,))
    idx = torch.tensor([3, 17, 5, 29, 0, 11])
    rows = model.inputs(torch.rand(N, X_DIM), labels)[idx]
    x, codes = rows[:, :X_DIM], rows[:, X_DIM:]
    guide_trace = poutine.trace(guide).get_trace(rows, idx)
    theta = {l: guide_trace.nodes["decoder." + l]["value"] for l in LAYERS}
    z = guide_trace.nodes["z"]["value"]
    q_theta, q_z = oracle_q(guide, rows, idx, False, every_layer=True, images_only=True)
    loss = -Trace_ELBO().loss(model, poutine.replay(guide, trace=guide_trace), rows, idx)
    expected = conditional_elbo(x, codes, q_theta, q_z, theta, z, N / B, PRIOR_SCALE, OBS_SCALE, every_layer=True)
    assert loss == pytest.approx(expected.item(), rel=1e-6)
    cut = lambda l, v: v[..., :v.shape[-1] - K] if l in ("w2", "w3") else v  # noqa: E731  e_c's weights cut
    at_input = conditional_elbo(x, codes, {l: tuple(cut(l, v) for v in q) for l, q in q_theta.items()},
                                q_z, {l: cut(l, v) for l, v in theta.items()}, z, N / B, PRIOR_SCALE, OBS_SCALE)
    assert abs(loss - at_input.item()) > 1e-3 * abs(loss)  # power: the label's later weights count
    loc_a, _ = factor(guide, model.inputs(x, torch.zeros(len(x), dtype=torch.long)))
    loc_b, _ = factor(guide, model.inputs(x, torch.full((len(x),), 2)))
    assert torch.equal(loc_a, loc_b)


def test_the_decoder_the_encoder_and_the_learned_prior_read_the_label():
    pyro.set_rng_seed(0)
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, n_classes=K, class_prior="learned")
    guide = make_guide("amortized", model, width=WIDTH)
    with torch.no_grad():
        guide.q_theta.loc.add_(torch.randn_like(guide.q_theta.loc))  # M and S start at 0: move them
    theta, z = guide.global_mean(), torch.randn(5, Z_DIM)
    a, b = (torch.nn.functional.one_hot(torch.full((5,), c), K).float() for c in (0, 2))
    assert not torch.allclose(model.mean_image(z, theta, a), model.mean_image(z, theta, b), atol=1e-4)
    assert not torch.allclose(model.log_prior_z(z, a, theta), model.log_prior_z(z, b, theta), atol=1e-4)
    x = torch.rand(5, X_DIM)
    loc_a, _ = factor(guide, model.inputs(x, torch.zeros(5, dtype=torch.long)))
    loc_b, _ = factor(guide, model.inputs(x, torch.full((5,), 2)))
    assert not torch.allclose(loc_a, loc_b, atol=1e-4)
    standard = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, n_classes=K)  # N(0, I) whatever the class
    assert torch.equal(standard.log_prior_z(z, a, theta), standard.log_prior_z(z, b, theta))


def run_cli(args):
    return CliRunner().invoke(cli, [str(a) for a in args])


TINY = ["--dataset", "mnist-sample", "--n-obs", 40, "--n-test", 10, "--epochs", 3, "--batch-size", 20, "--hidden", 8,
        "--z-dim", 3, "--no-progress", "--eval-every", 1, "--predictive-draws", 2]


@pytest.mark.parametrize("guide, extra", [("amortized", []), ("per-datapoint", []), ("shared", []),
                                          ("amortized", ["--class-prior", "learned"]),
                                          ("per-datapoint", ["--class-prior", "learned", "--decoder-prior", "none"])])
def test_a_conditional_run_trains_on_the_shipped_sample_and_its_gap_is_measured(tmp_path, guide, extra):
    width = ["--width", 4] if guide == "amortized" else []
    out = tmp_path / "run"
    result = run_cli(["fit", "--guide", guide, "--conditional", *width, *extra, *TINY, "--out", out])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "config.json").read_text())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 3 and all(math.isfinite(r["elbo"]) for r in metrics)
    assert math.isfinite(metrics[-1]["train_plugin_mse"])
    assert info["config"]["conditional"] and info["data"]["labels"]["n_classes"] == 10
    result = run_cli(["gap", out, "--split", "train", "--n-images", 3, "--importance-samples", 10, "--theta-draws", 2,
                      "--max-steps", 10, "--samples", 2, "--ais-steps", 0])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "gap.json").read_text())
    assert report["label"].endswith("conditional" if not extra else "learned p(z | c)" if "none" not in extra
                                    else "learned p(z | c), point θ")
    assert math.isfinite(report["amortization_gap"]["mean"]) and math.isfinite(report["optimized_plugin_mse"])


@pytest.mark.parametrize("decoder_prior", ["normal", "none"])
def test_a_conditional_run_with_conv_encoder_and_decoder_trains(tmp_path, decoder_prior):
    """The conditional model with the conv decoder (it reads [z, one-hot(c)]) and the conv encoder (the label joins
    the convolutions' features), Bayesian or standard: finite ELBOs, and the label recorded."""
    out = tmp_path / "run"
    result = run_cli(["fit", "--guide", "amortized", "--width", 4, "--conditional", "--decoder", "conv", "--encoder",
                      "conv", "--decoder-prior", decoder_prior, *TINY, "--out", out])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "config.json").read_text())
    assert info["config"]["conditional"] and info["config"]["decoder"] == "conv" and info["config"]["encoder"] == "conv"
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 3 and all(math.isfinite(r["elbo"]) for r in metrics)


def test_a_conditional_run_trains_on_a_cifar10_folder_with_its_labels(tmp_path):
    """`fit --conditional` on a folder in CIFAR-10's published format (python batches: labels beside the images):
    the labels recorded are the batches' own, and the encoder and decoder read 3,072 pixels and 10 classes."""
    from test_datasets import write_cifar
    write_cifar(tmp_path / "cifar", per_batch=10)
    out = tmp_path / "run"
    result = run_cli(["fit", "--guide", "amortized", "--width", 4, "--conditional", "--dataset", tmp_path / "cifar",
                      *TINY[2:], "--out", out])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "config.json").read_text())
    assert info["config"]["conditional"] and info["data"]["x_dim"] == 3072
    assert info["data"]["labels"]["n_classes"] == 10
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 3 and all(math.isfinite(r["elbo"]) for r in metrics)


def test_a_conditional_run_reads_the_labels_it_was_trained_with():
    """The rows [x, e_c] travel with the minibatch: the same run on shuffled labels is another run."""
    from amortized_pyro import load_data
    data = load_data("mnist-sample", n_obs=40, n_test=10, seed=0, **quiet)
    settings = dict(dataset="mnist-sample", n_obs=40, n_test=10, epochs=2, batch_size=20, hidden=8, z_dim=3,
                    width=4, conditional=True, progress=False, device="cpu", **quiet)
    own = fit(data=data, **settings)
    shuffled = data.to("cpu")
    shuffled.train_labels = torch.roll(data.train_labels, 1)
    other = fit(data=shuffled, **settings)
    assert own.final["elbo"] != other.final["elbo"]
    assert own.evaluate(data)["test_plugin_mse"] == pytest.approx(own.final["test_plugin_mse"], rel=1e-6)


def test_a_source_without_labels_refuses_the_conditional_model_in_one_line(tmp_path):
    images = np.random.default_rng(0).random((30, 64)).astype(np.float32)
    np.save(tmp_path / "images.npy", images)
    with pytest.raises(InvalidSettings, match="--conditional needs class labels"):
        fit(dataset=str(tmp_path / "images.npy"), conditional=True, n_obs=20, n_test=5, epochs=1, progress=False,
            **quiet)
    result = run_cli(["fit", "--dataset", tmp_path / "images.npy", "--conditional", "--n-obs", 20, "--n-test", 5,
                      "--epochs", 1, "--no-progress", "--out", tmp_path / "run"])
    assert result.exit_code == 2 and "--conditional needs class labels" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "run").exists()
    result = run_cli(["fit", "--class-prior", "learned", *TINY, "--out", tmp_path / "run"])
    assert result.exit_code == 2 and "add --conditional" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    for where, said in ((["--no-encoder-label"], "add --conditional"), (["--decoder-label", "every-layer"],
                                                                         "add --conditional"),
                        (["--conditional", "--decoder-label", "every-layer", "--decoder", "conv"], "mlp decoder"),
                        (["--conditional", "--guide", "per-datapoint", "--no-encoder-label"], "encoder")):
        result = run_cli(["fit", *where, *TINY, "--out", tmp_path / "run"])
        assert result.exit_code == 2 and said in result.output, (where, result.output)
        assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "run").exists(), result.output


def test_sample_draws_one_row_per_class_and_refuses_in_one_line(tmp_path):
    """Class-conditional generation (issue 50, item 3): a PNG that is not blank, whose class rows differ; the same
    draws again with the same seed; an existing file and an unfinished run refused in one line."""
    from matplotlib.image import imread
    from amortized_pyro.models.generation import draw_grid
    from amortized_pyro.runs.fit import load_run

    out = tmp_path / "run"
    trained = run_cli(["fit", "--conditional", "--class-prior", "learned", "--decoder-prior", "none", "--width", 4,
                       *TINY, "--epochs", 30, "--lr", 0.03, "--out", out])
    assert trained.exit_code == 0, trained.output
    result = run_cli(["sample", out, "--per-class", 3, "--out", tmp_path / "grid.png"])
    assert result.exit_code == 0, result.output
    pixels = imread(tmp_path / "grid.png")
    assert pixels.std() > 0.05  # drawn images, not a blank canvas
    run = load_run(out)
    theta = run.guide.global_mean()
    grid = draw_grid(run.model, theta, 3, torch.Generator().manual_seed(0))
    assert grid.shape == (10, 3, 784)
    assert torch.equal(grid, draw_grid(run.model, theta, 3, torch.Generator().manual_seed(0)))
    # each class's row from the same z noise (the same seed): the rows differ by their class alone
    rows = torch.cat([draw_grid(run.model, theta, 3, torch.Generator().manual_seed(0), torch.tensor([c]))
                      for c in range(10)])
    assert min((rows[a] - rows[b]).abs().max().item() for a in range(10) for b in range(a)) > 0.01
    again = run_cli(["sample", out, "--out", tmp_path / "grid.png"])
    assert again.exit_code == 1 and "exists" in again.output and len(again.output.strip().splitlines()) == 1
    rows = run_cli(["sample", out, "--rows", 3, "--out", tmp_path / "rows.png"])  # ignored before (issue 71)
    assert rows.exit_code == 2 and "one row per class" in rows.output and not (tmp_path / "rows.png").exists()
    assert len(rows.output.strip().splitlines()) == 1, rows.output
    (out / "summary.json").unlink()  # no longer a finished run
    unfinished = run_cli(["sample", out, "--out", tmp_path / "other.png"])
    assert unfinished.exit_code == 1 and "not a finished run" in unfinished.output
    assert len(unfinished.output.strip().splitlines()) == 1, unfinished.output


def test_sample_draws_rows_of_independent_z_for_an_unconditional_run(tmp_path):
    out = tmp_path / "run"
    assert run_cli(["fit", "--width", 4, *TINY, "--out", out]).exit_code == 0
    result = run_cli(["sample", out, "--per-class", 4, "--rows", 2, "--seed", 3])
    assert result.exit_code == 0, result.output
    assert (out / "samples.png").exists() and "2 rows of 4 images: an unconditional run's rows" in result.output
    # no ceiling before (100,000 per class: over 10 minutes at 10.5 GB), matplotlib's error for a .txt (issue 71)
    ceiling = run_cli(["sample", out, "--per-class", 101])  # click's usage error, its range named
    assert ceiling.exit_code == 2 and "101 is not in the range 1<=x<=100" in ceiling.output, ceiling.output
    text = run_cli(["sample", out, "--out", out / "grid.txt"])
    assert text.exit_code == 2 and "no '.txt' file" in text.output, text.output
    assert len(text.output.strip().splitlines()) == 1 and not (out / "grid.txt").exists()


@pytest.mark.parametrize("decoder_label", ["input", "every-layer"])
def test_the_gaps_gram_shortcut_is_the_plain_log_joint_with_the_label_at_every_layer(decoder_label):
    """The gap's shortcut for the normal likelihood (``with_gram``: WᵀW and Wᵀ(x − b) of the last layer) gives the
    plain local log joint on the same draws where the last layer also reads the label ([h, e_c])."""
    from amortized_pyro.local.gaps import global_draws
    from amortized_pyro.local.gaps import GapSettings

    torch.set_default_dtype(torch.float64)
    pyro.set_rng_seed(0)
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN, PRIOR_SCALE, OBS_SCALE, n_classes=K,
                                 decoder_label=decoder_label)
    guide = make_guide("amortized", model, width=WIDTH)
    fit_draws, _ = global_draws(guide, GapSettings(theta_draws=3), torch.Generator().manual_seed(1))
    rows = model.inputs(torch.rand(5, X_DIM), torch.randint(0, K, (5,)))
    z = torch.randn(3, 4, 5, Z_DIM)  # [M, S, n, z_dim]
    plain = model.local_log_joint(rows, z, fit_draws.values)
    shortcut = model.local_log_joint(rows, z, model.with_gram(fit_draws, rows).values)
    assert "gram.WtW" in model.with_gram(fit_draws, rows).values  # the shortcut's path, not the plain one
    assert plain.shape == (3, 4, 5) and torch.allclose(plain, shortcut, rtol=1e-10, atol=1e-8)
