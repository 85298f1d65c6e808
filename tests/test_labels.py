"""Class labels (issue 50, item 1): every format that publishes them gives them, each image keeping its own through
the subsets (each image written here carries its label in its first pixel, so a mismatch shows), grayscale,
binarizing and the device; run files record them; a source without labels says so in one line when they are
asked for."""
import gzip
import json
import pickle
import struct

import numpy as np
import pytest
from scipy.io import savemat

from amortized_pyro import AmortizedPyroError, fit, load_data
from amortized_pyro.runs.data import SAMPLE_PATH
from amortized_pyro.runs.formats import CIFAR_FOLDER, CIFAR_TRAIN

quiet = dict(log=lambda line: None)


def labelled(n, shape, seed):
    """uint8 images [n, *shape] whose first pixel is 20 × their label, and the labels (0..9)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = rng.integers(0, 256, (n,) + shape, dtype=np.uint8)
    images.reshape(n, -1)[:, 0] = 20 * labels
    return images, labels


def write_idx(path, array):
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(">%dI" % array.ndim, *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def assert_aligned(data):
    for x, y in ((data.train, data.train_labels), (data.test, data.test_labels)):
        assert y is not None and len(y) == len(x)
        assert np.array_equal(np.round(x[:, 0].numpy() * 255 / 20).astype(int), y.numpy())


def test_idx_folders_give_their_label_files(tmp_path):
    for prefix, n, seed in (("train", 40, 0), ("t10k", 20, 1)):
        images, labels = labelled(n, (28, 28), seed)
        write_idx(tmp_path / ("%s-images-idx3-ubyte.gz" % prefix), images)
        write_idx(tmp_path / ("%s-labels-idx1-ubyte.gz" % prefix), labels)
    data = load_data(str(tmp_path), n_obs=30, n_test=10, seed=3, **quiet)
    assert_aligned(data)
    assert data.n_classes == 1 + max(data.train_labels.max().item(), data.test_labels.max().item())
    assert_aligned(data.to("cpu"))
    assert data.binarize(0).train_labels is data.train_labels


def test_one_idx_split_is_cut_in_two_with_its_labels(tmp_path):
    images, labels = labelled(50, (28, 28), 0)
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels)
    assert_aligned(load_data(str(tmp_path), n_obs=30, n_test=10, seed=5, **quiet))


def test_cifar10_batches_and_svhn_files_give_their_labels(tmp_path):
    folder = tmp_path / "c" / CIFAR_FOLDER
    folder.mkdir(parents=True)
    for k, name in enumerate(CIFAR_TRAIN + ("test_batch",)):
        images, labels = labelled(6, (3, 32, 32), k)
        batch = {b"labels": [int(y) for y in labels], b"data": images.reshape(6, 3072)}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    assert_aligned(load_data(str(tmp_path / "c"), n_obs=20, n_test=5, seed=1, **quiet))
    svhn = tmp_path / "s"
    svhn.mkdir()
    for k, name in enumerate(("train_32x32.mat", "test_32x32.mat")):
        images, labels = labelled(12, (3, 32, 32), 10 + k)
        y = np.where(labels == 0, 10, labels)  # SVHN publishes the digit 0 as 10
        savemat(svhn / name, {"X": np.transpose(images, (2, 3, 1, 0)), "y": y.reshape(-1, 1)})
    data = load_data(str(svhn), n_obs=10, n_test=5, seed=2, **quiet)
    assert_aligned(data)
    assert data.grayscale().train_labels is data.train_labels  # luminance mixes the planes: the labels stay


def test_npz_files_and_the_shipped_sample_give_their_labels(tmp_path):
    train, labels = labelled(30, (28, 28), 0)
    test, test_labels = labelled(10, (28, 28), 1)
    np.savez(tmp_path / "split.npz", train=train, test=test, train_labels=labels, test_labels=test_labels)
    assert_aligned(load_data(str(tmp_path / "split.npz"), n_obs=20, n_test=5, **quiet))
    sample = load_data("mnist-sample", n_obs=200, n_test=50, **quiet)
    with np.load(SAMPLE_PATH) as raw:  # each raw[...] reads the array from the file again: once each
        images, labels = raw["images"], raw["labels"]
    rows = {image.tobytes(): label for image, label in zip(images, labels)}
    for x, y in ((sample.train, sample.train_labels), (sample.test, sample.test_labels)):
        got = [rows[np.round(image.numpy() * 255).astype(np.uint8).tobytes()] for image in x]
        assert np.array_equal(np.array(got), y.numpy())
    assert sample.n_classes == 10


def test_a_source_without_labels_says_so_when_they_are_asked_for(tmp_path):
    images, _ = labelled(30, (28, 28), 0)
    np.save(tmp_path / "images.npy", images)
    data = load_data(str(tmp_path / "images.npy"), n_obs=20, n_test=5, **quiet)
    assert data.train_labels is None and data.n_classes is None and data.labels_fingerprint() is None
    with pytest.raises(AmortizedPyroError, match="a conditional model needs class labels") as caught:
        data.labels_or_refuse()
    assert "\n" not in str(caught.value)


def test_labels_of_the_wrong_length_are_one_clear_error(tmp_path):
    images, labels = labelled(30, (28, 28), 0)
    np.savez(tmp_path / "bad.npz", images=images, labels=labels[:29])
    with pytest.raises(AmortizedPyroError, match="29 labels for 30 images"):
        load_data(str(tmp_path / "bad.npz"), n_obs=20, n_test=5, **quiet)


def test_run_files_record_the_labels(tmp_path):
    data = load_data("mnist-sample", n_obs=40, n_test=10, **quiet)
    fit(guide="shared", data=data, epochs=1, batch_size=20, hidden=8, z_dim=2, out=tmp_path / "run", progress=False,
        log=lambda line: None)
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())["data"]["labels"]
    assert recorded == {"n_classes": 10, "fingerprint": data.labels_fingerprint()}
    other = load_data("mnist-sample", n_obs=40, n_test=10, seed=1, **quiet)
    assert other.labels_fingerprint() != data.labels_fingerprint()
