"""experiments/remeasured.py (issue 49, item 4): re-measured gap reports against a commit's, on the same images.
Run on a committed comparison folder against HEAD, with a copy of it as the "new" reports: identical reports read
0 over every compared value; one value changed by hand is found, with its size and place; a per-image gap below
zero is listed; a bad revision or an empty folder is one line and a non-zero exit. The script runs in this
process, as python would run it (tests/in_process.py)."""
import json
import shutil
from pathlib import Path

from in_process import run_python

ROOT = Path(__file__).resolve().parents[1]
FOLDER = "figures/architectures/mlp-none"  # committed: 6 runs, 12 reports of 20 images, no coupling gap
REPORT = "runs/shared_data_mnist/A-VI_k_64_point_theta-seed0/gap-train.json"


def remeasured(*args):
    return run_python("experiments/remeasured.py", *args, cwd=ROOT)


def test_identical_reports_read_zero_over_every_compared_value(tmp_path):
    shutil.copytree(ROOT / FOLDER, tmp_path / "new")
    done = remeasured("%s=%s" % (FOLDER, tmp_path / "new"), "--before", "HEAD")
    assert done.returncode == 0, done.stderr
    assert "largest |now - then| of amortization_gap over 180 per-image values: 0.000\n" in done.stdout
    assert "largest |now - then| of coupling_gap over 0 per-image values: none compared" in done.stdout
    assert "below zero now: 0" in done.stdout


def test_a_changed_value_and_a_value_below_zero_are_found(tmp_path):
    shutil.copytree(ROOT / FOLDER, tmp_path / "new")
    path = tmp_path / "new" / REPORT
    report = json.loads(path.read_text())
    before = report["per_image"]["amortization_gap"][3]
    report["per_image"]["amortization_gap"][3] = -1.5
    path.write_text(json.dumps(report))
    done = remeasured("%s=%s" % (FOLDER, tmp_path / "new"), "--before", "HEAD")
    image = report["images"][3]
    assert ("largest |now - then| of amortization_gap over 180 per-image values: %.3f "
            "(A-VI_k_64_point_theta-seed0 train image %d: %.3f -> -1.500)" % (before + 1.5, image, before)) in done.stdout
    assert "below zero now: 1" in done.stdout
    assert "A-VI_k_64_point_theta-seed0 train amortization_gap image %d: -1.50" % image in done.stdout


def test_a_bad_revision_or_an_empty_folder_is_one_line(tmp_path):
    done = remeasured(FOLDER, "--before", "no-such-revision")
    assert done.returncode != 0 and done.stderr.strip() == (
        "remeasured.py: --before no-such-revision is no commit of this repository")
    done = remeasured("%s=%s" % (FOLDER, tmp_path), "--before", "HEAD")
    assert done.returncode != 0 and done.stderr.strip() == "remeasured.py: no run directories under %s/runs/" % tmp_path


def test_reports_an_earlier_layout_kept_flat_are_found(tmp_path):
    """--flat: the revision kept the reports as RUN-gap-SPLIT.json in one folder (as gap-vs-n's reports/ were, from
    which tests/data/flat-reports holds one)."""
    flat = ROOT / "tests" / "data" / "flat-reports"
    run = tmp_path / "runs" / "mnist" / "A-VI_k_64-seed0"
    run.mkdir(parents=True)
    shutil.copy(flat / "A-VI_k_64-seed0-gap-train.json", run / "gap-train.json")
    done = remeasured("tests/data/flat-reports=%s" % tmp_path, "--before", "HEAD", "--flat", flat.relative_to(ROOT))
    assert done.returncode == 0, done.stderr
    assert "largest |now - then| of log_px over 20 per-image values: 0.000\n" in done.stdout
