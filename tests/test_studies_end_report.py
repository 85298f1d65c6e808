"""experiments/studies_end_report.py (issue 48) on small synthetic run folders laid out as the mirrored ones: the
table says how far each run got, its MSEs against the mean image's, when it first fell below 0.9 × and 0.5 ×,
its gaps where a report exists; the figure draws each run's ratios against steps."""
import json
import runpy
import sys
from pathlib import Path

import pytest
from matplotlib.figure import Figure

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
BASE = {"train_mse": 0.1, "test_mse": 0.2}


def run_folder(root, name, guide, objective, train_mses, finished, gap=None, held_out=True):
    run = root / name / "runs" / "mnist" / ("%s-seed0" % guide)
    run.mkdir(parents=True)
    config = {"guide": guide, "width": 64, "objective": objective, "batch_size": 1000}
    data = {"n_obs": 8000, "mean_image_mse": BASE}
    (run / "config.json").write_text(json.dumps({"config": config, "data": data}))
    rows = [{"epoch": 50 * (k + 1), "elbo_per_obs": -500.0 + k, "train_plugin_mse": m, "train_predictive_mse": m,
             **({"test_plugin_mse": 2 * m, "test_predictive_mse": 2 * m} if held_out else {})}
            for k, m in enumerate(train_mses)]
    rows.insert(1, {"epoch": 51, "elbo_per_obs": None})  # an epoch without evaluation
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    if finished:
        (run / "summary.json").write_text("{}")
    if gap:
        (run / "gap-train.json").write_text(json.dumps(gap))


def test_table_and_figure(tmp_path, monkeypatch):
    figures, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), save(fig, *a, **k))[1])
    gap = {"amortization_gap": {"mean": 12.34, "stderr": 1.0}, "coupling_gap": {"mean": 2.0, "stderr": 0.5},
           "approximation_gap": {"mean": 3.0, "stderr": 0.25}}
    run_folder(tmp_path, "end-original-reference-amortized", "amortized", "reference", [0.1, 0.085, 0.04], True, gap)
    run_folder(tmp_path, "end-original-reference-per-datapoint", "per-datapoint", "reference", [0.1, 0.095], False)
    # first in the figure, with no held-out line: the others keep their colour in the held-out panel all the same
    run_folder(tmp_path, "end-original-elbo-shared", "shared", "elbo", [0.1, 0.1], True, held_out=False)
    monkeypatch.setattr(sys, "argv", ["studies_end_report.py", *sorted(str(p) for p in tmp_path.glob("end-*")),
                                      "--out", str(tmp_path / "out")])
    runpy.run_path(str(EXPERIMENTS / "studies_end_report.py"), run_name="__main__")
    table = (tmp_path / "out" / "original.md").read_text().splitlines()
    avi = next(line for line in table if "| A-VI k=64 |" in line).split(" | ")
    fvi = next(line for line in table if "| F-VI |" in line).split(" | ")
    assert avi[2] == "1200" and avi[3] == "0.40" and avi[5] == "0.40" and avi[7] == "-498.00"
    assert avi[8] == "800" and avi[9] == "1200"  # 0.085 < 0.09 at epoch 100 (800 steps); 0.04 < 0.05 at 1,200
    assert avi[10] == "12.3 ± 1.0 / 2.0 ± 0.5 / 3.0 ± 0.2" and avi[11] == "not measured |"
    assert fvi[2] == "800 (going on)" and fvi[8] == "not yet" and fvi[9] == "not yet"
    train, test = figures[0].axes[:2]
    lines = {line.get_label(): line for line in train.get_lines() if not line.get_label().startswith("_")}
    assert list(lines["A-VI k=64, authors' objective"].get_ydata()) == pytest.approx([1.0, 0.85, 0.4])
    assert list(lines["F-VI, authors' objective (going on)"].get_xdata()) == [400, 800]
    assert [l.get_ydata()[0] for l in test.get_lines() if l.get_label().startswith("A-VI")] == pytest.approx([1.0])
    same = {l.get_label(): l.get_color() for l in test.get_lines() if not l.get_label().startswith("_")}
    assert same and all(lines[label].get_color() == colour for label, colour in same.items())  # one colour per run
