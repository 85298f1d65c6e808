"""A run folder's files as data (issue 60): a resume reads every file it needs before it changes one, so a
damaged file leaves a finished run as it was; and a ``.pt`` file is read as tensors only, never as code."""
import os
import pickle
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from amortized_pyro.runs.store import RUN_FILES
from conftest import tiny_finished_run
from test_newcomer_cli import one_error_line


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A tiny finished run (2 epochs), made once: each test damages a copy."""
    return tiny_finished_run(tmp_path_factory.mktemp("finished") / "run")


def contents(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
@pytest.mark.parametrize("name", RUN_FILES)
def test_extending_a_finished_run_with_a_damaged_file_refuses_and_changes_nothing(finished, tmp_path, name, damage):
    """``fit --resume RUN --epochs 4`` on a finished run with one file damaged: one line, exit 1, and every file
    byte for byte as it was (summary.json kept: the run stays finished)."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    data = (run / name).read_bytes()
    (run / name).write_bytes(data[:len(data) // 2] if damage == "truncated" else b"\x80garbage\x00{")
    before = contents(run)
    line = one_error_line(CliRunner().invoke(cli, ["fit", "--resume", str(run), "--epochs", "4", "--no-progress"]))
    assert name in line, line
    assert contents(run) == before


def test_extending_a_finished_pack_with_a_damaged_file_refuses_and_changes_nothing(tmp_path):
    """The same for seeds trained as replicas (``fit --resume PACK``): the second replica's checkpoint damaged,
    neither replica's files change."""
    pack = tmp_path / "pack"
    args = ["fit", "--dataset", "mnist-sample", "--n-obs", "24", "--n-test", "8", "--epochs", "2", "--batch-size", "12",
            "--hidden", "8", "--z-dim", "2", "--width", "4", "--replicas", "2", "--no-progress", "--out", str(pack)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    (pack / "seed1" / "checkpoint.pt").write_bytes(b"\x80garbage")
    before = {seed: contents(pack / seed) for seed in ("seed0", "seed1")}
    line = one_error_line(CliRunner().invoke(cli, ["fit", "--resume", str(pack), "--epochs", "4", "--no-progress"]))
    assert "checkpoint.pt" in line
    assert {seed: contents(pack / seed) for seed in ("seed0", "seed1")} == before


class RunsCode:
    """What a crafted .pt file holds: unpickled, it would run a shell command that writes ``marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, ("touch %s" % self.marker,)


@pytest.mark.parametrize("name, command, how", [
    ("params.pt", ["gap", "{run}", "--n-images", "2", "--max-steps", "5", "--ais-steps", "0", "--samples", "2",
                   "--no-progress"], "torch.save"),
    ("params.pt", ["gap", "{run}"], "pickle.dumps"),
    ("checkpoint.pt", ["fit", "--resume", "{run}", "--epochs", "4"], "torch.save"),
    ("checkpoint.pt", ["fit", "--resume", "{partial}"], "torch.save")])
def test_a_pt_file_that_would_run_code_is_refused_unrun(finished, tmp_path, name, command, how):
    """A run folder is data: a crafted params.pt or checkpoint.pt whose unpickling calls os.system is refused in
    one line (exit 1), the command never run (a plain pickle, which torch.load reads too, is not a .pt file)."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    marker = tmp_path / "marker"
    crafted = {"format": 3, "guide": RunsCode(marker)}
    if how == "torch.save":
        torch.save(crafted, run / name)
    else:
        (run / name).write_bytes(pickle.dumps(crafted))
    if "{partial}" in command:
        (run / "summary.json").unlink()
    before = contents(run)
    line = one_error_line(CliRunner().invoke(cli, [a.format(run=run, partial=run) for a in command]))
    assert not marker.exists()
    assert "%s in %s" % (name, run) in line, line
    if how == "torch.save":
        assert "(it would call %s.system)" % os.system.__module__ in line and "data, not code" in line, line
    assert contents(run) == before


def test_a_runs_pt_files_hold_tensors_and_numbers_only(finished):
    """What a run writes loads with torch.load's weights_only=True and nothing allowlisted (numpy's random
    state is stored as a tensor)."""
    for name in ("params.pt", "checkpoint.pt"):
        state = torch.load(finished / name, weights_only=True)
        assert state["format"] == 3 and "q_theta.loc" in state["guide"]


def test_a_checkpoint_holding_numpys_random_state_as_an_array_still_resumes_as_it_was(finished, tmp_path):
    """Checkpoints written before the numpy state was stored as a tensor hold it as a numpy array: they load (numpy's
    array types allowlisted) and resume exactly as the same run written today."""
    from amortized_pyro.runs.fit import resume
    new, old = tmp_path / "new", tmp_path / "old"
    shutil.copytree(finished, new)
    shutil.copytree(finished, old)
    checkpoint = torch.load(old / "checkpoint.pt", weights_only=True)
    name, key, *rest = checkpoint["rng"]["numpy"]
    checkpoint["rng"]["numpy"] = (name, key.numpy().astype(np.uint32), *rest)
    torch.save(checkpoint, old / "checkpoint.pt")
    quiet = dict(progress=False, log=lambda *a: None)
    a, b = resume(new, epochs=3, **quiet), resume(old, epochs=3, **quiet)
    assert [r["elbo"] for r in a.history] == [r["elbo"] for r in b.history]
