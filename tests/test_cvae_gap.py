"""The CVAE's gap study (issue 50, item 4) as a pipeline, end to end at a tiny scale on the shipped sample:
experiments/cvae-gap.sh (shrunk by its CVAE_GAP_* variables) trains the VAE and the CVAE (A-VI k = 64 and F-VI,
two seeds) and measures their gaps, then the driver's report (python experiments/study.py cvae-gap --report-only)
writes figures/cvae-gap/gaps.md and gaps.png. Checked: both designs measured the same images per seed and split
(of the same data cut), the table has its rows, and its CVAE − VAE differences are the paired ones, recomputed
here from the two designs' gap reports. About 25 s of one core. No real study runs: everything happens in a
temporary root where experiments/ is a link to the real folder."""
import json
import math
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from amortized_pyro.report.paired import GAPS, difference


ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
SEEDS = (0, 1)
SPLITS = ("train", "test")
# configuration label in the VAE design → in the CVAE design (the run's label: amortized_pyro.models.guides)
PAIRS = {"A-VI k=64": "A-VI k=64, conditional", "F-VI": "F-VI, conditional"}
RUN_DIRS = {"A-VI k=64": "A-VI_k_64", "F-VI": "F-VI", "A-VI k=64, conditional": "A-VI_k_64_conditional",
            "F-VI, conditional": "F-VI_conditional"}
TINY = {"CVAE_GAP_N_OBS": "40", "CVAE_GAP_N_TEST": "20", "CVAE_GAP_EPOCHS": "2", "CVAE_GAP_SEEDS": "0,1",
        "CVAE_GAP_IMAGES": "3",
        "CVAE_GAP_OPTIONS": "--batch-size 20 --hidden 8 --z-dim 2 --predictive-draws 0 --eval-every 1 "
                            "--gap-importance-samples 10 --gap-theta-draws 1 --gap-score-draws 2 --gap-select-draws 2 "
                            "--gap-samples 2 --gap-step-samples 2 --gap-max-steps 10 --gap-window 5 --gap-ais-steps 0"}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """A root where the script ran both designs on mnist-sample and the driver wrote the report."""
    root = tmp_path_factory.mktemp("cvae-gap")
    (root / "experiments").symlink_to(EXPERIMENTS)
    env = dict(os.environ, **TINY)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # the script's python: ours
    done = subprocess.run(["bash", "experiments/cvae-gap.sh", "mnist-sample"], cwd=root, env=env,
                          capture_output=True, text=True)
    log = root / "runs" / "cvae-gap.log"
    assert done.returncode == 0, done.stderr + (log.read_text()[-3000:] if log.exists() else "")
    done = subprocess.run([sys.executable, str(EXPERIMENTS / "study.py"), "cvae-gap", "--report-only", "--root",
                           str(root)], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    return root


def gap_report(root, design, label, seed, split):
    run = root / "runs" / "cvae-gap" / design / "runs" / "mnist-sample" / ("%s-seed%d" % (RUN_DIRS[label], seed))
    return json.loads((run / ("gap-%s.json" % split)).read_text()), json.loads((run / "config.json").read_text())


def test_both_designs_measured_the_same_images_per_seed_and_split(pipeline):
    for vae_label, cvae_label in PAIRS.items():
        for split in SPLITS:
            chosen = {}
            for seed in SEEDS:
                vae, vae_info = gap_report(pipeline, "vae", vae_label, seed, split)
                cvae, cvae_info = gap_report(pipeline, "cvae", cvae_label, seed, split)
                assert not vae_info["config"]["conditional"] and cvae_info["config"]["conditional"]
                assert cvae_info["config"]["class_prior"] == "standard"
                assert (vae["label"], cvae["label"]) == (vae_label, cvae_label)
                assert vae_info["data"]["fingerprint"] == cvae_info["data"]["fingerprint"]  # the same data cut
                assert vae["seed"] == cvae["seed"] == seed and vae["gap_seed"] == cvae["gap_seed"] == seed
                assert vae["images"] == cvae["images"] and len(vae["images"]) == 3
                chosen[seed] = vae["images"]
            assert chosen[0] != chosen[1]  # each seed its own images (the gap seed is 0 + the run's seed)


def against_rows(text):
    """{(base, heading kind, label, split): [the three gap cells]} of gaps.md's --against tables."""
    rows, base, kind = {}, None, None
    for line in text.splitlines():
        found = re.match(r"Each configuration's gaps minus (.+)'s \(nats", line)
        if found:
            base, kind = found.group(1), None
        elif line.startswith("Paired by (training seed, image)"):
            kind = "paired"
        elif line.startswith("Unpaired"):
            kind = "unpaired"
        elif base and kind and line.startswith("| ") and not line.startswith("| configuration"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[(base, kind, cells[0], cells[1])] = cells[2:]
    return rows


def test_the_report_has_the_gap_table_and_the_paired_cvae_rows(pipeline):
    out = pipeline / "figures" / "cvae-gap"
    assert (out / "gaps.png").stat().st_size > 0
    text = (out / "gaps.md").read_text()
    assert "--against 'A-VI k=64' --against F-VI" in text.splitlines()[0]
    table = {tuple(c.strip() for c in line.strip("|").split("|")[:2]) for line in text.splitlines()
             if line.startswith("| ")}
    for label in (*PAIRS, *PAIRS.values()):
        for split in SPLITS:
            assert (label, split) in table, (label, split)
    rows = against_rows(text)
    for base, label in PAIRS.items():
        for split in SPLITS:
            assert (base, "paired", label, split) in rows, sorted(rows)
    assert not [key for key in rows if key[1] == "unpaired"]
    for design in ("vae", "cvae"):  # the mirrored small files the table was drawn from
        assert list((out / design / "runs" / "mnist-sample").glob("*/gap-train.json"))


def nested_stderr(differences):
    """The pooling rule's standard error for images nested in seeds (amortized_pyro.gap.pooling.pooled), written
    out again: Var = max(0, Var(seed means) − within / n) / S + within / (S n)."""
    S, n = len(differences), len(differences[0])
    seed_means = [statistics.fmean(d) for d in differences]
    within = statistics.fmean(statistics.variance(d) for d in differences)
    var_seed = max(0.0, statistics.variance(seed_means) - within / n)
    return math.sqrt(var_seed / S + within / (S * n))


def test_the_tables_cvae_minus_vae_is_the_mean_of_the_per_image_differences(pipeline):
    rows = against_rows((pipeline / "figures" / "cvae-gap" / "gaps.md").read_text())
    checked = 0
    for vae_label, cvae_label in PAIRS.items():
        for split in SPLITS:
            for column, name in enumerate(GAPS):
                differences, reports = [], {"vae": [], "cvae": []}
                for seed in SEEDS:
                    vae, _ = gap_report(pipeline, "vae", vae_label, seed, split)
                    cvae, _ = gap_report(pipeline, "cvae", cvae_label, seed, split)
                    reports["vae"].append(vae)
                    reports["cvae"].append(cvae)
                    if vae["per_image"][name] is None:  # F-VI on held-out images: no amortization gap
                        break
                    by_image = dict(zip(vae["images"], vae["per_image"][name]))  # paired by (seed, image)
                    differences.append([x - by_image[i] for i, x in zip(cvae["images"], cvae["per_image"][name])])
                cell = rows[(vae_label, "paired", cvae_label, split)][column]
                if len(differences) < len(SEEDS):
                    assert (vae_label, split, name) == ("F-VI", "test", "amortization_gap") and cell == "n/a"
                    continue
                mean = statistics.fmean(d for seed in differences for d in seed)
                stderr = nested_stderr(differences)
                assert cell == "%+.1f ± %.1f (%+.1f s.e.)" % (mean, stderr, mean / stderr), (vae_label, split, name, cell)
                paired = difference(reports["cvae"], reports["vae"], name, None)  # the table's own
                assert paired["mean"] == pytest.approx(mean, rel=1e-9, abs=1e-9)
                assert paired["stderr"] == pytest.approx(stderr, rel=1e-6)  # pooled's seed means: float32
                checked += 1
    assert checked == 11  # A-VI: 2 splits × 3 gaps; F-VI: train's 3, test's coupling and approximation gaps


def test_the_driver_runs_the_script_on_its_data_folder_then_the_report(tmp_path):
    (tmp_path / "experiments").symlink_to(EXPERIMENTS)
    (tmp_path / "mnist").mkdir()
    done = subprocess.run([sys.executable, str(EXPERIMENTS / "study.py"), "cvae-gap", "--dry-run", "--data", "mnist",
                           "--root", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    steps = [line for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert steps[0] == "+ bash experiments/cvae-gap.sh mnist"
    assert steps[-1] == ("+ python experiments/gap_tables.py figures/cvae-gap/vae figures/cvae-gap/cvae --out "
                         "figures/cvae-gap --title 'CVAE against VAE' --against 'A-VI k=64' --against F-VI")
    assert not (tmp_path / "runs").exists()
