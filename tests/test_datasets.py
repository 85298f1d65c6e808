"""CIFAR-10 and SVHN: folders in their published formats, written here (these are not the data sets: small
files of random pixels in exactly those formats), read by the package, kept in colour and flattened
channel-first; the named data sets offline; grayscale; a colour run end to end."""
import json
import os
import pickle

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from scipy.io import savemat

from amortized_pyro import AmortizedPyroError, load_data
from amortized_pyro.cli.commands import cli
from amortized_pyro.runs.formats import CIFAR_FOLDER, CIFAR_TRAIN, LUMA

quiet = dict(log=lambda line: None)
TINY = ["--n-obs", "24", "--n-test", "8", "--epochs", "2", "--batch-size", "12", "--hidden", "8", "--z-dim", "2",
        "--no-progress", "--device", "cpu"]


def write_cifar(root, per_batch=6, seed=0):
    """CIFAR-10's python version: cifar-10-batches-py/data_batch_1..5 and test_batch, pickled dicts (as the
    published ones: bytes keys, data uint8 [n, 3072] with the red, green, blue planes of each image in turn).
    Returns (train, test) as uint8 [n, 3, 32, 32]."""
    rng = np.random.default_rng(seed)
    folder = root / CIFAR_FOLDER
    folder.mkdir(parents=True)
    batches = {}
    for name in CIFAR_TRAIN + ("test_batch",):
        images = rng.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8)
        batches[name] = images
        batch = {b"batch_label": name.encode(), b"labels": [int(y) for y in rng.integers(0, 10, per_batch)],
                 b"data": images.reshape(per_batch, 3072), b"filenames": [b"x.png"] * per_batch}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    return np.concatenate([batches[n] for n in CIFAR_TRAIN]), batches["test_batch"]


def write_svhn(folder, n_train=30, n_test=10, seed=0):
    """SVHN's cropped digits: train_32x32.mat and test_32x32.mat, X uint8 [32, 32, 3, n], y [n, 1].
    Returns (train, test) as uint8 [n, 3, 32, 32]."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, n in (("train_32x32.mat", n_train), ("test_32x32.mat", n_test)):
        images = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        savemat(folder / name, {"X": np.transpose(images, (2, 3, 1, 0)), "y": rng.integers(1, 11, (n, 1))})
        out.append(images)
    return tuple(out)


def rows(images):
    return torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255)


def as_set(x):
    return {tuple(r.tolist()) for r in x}


@pytest.mark.parametrize("where", ["batches", "parent"])
def test_a_cifar10_folder_is_read_in_colour_channel_first(tmp_path, where):
    train, test = write_cifar(tmp_path)
    dataset = tmp_path / CIFAR_FOLDER if where == "batches" else tmp_path
    data = load_data(str(dataset), n_obs=30, n_test=6, **quiet)
    assert data.shape == (3, 32, 32) and data.train.shape == (30, 3072) and data.test.shape == (6, 3072)
    # every row one whole image, its planes red, green, blue: the published rows, not one plane per row
    assert as_set(data.train) == as_set(rows(train)) and as_set(data.test) == as_set(rows(test))


def test_an_svhn_folder_is_read_in_colour_channel_first(tmp_path):
    train, test = write_svhn(tmp_path / "svhn")
    data = load_data(str(tmp_path / "svhn"), n_obs=30, n_test=10, **quiet)
    assert data.shape == (3, 32, 32) and data.train.shape == (30, 3072)
    assert as_set(data.train) == as_set(rows(train)) and as_set(data.test) == as_set(rows(test))


def test_the_named_data_sets_read_their_files_from_the_data_folder_without_torchvision(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "torchvision", None)  # not needed when the files are there
    write_cifar(tmp_path)
    write_svhn(tmp_path)
    for name in ("cifar10", "svhn"):
        data = load_data(name, data_dir=tmp_path, n_obs=20, n_test=5, download=False, **quiet)
        assert data.shape == (3, 32, 32) and data.train.shape == (20, 3072) and data.name == name


@pytest.mark.parametrize("name, hint", [("cifar10", CIFAR_FOLDER), ("svhn", "train_32x32.mat")])
def test_a_named_colour_data_set_offline_says_in_one_line_what_to_do(tmp_path, name, hint):
    result = CliRunner().invoke(cli, ["fit", "--dataset", name, "--data-dir", str(tmp_path), "--no-download",
                                      "--out", str(tmp_path / "run"), *TINY])
    assert result.exit_code == 1 and "Traceback" not in result.output
    line = result.output.strip().splitlines()[-1]
    assert len(result.output.strip().splitlines()) == 1 and hint in line and "downloading is off" in line
    assert not (tmp_path / "run").exists()


def test_grayscale_is_the_luminance_of_each_image(tmp_path):
    train, _ = write_svhn(tmp_path)
    gray = load_data(str(tmp_path), n_obs=30, n_test=10, grayscale=True, **quiet)
    colour = load_data(str(tmp_path), n_obs=30, n_test=10, **quiet)
    assert gray.shape == (1, 32, 32) and gray.train.shape == (30, 1024)
    planes = colour.train.reshape(30, 3, 1024)
    expected = LUMA[0] * planes[:, 0] + LUMA[1] * planes[:, 1] + LUMA[2] * planes[:, 2]
    assert torch.allclose(gray.train, expected, atol=1e-6) and gray.fingerprint() != colour.fingerprint()


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return os.system, ("touch %s" % (tmp_path / "ran"),)

    write_cifar(tmp_path)
    (tmp_path / CIFAR_FOLDER / "test_batch").write_bytes(pickle.dumps({b"data": Payload()}, protocol=2))
    with pytest.raises(AmortizedPyroError, match="refused to load"):
        load_data(str(tmp_path), n_obs=10, n_test=2, **quiet)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "data_batch_3").unlink(), "missing CIFAR-10 batch"),
    (lambda f: (f / "test_batch").write_bytes(b"not a pickle"), "not a CIFAR-10 python batch"),
    (lambda f: (f / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8)})), "[n, 3072]"),
])
def test_a_damaged_cifar10_folder_is_one_clear_error(tmp_path, damage, message):
    write_cifar(tmp_path)
    damage(tmp_path / CIFAR_FOLDER)
    with pytest.raises(AmortizedPyroError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_data(str(tmp_path), n_obs=10, n_test=2, **quiet)


def test_a_damaged_svhn_file_is_one_clear_error(tmp_path):
    write_svhn(tmp_path)
    (tmp_path / "test_32x32.mat").write_bytes(b"not a mat file")
    with pytest.raises(AmortizedPyroError, match="not an SVHN .mat file"):
        load_data(str(tmp_path), n_obs=10, n_test=2, **quiet)


def test_fit_and_compare_train_on_colour_images_and_draw_them_in_colour(tmp_path, monkeypatch):
    """fit on a CIFAR-10-format folder (3,072 pixels, binarized too), compare's reconstructions in colour."""
    write_cifar(tmp_path / "cifar")
    result = CliRunner().invoke(cli, ["fit", "--dataset", str(tmp_path / "cifar"), "--out", str(tmp_path / "run"),
                                      "--binarize", "--likelihood", "bernoulli", *TINY])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "run" / "config.json").read_text())
    assert info["data"]["x_dim"] == 3072 and info["data"]["image_shape"] == [3, 32, 32]
    drawn = []
    import matplotlib.axes
    original = matplotlib.axes.Axes.imshow
    monkeypatch.setattr(matplotlib.axes.Axes, "imshow",
                        lambda self, x, *a, **k: drawn.append(np.shape(x)) or original(self, x, *a, **k))
    result = CliRunner().invoke(cli, ["compare", "--dataset", str(tmp_path / "cifar"), "--guides", "amortized",
                                      "--widths", "4", "--seeds", "0", "--out", str(tmp_path / "cmp"), *TINY])
    assert result.exit_code == 0, result.output
    assert drawn and set(drawn) == {(32, 32, 3)}
