"""experiments/inference_costs.py in two steps (issue 49, item 6): `measure` keeps every round's time in a file and
never overwrites one; `table` draws inference.md from that file alone (medians, ratios to A-VI's), so the table can
be made again from what is committed. The timing itself (a trained run's inference) is exercised by the remedies
study; here the records are written by hand with known medians. The script and the fits run in this process, as
python would run them (tests/in_process.py): none of these tests is about processes."""
import json
from pathlib import Path

from in_process import run_cli, run_python

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "inference_costs.py"


def script(*args, cwd=ROOT):
    return run_python(SCRIPT, *args, cwd=cwd)


def record(label, how, seconds):
    return {"folder": "f", "run": "r", "label": label, "how": how, "seconds": seconds, "date": "2026-11-26",
            "machine": "x86_64, Linux", "torch_threads": 1}


def test_the_table_gives_medians_and_ratios_to_a_vi_from_the_records_alone(tmp_path):
    """Medians 2 ms (A-VI: rounds 1, 2, 9 ms), 5 ms (its flow) and 600 ms (F-VI): ratios 1, 2 (2.5 rounded to even)
    and 300; the A-VI with a comma in its label is not the base."""
    records = [record("A-VI k=64", "its own factor and a draw", [0.001, 0.002, 0.009]),
               record("A-VI k=64, flow K=2", "its own factor and a draw", [0.005, 0.004, 0.006]),
               record("F-VI", "q* optimization, 1100 steps", [0.5, 0.6, 0.7])]
    path = tmp_path / "inference.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = script("table", path, "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "out" / "inference.md").read_text()
    assert text.splitlines()[0] == "Command: python experiments/inference_costs.py table %s --out %s" % (
        path, tmp_path / "out")
    rows = [line for line in text.splitlines() if line.startswith("| A-VI") or line.startswith("| F-VI")]
    assert rows == ["| A-VI k=64 | its own factor and a draw | 3 | 2.00 | 1 |",
                    "| A-VI k=64, flow K=2 | its own factor and a draw | 3 | 5.00 | 2 |",
                    "| F-VI | q* optimization, 1100 steps | 3 | 600.00 | 300 |"]
    assert "2026-11-26 on x86_64, Linux, 1 torch thread(s)" in text


def test_measure_refuses_a_file_that_is_there_and_a_folder_without_a_finished_run(tmp_path):
    there = tmp_path / "inference.jsonl"
    there.write_text("kept\n")
    done = script("measure", tmp_path / "cell", "--out", there)
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0 and "move it away" in done.stderr
    assert there.read_text() == "kept\n"
    (tmp_path / "cell" / "runs" / "d" / "A-VI_k_64-seed0").mkdir(parents=True)  # begun, no params.pt
    done = script("measure", tmp_path / "cell", "--out", tmp_path / "new.jsonl")
    assert done.returncode == 1 and "no finished seed-0 run" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "new.jsonl").exists()


def test_measure_times_trained_runs_and_table_reads_its_records(tmp_path):
    """Two tiny trained runs (A-VI and F-VI, one epoch): measure writes one record per folder with every round's
    time (F-VI: its q* optimization's steps, 3 rounds) that `table` then draws, A-VI the base of the ratios."""
    small = ["--dataset", "mnist-sample", "--n-obs", "40", "--n-test", "10", "--epochs", "1", "--hidden", "8",
             "--z-dim", "2", "--predictive-draws", "0", "--no-progress"]
    for cell, guide in (("a-vi", ["--guide", "amortized", "--width", "4"]), ("f-vi", ["--guide", "per-datapoint"])):
        run = tmp_path / cell / "runs" / "mnist-sample" / ("%s-seed0" % cell)
        done = run_cli("fit", *small, *guide, "--out", run)
        assert done.returncode == 0, done.stderr
    records = tmp_path / "inference.jsonl"
    done = script("measure", tmp_path / "a-vi", tmp_path / "f-vi", "--out", records, "--rounds", 2)
    assert done.returncode == 0, done.stderr
    a_vi, f_vi = [json.loads(line) for line in records.read_text().splitlines()]
    assert a_vi["label"] == "A-VI k=4" and len(a_vi["seconds"]) == 2 and a_vi["how"] == "its own factor and a draw"
    assert f_vi["label"] == "F-VI" and len(f_vi["seconds"]) == 3 and f_vi["how"].startswith("q* optimization, ")
    assert a_vi["torch_threads"] >= 1 and a_vi["date"] and a_vi["machine"]
    done = script("table", records, "--out", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| A-VI k=4 | its own factor and a draw | 2 |" in (tmp_path / "inference.md").read_text()
    assert script("measure", tmp_path / "a-vi", "--out", records).returncode == 1  # never over the records
