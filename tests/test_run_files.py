"""A run folder's files as data (issue 60): a resume reads every file it needs before it changes one, so a
damaged file leaves a finished run as it was; and a ``.pt`` file is read as tensors only, never as code."""
import shutil

import pytest
from click.testing import CliRunner

from amortized_pyro.cli.commands import cli
from amortized_pyro.runs.store import RUN_FILES
from conftest import tiny_finished_run


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A tiny finished run (2 epochs), made once: each test damages a copy."""
    return tiny_finished_run(tmp_path_factory.mktemp("finished") / "run")


def one_error_line(result, code=1):
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert "Traceback" not in result.output and lines[-1].startswith("Error: "), result.output
    return lines[-1]


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
    args = ["fit", "--dataset", "mnist-sample", "--n-obs", "24", "--n-test", "8", "--epochs", "2", "--batch-size",
            "12", "--hidden", "8", "--z-dim", "2", "--width", "4", "--replicas", "2", "--no-progress", "--out", str(pack)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    (pack / "seed1" / "checkpoint.pt").write_bytes(b"\x80garbage")
    before = {seed: contents(pack / seed) for seed in ("seed0", "seed1")}
    line = one_error_line(CliRunner().invoke(cli, ["fit", "--resume", str(pack), "--epochs", "4", "--no-progress"]))
    assert "checkpoint.pt" in line
    assert {seed: contents(pack / seed) for seed in ("seed0", "seed1")} == before
