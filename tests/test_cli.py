"""The command line end to end, and its answers to bad input: one line, non-zero exit, no traceback."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from amortized_pyro.cli.commands import cli

FAST = ["--dataset", "mnist-sample", "--n-obs", "60", "--n-test", "20", "--epochs", "2", "--batch-size", "30",
        "--hidden", "16", "--z-dim", "4", "--no-progress", "--device", "cpu"]


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_help_explains_every_option():
    result = run("fit", "--help")
    assert result.exit_code == 0
    for option in ("--guide", "--width", "--dataset", "--n-obs", "--epochs", "--batch-size", "--lr", "--weight-decay",
                   "--particles", "--device", "--seed", "--eval-every", "--out", "--data-dir"):
        assert option in result.output


def test_every_command_sets_torchs_threads(monkeypatch):
    """--threads (default 1, or AMORTIZED_PYRO_THREADS) sets torch's threads before the command runs."""
    assert all("threads" in [p.name for p in command.params] for command in cli.commands.values())
    before = torch.get_num_threads()
    try:
        assert run("plot", "--threads", "3", "no-such-results.json").exit_code == 1 and torch.get_num_threads() == 3
        monkeypatch.setenv("AMORTIZED_PYRO_THREADS", "2")
        assert run("plot", "no-such-results.json").exit_code == 1 and torch.get_num_threads() == 2
        monkeypatch.delenv("AMORTIZED_PYRO_THREADS")
        assert run("plot", "no-such-results.json").exit_code == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("guide", ["amortized", "per-datapoint", "shared"])
def test_fit_writes_all_outputs(tmp_path, guide):
    width = ["--width", "8"] if guide == "amortized" else []  # the others have no encoder: refused there
    result = run("fit", "--guide", guide, *width, "--out", str(tmp_path), *FAST)
    assert result.exit_code == 0, result.output
    assert "final ELBO" in result.output and "train MSE       plug-in" in result.output
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["config"]["guide"] == guide and "sample" in config["data"]["source"]
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert set(metrics[-1]) == {"epoch", "elbo", "elbo_per_obs", "time", "train_plugin_mse", "test_plugin_mse",
                                "train_predictive_mse", "test_predictive_mse", "theta_scale_mean"}
    assert (metrics[-1]["test_plugin_mse"] is None) == (guide == "per-datapoint")
    state = torch.load(tmp_path / "params.pt", weights_only=True)
    assert state["format"] == 3 and "q_theta.loc" in state["guide"]


def test_module_entry_point_runs_fit_as_written(tmp_path):
    """`python -m amortized_pyro fit --guide amortized --width 128`, shortened to 2 epochs on the sample."""
    out = subprocess.run([sys.executable, "-m", "amortized_pyro", "fit", "--guide", "amortized", "--width", "128",
                          "--out", str(tmp_path), *FAST], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "summary.json").exists()


def one_error_line(result, code=1):
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert "Traceback" not in result.output
    assert lines[-1].startswith("Error: ")
    return lines[-1]


@pytest.mark.parametrize("args", [["--guide", "nope"], ["--width", "0"], ["--width", "-5"], ["--epochs", "0"],
                                  ["--lr", "0"], ["--lr", "nan"], ["--obs-scale", "inf"], ["--likelihood", "poisson"],
                                  ["--beta2", "1"], ["--config", "missing.toml"], ["--threads", "0"]])
def test_usage_errors_exit_2(args):
    one_error_line(run("fit", *args), code=2)


def write_npy(path, nan=False):
    images = np.random.default_rng(0).random((50, 28, 28))
    if nan:
        images[0, 0, 0] = np.nan
    np.save(path, images)
    return str(path)


@pytest.mark.parametrize("case, expected", [
    ("missing file", "no such file"),
    ("corrupt idx", "corrupt"),
    ("nan data", "NaN"),
    ("cuda absent", "CUDA is not available"),
    ("diverges", "diverged"),
    ("fashion offline", "downloading is off"),
])
def test_runtime_errors_exit_1_with_one_line(tmp_path, case, expected):
    args = list(FAST)
    if case == "missing file":
        args += ["--dataset", str(tmp_path / "missing.npy")]
    elif case == "corrupt idx":
        (tmp_path / "t10k-images-idx3-ubyte").write_bytes(bytes([0, 0, 8, 3, 0, 0, 0, 9, 0, 0, 0, 28, 0, 0, 0, 28]))
        args += ["--dataset", str(tmp_path)]
    elif case == "nan data":
        args += ["--dataset", write_npy(tmp_path / "x.npy", nan=True)]
    elif case == "cuda absent":
        if torch.cuda.is_available():
            pytest.skip("CUDA is present")
        args += ["--device", "cuda"]
    elif case == "diverges":
        args += ["--lr", "1e9", "--batch-size", "60", "--epochs", "4", "--out", str(tmp_path / "run")]
    else:
        args += ["--dataset", "fashion-mnist", "--no-download", "--data-dir", str(tmp_path)]
    line = one_error_line(run("fit", *args))
    assert expected in line
    if case == "diverges":  # finished epochs are kept
        assert (tmp_path / "run" / "metrics.jsonl").read_text().strip()


def test_without_ray_the_executor_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    result = run("compare", "--executor", "ray", "--guides", "shared", "--seeds", "0", "--dataset", "mnist-sample",
                 "--n-obs", "40", "--n-test", "10", "--epochs", "1", "--no-progress", "--out", str(tmp_path / "cmp"))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and lines == ['Error: the Ray executor needs Ray: pip install -e ".[ray]" '
                                               '(or pip install "ray>=2.9")']


@pytest.mark.parametrize("args, option", [
    (["fit", "--checkpoint-every", "abc"], "--checkpoint-every"), (["fit", "--device", "foo"], "--device"),
    (["fit", "--seed", "-1"], "--seed"), (["gap", ".", "--refine-steps", "abc"], "--refine-steps"),
    (["gap", ".", "--refine-steps", "0,-5"], "--refine-steps"),
    (["fit", *FAST, "--estimator", "meanfield", "--objective", "reference"], "--objective"),
    (["fit", *FAST, "--replicas", "2", "--guide", "semi-amortized"], "--guide"),
    (["fit", *FAST, "--init-scale", "1e308"], "--init-scale"),
    (["fit", *FAST, "--epochs", "99999999999999999999999"], "--epochs"),
    (["fit", "--resume", "somewhere"], "--out"),  # a usage error raised inside the command
    (["gap", ".", "--seed", "-1"], "--seed"), (["capacity", ".", "--widths", "8,8"], "--widths"),
    (["compare", "--seeds", "0,0"], "--seeds"), (["gap", ".", "--device", "foo"], "--device"),
    (["capacity", ".", "--device", "cuda:x"], "--device")])
def test_usage_errors_exit_2_before_anything_is_written(tmp_path, args, option):
    result = run(*args, "--out", str(tmp_path / "run"))
    assert result.exit_code == 2 and option in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, expected", [("epochs = 1.7", "epochs expects a whole number"), ("n_obs = true", "n_obs expects"),
                                            ("lr = \"0.5\"", "lr expects a number"), ("compare = 5", "must be a table")])
def test_preset_values_follow_the_fields_rules_in_the_cli_and_the_api(tmp_path, text, expected):
    from amortized_pyro import AmortizedPyroError, FitConfig

    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    for command in ("fit", "compare"):
        result = run(command, "--config", str(path))
        assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output
    with pytest.raises(AmortizedPyroError, match=expected):
        FitConfig.from_toml(path)


def test_a_run_written_before_q_thetas_renaming_loads_and_resumes_as_it_was(tmp_path):
    """Format 2 named q(θ)'s tensors by PyroParam's private names (q_theta.loc_unconstrained, .scale_unconstrained,
    the log-scales); such a run reads as format 3 (q_theta.loc, q_theta.log_scale) and resumes exactly as the
    same run written today."""
    from amortized_pyro.runs.fit import load_run, resume
    from amortized_pyro.runs.checkpoints import RENAMED_IN_3
    from conftest import tiny_finished_run
    new = tiny_finished_run(tmp_path / "new")
    old = tmp_path / "old"
    shutil.copytree(new, old)
    before = {new_name: old_name for old_name, new_name in RENAMED_IN_3.items()}
    for name in ("params.pt", "checkpoint.pt"):
        state = torch.load(old / name, weights_only=True)
        torch.save(dict(state, format=2, guide={before.get(k, k): v for k, v in state["guide"].items()}), old / name)
    assert "q_theta.scale_unconstrained" in torch.load(old / "checkpoint.pt", weights_only=True)["guide"]
    quiet = dict(progress=False, log=lambda *a: None)
    for a, b in ((load_run(new), load_run(old)), (resume(new, epochs=3, **quiet), resume(old, epochs=3, **quiet))):
        assert a.guide.state_dict().keys() == b.guide.state_dict().keys()
        for key, value in a.guide.state_dict().items():
            assert torch.equal(value, b.guide.state_dict()[key]), key


def test_a_run_whose_config_names_the_estimator_elbo_reads_and_resumes_as_today(tmp_path):
    """Earlier versions called the estimator setting ``elbo`` (a name the objective and the metric also use);
    such a config.json reads as ``estimator`` and the run resumes as the same run written today."""
    from amortized_pyro.runs.fit import resume
    from amortized_pyro.runs.store import RENAMED_SETTINGS, read_info
    from conftest import tiny_finished_run
    new = tiny_finished_run(tmp_path / "new")
    old = tmp_path / "old"
    shutil.copytree(new, old)
    before = {new_name: old_name for old_name, new_name in RENAMED_SETTINGS.items()}
    info = json.loads((old / "config.json").read_text())
    info["config"] = {before.get(k, k): v for k, v in info["config"].items()}
    (old / "config.json").write_text(json.dumps(info))
    assert "elbo" in json.loads((old / "config.json").read_text())["config"]
    assert read_info(old) == read_info(new)
    quiet = dict(progress=False, log=lambda *a: None)
    a, b = resume(new, epochs=3, **quiet), resume(old, epochs=3, **quiet)
    assert [r["elbo"] for r in a.history] == [r["elbo"] for r in b.history]


def test_a_bug_of_ours_shows_its_traceback_and_asks_for_a_report(monkeypatch):
    """Only the package's errors and the host's limits become one line: an internal ValueError is a bug."""
    def broken(*args, **kwargs):
        raise ValueError("an internal inconsistency")
    monkeypatch.setattr("amortized_pyro.cli.commands.fit", broken)
    result = run("fit", *FAST)
    assert result.exit_code == 1
    assert "Traceback" in result.output and "ValueError: an internal inconsistency" in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: this is a bug of amortized_pyro")


@pytest.mark.parametrize("damage, expected", [
    ("params", "cannot read params.pt"),
    ("metrics", "metrics.jsonl: line 2 is not JSON"),
])
def test_a_damaged_run_directory_is_one_line(tmp_path, damage, expected):
    from conftest import tiny_finished_run
    out = tiny_finished_run(tmp_path / "run")
    if damage == "params":
        (out / "params.pt").write_bytes(b"not a pickle at all")
    else:
        lines = (out / "metrics.jsonl").read_text().splitlines()
        (out / "metrics.jsonl").write_text("\n".join(lines[:1] + ["{broken"] + lines[1:]) + "\n")
    line = one_error_line(run("gap", str(out), "--n-images", "2", "--max-steps", "20", "--ais-steps", "0",
                              "--samples", "2", "--importance-samples", "2", "--no-progress"))
    assert expected in line


@pytest.mark.parametrize("command", ["fit", "compare", "gap", "capacity"])
def test_an_empty_out_is_a_usage_error(tmp_path, command):
    args = [command] + (["."] if command in ("gap", "capacity") else [])
    result = run(*args, "--out", "")
    assert result.exit_code == 2 and "--out" in result.output and "empty path" in result.output


def test_a_run_without_test_images_writes_json_and_a_gap_says_what_it_measured(tmp_path):
    out = tmp_path / "run"
    result = run("fit", "--dataset", "mnist-sample", "--n-obs", "60", "--n-test", "0", "--epochs", "1",
                 "--batch-size", "30", "--hidden", "8", "--z-dim", "3", "--width", "4", "--no-progress", "--out", str(out))
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text(), parse_constant=lambda c: pytest.fail("not JSON: " + c))
    assert summary["mean_image_mse"]["test_mse"] is None
    measured = run("gap", str(out), "--split", "train", "--n-images", "1000", "--max-steps", "10", "--ais-steps", "0",
                   "--samples", "2", "--importance-samples", "2", "--no-progress", "--out", str(tmp_path / "gap.json"))
    assert measured.exit_code == 0, measured.output
    assert "the run has 60 train images: measuring all of them, not 1000" in measured.output
    assert json.loads((tmp_path / "gap.json").read_text())["n_images"] == 60


def test_ctrl_c_while_starting_is_one_line_and_status_130():
    """A KeyboardInterrupt raised while ``python -m amortized_pyro`` imports its command line (torch, Pyro)."""
    script = ("import builtins, runpy\n"
              "real = builtins.__import__\n"
              "def interrupted(name, *args, **kwargs):\n"
              "    if name == 'amortized_pyro.cli.commands':\n"
              "        raise KeyboardInterrupt\n"
              "    return real(name, *args, **kwargs)\n"
              "builtins.__import__ = interrupted\n"
              "runpy.run_module('amortized_pyro', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 130 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == ["Error: interrupted while starting; nothing was written"]
    assert "torch" not in subprocess.run([sys.executable, "-c", "import sys, amortized_pyro; print(list(sys.modules))"],
                                         capture_output=True, text=True).stdout.split("'")


def test_a_corrupt_results_file_is_reported_at_its_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"a": 1}\n\n{"b": 2}\n{broken\n')
    result = CliRunner().invoke(cli, ["plot", str(path)])
    assert result.exit_code == 1 and "line 4 is not JSON" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
