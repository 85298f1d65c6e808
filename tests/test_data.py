"""Data sources: IDX folders (plain and gzipped), .npy/.npz arrays, the shipped sample, subsets, bad files."""
import gzip
import sys

import numpy as np
import pytest
import torch

from amortized_pyro import AmortizedPyroError, load_data
from amortized_pyro.runs.data import SAMPLE_PATH
from amortized_pyro.runs.formats import read_idx

quiet = dict(log=lambda line: None)


def sample_images(n=300):
    return np.load(SAMPLE_PATH)["images"][:n]


def write_idx(path, array, compress=False):
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, ">u4").tobytes()
    raw = header + array.astype(np.uint8).tobytes()
    (gzip.open if compress else open)(path, "wb").write(raw)


def test_shipped_sample_is_real_mnist():
    data = load_data("mnist-sample", n_obs=2500, n_test=500, **quiet)
    assert data.train.shape == (2500, 784) and data.test.shape == (500, 784)
    assert data.train.dtype == torch.float32 and 0 <= data.train.min() and data.train.max() <= 1
    # MNIST digits: mostly black background, a few hundred bright pixels each
    assert 0.05 < data.train.mean() < 0.2 and (data.train > 0.5).sum(1).float().mean() > 50


def test_subsets_are_deterministic_and_disjoint():
    a = load_data("mnist-sample", n_obs=200, n_test=50, seed=3, **quiet)
    b = load_data("mnist-sample", n_obs=200, n_test=50, seed=3, **quiet)
    c = load_data("mnist-sample", n_obs=200, n_test=50, seed=4, **quiet)
    assert torch.equal(a.train, b.train) and torch.equal(a.test, b.test) and not torch.equal(a.train, c.train)
    rows = {tuple(r.tolist()) for r in a.train} & {tuple(r.tolist()) for r in a.test}
    assert not rows


def test_too_few_images_are_capped_and_said():
    lines = []
    data = load_data("mnist-sample", n_obs=10000, n_test=1000, log=lines.append)
    assert len(lines) == 1 and "using n_obs=" in lines[0]
    assert data.train.shape[0] + data.test.shape[0] <= 3000


def test_mnist_unavailable_offline_falls_back_to_sample(tmp_path):
    lines = []
    data = load_data("mnist", data_dir=tmp_path, n_obs=100, n_test=10, download=False, log=lines.append)
    assert len(lines) == 1 and "shipped MNIST sample" in lines[0]
    assert "downloading is off" in lines[0] and "downloaded" not in lines[0]
    assert "sample" in data.source and data.train.shape == (100, 784)


def test_a_broken_torchvision_is_named_not_the_network(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision now raises ImportError
    lines = []
    data = load_data("mnist", data_dir=tmp_path, n_obs=100, n_test=10, download=True, log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("torchvision cannot be imported (ModuleNotFoundError")
    assert "download" not in lines[0] and "sample" in data.source
    with pytest.raises(AmortizedPyroError, match="torchvision cannot be imported"):
        load_data("fashion-mnist", data_dir=tmp_path, n_obs=100, n_test=10)


@pytest.mark.parametrize("installed, expected", [
    ({"torch": "2.5.1", "torchvision": "0.21.0"}, "installed: torch 2.5.1 and torchvision 0.21.0, which asks for "
                                                   "torch ==2.6.0"),
    ({"torch": "2.5.1"}, "installed: torch 2.5.1 and no torchvision"),
])
def test_a_broken_torchvision_says_both_versions_and_the_pairing_it_expects(tmp_path, monkeypatch, installed, expected):
    """Not "install torch and torchvision together" where they were: the versions installed (importlib.metadata)
    and the torch that torchvision's metadata asks for (its Requires-Dist), in the one line."""
    import importlib.metadata

    def version(name):
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision now raises ImportError
    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: ["numpy", "torchaudio (>=2)", "torch (==2.6.0)",
                                                                      "scipy ; extra == 'scipy'"])
    with pytest.raises(AmortizedPyroError) as error:
        load_data("fashion-mnist", data_dir=tmp_path, n_obs=100, n_test=10)
    line = str(error.value)
    assert line.startswith("torchvision cannot be imported (ModuleNotFoundError") and "\n" not in line
    assert expected in line and "together" not in line, line


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "cifar10", "svhn"])
def test_offline_without_files_says_so_whatever_torchvision_s_health(tmp_path, monkeypatch, name):
    """With downloading off and no files in the data folder the answer is about the data, torchvision importable
    or not (a torchvision built for another torch must not turn it into an installation message)."""
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision now raises ImportError
    lines = []
    try:
        load_data(name, data_dir=tmp_path, n_obs=20, n_test=5, download=False, log=lines.append)
    except AmortizedPyroError as error:
        lines.append(str(error))
    assert len(lines) == 1 and "downloading is off" in lines[0] and "torchvision" not in lines[0]


@pytest.mark.parametrize("compress", [False, True])
def test_idx_folder_with_train_and_test_files(tmp_path, compress):
    images = sample_images()
    suffix = ".gz" if compress else ""
    write_idx(tmp_path / ("train-images-idx3-ubyte" + suffix), images[:200], compress)
    write_idx(tmp_path / ("t10k-images-idx3-ubyte" + suffix), images[200:], compress)
    assert np.array_equal(read_idx(tmp_path / ("train-images-idx3-ubyte" + suffix)), images[:200])
    data = load_data(str(tmp_path), n_obs=150, n_test=80, **quiet)
    assert data.train.shape == (150, 784) and data.test.shape == (80, 784)


def test_an_idx_folder_with_the_test_file_alone_is_one_pool_cut_in_two(tmp_path):
    """As ../shared/data/mnist holds MNIST: t10k-images only, its images cut into disjoint subsets."""
    images = sample_images(300)
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images, compress=True)
    data = load_data(str(tmp_path), n_obs=200, n_test=50, **quiet)
    assert data.train.shape == (200, 784) and data.test.shape == (50, 784) and data.shape == (1, 28, 28)
    pool = {tuple(r) for r in (images.reshape(300, -1) / 255.0).astype(np.float32).tolist()}
    rows = [tuple(r) for r in torch.cat([data.train, data.test]).tolist()]
    assert set(rows) <= pool and len(set(rows)) == 250


def test_real_mnist_idx_from_shared_if_present():
    """The published file, where this checkout has ../shared beside it (skipped for a plain clone)."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"
    if not folder.is_dir():
        pytest.skip("no ../shared/data/mnist")
    images = read_idx(folder / "t10k-images-idx3-ubyte.gz")
    assert images.shape == (10000, 28, 28) and np.array_equal(images[:3000], np.load(SAMPLE_PATH)["images"])


@pytest.mark.parametrize("damage", ["truncate", "magic", "empty"])
def test_corrupt_idx_gives_clear_error(tmp_path, damage):
    path = tmp_path / "t10k-images-idx3-ubyte"
    write_idx(path, sample_images(10))
    raw = path.read_bytes()
    path.write_bytes({"truncate": raw[:-7], "magic": b"\x12\x34" + raw[2:], "empty": b""}[damage])
    with pytest.raises(AmortizedPyroError, match="IDX|corrupt"):
        load_data(str(tmp_path), n_obs=5, n_test=2, **quiet)


def test_npy_and_npz_sources(tmp_path):
    images = sample_images(100)
    np.save(tmp_path / "x.npy", images)
    np.savez(tmp_path / "split.npz", train=images[:60] / 255.0, test=images[60:])
    assert load_data(str(tmp_path / "x.npy"), n_obs=70, n_test=30, **quiet).train.shape == (70, 784)
    data = load_data(str(tmp_path / "split.npz"), n_obs=60, n_test=40, **quiet)
    assert data.test.shape == (40, 784)
    assert torch.allclose(data.train.sort(0).values, torch.tensor(images[:60] / 255.0, dtype=torch.float32)
                          .reshape(60, -1).sort(0).values)


@pytest.mark.parametrize("content, message", [
    ("nan", "NaN"), ("range", r"\[0, 1\]"), ("garbage", "not a readable .npy/.npz array file \\(corrupt"),
    ("keys", "expected arrays"), ("sizes", "train and test images differ in shape \\(1×28×28 and 1×4×4\\)"),
])
def test_bad_array_files_give_clear_errors(tmp_path, content, message):
    images = sample_images(20) / 255.0
    path = tmp_path / ("bad.npz" if content in ("keys", "sizes") else "bad.npy")
    if content == "nan":
        images[3, 5, 5] = np.nan
        np.save(path, images)
    elif content == "range":
        np.save(path, images * 3)
    elif content == "garbage":
        path.write_bytes(b"not an array at all")
    elif content == "sizes":
        np.savez(path, train=images.reshape(20, -1), test=images[:, :4, :4].reshape(20, -1))
    else:
        np.savez(path, a=images, b=images)
    with pytest.raises(AmortizedPyroError, match=message):
        load_data(str(path), n_obs=10, n_test=5, **quiet)


@pytest.mark.parametrize("compressed", [False, True], ids=["savez", "savez_compressed"])
@pytest.mark.parametrize("damage", ["truncated", "member damaged"])
def test_a_damaged_npz_is_bad_input_in_one_line(tmp_path, damage, compressed):
    """A truncated archive (no zip directory) or a damaged member (a CRC or zlib error on reading it) is the
    input's fault: one line naming the file, exit status 1, not a traceback asking for a bug report."""
    from click.testing import CliRunner
    from amortized_pyro.cli.commands import cli
    path = tmp_path / "bad.npz"
    images = sample_images(40) / 255.0
    (np.savez_compressed if compressed else np.savez)(path, train=images[:30], test=images[30:])
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:len(data) // 2]
    else:
        data[200:260] = bytes(b ^ 0xFF for b in data[200:260])
    path.write_bytes(bytes(data))
    result = CliRunner().invoke(cli, ["fit", "--dataset", str(path), "--n-obs", "20", "--n-test", "5", "--no-progress",
                                      "--out", str(tmp_path / "run")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert lines == ["Error: %s is not a readable .npy/.npz array file (corrupt, truncated, or an array of Python "
                     "objects)" % path]


def test_missing_source_gives_clear_error(tmp_path):
    with pytest.raises(AmortizedPyroError, match="no such file or folder"):
        load_data(str(tmp_path / "nothing-here"), **quiet)
    with pytest.raises(AmortizedPyroError, match="no such file or folder"):
        load_data("missing.npy", **quiet)
    with pytest.raises(AmortizedPyroError, match="unknown dataset"):
        load_data("cifar", **quiet)
    with pytest.raises(AmortizedPyroError, match="no IDX image files"):
        load_data(str(tmp_path), **quiet)


def test_a_dataset_path_never_names_a_hidden_folder():
    from amortized_pyro.runs.layout import grid_run_dir, slug
    assert slug("../shared/data/mnist") == "shared_data_mnist" and slug("mnist-sample") == "mnist-sample"
    assert not any(part.startswith(".") for part in grid_run_dir("out", "../data/x.npz", "A-VI k=64", 0).parts[1:])
