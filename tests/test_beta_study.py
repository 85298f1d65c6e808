"""experiments/beta_study.py's report on two tiny finished runs of the shapes (β 1 and 4): its table holds each
β's row with the identity E_q log p(x|z) = ELBO + KL, the MIG, and its figure the points it plots. The fits and
the report run in this process, as python would run them (tests/in_process.py)."""
import json
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from amortized_pyro.runs.shapes import write_shapes

from in_process import run_cli, run_python

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("beta")
    shapes = write_shapes(tmp / "shapes.npz", 300, 60, seed=0)
    for beta in (1, 4):
        done = run_cli("fit", "--config", "experiments/beta-study.toml", "--dataset", shapes, "--n-obs", "300",
                       "--n-test", "60", "--batch-size", "100", "--hidden", "32", "--width", "16", "--epochs", "2",
                       "--eval-every", "2", "--kl-weight", beta, "--no-progress",
                       "--out", tmp / "runs" / ("shapes-standard-b%d-s0" % beta), cwd=ROOT)
        assert done.returncode == 0, done.stderr
    done = run_python("experiments/beta_study.py", "report", tmp / "runs", "--shapes", shapes, "--out", tmp / "out",
                      cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return tmp / "out"


def test_the_table_holds_each_beta_with_its_identities(report):
    rows = [json.loads(line) for line in (report / "beta.jsonl").read_text().splitlines()]
    assert sorted(r["beta"] for r in rows) == [1.0, 4.0]
    for r in rows:
        assert r["reconstruction"] == pytest.approx(r["elbo"] + r["kl"])
        assert r["kl"] == pytest.approx(sum(r["kl_per_dim"])) and min(r["kl_per_dim"]) >= -1e-6
        assert 0 <= r["mig"] <= 1 and 0 <= r["active_units"] <= 10
        assert r["amortization_gap"] is None  # no gap report was written for these runs
    table = (report / "beta.md").read_text()
    assert table.count("| shapes | standard |") == 2 and "%.1f" % rows[0]["elbo"] in table
    assert "| n/a |" in table  # the missing gap says so
    for r in rows:  # each run's small files beside the table
        kept = report / "runs" / ("shapes-standard-b%g-s0" % r["beta"])
        assert {p.name for p in kept.iterdir()} == {"config.json", "metrics.jsonl", "summary.json"}


def test_the_figures_are_drawn(report):
    for name in ("beta.png", "traversal-shapes.png"):
        image = matplotlib.image.imread(report / name)
        assert image.shape[0] > 300 and np.std(image[..., :3]) > 0.05  # not blank


def test_run_takes_the_part_of_the_grid_it_is_given(tmp_path, monkeypatch):
    """`run --datasets mnist --decoders bayesian` trains and measures that part alone (β 1 and 4, 3 seeds), so two
    processes on two cores can share the grid; a run with a summary and a gap report is not touched again."""
    import argparse
    import importlib.util
    spec = importlib.util.spec_from_file_location("beta_study", ROOT / "experiments" / "beta_study.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    calls = []
    monkeypatch.setattr(study, "python", lambda *args: calls.append(args))
    done = tmp_path / "mnist-bayesian-b1-s0"
    done.mkdir()
    (done / "summary.json").write_text("{}")
    (done / "gap-test.json").write_text("{}")
    study.run(argparse.Namespace(runs=tmp_path, datasets=["mnist"], decoders=["bayesian"], betas=None, shapes="s.npz",
                                 mnist="m"))
    fits = [c for c in calls if c[0] == "fit"]
    outs = sorted(c[c.index("--out") + 1] for c in fits)
    assert outs == sorted(str(tmp_path / ("mnist-bayesian-b%s-s%d" % (b, s))) for b in ("1", "4") for s in (0, 1, 2)
                          if (b, s) != ("1", 0))
    assert all(c[c.index("--dataset") + 1] == "m" and c[c.index("--decoder-prior") + 1] == "normal" for c in fits)
    assert len(calls) == 2 * len(fits)  # each then its gap
    calls.clear()
    study.run(argparse.Namespace(runs=tmp_path, datasets=["shapes"], decoders=["standard"], betas=[0.25, 8.0],
                                 shapes="s.npz", mnist="m"))
    assert sorted(c[c.index("--kl-weight") + 1] for c in calls if c[0] == "fit") == ["0.25"] * 3 + ["8.0"] * 3
