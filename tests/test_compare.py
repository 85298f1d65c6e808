"""The comparison: a tiny grid's table, its round trip through a file, every figure, and resuming."""
import json
import math
import runpy
import statistics
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from amortized_pyro.report import figures as plots
from amortized_pyro.report.figures import plot_all
from amortized_pyro.report.tables import format_summary
from amortized_pyro.study import comparison, executors
from amortized_pyro.study.comparison import compare, configurations
from amortized_pyro.study.results import Results, leaves_plateau

from conftest import legend_clear_of, same_records

TINY = dict(dataset="mnist-sample", n_obs=60, n_test=20, epochs=4, batch_size=30, hidden=16, z_dim=4,
            device="cpu", eval_every=2, progress=False, log=lambda line: None)
# the command's gap settings with a small Monte Carlo budget, so that gap tests take seconds on any machine: every
# stage of a report kept (q* and the q*_m, IWAE, AIS, the refinement rows) where a test reads which reports exist,
# their fields and how the table and figure 7 show them, not what the numbers come to. Given as the command's own
# --gap-* options: their defaults are COMPARE_GAP as it was when the command line was imported, so patching
# comparison.COMPARE_GAP in a test does not reach the command. q* stops by its rule after about 50 steps here, well
# under the cap of 300 (a capped q* would be marked † in the table the gaps test reads)
SMALL_GAP = ["--gap-theta-draws", "2", "--gap-importance-samples", "10", "--gap-score-draws", "3", "--gap-select-draws",
             "3", "--gap-samples", "5", "--gap-step-samples", "2", "--gap-max-steps", "300", "--gap-window", "10",
             "--gap-patience", "2", "--gap-ais-steps", "2", "--gap-ais-chains", "2"]
COLUMNS = {"kind", "study", "dataset", "guide", "width", "label", "seed", "n_obs", "epoch", "iteration", "elbo",
           "elbo_per_obs", "train_plugin_mse", "test_plugin_mse", "train_predictive_mse", "test_predictive_mse", "time",
           "theta_scale_mean"}


def tiny_compare(out):
    options = {k: v for k, v in TINY.items() if k != "dataset"}
    return compare(guides=("amortized", "per-datapoint"), widths=(8,), seeds=(0, 1), datasets=("mnist-sample",),
                   out=out, study="tiny", **options)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    return out, tiny_compare(out)


def test_table_has_a_row_per_configuration_seed_and_evaluated_epoch(tiny):
    _, results = tiny
    assert len(results.rows) == 2 * 2 * 2  # 2 configurations × 2 seeds × epochs {2, 4}
    assert all(set(row) == COLUMNS for row in results.rows)
    keys = {(r["label"], r["seed"], r["epoch"]) for r in results.rows}
    assert keys == {(l, s, e) for l in ("A-VI k=8", "F-VI") for s in (0, 1) for e in (2, 4)}
    assert all(r["iteration"] == 2 * r["epoch"] for r in results.rows)  # 60 images / 30 per batch
    for key in ("test_plugin_mse", "test_predictive_mse"):
        assert all(math.isnan(r[key]) == (r["label"] == "F-VI") for r in results.rows)
    (baseline,) = results.baselines  # the mean training image's MSE, per dataset
    assert baseline["dataset"] == "mnist-sample" and 0.03 < baseline["train_mse"] < 0.1
    labels = {(r["label"], r["split"]) for r in results.reconstructions}
    assert labels == {("original", "train"), ("original", "test"), ("A-VI k=8", "train"), ("A-VI k=8", "test"),
                      ("F-VI", "train")}


def test_table_round_trips_through_its_file(tiny, tmp_path):
    out, results = tiny
    results.save(tmp_path / "again.jsonl")
    loaded = Results.load(tmp_path / "again.jsonl")
    assert same_records(loaded.rows, results.rows)
    assert loaded.reconstructions == results.reconstructions and loaded.baselines == results.baselines
    assert Results.load(out / "results.jsonl").rows[0]["label"] == results.rows[0]["label"]


def test_summary_reports_gap_to_fvi(tiny):
    """The gap to F-VI in nats/obs and %, against the runs' own final ELBOs (each run directory's
    summary.json, not the table's rows): mean over seeds of F-VI's minus the configuration's."""
    out, results = tiny
    def final_elbo(name):
        finals = [json.loads((out / "runs" / "mnist-sample" / ("%s-seed%d" % (name, seed)) / "summary.json")
                             .read_text())["final"]["elbo_per_obs"] for seed in (0, 1)]
        return statistics.fmean(finals)
    fvi, avi = final_elbo("F-VI"), final_elbo("A-VI_k_8")
    table = {r["label"]: r for r in results.summary()}
    assert table["F-VI"]["gap_to_fvi"] == 0
    assert table["A-VI k=8"]["gap_to_fvi"] == pytest.approx(fvi - avi, rel=1e-9)
    assert table["A-VI k=8"]["gap_to_fvi_percent"] == pytest.approx(100 * (fvi - avi) / abs(fvi), rel=1e-9)
    assert table["A-VI k=8"]["seeds"] == 2 and "| A-VI k=8 |" in format_summary(results.summary())


def test_plot_draws_every_figure_from_the_saved_table(tiny, tmp_path, saved_figures):
    """Every figure from results.jsonl alone, read where it is saved (what it shows, not the file's size)."""
    out, _ = tiny
    results = Results.load(out / "results.jsonl")
    paths = plot_all(results, tmp_path)
    assert {p.name for p in paths} == set(saved_figures) == {
        "fig1_neg_elbo.png", "fig2_train_mse.png", "fig3_test_mse.png", "fig4_speed.png",
        "fig5_reconstructions_mnist-sample.png", "fig6_elbo_seeds.png"}

    def mean(label, key):  # over seeds, at the evaluated epochs 2 and 4
        return [statistics.fmean(r[key] for r in results.rows if (r["label"], r["epoch"]) == (label, e)) for e in (2, 4)]

    (ax,) = saved_figures["fig1_neg_elbo.png"].axes  # ELBOs below 0 throughout: −ELBO on a log scale
    assert ax.get_ylabel().startswith("−ELBO per observation") and ax.get_yscale() == "log"
    assert curves(ax)["F-VI"] == pytest.approx([-v for v in mean("F-VI", "elbo_per_obs")])
    for name, split in (("fig2_train_mse.png", "train"), ("fig3_test_mse.png", "test")):
        (ax,) = saved_figures[name].axes
        assert ax.get_ylabel() == "%s reconstruction MSE" % split
        assert curves(ax)["A-VI k=8 (plugin)"] == pytest.approx(mean("A-VI k=8", "%s_plugin_mse" % split))
    summary = {r["label"]: r for r in results.summary()}
    _, bottom = saved_figures["fig4_speed.png"].axes
    assert [p.get_height() for p in bottom.patches] == pytest.approx(
        [summary[label]["ms_per_epoch"][0] for label in ("A-VI k=8", "F-VI")])
    grid = saved_figures["fig5_reconstructions_mnist-sample.png"]
    assert sum(len(ax.get_images()) for ax in grid.axes) == sum(len(r["images"]) for r in results.reconstructions)
    panels = [ax for ax in saved_figures["fig6_elbo_seeds.png"].axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["mnist-sample: A-VI k=8", "mnist-sample: F-VI"]


def curves(ax):
    """{legend label: y values} of an axis's lines."""
    return {line.get_label(): np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()}


def drawn(fig):
    """What a figure shows, axis by axis: its labels, title, the y values of its lines and its bars' heights."""
    return [(ax.get_xlabel(), ax.get_ylabel(), ax.get_title(), [list(line.get_ydata()) for line in ax.get_lines()],
             [p.get_height() for p in ax.patches if hasattr(p, "get_height")]) for ax in fig.axes]


def test_figures_show_what_they_say(tiny, tmp_path):
    """Content, not file size: labels, one curve per configuration and key, the mean-image line, the
    values the table holds (mean over seeds), no NaN where a value exists."""
    _, results = tiny
    (ax,) = plots.curve_figure(results, ["elbo_per_obs"], "−ELBO per observation (nats)", "−ELBO",
                               tmp_path / "f1.png", log_scale=True, negate=True).axes
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_yscale()) == ("epoch", "−ELBO per observation (nats)", "log")
    lines = curves(ax)
    assert set(lines) == {"A-VI k=8", "F-VI"}
    fvi = [-statistics.fmean(r["elbo_per_obs"] for r in results.rows if r["label"] == "F-VI" and r["epoch"] == e)
           for e in (2, 4)]
    assert lines["F-VI"] == pytest.approx(fvi, rel=1e-6)
    baseline = results.baselines[0]
    for split, expected in (("train", {"A-VI k=8", "F-VI"}), ("test", {"A-VI k=8"})):  # F-VI: no test factor
        (ax,) = plots.curve_figure(results, ["%s_plugin_mse" % split, "%s_predictive_mse" % split], "MSE", "MSE",
                                   tmp_path / "f2.png", log_scale=True, baseline="%s_mse" % split).axes
        lines = curves(ax)
        assert set(lines) == {"%s (%s)" % (n, kind) for n in expected for kind in ("plugin", "predictive")} | \
            {"mean training image (ignores z)"}
        assert lines["mean training image (ignores z)"][0] == pytest.approx(baseline["%s_mse" % split])
        assert legend_clear_of(ax)  # the legend beside the curves, not over them
        assert all(np.isfinite(values).all() for values in lines.values())
    seeds = plots.seeds_figure(results, tmp_path / "f6.png")
    panels = [ax for ax in seeds.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["mnist-sample: A-VI k=8", "mnist-sample: F-VI"]
    assert all(set(curves(ax)) == {"seed 0", "seed 1"} for ax in panels)
    speed = plots.speed_figure(results, tmp_path / "f4.png")
    bars = speed.axes[1].patches
    assert len(bars) == 2 and all(bar.get_height() > 0 for bar in bars)  # ms per epoch of each configuration
    assert [t.get_text() for t in speed.axes[1].get_xticklabels()] == ["A-VI k=8", "F-VI"]
    grid = plots.reconstruction_figure(results, "mnist-sample", tmp_path / "f5.png")
    titles = [ax.get_title() for ax in grid.axes if ax.get_title()]
    assert titles == ["original", "A-VI k=8", "F-VI"]
    shown = {(ax.get_subplotspec().colspan.start, ax.get_subplotspec().rowspan.start): bool(ax.get_images())
             for ax in grid.axes}
    n = len(results.reconstructions[0]["images"])  # images per split; rows: train images, then test images
    assert all(shown[(col, row)] for col in range(3) for row in range(n))  # every column has its train images
    assert not any(shown[(2, row)] for row in range(n, 2 * n)) and all(shown[(1, row)] for row in range(n, 2 * n))


def test_resuming_skips_finished_runs(tiny, monkeypatch):
    out, results = tiny
    monkeypatch.setattr(executors, "fit", lambda *a, **k: pytest.fail("a finished run was trained again"))
    again = tiny_compare(out)
    assert [(r["label"], r["seed"], r["epoch"], r["elbo"]) for r in again.rows] == \
        [(r["label"], r["seed"], r["epoch"], r["elbo"]) for r in results.rows]


def test_configurations_and_bad_grids():
    assert configurations(["shared", "amortized"], [64, 1]) == [("amortized", 1), ("amortized", 64), ("shared", None)]
    with pytest.raises(comparison.AmortizedPyroError):
        configurations(["amortized"], [0])
    with pytest.raises(comparison.AmortizedPyroError):
        configurations(["nope"], [1])


def test_compare_and_plot_commands(tmp_path, saved_figures):
    args = ["compare", "--guides", "shared,amortized", "--widths", "4", "--seeds", "0", "--dataset", "mnist-sample",
            "--n-obs", "40", "--n-test", "10", "--epochs", "2", "--batch-size", "20", "--hidden", "8", "--z-dim", "3",
            "--no-progress", "--device", "cpu", "--out", str(tmp_path / "cmp")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "| constant-VI |" in result.output and (tmp_path / "cmp" / "summary.md").exists()
    assert len(list((tmp_path / "cmp").glob("fig*.png"))) == len(saved_figures) == 6
    compared = {name: drawn(fig) for name, fig in saved_figures.items()}
    assert [line.get_label() for line in saved_figures["fig2_train_mse.png"].axes[0].get_lines()][:2] == [
        "A-VI k=4 (plugin)", "constant-VI (plugin)"]
    saved_figures.clear()
    result = CliRunner().invoke(cli, ["plot", str(tmp_path / "cmp" / "results.jsonl"), "--out", str(tmp_path / "re")])
    assert result.exit_code == 0 and len(list((tmp_path / "re").glob("fig*.png"))) == 6
    assert {name: drawn(fig) for name, fig in saved_figures.items()} == compared  # redrawn from results.jsonl alone, the same
    bad = CliRunner().invoke(cli, ["compare", "--widths", "0"])
    assert bad.exit_code == 2 and "widths" in bad.output
    missing = CliRunner().invoke(cli, ["plot", str(tmp_path / "nothing.jsonl")])
    assert missing.exit_code == 1 and missing.output.strip().splitlines()[-1].startswith("Error: no results file")


def test_compare_measures_the_gaps_and_reuses_them(tmp_path, monkeypatch, saved_figures):
    args = ["compare", "--guides", "amortized,per-datapoint", "--widths", "4", "--seeds", "0,1", "--dataset",
            "mnist-sample", "--n-obs", "40", "--n-test", "10", "--epochs", "2", "--batch-size", "20", "--hidden", "8",
            "--z-dim", "3", "--predictive-draws", "0", "--gap-images", "5", "--no-progress", "--device", "cpu",
            "--out", str(tmp_path / "cmp"), *SMALL_GAP]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    gaps = Results.load(tmp_path / "cmp" / "results.jsonl").gaps
    assert sorted((g["label"], g["split"], g["seed"]) for g in gaps) == [  # every seed measured
        (label, split, seed) for label in ("A-VI k=4", "F-VI") for split in ("test", "train") for seed in (0, 1)]
    fvi_test = next(g for g in gaps if g["label"] == "F-VI" and g["split"] == "test")
    assert fvi_test["amortization_gap"] is None and fvi_test["elbo_optimized"]["stderr"] > 0  # test-time F-VI
    # the table's row: the mean over the two seeds of their image means, ± the standard error over seeds
    means = [g["amortization_gap"]["mean"] for g in gaps if (g["label"], g["split"]) == ("A-VI k=4", "test")]
    row = "| A-VI k=4 | test | 2 | 5 |"
    line = next(line for line in (tmp_path / "cmp" / "summary.md").read_text().splitlines() if line.startswith(row))
    assert line.split(" | ")[8] == "%.1f ± %.1f" % (sum(means) / 2, abs(means[0] - means[1]) / 2)
    left, right = saved_figures["fig7_gaps.png"].axes  # fig7 draws what the table holds
    shown = {c.get_label(): c.lines[0].get_ydata()[0] for c in left.containers}
    assert shown == pytest.approx({"A-VI, test images": sum(means) / 2, "A-VI, train images": statistics.fmean(
        g["amortization_gap"]["mean"] for g in gaps if (g["label"], g["split"]) == ("A-VI k=4", "train"))})
    refined = {c.get_label(): list(c.lines[0].get_xdata()) for c in right.containers}
    assert refined == {"%s, %s" % key: [0.5] + list(comparison.COMPARE_REFINE[1:])
                       for key in (("A-VI k=4", "train"), ("A-VI k=4", "test"), ("F-VI", "train"))}
    monkeypatch.setattr(comparison, "measure_run", lambda *a, **k: pytest.fail("a saved gap report was measured again"))
    assert CliRunner().invoke(cli, args).exit_code == 0


def test_a_gap_report_whose_refinement_rows_kept_their_last_iterate_is_measured_again(tmp_path):
    """A report made before refinement rows kept their best iterate (no ``kept_steps``) is not reused: its rows of
    more steps could read a larger gap left than those of fewer."""
    args = ["compare", "--guides", "shared", "--seeds", "0", "--dataset", "mnist-sample", "--n-obs", "40", "--n-test",
            "10", "--epochs", "2", "--batch-size", "20", "--hidden", "8", "--z-dim", "3", "--predictive-draws", "0",
            "--gap-images", "2", "--gap-max-steps", "50", "--gap-ais-steps", "0", "--gap-theta-draws", "2",
            "--gap-samples", "5", "--gap-importance-samples", "5", "--no-progress", "--out", str(tmp_path)]
    assert run_cli(args).exit_code == 0
    path = tmp_path / "runs" / "mnist-sample" / "constant-VI-seed0" / "gap-test.json"
    report = json.loads(path.read_text())
    assert [len(row["kept_steps"]) for row in report["refinement"]] == [2] * 4
    for row in report["refinement"]:
        del row["kept_steps"]
    path.write_text(json.dumps(report))
    again = run_cli(args)
    assert again.exit_code == 0 and "gap-test.json was measured before refinement rows kept their best iterate: " \
        "measuring again" in again.output
    assert all("kept_steps" in row for row in json.loads(path.read_text())["refinement"])


@pytest.mark.parametrize("study", ["offline", "informative"])
def test_committed_results_stay_readable(study, tmp_path):
    """Results committed by earlier versions (figures/) load, summarize and plot with this one."""
    path = Path(__file__).parents[1] / "figures" / study / "results.jsonl"
    results = Results.load(path)
    assert results.rows and format_summary(results.summary())
    assert len(plot_all(results, tmp_path)) >= 6


def test_plateau_figure_and_the_step_that_leaves_the_mean_image(tiny, tmp_path):
    _, results = tiny
    plateau = runpy.run_path(str(Path(__file__).parents[1] / "experiments" / "plateau_report.py"))
    left, right = plateau["figure"](results, tmp_path / "plateau.png").axes
    assert len(left.get_lines()) == len(results.runs()) + 1 and len(right.get_lines()) == len(results.runs())
    assert all(np.isfinite(line.get_ydata()).all() for line in right.get_lines())  # s̄ recorded at every evaluation
    # two studies of the same configuration and seed (the two objectives) stay two runs
    other = Results([dict(r, study="other") for r in results.rows] + results.rows, baselines=results.baselines)
    left, right = plateau["figure"](other, tmp_path / "two.png").axes
    assert len(right.get_lines()) == 2 * len(results.runs())
    assert {line.get_label() for line in right.get_lines() if not line.get_label().startswith("_")} == \
        {"%s, %s" % (study, name) for study in ("tiny", "other") for name in ("A-VI k=8", "F-VI")}
    rows = [{"iteration": i, "train_plugin_mse": mse} for i, mse in ((100, 0.07), (200, 0.06), (300, 0.05))]
    assert leaves_plateau(rows, 0.063)["iteration"] == 300  # 0.9 × 0.063 = 0.0567
    assert leaves_plateau(rows, 0.05) is None


def test_overwriting_a_run_redoes_its_gap_reports(tmp_path):
    """compare --overwrite retrains a run: its gap reports (derived files) are measured again, not reused,
    and the summary shows the new numbers (end to end through the command line)."""
    args = ["compare", "--dataset", "mnist-sample", "--guides", "amortized", "--widths", "4", "--seeds", "0",
            "--n-obs", "50", "--n-test", "10", "--hidden", "16", "--z-dim", "2", "--gap-images", "3",
            "--predictive-draws", "0", "--no-progress", "--out", str(tmp_path), *SMALL_GAP]
    gap_file = tmp_path / "runs" / "mnist-sample" / "A-VI_k_4-seed0" / "gap-test.json"
    assert run_cli(args + ["--epochs", "2"]).exit_code == 0
    before = json.loads(gap_file.read_text())
    result = run_cli(args + ["--epochs", "6", "--overwrite"])
    assert result.exit_code == 0, result.output
    after = json.loads(gap_file.read_text())
    assert after["trained_epochs"] == 6 and before["trained_epochs"] == 2 and after["run_id"] != before["run_id"]
    assert after["elbo_guide"] != before["elbo_guide"]
    assert "%.1f ± " % after["elbo_guide"]["mean"] in (tmp_path / "summary.md").read_text()


def run_cli(args):
    return CliRunner().invoke(cli, args)


def test_speed_counts_leaving_the_mean_image_not_an_absolute_mse(tmp_path):
    """A run sitting just under an absolute MSE of 0.07 while the mean image is at 0.063 has not left the
    plateau: 'reached' is relative to the mean image (0.9 × its train MSE by default)."""
    common = dict(kind="metrics", study="s", dataset="d", guide="shared", width=None, n_obs=10, elbo=-1.0,
                  elbo_per_obs=-0.1, test_plugin_mse=math.nan, train_predictive_mse=math.nan,
                  test_predictive_mse=math.nan, theta_scale_mean=0.1)
    rows = [dict(common, label="constant-VI", seed=0, epoch=e, iteration=10 * e, time=e, train_plugin_mse=0.061)
            for e in (1, 2)]
    rows += [dict(common, guide="amortized", width=8, label="A-VI k=8", seed=0, epoch=e, iteration=10 * e, time=e,
                  train_plugin_mse=mse) for e, mse in ((1, 0.062), (2, 0.05))]
    results = Results(rows, baselines=[{"kind": "baseline", "dataset": "d", "train_mse": 0.063, "test_mse": 0.064}])
    table = {r["label"]: r for r in results.summary()}
    assert table["constant-VI"]["seeds_leaving"] == 0  # 0.061 < 0.07, but > 0.9 × 0.063
    assert table["A-VI k=8"]["seeds_leaving"] == 1 and table["A-VI k=8"]["iterations_to_leave"][0] == 20
    assert "not reached" in format_summary(results.summary()).splitlines()[3]
    speed = plots.speed_figure(results, tmp_path / "speed.png")
    assert [t.get_text() for t in speed.axes[0].texts] == ["1/1 seeds", "0/1 seeds"]


def test_compare_measures_a_flow_guides_gaps_without_refinement_rows(tmp_path):
    """compare --gap-images on a flow guide: its factor is not Gaussian, so its reports have q* in its own
    family and no refinement rows (a Gaussian guide's reports have them); the summary shows both."""
    args = ["compare", "--dataset", "mnist-sample", "--guides", "amortized", "--widths", "4", "--seeds", "0",
            "--n-obs", "50", "--n-test", "10", "--hidden", "16", "--z-dim", "2", "--gap-images", "2", "--epochs", "2",
            "--predictive-draws", "0", "--no-progress", *SMALL_GAP]
    caps = []
    for flow, out in ((["--flow", "2"], tmp_path / "flow"), ([], tmp_path / "gaussian")):
        result = run_cli(args + flow + ["--out", str(out)])
        assert result.exit_code == 0, result.output
        report = json.loads(next(out.glob("runs/*/*/gap-test.json")).read_text())
        assert report["refine_steps"] == ([] if flow else list(comparison.COMPARE_REFINE))
        assert ("flow_gain" in report) == bool(flow)
        caps.append(report["settings"]["max_steps"])
    assert caps[0] == 2 * caps[1]  # the flow's q*, at its lower flow_lr, gets twice the steps
