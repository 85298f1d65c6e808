"""The figures of experiments/gap_tables.py and experiments/plateau_report.py say what they show (issue 29, item 4):
missing gaps drawn as missing, the approximation gap's estimator and capped optimizations marked, what the
error bars cover, what differs between the N besides N, and plateau curves that neither hide one another nor
leave the seeds unsaid. Each script runs through its command line on small synthetic inputs; the figures it
saves are caught at Figure.savefig and inspected."""
import json
import runpy
import sys
from pathlib import Path

import pytest
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.lines import Line2D
from matplotlib.text import Text

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
SOURCE = "synthetic images for a test"


def run_script(monkeypatch, name, *args):
    monkeypatch.setattr(sys, "argv", [name, *map(str, args)])
    runpy.run_path(str(EXPERIMENTS / name), run_name="__main__")


def gap(mean, stderr=0.5):
    return {"mean": mean, "stderr": stderr}


def gap_report(label, split, run_id, amortization=3.0, capped=False, trained_epochs=10, per_image=None):
    """A gap report with what gap_tables.py reads (format_reports' table and the figure), nothing more."""
    report = {"label": label, "split": split, "run_id": run_id, "trained_epochs": trained_epochs, "n_images": 4,
              "images": [0, 1, 2, 3], "settings": {"importance_samples": 50, "theta": "mean", "theta_draws": 1,
                                                   "max_steps": 100},
              "optimizer_steps": 100 if capped else 40, "score_draws": 8, "refinement": [],
              "elbo_guide": None if amortization is None else gap(-100.0 - amortization), "elbo_optimized": gap(-100.0),
              "elbo_per_theta": gap(-99.0), "log_px": gap(-97.0), "log_px_ais": None,
              "amortization_gap": None if amortization is None else gap(amortization), "coupling_gap": gap(1.0),
              "approximation_gap": gap(2.0), "optimized_plugin_mse": 0.05,
              "capped": 2 if capped else 0, "capped_per_theta": 0, "hit_cap": capped,
              "stderr_over": "images (θ draws, z draws and the trained run held fixed)"}
    if per_image:
        report["per_image"] = per_image
    return report


def write_run(folder, name, reports, n_obs=100, epochs=10, lr=0.003, seed=0):
    """A run directory as compare leaves it (config.json, metrics.jsonl) with its gap reports."""
    run = Path(folder) / "runs" / "synthetic" / name
    run.mkdir(parents=True)
    run_id = "%s-%d-%d" % (name, n_obs, seed)
    config = {"guide": "amortized", "width": 8, "seed": seed, "n_obs": n_obs, "batch_size": 50, "epochs": epochs,
              "lr": lr, "data_dir": "data"}
    (run / "config.json").write_text(json.dumps({"config": config, "run_id": run_id, "data": {
        "name": "synthetic", "source": SOURCE, "n_obs": n_obs}}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(
        {"epoch": e, "elbo_per_obs": -200.0 + 10 * e, "train_plugin_mse": 0.05, "time": 0.1 * e}) + "\n"
        for e in range(1, epochs + 1)))
    for report in reports:
        report = dict(report, run_id=run_id, trained_epochs=epochs)
        (run / ("gap-%s.json" % report["split"])).write_text(json.dumps(report))


def all_text(fig):
    return "\n".join(t.get_text() for t in fig.findobj(Text))


def bar_centres(ax):
    return [p.get_x() + p.get_width() / 2 for c in ax.containers if isinstance(c, BarContainer) for p in c.patches]


def errorbar_xs(ax):
    return [x for c in ax.containers if isinstance(c, ErrorbarContainer) for lines in c.lines[2]
            for segment in lines.get_segments() for x, _ in segment]


def test_a_missing_gap_is_drawn_as_missing(tmp_path, monkeypatch, saved_figures):
    """F-VI has no held-out amortization gap: no bar and no error bar there (not a zero bar), "n/a" instead."""
    write_run(tmp_path / "study", "A-VI_k_8-seed0", [gap_report("A-VI k=8", s, None) for s in ("train", "test")])
    write_run(tmp_path / "study", "F-VI-seed0", [gap_report("F-VI", "train", None),
                                                 gap_report("F-VI", "test", None, amortization=None)])
    run_script(monkeypatch, "gap_tables.py", tmp_path / "study", "--out", tmp_path / "out")
    amortization = saved_figures.last.axes[0]
    assert [t.get_text() for t in amortization.get_xticklabels()] == ["A-VI k=8", "F-VI"]
    # F-VI's tick is at 1, its test bar right of it: nothing drawn there but the note
    assert len(bar_centres(amortization)) == 3 and max(bar_centres(amortization)) < 1
    assert errorbar_xs(amortization) and max(errorbar_xs(amortization)) < 1
    assert [t.get_position()[0] > 1 for t in amortization.texts if t.get_text() == "n/a"] == [True]
    low, high = amortization.get_xlim()  # the note inside the axes, not past their edge
    assert all(low < t.get_position()[0] < high for t in amortization.texts if t.get_text() == "n/a")
    coupling = saved_figures.last.axes[1]  # F-VI's held-out coupling gap exists: drawn
    assert len(bar_centres(coupling)) == 4 and not [t for t in coupling.texts if t.get_text() == "n/a"]


def test_the_approximation_gap_names_its_estimator_and_marks_capped_optimizations(tmp_path, monkeypatch, saved_figures):
    write_run(tmp_path / "study", "A-VI_k_8-seed0", [gap_report("A-VI k=8", "train", None, capped=True)])
    write_run(tmp_path / "study", "A-VI_k_32-seed0", [gap_report("A-VI k=32", "train", None)])
    run_script(monkeypatch, "gap_tables.py", tmp_path / "study", "--out", tmp_path / "out")
    fig = saved_figures.last
    approximation = fig.axes[2]
    words = approximation.get_ylabel() + approximation.get_title()
    assert "IWAE" in words and "lower bound" in words
    assert [t.get_text() for t in approximation.get_xticklabels()] == ["A-VI k=8", "A-VI k=32"]
    hatched = [[bool(p.get_hatch()) for p in sorted((p for c in ax.containers if isinstance(c, BarContainer)
                                                      for p in c.patches), key=lambda p: p.get_x())] for ax in fig.axes]
    # k=8's q* capped: its amortization gap hatched; no q*_m capped: the approximation gap is not
    assert hatched[0] == [True, False] and hatched[2] == [False, False]
    assert "step cap" in all_text(fig)  # the mark explained


def test_the_figure_says_what_its_error_bars_cover(tmp_path, monkeypatch, saved_figures):
    """One seed: over its images; several with per-image values: over seeds and images (pooling's account)."""
    write_run(tmp_path / "study", "A-VI_k_8-seed0", [gap_report("A-VI k=8", "train", None)])
    for seed in (0, 1):
        values = {"per_image": {name: [1.0 + seed, 2.0, 3.0, 4.0 + seed] for name in
                                ("amortization_gap", "coupling_gap", "approximation_gap")}}
        write_run(tmp_path / "study", "A-VI_k_32-seed%d" % seed, [gap_report("A-VI k=32", "train", None, **values)],
                  seed=seed)
    run_script(monkeypatch, "gap_tables.py", tmp_path / "study", "--out", tmp_path / "out")
    title = saved_figures.last._suptitle.get_text()
    assert "error bars ± 1 s.e. over images" in title
    assert "seeds and images (crossed" in title  # the same four images in both seeds


def test_gap_against_n_says_what_else_differs(tmp_path, monkeypatch, saved_figures):
    """--by-n: each N's trained epochs, the data and any other differing setting, as the runs recorded them."""
    write_run(tmp_path / "n100", "A-VI_k_8-seed0", [gap_report("A-VI k=8", "train", None)], n_obs=100, epochs=12)
    write_run(tmp_path / "n200", "A-VI_k_8-seed0", [gap_report("A-VI k=8", "train", None)], n_obs=200, epochs=7,
              lr=0.001)
    run_script(monkeypatch, "gap_tables.py", tmp_path / "n100", tmp_path / "n200", "--by-n", "--out", tmp_path / "out")
    text = " ".join(all_text(saved_figures.last).split())  # wrapped lines joined
    assert "trained epochs: N 100: 12; N 200: 7" in text
    assert "data: %s at every N" % SOURCE in text
    assert "lr: N 100: 0.003; N 200: 0.001" in text and "batch_size" not in text  # only what differs
    run_script(monkeypatch, "gap_tables.py", tmp_path / "n100", tmp_path / "n200", "--out", tmp_path / "plain")
    assert "Besides N" not in all_text(saved_figures.last)


def test_plateau_curves_are_told_apart_and_seeds_said(tmp_path, monkeypatch, saved_figures):
    """A colour per configuration and a line style per objective: no two labelled groups alike; F-VI's curves,
    the same under both objectives, both visible (the later drawn thinner and darker, on top of a wide pale one);
    the legend says a line per seed."""
    curve = {"A-VI k=8": [0.06, 0.04, 0.02], "A-VI k=32": [0.06, 0.05, 0.03], "F-VI": [0.063, 0.063, 0.063]}
    for study, folder in (("plateau (reference)", "reference"), ("plateau (elbo)", "elbo")):
        rows = [{"kind": "metrics", "study": study, "dataset": "synthetic", "label": name, "seed": seed, "epoch": i,
                 "iteration": 100 * i, "train_plugin_mse": mse, "theta_scale_mean": 0.1 / i, "elbo_per_obs": -100.0}
                for name, values in curve.items() for seed in (0, 1) for i, mse in enumerate(values, 1)]
        rows.append({"kind": "baseline", "dataset": "synthetic", "train_mse": 0.063, "test_mse": 0.064})
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_script(monkeypatch, "plateau_report.py", tmp_path / "reference", tmp_path / "elbo", "--out", tmp_path / "out")
    for ax in saved_figures.last.axes:
        groups = [line for line in ax.get_lines() if ", " in line.get_label()]  # (study, configuration) entries
        assert len(groups) == 6
        looks = {(to_rgba(line.get_color()), line.get_linestyle()) for line in groups}
        assert len(looks) == len(groups), "two groups of curves drawn alike"
        legend = ax.get_legend()
        assert "seed" in " ".join([legend.get_title().get_text()] + [t.get_text() for t in legend.get_texts()])
        fvi = sorted((line for line in ax.get_lines() if "F-VI" in line.get_label()), key=Line2D.get_zorder)
        under, over = fvi[0], fvi[-1]
        assert under.get_zorder() < over.get_zorder() and over.get_linewidth() < under.get_linewidth()
        assert (under.get_alpha() or 1) < (over.get_alpha() or 1)  # one colour: the wide one pale under the thin


def test_against_gives_each_configurations_gaps_minus_the_named_ones_in_standard_errors(tmp_path, monkeypatch, saved_figures):
    """One seed each: the summaries as they are, so the differences and ratios are known in closed form."""
    write_run(tmp_path / "a", "A-VI_k_8-seed0", [gap_report("A-VI k=8", s, None, amortization=3.0) for s in ("train", "test")])
    write_run(tmp_path / "b", "SA-VI_k_8_r_5-seed0", [gap_report("SA-VI k=8 r=5", "train", None, amortization=1.0)])
    write_run(tmp_path / "c", "F-VI-seed0", [gap_report("F-VI", "test", None, amortization=None)])
    run_script(monkeypatch, "gap_tables.py", tmp_path / "a", tmp_path / "b", tmp_path / "c", "--out", tmp_path / "out",
               "--against", "A-VI k=8", "--against", "SA-VI k=8 r=5")
    text = (tmp_path / "out" / "gaps.md").read_text()
    assert text.splitlines()[0].endswith("--out %s --title Gaps --against 'A-VI k=8' --against 'SA-VI k=8 r=5'"
                                         % (tmp_path / "out"))
    first, second = text.split("Each configuration's gaps minus")[1:]
    rows = [line for line in first.splitlines() if line.startswith("| SA-VI") or line.startswith("| F-VI")]
    # amortization 1 − 3 = −2 over √(0.5² + 0.5²); coupling and approximation gaps equal: 0
    assert rows == ["| SA-VI k=8 r=5 | train | -2.0 ± 0.7 (-2.8 s.e.) | +0.0 ± 0.7 (+0.0 s.e.) | +0.0 ± 0.7 (+0.0 s.e.) |",
                    "| F-VI | test | n/a | +0.0 ± 0.7 (+0.0 s.e.) | +0.0 ± 0.7 (+0.0 s.e.) |"]
    # against SA-VI, which has no test row: A-VI's training row alone, the other sign
    assert [line for line in second.splitlines() if line.startswith("| A-VI") or line.startswith("| F-VI")] == [
        "| A-VI k=8 | train | +2.0 ± 0.7 (+2.8 s.e.) | +0.0 ± 0.7 (+0.0 s.e.) | +0.0 ± 0.7 (+0.0 s.e.) |"]
    with pytest.raises(SystemExit, match="--against A-VI k=64: no such configuration .*A-VI k=8, SA-VI k=8 r=5"):
        run_script(monkeypatch, "gap_tables.py", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "out2",
                   "--against", "A-VI k=64")
    assert not (tmp_path / "out2").exists() or not any((tmp_path / "out2").iterdir())


def test_the_training_table_gives_each_configurations_final_train_mse_over_seeds(tmp_path, monkeypatch, saved_figures):
    """Two seeds whose last evaluations read train plug-in MSE 0.04 and 0.06 (earlier epochs 0.05): the row says
    their mean ± sd / √2 = 0.0500 ± 0.0100, the last evaluation's, not an earlier one's."""
    for seed, final in ((0, 0.04), (1, 0.06)):
        write_run(tmp_path / "study", "A-VI_k_8-seed%d" % seed, [gap_report("A-VI k=8", "train", None)], seed=seed)
        metrics = tmp_path / "study" / "runs" / "synthetic" / ("A-VI_k_8-seed%d" % seed) / "metrics.jsonl"
        lines = metrics.read_text().splitlines()
        lines[-1] = json.dumps(dict(json.loads(lines[-1]), train_plugin_mse=final))
        metrics.write_text("\n".join(lines) + "\n")
    run_script(monkeypatch, "gap_tables.py", tmp_path / "study", "--out", tmp_path / "out")
    text = (tmp_path / "out" / "gaps.md").read_text()
    header = next(line for line in text.splitlines() if "| SVI steps |" in line).split(" | ")
    row = next(line for line in text.splitlines() if line.startswith("| A-VI k=8 | 2 |")).split(" | ")
    assert header[-1] == "final train MSE plug-in |" and row[-1] == "0.0500 ± 0.0100 |"
