"""A run folder whose files are not this run's, or not whole, is refused in one line (issue 71: torch's "Missing
key(s) in state_dict ... this is a bug of amortized_pyro", its 300-character "internal miniz error", a checkpoint
whose epoch read 10⁹ resumed with exit 0 and rewrote config.json, an .npz whose one array was named foo taken for
the images)."""
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from amortized_pyro import load_data, load_run, resume
from amortized_pyro.cli.commands import cli
from amortized_pyro.errors import AmortizedPyroError
from conftest import tiny_finished_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return tiny_finished_run(root / "amortized"), tiny_finished_run(root / "shared", guide="shared")


def copy_of(run, tmp_path):
    return shutil.copytree(run, tmp_path / "copy")


def test_another_guides_parameters_are_refused_in_one_line(runs, tmp_path):
    amortized, shared = runs
    run = copy_of(amortized, tmp_path)
    shutil.copy(shared / "params.pt", run / "params.pt")
    with pytest.raises(AmortizedPyroError, match="holds the parameters of another guide than this run's config.json "
                                                 "builds: .* missing .*another run's file"):
        load_run(run)
    refused = CliRunner().invoke(cli, ["gap", str(run), "--n-images", "2", "--no-progress"])
    assert refused.exit_code == 1 and "another guide" in refused.output and "bug" not in refused.output


def test_resuming_from_another_guides_checkpoint_is_refused_in_one_line(runs, tmp_path):
    amortized, shared = runs
    run = copy_of(amortized, tmp_path)
    shutil.copy(shared / "checkpoint.pt", run / "checkpoint.pt")
    config = (run / "config.json").read_bytes()
    with pytest.raises(AmortizedPyroError, match="^checkpoint.pt holds the parameters of another guide"):
        resume(run, epochs=4, progress=False, log=lambda *a: None)
    assert (run / "config.json").read_bytes() == config  # nothing rewritten


def test_a_cut_off_file_is_refused_in_one_line(runs, tmp_path):
    run = copy_of(runs[0], tmp_path)
    whole = (run / "params.pt").read_bytes()
    for cut in (100, len(whole) // 2):
        (run / "params.pt").write_bytes(whole[:cut])
        with pytest.raises(AmortizedPyroError, match=r"^cannot read params.pt in .*: not a whole .pt file "
                                                     r"\(truncated, or not written by torch.save\)$"):
            load_run(run)


def test_a_checkpoint_of_an_impossible_epoch_is_refused_and_nothing_is_rewritten(runs, tmp_path):
    run = copy_of(runs[0], tmp_path)
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=False)
    checkpoint["epoch"] = 10 ** 9
    torch.save(checkpoint, run / "checkpoint.pt")
    config = (run / "config.json").read_bytes()
    with pytest.raises(AmortizedPyroError, match="says epoch 1000000000 of a run of 2 epochs: not this run's"):
        resume(run, epochs=4, progress=False, log=lambda *a: None)
    assert (run / "config.json").read_bytes() == config


def test_an_npz_whose_arrays_are_not_named_as_images_is_refused(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, foo=np.random.default_rng(0).random((12, 4, 4)))
    with pytest.raises(AmortizedPyroError, match=r"expected arrays 'train' \(and 'test'\) or 'images', found \['foo'\]"):
        load_data(str(path), n_obs=8, n_test=2, log=lambda *a: None)
