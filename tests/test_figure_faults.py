"""Figures and tables say what their data hold (issue 29, item 4): fig7 and gap-report's figure draw no line
across a width a configuration lacks, tell configurations and splits apart, capacity and summary state the
± their rows support, an empty speed panel says so, and "ms / epoch" is summary.json's. Synthetic inputs."""
import itertools
import json
import math
import statistics

import matplotlib.colors
import numpy as np
import pytest
from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from amortized_pyro.report.figures import speed_figure
from amortized_pyro.report.gap_figures import capacity_figure, gap_figure
from amortized_pyro.report.tables import format_capacity, format_summary
from amortized_pyro.runs.fit import load_run
from amortized_pyro.study.results import Results

from conftest import legend_clear_of

GUIDES = {"A-VI": "amortized", "SA-VI": "semi-amortized", "F-VI": "per-datapoint", "constant-VI": "shared"}


def report(label, split, gap, seed=0):
    """A gap report as ``gap`` writes it, reduced to what the figures read."""
    family, _, rest = label.partition(" ")
    width = int(rest.split(" ")[0][2:]) if rest else None
    return {"label": label, "guide": GUIDES[family], "width": width, "split": split, "seed": seed, "n_images": 5,
            "amortization_gap": {"mean": gap, "stderr": 1.0}, "elbo_guide": {"mean": -100.0, "stderr": 1.0},
            "refinement": [{"steps": s, "gap_left": {"mean": gap / (1 + s), "stderr": 0.5}} for s in (0, 5, 20)]}


def only_neighbours(line, widths):
    """Whether every segment of ``line`` joins two neighbouring widths of ``widths`` (NaN breaks a line)."""
    x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
    drawn = [(a, b) for a, b, ya, yb in zip(x, x[1:], y, y[1:]) if np.isfinite(ya) and np.isfinite(yb)]
    return all(widths.index(b) == widths.index(a) + 1 for a, b in drawn)


def test_fig7_draws_no_line_across_a_width_a_configuration_lacks(tmp_path):
    """A-VI train at k = 8, 32, 128; its test split and SA-VI only at 8 and 128: no segment from 8 to 128."""
    reports = [report("A-VI k=%d" % k, "train", 100.0 / k) for k in (8, 32, 128)]
    reports += [report("A-VI k=%d" % k, "test", 200.0 / k) for k in (8, 128)]
    reports += [report("SA-VI k=%d r=5" % k, "train", 50.0 / k) for k in (8, 128)]
    left, _ = gap_figure(reports, tmp_path / "fig7.png").axes
    widths = [int(t.get_text()) for t in left.get_xticklabels()]
    assert widths == [8, 32, 128]
    lines = {c.get_label(): c.lines[0] for c in left.containers}
    assert set(lines) == {"A-VI, train images", "A-VI, test images", "SA-VI, train images"}
    for label, line in lines.items():
        assert only_neighbours(line, widths), label
        measured = {r["width"]: r["amortization_gap"]["mean"] for r in reports
                    if "%s, %s images" % (r["label"].split(" ")[0], r["split"]) == label}
        shown = {int(x): y for x, y in zip(line.get_xdata(), line.get_ydata()) if np.isfinite(y)}
        assert shown == pytest.approx(measured)  # every measured point still drawn


def test_fig7_refinement_lines_are_told_apart(tmp_path):
    """fig7's configurations (four A-VI widths, F-VI, constant-VI; train and test): a colour and a marker per
    configuration, none shared, colours far apart; no two lines alike in colour, marker and line style."""
    labels = ["A-VI k=1", "A-VI k=64", "A-VI k=128", "A-VI k=256", "F-VI", "constant-VI"]
    reports = [report(label, split, 10.0 + i) for i, label in enumerate(labels) for split in ("train", "test")]
    _, right = gap_figure(reports, tmp_path / "fig7.png").axes
    looks = {}
    for container in right.containers:
        line = container.lines[0]
        looks[container.get_label()] = (matplotlib.colors.to_rgb(line.get_color()), line.get_marker(),
                                        line.get_linestyle())
    assert len(looks) == 12 and len(set(looks.values())) == 12
    per_configuration = {label: {looks["%s, %s" % (label, split)][:2] for split in ("train", "test")}
                         for label in labels}
    assert all(len(v) == 1 for v in per_configuration.values())  # a configuration looks the same in both splits
    colors, markers = zip(*(v.pop() for v in per_configuration.values()))
    assert len(set(markers)) == len(labels)
    assert min(math.dist(a, b) for a, b in itertools.combinations(colors, 2)) > 0.25  # no look-alike shades
    assert legend_clear_of(right)


def test_gap_report_figure_gives_train_and_test_their_own_marker_and_line(tmp_path):
    reports = [report("A-VI k=4", split, gap) for split, gap in (("train", 10.0), ("test", 30.0))]
    left, right = gap_figure(reports, tmp_path / "gap_figure.png").axes
    for ax, labels in ((left, ("A-VI, train images", "A-VI, test images")),
                       (right, ("A-VI k=4, train", "A-VI k=4, test"))):
        lines = {c.get_label(): c.lines[0] for c in ax.containers}
        train, test = (lines[label] for label in labels)
        assert train.get_linestyle() != test.get_linestyle()
        if ax is left:
            assert train.get_marker() != test.get_marker()
        assert (train.get_marker(), train.get_markerfacecolor()) != (test.get_marker(), test.get_markerfacecolor())


def capacity_rows(seeds):
    rows = []
    for width, split, seed in itertools.product((4, 16), ("train", "test"), seeds):
        gap = {"mean": width + 10.0 * seed + (split == "test"), "stderr": 0.5}
        rows.append({"width": width, "depth": 1, "split": split, "seed": seed, "n_images": 5, "epochs": 3,
                     "encoder_capped": False, "capped": 0, "hit_cap": False, "amortization_gap": gap,
                     "coupling_gap": gap, "approximation_gap": gap})
    return rows


def error_halves(container):
    return [abs(seg[1][1] - seg[0][1]) / 2 for seg in container.lines[2][0].get_segments()]


def test_capacity_states_the_spread_its_rows_hold(tmp_path):
    """One seed per point: ± s.e. over images (the row's own); several: over the seeds' image means."""
    (ax,) = capacity_figure(capacity_rows([0]), tmp_path / "one.png").axes
    assert "over images" in ax.get_title() and "over encoder seeds" not in ax.get_title()
    assert error_halves(ax.containers[0]) == pytest.approx([0.5, 0.5])
    table = format_capacity(capacity_rows([0]))
    assert "standard error over its images" in table and "encoders' seeds" not in table
    (ax,) = capacity_figure(capacity_rows([0, 1]), tmp_path / "two.png").axes
    assert "over the seeds' image means" in ax.get_title() and "over images" not in ax.get_title()
    assert error_halves(ax.containers[0]) == pytest.approx([5.0, 5.0])  # means k and k + 10: sd 10 / √2, s.e. 5
    table = format_capacity(capacity_rows([0, 1]))
    assert "encoders' seeds of their image means" in table and "over its images" not in table


METRICS = dict(kind="metrics", study="s", dataset="d", n_obs=10, elbo=-1.0, test_plugin_mse=0.07,
               train_predictive_mse=0.07, test_predictive_mse=0.07, theta_scale_mean=0.1)


def metrics(label, seed, epoch, **values):
    guide = GUIDES[label.split(" ")[0]]
    return dict(METRICS, guide=guide, width=8 if guide == "amortized" else None, label=label, seed=seed, epoch=epoch,
                iteration=10 * epoch, **values)


@pytest.mark.parametrize("baselines, says", [([{"kind": "baseline", "dataset": "d", "train_mse": 0.063, "test_mse": 0.064}],
                                              "no run reached"), ([], "no mean-image MSE")])
def test_an_empty_speed_panel_says_so_and_shows_no_axes(tmp_path, baselines, says):
    rows = [metrics(label, seed, e, elbo_per_obs=-0.1, time=0.1 * e, train_plugin_mse=0.061)
            for label in ("A-VI k=8", "constant-VI") for seed in (0, 1) for e in (1, 2)]
    top, bottom = speed_figure(Results(rows, baselines=baselines), tmp_path / "speed.png").axes
    assert not top.axison and not top.get_lines() and not top.patches  # no box, no axis to read values off
    assert [t.get_text() for t in top.texts if says in t.get_text()]
    assert "Speed" in top.get_title()
    assert len(bottom.patches) == 2 and bottom.axison  # ms per epoch still drawn


def test_summary_gives_the_standard_error_over_seeds():
    """3 seeds with final ELBOs −1, −2, −6 nats/obs: −3.00 ± sd/√3 = 1.53 (their sd is 2.65); one seed: no ±;
    the steps column is the last record's iteration (2 epochs of 10 steps), each seed's where they differ; N is said
    under the table."""
    rows = [metrics("A-VI k=8", seed, 2, elbo_per_obs=value, time=0.2, train_plugin_mse=0.05)
            for seed, value in enumerate((-1.0, -2.0, -6.0))]
    rows.append(metrics("constant-VI", 0, 2, elbo_per_obs=-4.0, time=0.2, train_plugin_mse=0.06))
    rows += [metrics("A-VI k=16", 0, 2, elbo_per_obs=-4.0, time=0.2, train_plugin_mse=0.06),
             metrics("A-VI k=16", 1, 5, elbo_per_obs=-4.0, time=0.5, train_plugin_mse=0.06, n_obs=20)]
    text = format_summary(Results(rows).summary())
    cells = {line.split(" | ")[1]: line.split(" | ") for line in text.splitlines() if line.startswith("| d |")}
    se = statistics.stdev((-1.0, -2.0, -6.0)) / math.sqrt(3)
    assert cells["A-VI k=8"][3:5] == ["2", "20"] and "\nd: N 10, 20 training images." in text
    assert cells["A-VI k=8"][5] == "-3.00 ± %.2f" % se == "-3.00 ± 1.53"
    assert cells["constant-VI"][5] == "-4.00"  # one seed: no spread to give
    assert cells["A-VI k=16"][3:5] == ["2/5", "20/50"]  # seeds of different lengths: each length
    assert "standard error over seeds" in text and "one seed: no ±" in text and "sd over seeds" not in text


def test_ms_per_epoch_in_the_table_is_summary_json_s(tmp_path):
    """A run evaluated at every epoch: the comparison's "ms / epoch" (and fig4's bar) equal summary.json's."""
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["fit", "--dataset", "mnist-sample", "--n-obs", "60", "--n-test", "20",
                                      "--epochs", "3", "--eval-every", "1", "--batch-size", "30", "--hidden", "8",
                                      "--z-dim", "3", "--width", "4", "--predictive-draws", "0", "--no-progress",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    expected = json.loads((out / "summary.json").read_text())["ms_per_epoch"]
    results = Results()
    results.add_run(load_run(out), "mnist-sample", "s", 60)
    assert len(results.rows) == 3  # three evaluated epochs: the first is not the last
    (row,) = results.summary()
    assert row["ms_per_epoch"][0] == pytest.approx(expected, rel=1e-12)
    assert ("| %.0f |" % expected) in format_summary([row])
    _, bottom = speed_figure(results, tmp_path / "speed.png").axes
    assert bottom.patches[0].get_height() == pytest.approx(expected, rel=1e-12)


def test_capacity_marks_points_whose_encoders_stopped_short(tmp_path):
    rows = capacity_rows([0, 1])
    for r in rows:
        r["reached_target"] = not (r["width"] == 4 and r["seed"] == 1)  # one encoder of width 4 short of its target
    (ax,) = capacity_figure(rows, tmp_path / "short.png").axes
    crosses = [line for line in ax.lines if line.get_marker() == "x"]
    assert sorted(x for line in crosses for x in line.get_xdata()) == [4, 4]  # train and test at width 4 only
    assert any("short of its run's own level" in t.get_text() for t in ax.get_legend().get_texts())
    (ax,) = capacity_figure(capacity_rows([0, 1]), tmp_path / "fine.png").axes
    assert not [line for line in ax.lines if line.get_marker() == "x"]


def test_a_one_width_compare_draws_readable_x_axes(tmp_path, saved_figures):
    """A compare of one encoder width: fig7's left panel has that width as its one tick, in the middle of its axis
    (not at an edge of a decade matplotlib picked), and the refinement panel's ticks are the steps measured, 0 (the
    guide's own factor) among them where it is drawn (0.5: a log axis has no 0), which its label says."""
    args = ["compare", "--guides", "amortized,shared", "--widths", "4", "--seeds", "0", "--dataset", "mnist-sample",
            "--n-obs", "40", "--n-test", "10", "--epochs", "2", "--batch-size", "20", "--hidden", "8", "--z-dim", "3",
            "--predictive-draws", "0", "--gap-images", "2", "--gap-max-steps", "50", "--gap-ais-steps", "0",
            "--gap-theta-draws", "2", "--gap-samples", "5", "--gap-importance-samples", "5", "--no-progress",
            "--out", str(tmp_path)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    left, right = saved_figures["fig7_gaps.png"].axes[:2]
    assert [t.get_text() for t in left.get_xticklabels()] == ["4"] and list(left.get_xticks()) == [4]
    assert math.log(left.get_xlim()[0]) + math.log(left.get_xlim()[1]) == pytest.approx(2 * math.log(4))
    assert not [t.get_text() for t in left.get_xticklabels(minor=True) if t.get_text()]
    assert [t.get_text() for t in right.get_xticklabels()] == ["0", "5", "20", "100"]
    assert list(right.get_xticks()) == [0.5, 5, 20, 100]
    assert not [t.get_text() for t in right.get_xticklabels(minor=True) if t.get_text()]
    assert "log axis" in right.get_xlabel() and "k = 0, the guide's own factor, drawn at 0.5" in right.get_xlabel()
