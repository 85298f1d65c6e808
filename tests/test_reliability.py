"""Results you can trust: checkpoints and resume (a real process killed with SIGKILL ends as if never
stopped), SIGINT/SIGTERM, divergence, no silent overwrite or reuse, results that stand alone, and bad input."""
import json
import signal
import subprocess
import sys
import time

import numpy as np
import torch
import pytest
from click.testing import CliRunner

import pyro

from amortized_pyro import AmortizedPyroError, FitConfig, fit, load_run
from amortized_pyro.cli.commands import cli
from amortized_pyro.inference.evaluation import evaluate
from amortized_pyro.runs.store import RunWriter
from amortized_pyro.study import executors
from amortized_pyro.study.comparison import compare
from amortized_pyro.study.results import Results

from conftest import requires_cuda

RUN = ["--dataset", "mnist-sample", "--n-obs", "200", "--n-test", "20", "--batch-size", "20", "--hidden", "32",
       "--z-dim", "4", "--width", "16", "--eval-every", "5", "--predictive-draws", "2", "--device", "cpu",
       "--no-progress", "--checkpoint-every", "1"]
EPOCHS = 40


def start(out, *extra, run=RUN):
    return subprocess.Popen([sys.executable, "-m", "amortized_pyro", "fit", *run, "--epochs", str(EPOCHS),
                             "--out", str(out), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(*args):
    """``fit ARGS`` run to its end in this process, as the command line runs it (CliRunner): a run that is killed
    or signalled is a real process (start()); the whole runs it is compared with and the resumes need not be, and
    each process would cost the interpreter's start and the imports of torch and Pyro (about 3 s)."""
    done = CliRunner().invoke(cli, ["fit", *args])
    assert done.exit_code == 0, done.output
    return done


def epochs_written(out):
    path = out / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_for_epochs(process, out, count):
    """Until the run has written ``count`` epochs, however slow the machine (no deadline: a test must not fail
    because the machine is busy)."""
    while epochs_written(out) < count:
        assert process.poll() is None, "the run ended before it could be stopped: %s" % process.stderr.read()
        time.sleep(0.01)


def metrics(out):
    """Every record without its wall-clock time."""
    return [{k: v for k, v in json.loads(line).items() if k != "time"}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole") / "run"
    finish(*RUN, "--epochs", str(EPOCHS), "--out", str(out))
    return out


def test_a_killed_run_resumes_to_exactly_the_uninterrupted_end(uninterrupted, tmp_path):
    out = tmp_path / "run"
    process = start(out)
    wait_for_epochs(process, out, 12)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not (out / "summary.json").exists() and epochs_written(out) < EPOCHS
    finish("--resume", str(out))
    assert metrics(out) == metrics(uninterrupted)  # bit-identical on the same device
    resumes = json.loads((out / "config.json").read_text())["resumes"]
    assert len(resumes) == 1 and 0 < resumes[0]["from_epoch"] < EPOCHS


def test_a_killed_pack_of_replicas_resumes_to_exactly_the_uninterrupted_end(tmp_path):
    """Seeds packed as replicas checkpoint together; killed, the pack resumes as one to the very end of the
    uninterrupted pack, seed by seed."""
    whole, out = tmp_path / "whole", tmp_path / "pack"
    finish(*RUN, "--epochs", str(EPOCHS), "--replicas", "2", "--out", str(whole))
    process = start(out, "--replicas", "2")
    wait_for_epochs(process, out / "seed1", 12)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not (out / "seed0" / "summary.json").exists()
    finish("--resume", str(out))
    for seed in ("seed0", "seed1"):
        assert metrics(out / seed) == metrics(whole / seed)


def largest_relative_difference(a, b):
    """The largest |x − y| / max(|x|, |y|, 1e-12) over the numbers of two runs' records, which must name the
    same epochs and fields."""
    assert [sorted(r) for r in a] == [sorted(r) for r in b]
    return max((abs(x[k] - y[k]) / max(abs(x[k]), abs(y[k]), 1e-12) for x, y in zip(a, b) for k in x
                if isinstance(x[k], float)), default=0.0)


@requires_cuda
@pytest.mark.parametrize("guide, graph", [("per-datapoint", False), ("amortized", False), ("amortized", True)])
def test_a_killed_cuda_run_resumes_as_close_to_the_uninterrupted_end_as_a_second_run_is(tmp_path, guide, graph):
    """On CUDA the per-datapoint gather's backward (and cuBLAS's reductions) may accumulate with atomics, in an
    order that varies from run to run, so two uninterrupted runs need not agree bit for bit. The tolerance is
    that measured spread: the resumed run ends within 10 × the largest relative difference between two
    uninterrupted CUDA runs of the same seed, or within 1e-6 where those agree exactly. Both differences are
    printed (``pytest -s``) for BENCHMARKS.md. With ``--graph`` (issue 70, item 3) the resumed run captures its step
    again from the checkpoint's parameters and capturable Adam state."""
    run = [value if value != "cpu" else "cuda" for value in RUN] + ["--guide", guide] + (["--graph"] if graph else [])
    if guide == "per-datapoint":
        del run[run.index("--width"):run.index("--width") + 2]
    first, second, out = tmp_path / "first", tmp_path / "second", tmp_path / "resumed"
    for whole in (first, second):
        finish(*run, "--epochs", str(EPOCHS), "--out", str(whole))
    process = start(out, run=run)
    wait_for_epochs(process, out, 12)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL and epochs_written(out) < EPOCHS
    finish("--resume", str(out))
    spread = largest_relative_difference(metrics(first), metrics(second))
    resumed = largest_relative_difference(metrics(first), metrics(out))
    print("\nCUDA %s%s: uninterrupted vs uninterrupted %.3g, uninterrupted vs resumed %.3g (largest relative "
          "difference over %d epochs' records)" % (guide, " --graph" if graph else "", spread, resumed, EPOCHS))
    assert resumed <= max(10 * spread, 1e-6)


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_checkpoints_says_how_to_resume_and_exits_128_plus_signal(uninterrupted, tmp_path, signum, code):
    out = tmp_path / "run"
    process = start(out)
    wait_for_epochs(process, out, 8)
    process.send_signal(signum)
    assert process.wait() == code
    lines = [line for line in process.stderr.read().splitlines() if line.strip()]
    assert lines[-1].startswith("Error: interrupted by %s" % signal.Signals(signum).name)
    assert "--resume %s" % out in lines[-1] and "Traceback" not in "".join(lines)
    stopped = load_run(out)  # the interrupted run loads, as of its checkpoint
    assert 8 <= len(stopped.history) < EPOCHS and stopped.history[-1]["epoch"] == len(stopped.history)
    finish("--resume", str(out))
    assert metrics(out) == metrics(uninterrupted)


def test_resume_cannot_change_what_defines_the_run(tmp_path):
    out = tmp_path / "run"
    assert CliRunner().invoke(cli, ["fit", *RUN, "--epochs", "1", "--out", str(out)]).exit_code == 0
    (out / "summary.json").unlink()  # as if interrupted after its last checkpoint
    refused = CliRunner().invoke(cli, ["fit", "--resume", str(out), "--guide", "shared", "--lr", "1e-4"])
    assert refused.exit_code == 2 and "cannot change --guide" in refused.output  # a usage error
    same = CliRunner().invoke(cli, ["fit", "--resume", str(out), "--guide", "amortized", "--no-progress"])
    assert same.exit_code == 0, same.output  # restating the run's own value is not a change


def test_resuming_a_finished_run_says_so_and_changes_nothing(uninterrupted):
    before = {p.name: p.stat().st_mtime_ns for p in uninterrupted.iterdir()}
    done = finish("--resume", str(uninterrupted))
    assert "nothing to resume" in done.stderr
    assert {p.name: p.stat().st_mtime_ns for p in uninterrupted.iterdir()} == before


def test_divergence_keeps_the_last_good_checkpoint_and_resumes_with_a_lower_lr(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["fit", *RUN, "--epochs", "4", "--lr", "1e9", "--out", str(out)])
    assert result.exit_code == 1 and "diverged at epoch 1" in result.output
    assert "last good checkpoint (epoch 0)" in result.output and "--resume %s --lr" % out in result.output
    result = CliRunner().invoke(cli, ["fit", "--resume", str(out), "--lr", "1e-3", "--no-progress"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "config.json").read_text())
    assert info["config"]["lr"] == 1e-3 and info["resumes"][0]["changed"]["lr"] == 1e-3
    assert [r["epoch"] for r in metrics(out)] == [1, 2, 3, 4]


def test_a_run_directory_is_never_overwritten_silently(tmp_path):
    args = ["fit", *RUN, "--epochs", "1", "--out", str(tmp_path / "run")]
    assert CliRunner().invoke(cli, args).exit_code == 0
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 1 and "holds a run already" in refused.output and "--overwrite" in refused.output
    assert CliRunner().invoke(cli, args + ["--overwrite"]).exit_code == 0


def test_two_runs_cannot_claim_one_directory(tmp_path):
    info = {"config": {}, "data": {}, "device": "cpu"}
    RunWriter(tmp_path, info)
    with pytest.raises(AmortizedPyroError, match="holds a run already"):
        RunWriter(tmp_path, info)


def test_default_run_names_are_unique_and_name_the_data_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # within the same second
        result = CliRunner().invoke(cli, ["fit", *RUN, "--epochs", "1", "--dataset", "mnist", "--no-download",
                                          "--data-dir", str(tmp_path / "none")])
        assert result.exit_code == 0, result.output
    names = [p.name for p in (tmp_path / "runs").iterdir()]
    assert len(names) == 2 and all("-mnist-sample-" in name for name in names)


TINY = dict(n_obs=40, n_test=10, batch_size=20, hidden=8, z_dim=3, device="cpu", eval_every=2,
            predictive_draws=2, progress=False, log=lambda line: None)


def test_compare_refuses_a_run_made_with_other_settings_and_resumes_a_partial_one(tmp_path, monkeypatch):
    grid = dict(guides=("shared",), widths=(4,), seeds=(0,), datasets=("mnist-sample",), out=tmp_path, **TINY)
    first = compare(epochs=2, **grid)
    with pytest.raises(AmortizedPyroError, match="epochs=2, not 3.*--overwrite"):
        compare(epochs=3, **grid)
    assert compare(epochs=3, overwrite=True, **grid).rows[-1]["epoch"] == 3
    run_dir = tmp_path / "runs" / "mnist-sample" / "constant-VI-seed0"
    compare(epochs=2, overwrite=True, **grid)
    for name in ("summary.json", "params.pt"):  # as if stopped after its last checkpoint
        (run_dir / name).unlink()
    monkeypatch.setattr(executors, "fit", lambda *a, **k: pytest.fail("a checkpointed run was trained anew"))
    again = compare(epochs=2, **grid)
    assert [r["elbo"] for r in again.rows] == [r["elbo"] for r in first.rows] and (run_dir / "summary.json").exists()


def test_compare_does_not_fall_back_to_the_sample_unless_asked(tmp_path):
    args = ["compare", "--guides", "shared", "--seeds", "0", "--dataset", "mnist", "--no-download", "--data-dir",
            str(tmp_path / "none"), "--n-obs", "40", "--n-test", "10", "--epochs", "1", "--batch-size", "20",
            "--hidden", "8", "--z-dim", "3", "--no-progress", "--out", str(tmp_path / "cmp")]
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 1 and "--allow-sample" in refused.output
    allowed = CliRunner().invoke(cli, args + ["--allow-sample"])
    assert allowed.exit_code == 0 and "| mnist-sample | constant-VI |" in allowed.output


def test_two_fits_in_a_row_each_evaluate_on_their_own(tiny_data, tmp_path):
    """Each result owns its model and guide: no context manager, no global state, and a loaded run too."""
    config = FitConfig(dataset="mnist-sample", n_obs=120, n_test=30, epochs=3, batch_size=40, hidden=16, z_dim=4,
                       width=8, device="cpu", predictive_draws=0)
    first = fit(config, data=tiny_data, out=tmp_path / "first", progress=False)
    second = fit(config, data=tiny_data, seed=1, lr=1e-2, progress=False)
    loaded = load_run(tmp_path / "first")
    third = fit(config, data=tiny_data, seed=2, progress=False)  # after the load, another fit
    for result in (first, second, loaded, third):
        again = evaluate(result.model, result.guide, tiny_data)
        assert again["train_plugin_mse"] == pytest.approx(result.final["train_plugin_mse"], rel=1e-6)
        assert result.evaluate(tiny_data)["train_plugin_mse"] == again["train_plugin_mse"]
    assert first.final["train_plugin_mse"] != pytest.approx(second.final["train_plugin_mse"], rel=1e-6)
    assert not list(pyro.get_param_store().keys())


@pytest.mark.parametrize("case, expected", [("3-pixel images", "expected images"), ("out in /proc", "cannot create"),
                                            ("out under a file", "cannot create")])
def test_bad_input_gets_one_line_and_exit_1(tmp_path, case, expected):
    args = ["fit", *RUN, "--epochs", "1"]
    if case == "3-pixel images":
        np.save(tmp_path / "x.npy", np.random.default_rng(0).random((10, 3)))
        args += ["--dataset", str(tmp_path / "x.npy"), "--out", str(tmp_path / "run")]
    elif case == "out in /proc":
        args += ["--out", "/proc/x"]
    else:
        (tmp_path / "file").write_text("")
        args += ["--out", str(tmp_path / "file" / "sub")]
    result = CliRunner().invoke(cli, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and lines[-1].startswith("Error: ") and expected in lines[-1]
    assert "Traceback" not in result.output


def test_a_batch_larger_than_the_data_is_said(tmp_path):
    result = CliRunner().invoke(cli, ["fit", *RUN, "--n-obs", "5", "--batch-size", "1000", "--epochs", "1",
                                      "--out", str(tmp_path / "run")])
    assert result.exit_code == 0 and "batch size 1000 > 5 training images: training on the full batch" in result.output


def test_debug_shows_the_traceback(tmp_path):
    args = ["fit", *RUN, "--epochs", "1", "--dataset", str(tmp_path / "missing.npy")]
    assert CliRunner().invoke(cli, args).exception.__class__ is SystemExit
    assert isinstance(CliRunner().invoke(cli, ["--debug"] + args).exception, AmortizedPyroError)


def test_a_failed_run_is_reported_and_the_grid_goes_on(tmp_path, monkeypatch):
    real_fit = executors.fit

    def diverging_for_one(config, **kwargs):
        if config.guide == "amortized":
            raise AmortizedPyroError("training diverged at epoch 1 (the loss is nan)")
        return real_fit(config, **kwargs)

    monkeypatch.setattr(executors, "fit", diverging_for_one)
    args = ["compare", "--guides", "amortized,shared", "--widths", "4", "--seeds", "0", "--dataset", "mnist-sample",
            "--n-obs", "40", "--n-test", "10", "--epochs", "2", "--batch-size", "20", "--hidden", "8", "--z-dim", "3",
            "--no-progress", "--out", str(tmp_path / "cmp")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    summary = (tmp_path / "cmp" / "summary.md").read_text()
    assert "FAILED, not in the table: mnist-sample A-VI k=4 seed 0: training diverged" in summary
    assert "| mnist-sample | constant-VI |" in summary
    assert Results.load(tmp_path / "cmp" / "results.jsonl").failures[0]["label"] == "A-VI k=4"
    everything = CliRunner().invoke(cli, args[:2] + ["amortized"] + args[3:-1] + [str(tmp_path / "all")])
    assert everything.exit_code == 1 and "every run of the grid failed" in everything.output
    assert "FAILED" in (tmp_path / "all" / "summary.md").read_text()


def test_a_checkpoint_from_an_earlier_version_says_it_cannot_be_resumed(tmp_path):
    """Format 1 (Pyro's param-store state) is refused in one line, by resume and by load_run alike."""
    out = tmp_path / "run"
    assert CliRunner().invoke(cli, ["fit", *RUN, "--epochs", "1", "--out", str(out)]).exit_code == 0
    (out / "summary.json").unlink()
    old = {"epoch": 1, "param_state": {"params": {}, "constraints": {}}, "optimizer": {}, "history": []}
    for name in ("checkpoint.pt", "params.pt"):
        torch.save(old, out / name)
    result = CliRunner().invoke(cli, ["fit", "--resume", str(out)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert "earlier version of amortized_pyro" in line and "cannot be loaded or resumed" in line
    with pytest.raises(AmortizedPyroError, match="earlier version"):
        load_run(out)


def test_a_runs_images_are_reloaded_from_where_they_were_and_checked(tmp_path, monkeypatch):
    """A relative .npy path is recorded absolute (gap works from another directory); images changed after
    training are refused in one line naming both fingerprints, by gap and by --resume (end to end)."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    images = np.random.default_rng(0).random((60, 16)).astype(np.float32)
    np.save(work / "x.npy", images)
    monkeypatch.chdir(work)
    args = ["fit", "--dataset", "x.npy", "--n-obs", "40", "--n-test", "10", "--batch-size", "20", "--hidden", "8",
            "--z-dim", "2", "--width", "4", "--epochs", "2", "--no-progress", "--out", str(tmp_path / "run")]
    assert CliRunner().invoke(cli, args).exit_code == 0
    monkeypatch.chdir(elsewhere)
    gap = ["gap", str(tmp_path / "run"), "--n-images", "3", "--importance-samples", "10", "--theta-draws", "1",
           "--samples", "5", "--max-steps", "20", "--out", str(tmp_path / "g.json")]
    measured = CliRunner().invoke(cli, gap)
    assert measured.exit_code == 0, measured.output
    np.save(work / "x.npy", images[::-1].copy())  # other images at the same path
    (tmp_path / "g.json").unlink()
    refused = CliRunner().invoke(cli, gap)
    *said, line = [line for line in refused.output.splitlines() if line.strip()]
    assert said == ["loading the run %s and its images" % (tmp_path / "run")]  # the progress line, then the refusal
    assert refused.exit_code == 1 and "trained on other images" in line and "fingerprint" in line
    (tmp_path / "run" / "summary.json").unlink()  # as if interrupted: --resume checks the same way
    resumed = CliRunner().invoke(cli, ["fit", "--resume", str(tmp_path / "run")])
    assert resumed.exit_code == 1 and "trained on other images" in resumed.output


def test_a_finished_run_is_extended_by_more_epochs_exactly_as_a_longer_run(tmp_path):
    """fit --resume FINISHED --epochs E continues from the final checkpoint: the extended run's metrics are
    those of a run trained for E epochs at once (the evaluation cadence ends on the same epochs)."""
    short, whole = tmp_path / "short", tmp_path / "whole"
    assert CliRunner().invoke(cli, ["fit", *RUN, "--eval-every", "2", "--epochs", "4", "--out", str(short)]).exit_code == 0
    assert CliRunner().invoke(cli, ["fit", *RUN, "--eval-every", "2", "--epochs", "6", "--out", str(whole)]).exit_code == 0
    extended = CliRunner().invoke(cli, ["fit", "--resume", str(short), "--epochs", "6", "--no-progress"])
    assert extended.exit_code == 0, extended.output
    assert "extending the finished run" in extended.output and (short / "summary.json").exists()
    assert metrics(short) == metrics(whole)


def test_a_run_that_fails_before_its_first_checkpoint_leaves_nothing_in_the_way(tmp_path, monkeypatch):
    """A failure between claiming the run directory and the first checkpoint removes what it wrote: the same
    --out then starts the run (there was nothing to resume); a directory that held other files keeps them."""
    from amortized_pyro.errors import AmortizedPyroError
    from amortized_pyro.runs import fit as fit_module

    def fails(*args, **kwargs):
        raise AmortizedPyroError("the guide could not be built")
    out, kept = tmp_path / "run", tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    with monkeypatch.context() as patch:
        patch.setattr(fit_module, "build", fails)
        for where in (out, kept):
            failed = CliRunner().invoke(cli, ["fit", *RUN, "--epochs", "1", "--out", str(where)])
            assert failed.exit_code == 1 and "could not be built" in failed.output
    assert not out.exists() and sorted(p.name for p in kept.iterdir()) == ["notes.txt"]
    again = CliRunner().invoke(cli, ["fit", *RUN, "--epochs", "1", "--out", str(out)])
    assert again.exit_code == 0, again.output


def test_a_resumed_runs_progress_bar_goes_on_from_its_epoch(tmp_path):
    out = tmp_path / "run"
    assert CliRunner().invoke(cli, ["fit", *RUN, "--epochs", "2", "--out", str(out)]).exit_code == 0
    (out / "summary.json").unlink()  # as if interrupted after its last checkpoint
    resumed = CliRunner().invoke(cli, ["fit", "--resume", str(out), "--epochs", "4", "--progress"])
    assert resumed.exit_code == 0, resumed.output
    assert "2/4" in resumed.output and "0/2" not in resumed.output


def test_a_run_fit_on_images_given_to_fit_is_measured_on_them_again(tmp_path):
    """fit(data=load_data(..., n_obs=60, n_test=20), out=DIR) records the images' own sizes, not the config's
    defaults (10,000 / 1,000): reloading the run's images for its gap finds the same fingerprint."""
    from amortized_pyro import load_data
    from amortized_pyro.runs.fit import finished_run
    data = load_data("mnist-sample", n_obs=60, n_test=20)
    fit(guide="amortized", data=data, epochs=1, hidden=8, z_dim=2, width=4, batch_size=20, predictive_draws=0,
        progress=False, log=lambda *a: None, out=tmp_path / "run")
    _, reloaded = finished_run(tmp_path / "run", log=lambda *a: None)
    assert torch.equal(reloaded.train, data.train) and torch.equal(reloaded.test, data.test)
