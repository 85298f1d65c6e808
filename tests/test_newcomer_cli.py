"""What a new user tripped over at the command line (issue 47): options accepted that do nothing, files read as
what they are not, advice that goes round in a circle, folders left behind, work done before a refusal, an
interrupt that claims to keep what was never written, memory as a bug of ours, and minutes without a word."""
import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from amortized_pyro.models.guides import GUIDES
from conftest import tiny_finished_run

TINY = ["--dataset", "mnist-sample", "--n-obs", "24", "--n-test", "8", "--epochs", "2", "--batch-size", "12",
        "--hidden", "8", "--z-dim", "2", "--no-progress", "--device", "cpu"]
GAP = ["--n-images", "2", "--max-steps", "20", "--ais-steps", "0", "--samples", "2", "--importance-samples", "2",
       "--theta-draws", "1", "--no-progress"]
PRESETS = sorted((Path(__file__).parents[1] / "experiments").glob("*.toml"))


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_error_line(result, code=1):
    """The last line of a refusal: ``Error: …``, the exit status ``code``, no traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("Error: "), result.output
    return lines[-1]


class Trained:
    def summary(self):
        return "trained"


# 1. options that configure another guide

@pytest.mark.parametrize("guide, extra", [
    ("per-datapoint", ["--width", "64", "--refine-steps", "3"]),
    ("per-datapoint", ["--width", "128"]),  # given, though it equals the default: still nothing it configures
    ("shared", ["--encoder", "conv", "--encoder-layers", "1"]),
    ("amortized", ["--iterations", "3"]),
    ("amortized", ["--qz-init", "random"]),
    ("semi-amortized", ["--flow", "2"]),
    ("iterative", ["--refine-lr", "0.1", "--refine-grad", "unrolled"]),
])
def test_options_that_do_not_apply_to_the_guide_are_refused_not_recorded(tmp_path, guide, extra):
    result = run("fit", "--guide", guide, *extra, *TINY, "--out", tmp_path / "run")
    line = one_error_line(result, code=2)
    assert guide in line and all(option in line for option in extra if option.startswith("--")), line
    assert not (tmp_path / "run").exists()


def test_compare_refuses_an_option_that_configures_none_of_its_guides(tmp_path, monkeypatch):
    monkeypatch.setattr("amortized_pyro.cli.commands.compare", lambda *a, **k: pytest.fail("compared"))
    line = one_error_line(run("compare", "--guides", "amortized", "--qz-init", "random", *TINY,
                              "--out", tmp_path / "cmp"), code=2)
    assert "--qz-init" in line and "amortized" in line
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("args", [["fit", "--stop-gain", "1", *TINY, "--out", "{tmp}/run"],
                                  ["compare", "--guides", "shared", "--stop-gain", "1", *TINY, "--out", "{tmp}/run"],
                                  ["fit", "--resume", "{finished}", "--epochs", "4", "--stop-gain", "1"]])
def test_a_stop_gain_without_a_stop_window_is_refused_not_recorded(tmp_path, args):
    """--stop-gain tunes the stopping rule that --stop-window turns on: alone (the run's window 0 on a resume) it
    would do nothing and be recorded in config.json, so it is a usage error; with a window it is taken."""
    finished = tiny_finished_run(tmp_path / "finished") if "{finished}" in args else None
    before = (finished / "config.json").read_text() if finished else None
    args = [str(a).format(tmp=tmp_path, finished=finished) for a in args]
    line = one_error_line(run(*args), code=2)
    assert "--stop-gain" in line and "--stop-window" in line, line
    assert not (tmp_path / "run").exists()
    if finished:
        assert (finished / "config.json").read_text() == before
    assert run("fit", "--stop-gain", "1", "--stop-window", "1", *TINY, "--out", tmp_path / "run").exit_code == 0


def test_compare_notes_that_widths_do_not_apply_to_guides_without_an_encoder(tmp_path, monkeypatch):
    """--widths given with guides that have no encoder: one line says it does not apply to them (a note, not a
    refusal: the study scripts give one --widths to each guide in turn)."""
    monkeypatch.setattr("amortized_pyro.cli.commands.compare", lambda *a, **k: None)
    monkeypatch.setattr("amortized_pyro.cli.commands.write_comparison", lambda *a: None)
    for guides, widths, noted in (("per-datapoint", ["--widths", "64"], "per-datapoint"),
                                  ("amortized,shared", ["--widths", "8,64"], "shared"),
                                  ("per-datapoint", [], None), ("amortized", ["--widths", "64"], None)):
        result = run("compare", "--guides", guides, *widths, *TINY, "--out", tmp_path / "cmp")
        notes = [line for line in result.output.splitlines() if "--widths" in line]
        assert result.exit_code == 0, result.output
        assert notes == ([] if noted is None else ["note: --widths applies to the guides with an encoder only: not "
                                                   "to %s (one run per seed)" % noted]), result.output


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_presets_set_every_guides_options_and_are_never_refused(tmp_path, monkeypatch, preset):
    """A preset's keys are defaults, not options given: every guide takes every preset (fit and compare)."""
    monkeypatch.setattr("amortized_pyro.cli.commands.fit", lambda config, **k: Trained())
    monkeypatch.setattr("amortized_pyro.cli.commands.compare", lambda *a, **k: None)
    monkeypatch.setattr("amortized_pyro.cli.commands.write_comparison", lambda *a: None)
    for guide in GUIDES:
        result = run("fit", "--config", preset, "--guide", guide, *TINY, "--out", tmp_path / guide)
        assert result.exit_code == 0 and "trained" in result.output, (guide, result.output)
        result = run("compare", "--config", preset, "--guides", guide, *TINY, "--out", tmp_path / "c")
        assert result.exit_code == 0, (guide, result.output)


# 2. a summary.json that is not one

@pytest.mark.parametrize("text", ["garbage", "{}", "[1, 2]"])
def test_a_garbage_summary_is_not_read_as_a_finished_run(tmp_path, text):
    out = tiny_finished_run(tmp_path / "run")
    (out / "summary.json").write_text(text)
    line = one_error_line(run("gap", out, *GAP, "--out", tmp_path / "gap.json"))
    assert "summary.json" in line and not (tmp_path / "gap.json").exists()
    assert "fit --resume" in line  # and what it says to do works:
    (out / "summary.json").unlink()
    assert run("fit", "--resume", out, "--no-progress").exit_code == 0
    assert json.loads((out / "summary.json").read_text())["final"]["epoch"] == 2


# 3. compare into a fit's run directory

def test_compare_refuses_a_fits_run_directory_as_its_out(tmp_path):
    out = tiny_finished_run(tmp_path / "run")
    before = sorted(p.name for p in out.iterdir())
    line = one_error_line(run("compare", "--guides", "shared", "--seeds", "0", *TINY, "--out", out))
    assert "run directory" in line and str(out) in line
    assert sorted(p.name for p in out.iterdir()) == before


# 4. the Bernoulli likelihood on images that are not binary

def test_bernoulli_without_binarize_is_a_usage_error(tmp_path):
    line = one_error_line(run("fit", "--likelihood", "bernoulli", *TINY, "--out", tmp_path / "run"), code=2)
    assert "--binarize" in line and not (tmp_path / "run").exists()
    assert run("fit", "--likelihood", "bernoulli", "--binarize", *TINY, "--out", tmp_path / "run").exit_code == 0


# 5. and 6. what a folder is, said once

def test_a_folder_holding_only_a_config_gets_one_way_on_not_a_circle(tmp_path):
    out = tiny_finished_run(tmp_path / "run")
    started = tmp_path / "started"
    started.mkdir()
    (started / "config.json").write_text((out / "config.json").read_text())
    to_out = one_error_line(run("fit", *TINY, "--out", started))
    to_resume = one_error_line(run("fit", "--resume", started))
    for line in (to_out, to_resume):
        assert "never reached its first checkpoint" in line and "--overwrite" in line, line
    assert "--resume" not in to_out  # nothing to resume: not sent there
    assert sorted(p.name for p in started.iterdir()) == ["config.json"]


@pytest.mark.parametrize("args", [["gap", "{missing}"], ["fit", "--resume", "{missing}"], ["capacity", "{missing}"],
                                  ["held-out", "{missing}", "--out", "{tmp}/study"]])
def test_a_run_that_does_not_exist_is_called_so(tmp_path, args):
    missing = tmp_path / "no-such-run"
    line = one_error_line(run(*[a.format(missing=missing, tmp=tmp_path) for a in args]))
    assert "does not exist" in line and "empty" not in line, line


def test_an_empty_folder_is_called_a_folder_without_a_run(tmp_path):
    line = one_error_line(run("gap", tmp_path))
    assert "holds no run" in line and "(empty)" not in line


# 7. failures leave no folder behind, and remove nothing they did not make

def test_failing_held_out_and_compare_leave_no_empty_out_folder(tmp_path):
    assert run("held-out", tmp_path / "no-run", "--out", tmp_path / "study").exit_code == 1
    assert not (tmp_path / "study").exists()
    missing = ["--dataset", tmp_path / "missing.npy", *TINY[2:]]
    assert run("compare", "--guides", "shared", "--seeds", "0", *missing, "--out", tmp_path / "a" / "cmp").exit_code == 1
    assert not (tmp_path / "a").exists()  # nor the parent it made
    mine = tmp_path / "mine"
    mine.mkdir()
    assert run("compare", "--guides", "shared", "--seeds", "0", *missing, "--out", mine).exit_code == 1
    assert mine.is_dir()  # the user's own folder stays
    assert run("held-out", tmp_path / "no-run", "--out", mine).exit_code == 1 and mine.is_dir()


# 8. a read-only run folder, found before the work

def test_gap_on_a_read_only_run_folder_fails_before_measuring(tmp_path, monkeypatch):
    out = tiny_finished_run(tmp_path / "run")
    monkeypatch.setattr("amortized_pyro.cli.gap_commands.measure_run",
                        lambda *a, **k: pytest.fail("measured before finding the folder read-only"))
    if os.geteuid() == 0:  # root writes anywhere: answer as the file system answers an ordinary user
        real = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, **k: real(path, mode, **k) and not (
            mode & os.W_OK and not os.stat(path).st_mode & stat.S_IWUSR))
    out.chmod(0o555)
    try:
        line = one_error_line(run("gap", out, *GAP))
    finally:
        out.chmod(0o755)
    assert "read-only" in line and "--out" in line, line


# 9. an interrupt says what it keeps

def test_ctrl_c_before_anything_is_written_does_not_claim_to_keep_results(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("amortized_pyro.cli.commands.prepare_data", interrupted)
    line = one_error_line(run("fit", *TINY, "--out", tmp_path / "run"), code=130)
    assert "nothing was written" in line and "kept" not in line, line


def test_ctrl_c_after_a_checkpoint_says_what_is_kept(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("amortized_pyro.runs.fit.train", interrupted)  # after the first checkpoint
    line = one_error_line(run("fit", *TINY, "--out", tmp_path / "run"), code=130)
    assert "kept" in line and str(tmp_path / "run") in line, line
    assert (tmp_path / "run" / "checkpoint.pt").exists()


# 10. memory

@pytest.mark.parametrize("option, value", [("--width", "1000000000"), ("--z-dim", "99999999999"),
                                           ("--hidden", "99999999999")])
def test_sizes_out_of_memory_are_one_line_naming_the_option(tmp_path, option, value):
    line = one_error_line(run("fit", *TINY, option, value, "--out", tmp_path / "run"))  # the last one counts
    assert "memory" in line and "%s %s" % (option, value) in line and "bug" not in line, line
    assert not (tmp_path / "run").exists()


# 11. progress

def test_compare_says_which_run_of_how_many_and_each_gap_phase(tmp_path):
    args = ["compare", "--guides", "shared", "--seeds", "0,1", *TINY, "--predictive-draws", "0",
            "--gap-images", "1", "--gap-max-steps", "10", "--gap-ais-steps", "2", "--gap-theta-draws", "1",
            "--gap-samples", "2", "--gap-importance-samples", "2", "--out", tmp_path / "cmp"]
    result = run(*args)
    assert result.exit_code == 0, result.output
    for n in (1, 2):
        assert "run %d of 2" % n in result.output, result.output
    for n in (1, 2, 3, 4):  # two runs, two splits each
        assert "gaps %d of 4" % n in result.output, result.output
    for phase in ("q*", "q*_m", "IWAE", "AIS"):
        assert phase in result.output, result.output
    again = run(*args)  # a finished run reused is said so, with its place
    assert "run 1 of 2" in again.output and "finished" in again.output


def test_gap_says_each_phase_without_a_progress_bar(tmp_path):
    out = tiny_finished_run(tmp_path / "run")
    result = run("gap", out, *GAP, "--ais-steps", "2", "--out", tmp_path / "gap.json")
    assert result.exit_code == 0, result.output
    text = result.output.split("|")[0]  # before the table
    for phase in ("loading", "q*", "q*_m", "IWAE", "AIS", "measured in"):
        assert phase in text, result.output


def test_no_progress_bar_where_the_output_is_not_a_terminal(tmp_path):
    """A log or a pipe (CliRunner's output is one) gets no bars by default: a tqdm bar's carriage returns and
    rates flooded logs (issue 71); --progress asks for them anyway."""
    args = [a for a in TINY if a != "--no-progress"] + ["--predictive-draws", "0"]
    quiet = run("fit", *args, "--out", tmp_path / "run")
    assert quiet.exit_code == 0, quiet.output
    assert "%|" not in quiet.output and "\r" not in quiet.output, quiet.output  # tqdm's "100%|███| 2/2"
    loud = run("fit", *args, "--progress", "--out", tmp_path / "loud")
    assert loud.exit_code == 0 and "%|" in loud.output, loud.output


def test_a_reconstruction_worse_than_the_mean_image_is_said_to_be_expected_early(tmp_path):
    """The README's first command (50 epochs) printed a plug-in MSE worse than the mean image's without a word
    (issue 71); two epochs of a tiny run are worse still: the summary says it is expected so early."""
    result = run("fit", *TINY, "--predictive-draws", "0", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    mse = next(line for line in result.output.splitlines() if line.startswith("train MSE"))
    plugin, mean = float(mse.split("plug-in ")[1].split(",")[0]), float(mse.split("mean image ")[1])
    assert plugin > mean, mse  # the case this test is about
    assert "further from the images than their mean image is: expected early" in result.output
