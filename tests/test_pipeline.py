"""experiments/ as one declared pipeline (issue 27): experiments/studies.py's registry names every study script once,
its needs name studies and form no cycle, its report scripts exist; a study whose need is missing stops with one
line naming what to run; --dry-run shows needs, study and report in order; and each report script without a test
elsewhere (capacity_status.py, studies_end_status.py, archive/cap_check.py; gap_tables.py and plateau_report.py are in
test_experiment_figures.py, theta_scales.py in test_theta_scales.py) runs on the smallest input it reads. No real
study runs: the driver works in a temporary --root, where experiments/ is a link to the real folder."""
import importlib.util
import json
import math
import re
import runpy
import statistics
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

from in_process import run_python

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
spec = importlib.util.spec_from_file_location("study", EXPERIMENTS / "study.py")
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)  # puts experiments/ on sys.path: its registry and steps import as modules
import studies  # noqa: E402
import study_steps  # noqa: E402


def drive(capsys, *args):
    """(exit status, stdout lines, stderr lines) of the driver run in-process."""
    status = study.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


@pytest.fixture
def root(tmp_path):
    """A working folder for the driver: experiments/ linked to the real one, nothing else."""
    (tmp_path / "experiments").symlink_to(EXPERIMENTS)
    return tmp_path


def touch(root, *paths, text="{}"):
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def files_under(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name != "experiments"
                  and "experiments" not in p.relative_to(folder).parts)


# The registry


def test_every_script_is_one_study_and_every_study_a_script():
    """Also the archived ones (experiments/archive/: studies run once, their reports kept)."""
    scripts = sorted(p.stem for p in [*EXPERIMENTS.glob("*.sh"), *EXPERIMENTS.glob("archive/*.sh")])
    assert sorted(studies.STUDIES) == scripts
    for name, entry in studies.STUDIES.items():
        assert entry.name == name and (ROOT / entry.script).is_file()
        assert (ROOT / entry.script).parent.name == "archive" or entry.script == "experiments/%s.sh" % name


def test_needs_name_studies_hold_what_they_read_and_have_no_cycle():
    for entry in studies.STUDIES.values():
        for need in entry.needs:
            assert need.study in studies.STUDIES, (entry.name, need.study)
            assert need.study != entry.name
            runs = Path(studies.STUDIES[need.study].runs).parts
            for pattern in need.files:  # what is read lies in the needed study's runs
                parts = Path(pattern).parts
                assert all(fnmatch(p, r) for p, r in zip(parts, runs)) and len(parts) > len(runs), (entry.name, pattern)
    state = {}

    def visit(name, path):
        assert state.get(name) != "open", "a cycle of needs: %s" % " → ".join(path + [name])
        if state.get(name) is None:
            state[name] = "open"
            for need in studies.STUDIES[name].needs:
                visit(need.study, path + [name])
            state[name] = "done"

    for name in studies.STUDIES:
        visit(name, [])


def test_the_declared_dependencies():
    needs = {name: sorted({n.study for n in entry.needs}) for name, entry in studies.STUDIES.items() if entry.needs}
    assert needs == {"capacity": ["gap-vs-n"], "held-out": ["informative"], "converged": ["informative"],
                     "cap-check": ["gap-vs-n", "informative", "sa-vi"]}
    assert {name for name, entry in studies.STUDIES.items() if entry.data} == {
        "gap-vs-n", "studies-end", "original-seeds", "reference-cpu", "plateau", "architectures", "remedies",
        "cvae-gap"}


def test_every_report_script_exists_and_every_report_writes_under_figures(tmp_path):
    from amortized_pyro.cli.commands import cli
    ctx = study_steps.Context(tmp_path, "mnist")
    for entry in studies.STUDIES.values():
        assert entry.figures.startswith("figures/")
        steps = entry.report(ctx)
        assert steps, entry.name
        for step in steps:
            if isinstance(step, (study_steps.Copy, study_steps.Mirror)):
                assert step.dest.startswith(entry.figures)
                continue
            argv = [a.text() if isinstance(a, study_steps.Glob) else a for a in step.argv]
            assert argv[0] == "python"
            if argv[1] == "-m":
                assert argv[2] == "amortized_pyro" and argv[3] in cli.commands, step.text()
                if argv[3] == "plot":  # the results.jsonl the study's compare writes, or its mirror under figures/
                    mirrored = [m.dest + "/results.jsonl" for m in steps if isinstance(m, study_steps.Mirror)]
                    assert any(fnmatch(argv[-1], pattern) for pattern in (*entry.reads, *mirrored)), step.text()
            else:
                assert (ROOT / argv[1]).is_file(), step.text()
            if step.stdout:
                out = step.stdout
            elif "--out" in argv:
                out = argv[argv.index("--out") + 1]
            else:  # plot: beside its results.jsonl
                out = argv[-1]
            assert fnmatch(out, entry.figures + "*"), (entry.name, step.text())


# a script's name, relative to experiments/ (not $1-study.toml, %s.sh)
NAMED = re.compile(r"(?<![\w./$%-])(?:experiments/)?((?:archive/)?[\w-]+\.(?:py|sh|toml))\b")


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.sh")) + sorted(EXPERIMENTS.glob("*.py"))
                         + sorted(EXPERIMENTS.glob("archive/*")) + [ROOT / "docs" / "cli.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_script_named_in_the_experiments_and_the_cli_page_exists(path):
    """A name is relative to experiments/ (an archived script's bare name may also be a sibling's: its own)."""
    text = path.read_text(encoding="utf-8")
    named = {m for m in NAMED.findall(text) if not Path(m).stem.isupper()}  # [archive/]NAME.sh: a placeholder
    missing = sorted(m for m in named if not (EXPERIMENTS / m).exists() and not (path.parent / m).exists())
    assert not missing, "%s names %s" % (path.name, ", ".join(missing))


# The driver


def test_list_names_every_study_its_needs_and_its_folder(capsys):
    status, out, _ = drive(capsys, "--list")
    assert status == 0
    rows = {line.split()[0]: line for line in out[1:]}
    assert set(rows) == set(studies.STUDIES)
    for name, entry in studies.STUDIES.items():
        assert entry.figures in rows[name]
        for need in entry.needs:
            assert need.study in rows[name].split(None, 1)[1]
    assert "gap-vs-n" in rows["capacity"] and "MNIST IDX folder" in rows["gap-vs-n"]


def test_the_cli_page_shows_the_list_as_it_is(capsys):
    _, out, _ = drive(capsys, "--list")
    assert "\n".join(out) in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_a_missing_need_stops_with_one_line_naming_what_to_run(root):
    done = run_python(EXPERIMENTS / "study.py", "capacity", "--root", root)  # in this process, as python would run it
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "python experiments/study.py gap-vs-n" in lines[0] and "--with-needs" in lines[0]
    assert "runs/gap-vs-n/n2500/runs/*/A-VI_k_64-seed0/summary.json" in lines[0]
    assert done.stdout == "" and files_under(root) == []  # nothing ran, nothing was made


def test_a_partial_need_is_not_taken(root, capsys):
    """Converged needs all six informative runs finished: five are not enough, a run without summary.json is not."""
    runs = ["%s/%s-seed%d" % (studies.INFORMATIVE, label, seed) for label in ("F-VI", "A-VI_k_64") for seed in (0, 1, 2)]
    touch(root, *["%s/summary.json" % run for run in runs[:-1]], "%s/checkpoint.pt" % runs[-1])
    status, out, err = drive(capsys, "converged", "--root", root, "--dry-run")
    assert status == 2 and out == [] and len(err) == 1
    assert "A-VI_k_64-seed2/summary.json missing" in err[0] and "python experiments/study.py informative" in err[0]
    touch(root, "%s/summary.json" % runs[-1])
    status, out, err = drive(capsys, "converged", "--root", root, "--dry-run")
    assert status == 0 and err == [] and "+ bash experiments/converged.sh" in out


def test_a_need_that_matches_twice_is_refused(root, capsys):
    for folder in ("shared_data_mnist", "mnist"):
        touch(root, "runs/gap-vs-n/n2500/runs/%s/A-VI_k_64-seed0/summary.json" % folder)
    status, _, err = drive(capsys, "capacity", "--root", root, "--dry-run")
    assert status == 2 and len(err) == 1 and "2 files match it, one expected" in err[0]


def test_a_study_on_mnist_needs_its_folder(root, capsys):
    status, out, err = drive(capsys, "gap-vs-n", "--root", root)
    assert status == 2 and out == [] and len(err) == 1 and "--data DIR" in err[0]
    status, out, err = drive(capsys, "gap-vs-n", "--root", root, "--data", "no-such-folder")
    assert status == 2 and "no folder no-such-folder" in err[0]


def test_dry_run_prints_the_needs_then_the_study_then_its_report(root, capsys):
    (root / "mnist").mkdir()
    before = files_under(root)
    status, out, err = drive(capsys, "cap-check", "--with-needs", "--dry-run", "--data", "mnist", "--root", root)
    assert status == 0, err
    expected = [  # in this order; the informative and cap-check scripts write their reports themselves
        "+ bash experiments/sa-vi.sh",
        "+ python experiments/gap_tables.py figures/sa-vi/sa-vi-5 figures/sa-vi/sa-vi-5-unrolled figures/sa-vi/sa-vi-20 "
        "--out figures/sa-vi --title SA-VI --against 'A-VI k=64'",
        "+ bash experiments/gap-vs-n.sh mnist",
        "+ python experiments/gap_tables.py figures/gap-vs-n/n1000 figures/gap-vs-n/n2500 figures/gap-vs-n/n8000 "
        "--out figures/gap-vs-n --by-n",
        "+ bash experiments/informative.sh",
        "  python experiments/theta_scales.py runs/informative/runs/mnist-sample/* > figures/informative/theta_scales.md",
        "+ bash experiments/archive/cap-check.sh",
        "  python experiments/archive/cap_check.py runs/informative/runs/mnist-sample/F-VI-seed0/gap-test.json "
        "runs/cap-check/informative-F-VI-seed0-test-20000.json > figures/cap-check/informative-F-VI-seed0-test-20000.md",
    ]
    at = [out.index(line) for line in expected]
    assert at == sorted(at), out
    assert sum(line.startswith("+ bash ") for line in out) == 4
    assert files_under(root) == before  # a dry run makes nothing


def test_dry_run_passes_the_script_options_and_skips_needs_that_are_there(root, capsys):
    run = "runs/gap-vs-n/n2500/runs/shared_data_mnist/A-VI_k_64-seed0"
    touch(root, *("%s/%s" % (run, name) for name in ("summary.json", "gap-train.json", "gap-test.json")))
    status, out, _ = drive(capsys, "capacity", "--dry-run", "--with-needs", "--root", root, "--seeds", "0")
    assert status == 0
    assert [line for line in out if line.startswith("+ ")] == [
        "+ bash experiments/capacity.sh --seeds 0",
        "+ python experiments/capacity_status.py runs/capacity/capacity.jsonl --out figures/capacity --own "
        "%s/gap-train.json --own %s/gap-test.json" % (run, run)]
    (root / "mnist").mkdir()
    status, out, _ = drive(capsys, "reference-cpu", "--dry-run", "--root", root, "--data=mnist", "--", "--dry-run")
    assert [line for line in out if line.startswith("+ ")] == [
        "+ bash experiments/archive/reference-cpu.sh %s mnist --dry-run" % s for s in studies.REFERENCE_CPU]


def test_report_only_needs_the_studys_runs(root, capsys):
    status, out, err = drive(capsys, "capacity", "--report-only", "--root", root)
    assert status == 2 and out == [] and len(err) == 1
    assert "runs/capacity/capacity.jsonl" in err[0] and "python experiments/study.py capacity" in err[0]
    assert files_under(root) == []


def test_unknown_study_and_usage(capsys):
    assert drive(capsys, "no-such-study")[0] == 2
    assert drive(capsys)[0] == 2


# The report steps, each on the smallest input it reads


def gap(mean, stderr=1.0):
    return {"mean": mean, "stderr": stderr}


def capacity_rows():
    """A sweep of widths 8 and 32, depth 1, seeds 0 and 1, as the capacity command leaves capacity.jsonl."""
    rows = []
    for width, base in ((8, 10.0), (32, 4.0)):
        for seed in (0, 1):
            for split, extra in (("train", 0.0), ("test", 6.0)):
                rows.append({"width": width, "depth": 1, "seed": seed, "split": split, "n_images": 5,
                             "gap_seed": seed, "images": [10 * seed + i for i in range(5)],
                             "epochs": 100 + 20 * seed, "encoder_capped": seed == 1 and width == 32,
                             "amortization_gap": gap(base + extra + 2 * seed), "coupling_gap": gap(1.0 + seed),
                             "approximation_gap": gap(3.0), "capped": 0, "capped_per_theta": 0, "hit_cap": False})
    return rows


def test_capacity_status_tables_the_encoders_done(tmp_path, monkeypatch, saved_figures):
    rows = capacity_rows()
    source = tmp_path / "runs" / "capacity" / "capacity.jsonl"
    touch(tmp_path, "runs/capacity/capacity.jsonl", text="".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "figures" / "capacity"
    own = [tmp_path / "runs" / ("gap-%s.json" % split) for split in ("train", "test")]
    for path, split, mean in zip(own, ("train", "test"), (12.5, 30.0)):  # the frozen run's, on encoder seed 1's images
        path.write_text(json.dumps({"split": split, "label": "A-VI k=64", "images": [10, 11, 12, 13, 14],
                                    "amortization_gap": gap(mean, 2.0)}))
    monkeypatch.setattr(sys, "argv", ["capacity_status.py", str(source), "--out", str(out),
                                      "--own", str(own[0]), "--own", str(own[1])])
    runpy.run_path(str(EXPERIMENTS / "capacity_status.py"), run_name="__main__")  # in-process: its figure is read
    assert (out / "capacity.jsonl").read_text() == source.read_text()
    assert (out / "frozen-run-gap-test.json").read_text() == own[1].read_text()
    (ax,) = saved_figures["capacity.png"].axes  # widths as ticks; each point the mean over the two seeds
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "32"]
    points = {c.get_label(): list(c.lines[0].get_ydata()) for c in ax.containers}
    assert points == {"1 hidden layer, train images": [11.0, 5.0], "1 hidden layer, test images": [17.0, 11.0]}
    assert ax.get_ylabel().startswith("amortization gap")
    text = (out / "capacity.md").read_text()
    assert text.startswith("Command: python experiments/capacity_status.py %s/capacity.jsonl --out %s --own "
                           "%s/frozen-run-gap-train.json --own %s/frozen-run-gap-test.json (4 encoders)" % (out, out, out, out))
    table = {tuple(c.strip() for c in line.strip("|").split("|")[:3]): [c.strip() for c in line.strip("|").split("|")]
             for line in text.splitlines() if re.match(r"\| \d", line)}
    assert set(table) == {(w, "1", s) for w in ("8", "32") for s in ("train", "test")}
    # width 32, test: seeds' amortization gaps 10 and 12 → 11.0 ± 1.0 over seeds; one encoder at the epoch cap
    assert table[("32", "1", "test")][3:8] == ["2", "5", "110", "1", "11.0 ± 1.0"]
    assert table[("8", "1", "train")][7:] == ["11.0 ± 1.0", "1.5 ± 0.5", "3.0 ± 0.0"]
    # on the same images: the frozen run's report beside the seed-1 encoders only (gap seed 1 drew its images)
    same = text.split("On the same images")[1].splitlines()
    assert [line for line in same if line.startswith("| train")] == [
        "| train | 5 | the run's own (A-VI k=64, trained with the decoder) | | 12.5 ± 2.0 |",
        "| train | 5 | fresh, k = 8, 1 hidden layer | 1 | 12.0 ± 1.0 |",
        "| train | 5 | fresh, k = 32, 1 hidden layer | 1 | 6.0 ± 1.0 |"]
    assert "0 → 0, 1 → 1" in text


def test_the_driver_reports_capacity_from_existing_runs(root, capsys):
    touch(root, "runs/capacity/capacity.jsonl", text="".join(json.dumps(r) + "\n" for r in capacity_rows()))
    for split in ("train", "test"):
        touch(root, "runs/gap-vs-n/n2500/runs/mnist/A-VI_k_64-seed0/gap-%s.json" % split, text=json.dumps(
            {"split": split, "label": "A-VI k=64", "images": [0, 1, 2, 3, 4], "amortization_gap": gap(5.0)}))
    status, out, err = drive(capsys, "capacity", "--report-only", "--root", root)
    assert status == 0, err
    assert out[0] == ("+ python experiments/capacity_status.py runs/capacity/capacity.jsonl --out figures/capacity --own "
                      "runs/gap-vs-n/n2500/runs/mnist/A-VI_k_64-seed0/gap-train.json --own "
                      "runs/gap-vs-n/n2500/runs/mnist/A-VI_k_64-seed0/gap-test.json")
    assert sorted(p.name for p in (root / "figures" / "capacity").iterdir()) == [
        "capacity.jsonl", "capacity.md", "capacity.png", "frozen-run-gap-test.json", "frozen-run-gap-train.json"]
    assert (root / "runs" / "capacity" / "capacity.jsonl").exists()  # nothing deleted


def end_run(root, folder, label, batch_size, epochs, finished, test_mse=0.0600, evaluated=True):
    """A run of experiments/studies-end.sh as far as studies_end_status.py reads it: config.json, metrics.jsonl."""
    run = root / "runs" / folder / "runs" / "shared_data_mnist" / ("%s-seed0" % label)
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"config": {"batch_size": batch_size}, "data": {
        "n_obs": 8000, "mean_image_mse": {"train_mse": 0.0640, "test_mse": 0.0650}}}))
    rows = []
    for epoch in range(1, epochs + 1):
        row = {"epoch": epoch, "elbo_per_obs": -600.0 + epoch / 100}
        if evaluated and (epoch % 10 == 0 or epoch == epochs):
            row.update(train_plugin_mse=0.0320, test_plugin_mse=test_mse, train_predictive_mse=0.0330,
                       test_predictive_mse=test_mse and test_mse + 0.001)
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if finished:
        (run / "summary.json").write_text("{}")


def test_studies_end_status_says_where_each_run_stands(tmp_path):
    end_run(tmp_path, "end-seed-elbo-amortized", "A-VI_k_64", 50000, 50, finished=True)  # ≥ N: full batch
    end_run(tmp_path, "end-original-reference-per-datapoint", "F-VI", 3000, 37, finished=False, test_mse=None)
    end_run(tmp_path, "end-original-elbo-shared", "constant-VI", 1000, 5, finished=False, evaluated=False)
    (tmp_path / "runs" / "end-seed-elbo-amortized.log").write_text("a log beside the folders\n")
    folders = sorted(str(p) for p in (tmp_path / "runs").glob("end-*"))
    done = run_python(EXPERIMENTS / "studies_end_status.py", *folders)  # in this process, as python would run it
    assert done.returncode == 0, done.stderr
    out = done.stdout
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()[2:]]
    assert rows == [  # the constant-VI run, not yet evaluated, has no row yet; the .log is passed over
        ["original", "reference", "F-VI", "111 of 50000, going on", "0.0320 (0.50)", "0.0330", "n/a", "n/a", "-599.63"],
        ["seed", "elbo", "A-VI k=64", "50 of 5000", "0.0320 (0.50)", "0.0330", "0.0600 (0.92)", "0.0610", "-599.50"],
    ], out


def report(label, per_image, max_steps, capped=0, capped_per_theta=0):
    return {"label": label, "n_images": len(per_image["elbo_optimized"]), "capped": capped,
            "capped_per_theta": capped_per_theta, "settings": {"max_steps": max_steps, "theta_draws": 2},
            "per_image": per_image}


def test_cap_check_pairs_the_two_reports_per_image(tmp_path):
    first = report("F-VI", {"elbo_guide": None, "elbo_optimized": [-100.0, -90.0, -80.0],
                            "elbo_per_theta": [-99.0, -89.0, -79.0]}, 1500, capped=3, capped_per_theta=5)
    second = report("F-VI", {"elbo_guide": None, "elbo_optimized": [-98.0, -89.0, -77.0],
                             "elbo_per_theta": [-99.0, -88.0, -79.0]}, 20000)
    paths = []
    for name, r in (("first", first), ("second", second)):
        paths.append(tmp_path / ("%s.json" % name))
        paths[-1].write_text(json.dumps(r))
    done = run_python(EXPERIMENTS / "archive" / "cap_check.py", *paths)  # in this process, as python would run it
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "%s: cap 1500 steps, capped q* 3 of 3 images, capped q*_m 5 of 6 pairs" % paths[0]
    assert out[1] == "%s: cap 20000 steps, capped q* 0 of 3 images, capped q*_m 0 of 6 pairs" % paths[1]
    d = [2.0, 1.0, 3.0]  # L(q*): second − first, per image
    assert out[2] == "elbo_optimized  second − first: +%.2f ± %.2f nats per image (min +1.00, max +3.00, 3 images)" % (
        statistics.mean(d), statistics.stdev(d) / math.sqrt(3))
    assert out[3].startswith("elbo_per_theta  second − first: +0.33 ± 0.33") and len(out) == 4  # no L(guide): F-VI


def test_the_driver_writes_cap_checks_pairs_into_figures(root, capsys):
    per_image = {"elbo_guide": [-101.0, -91.0], "elbo_optimized": [-100.0, -90.0], "elbo_per_theta": [-99.0, -89.0]}
    runs = [run.replace("*", "shared_data_mnist") for run, _ in studies.CAP_CHECK]
    for run, (_, name) in zip(runs, studies.CAP_CHECK):
        touch(root, run + "/gap-test.json", text=json.dumps(report("A-VI k=64", per_image, 1500)))
        touch(root, "runs/cap-check/%s.json" % name, text=json.dumps(report("A-VI k=64", per_image, 20000)))
    status, out, err = drive(capsys, "cap-check", "--report-only", "--root", root)
    assert status == 0, err
    for run, (_, name) in zip(runs, studies.CAP_CHECK):
        text = (root / "figures" / "cap-check" / ("%s.md" % name)).read_text().splitlines()
        assert text[0] == ("Command: python experiments/archive/cap_check.py %s/gap-test.json runs/cap-check/%s.json"
                           % (run, name))
        assert text[2].startswith("%s/gap-test.json: cap 1500 steps" % run)
        assert text[4].startswith("elbo_guide      second − first: +0.00 ± 0.00") and len(text) == 7
    assert sum("second − first" in line for line in out) == 9  # also shown


def test_the_driver_copies_the_held_out_rows_into_figures_and_draws_from_them(root, capsys):
    for name in ("held_out.jsonl", "references.jsonl"):  # the committed study's rows
        touch(root, "runs/held-out/" + name, text=(ROOT / "figures" / "held-out" / name).read_text())
    touch(root, "runs/held-out/held_out.md", "runs/held-out/work-in-progress.json")
    status, _, err = drive(capsys, "held-out", "--report-only", "--root", root)
    assert status == 0, err
    figures = root / "figures" / "held-out"
    assert sorted(p.name for p in figures.iterdir()) == [
        "held_out.jsonl", "held_out.md", "held_out_gaps.png", "held_out_tradeoff.png", "references.jsonl"]
    drawn = (figures / "held_out.md").read_text().split("\n", 1)
    assert drawn[0] == "Command: python experiments/held_out_report.py figures/held-out --out figures/held-out"
    assert drawn[1] == (ROOT / "figures" / "held-out" / "held_out.md").read_text().split("\n", 1)[1]


def test_a_mirror_keeps_a_comparisons_small_files_in_their_layout_and_skips_a_cell_not_begun(tmp_path, capsys):
    run = "runs/remedies/a-vi/runs/mnist/A-VI_k_64-seed0"
    small = ("runs/remedies/a-vi/summary.md", "runs/remedies/a-vi/results.jsonl") + tuple(
        "%s/%s" % (run, f) for f in ("config.json", "metrics.jsonl", "summary.json", "gap-train.json", "gap-test.json"))
    touch(tmp_path, *small, *("%s/%s" % (run, f) for f in ("params.pt", "checkpoint.pt", "recon.png")))
    for source in ("runs/remedies/a-vi", "runs/remedies/f-vi"):
        step = study_steps.Mirror(source, source.replace("runs/", "figures/", 1))
        assert step.run(tmp_path) == 0
    copied = sorted(str(p.relative_to(tmp_path / "figures")) for p in (tmp_path / "figures").rglob("*") if p.is_file())
    assert copied == sorted(p.replace("runs/", "", 1) for p in small)
    assert "no runs/remedies/f-vi yet" in capsys.readouterr().err


def test_every_study_script_is_executable():
    """The docs run them as `experiments/NAME.sh DATA`: each study script has its executable bit in git's tree too
    (experiments/lib/ holds sourced helpers, not commands)."""
    import os
    scripts = sorted([*EXPERIMENTS.glob("*.sh"), *EXPERIMENTS.glob("archive/*.sh")])
    assert scripts and [p.name for p in scripts if not os.access(p, os.X_OK)] == []
    listed = subprocess.run(["git", "ls-files", "-s", "experiments"], cwd=ROOT, capture_output=True, text=True).stdout
    modes = {line.split()[3]: line.split()[0] for line in listed.splitlines()}
    assert [name for name, mode in modes.items() if name.endswith(".sh") and "/lib/" not in name and mode != "100755"] == []
