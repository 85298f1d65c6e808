"""The capacity sweep (Cremer et al.'s protocol on a frozen q(θ)): an encoder trained to convergence where the
best factor is within its reach leaves no amortization gap (linear decoder, θ at a point: the posterior mean
is linear in x, which an encoder with LeakyReLU slope 1 represents exactly); the command end to end."""
import json
import math

import pytest
import torch
from click.testing import CliRunner

from amortized_pyro.autoguides.capacity import EncoderTraining
from amortized_pyro.cli.commands import cli
from amortized_pyro.gap.capacity import train_encoder
from amortized_pyro.autoguides import measure_gap
from amortized_pyro.gap.pooling import over_seeds
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.report.gap_figures import SHORT
from amortized_pyro.report.marks import plus_minus

from conftest import labelled_points, tiny_finished_run
from test_gap import Linear


def test_a_converged_encoder_closes_the_gap_where_it_can():
    linear = Linear()  # N = 4 images, z in 2-D
    with torch.no_grad():  # θ at a point: E_q[θ]
        linear.guide.q_theta.log_scale.fill_(math.log(1e-6))
    x = linear.x.repeat(10, 1) + 0.3 * torch.randn(40, linear.x.shape[1])  # 40 training images around them
    training = EncoderTraining(encoder_lr=3e-3, encoder_batch_size=10, encoder_tolerance=0.01, encoder_window=50,
                               max_epochs=20000)
    guide, epochs, capped, _ = train_encoder(linear.model, linear.guide.q_theta, x, 8, 1, 1.0, training, seed=0)
    # no AIS (its log p(x) is not read here; every phase draws from its own generators, local/draws.py: the gaps
    # are the same numbers with or without it, at a fifth of the time)
    settings = GapSettings(theta="mean", samples=2000, lr=0.02, step_samples=64, window=50, patience=5, ais_steps=0)
    before = train_encoder(linear.model, linear.guide.q_theta, x, 8, 1, 1.0, EncoderTraining(max_epochs=1), 0)[0]
    for images in (x[:10], linear.x):  # training images, and images it never saw
        gap = measure_gap(linear.model, guide, images, None, settings=settings)["amortization_gap"]
        untrained = measure_gap(linear.model, before, images, None, settings=settings)["amortization_gap"]
        assert not capped and abs(gap["mean"]) < 4 * gap["stderr"], (epochs, gap)
        assert untrained["mean"] > gap["mean"] + 4 * untrained["stderr"]  # a one-epoch encoder is well off


def capacity_figure_shows_the_rows(fig, gap):
    """capacity.png: the amortization gap against width, a line per depth and split holding the sweep's means
    over seeds (``gap``), each named in the legend, the widths as ticks, every point marked short (3 epochs: the cap)."""
    (ax,) = fig.axes
    assert ax.get_xlabel() == "encoder width k" and "amortization gap" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4", "16"]
    points = labelled_points(ax)
    names = {(d, split): "%d hidden layer%s, %s images" % (d, "s" * (d > 1), split) for d in (1, 2)
             for split in ("train", "test")}
    for (d, split), name in names.items():
        assert points[name] == ([4, 16], [pytest.approx(gap[w, d, split]["mean"]) for w in (4, 16)])
    short = sorted((x, y) for line in ax.get_lines() if line.get_marker() == "x" for x, y in zip(*line.get_data()))
    assert short == sorted((w, v["mean"]) for (w, _, _), v in gap.items())  # a × on every point: all at the epoch cap
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [SHORT] + list(names.values())


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    return tiny_finished_run(tmp_path_factory.mktemp("capacity") / "run")


def test_capacity_command_writes_a_table_a_figure_and_rows(finished_run, saved_figures):
    args = ["capacity", str(finished_run), "--widths", "4,16", "--layers", "1,2", "--seeds", "0,1", "--n-images", "5",
            "--max-epochs", "3", "--encoder-window", "2", "--encoder-batch-size", "20", "--theta-draws", "1", "--importance-samples", "20",
            "--samples", "5", "--max-steps", "50", "--window", "10", "--ais-steps", "0"]
    first = CliRunner().invoke(cli, args[:7] + ["0"] + args[8:])  # seed 0 only, then the whole sweep continues it
    assert first.exit_code == 0, first.output
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "continuing the sweep" in result.output and "(4 encoders done)" in result.output
    assert result.output.count("encoder k=") == 4  # only seed 1's encoders trained
    rows = [json.loads(line) for line in (finished_run / "capacity" / "capacity.jsonl").read_text().splitlines()]
    assert sorted((r["width"], r["layers"], r["seed"], r["split"]) for r in rows) == sorted(
        (w, d, s, split) for w in (4, 16) for d in (1, 2) for s in (0, 1) for split in ("train", "test"))
    assert all(r["epochs"] == 3 and r["encoder_capped"] for r in rows)  # 3 epochs: the cap, said as such
    # the level every fresh encoder must reach: the run's own encoder's objective on the training images
    assert len({r["target"] for r in rows}) == 1 and all(r["reached_target"] == (r["encoder_elbo"] >= r["target"])
                                                         for r in rows)
    # each encoder seed its own images (the gap seed: --seed plus the encoder's), every width of a seed the same
    images = {(r["seed"], r["split"]): set() for r in rows}
    for r in rows:
        images[r["seed"], r["split"]].add((r["gap_seed"], tuple(r["images"])))
    assert all(len(chosen) == 1 for chosen in images.values())
    assert images[0, "test"] != images[1, "test"]
    assert [gap_seed for gap_seed, _ in images[1, "test"]] == [1]
    table = (finished_run / "capacity" / "capacity.md").read_text()
    assert table.count("\n| 4 | 1 | train | 2 | 5 |") == 1 and "| 16 | 2 | test | 2 | 5 |" in table
    gap = {(w, d, split): over_seeds([r["amortization_gap"] for r in rows if (r["width"], r["layers"], r["split"]) ==
                                      (w, d, split)]) for w in (4, 16) for d in (1, 2) for split in ("train", "test")}
    for (w, d, split), value in gap.items():  # the table's amortization gap: the mean over seeds ± their s.e.
        assert "| %d | %d | %s | 2 | 5 | 3 | 2 | %s |" % (w, d, split, plus_minus(value)) in table
    capacity_figure_shows_the_rows(saved_figures["capacity.png"], gap)
    other = CliRunner().invoke(cli, args[:11] + ["4"] + args[12:])  # other settings: never mixed, never overwritten
    assert other.exit_code == 1 and "--overwrite" in other.output and len(other.output.strip().splitlines()) == 1
    bad = CliRunner().invoke(cli, ["capacity", str(finished_run), "--widths", "0"])
    assert bad.exit_code == 2 and "--widths" in bad.output
