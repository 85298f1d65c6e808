"""Image files in their published formats, read into float32 images in [0, 1], flattened channel-first.

* IDX (MNIST, FashionMNIST; optionally gzipped): ``train-images-idx3-ubyte[.gz]``, ``t10k-images-idx3-ubyte[.gz]``.
* CIFAR-10's python batches: a folder ``cifar-10-batches-py/`` with ``data_batch_1`` … ``data_batch_5`` and
  ``test_batch``, each a pickled dict whose ``data`` is uint8 [10000, 3072], each row the red, green and blue
  32 × 32 planes in turn.
* SVHN's cropped digits: ``train_32x32.mat`` and ``test_32x32.mat`` (MATLAB), ``X`` uint8 [32, 32, 3, N].
* NumPy ``.npy`` (one split) and ``.npz`` (``train``/``test`` or ``images``).

Their class labels where the format has them: IDX label files beside the images (``train-labels-idx1-ubyte``,
``t10k-labels-idx1-ubyte``), CIFAR-10's ``labels``, SVHN's ``y`` (its digit 0 published as 10), an ``.npz``'s
``labels`` (beside ``images``) or ``train_labels``/``test_labels``; none for ``.npy``.

Read here rather than through torchvision, which checks each file's checksum against the full published
files and so refuses a subset or a copy written by the tests. Every reader returns a :class:`Pool`: ``train``,
``test`` (or None), ``shape`` the image's (channels, height, width), and the labels of each split (int64, or None);
a row of ``train`` is that image flattened channel-first (3,072 pixels for a 3 × 32 × 32 colour image), never
one colour plane per row.
"""
import gzip
import io
import pickle
import zipfile
import zlib
from collections import namedtuple
from pathlib import Path

import numpy as np
import torch

from amortized_pyro.errors import AmortizedPyroError

IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
MIN_PIXELS = 16
CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_TRAIN = tuple("data_batch_%d" % i for i in range(1, 6))
SVHN_FILES = ("train_32x32.mat", "test_32x32.mat")
LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601, as torchvision's rgb_to_grayscale
Pool = namedtuple("Pool", "train test shape train_labels test_labels")


def read_idx(path):
    """Read an IDX file (as MNIST is published, optionally gzipped) into a numpy array."""
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise AmortizedPyroError("cannot read IDX file %s: %s" % (path, e)) from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_DTYPES or raw[3] == 0:
        raise AmortizedPyroError("%s is not an IDX file (bad magic number)" % path)
    ndim = raw[3]
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    dtype = np.dtype(IDX_DTYPES[raw[2]])
    expected = 4 + 4 * ndim + int(np.prod(shape)) * dtype.itemsize
    if len(raw) != expected:
        raise AmortizedPyroError("%s is corrupt: %d bytes where its header promises %d"
                                 % (path, len(raw), expected))
    return np.frombuffer(raw, dtype, offset=4 + 4 * ndim).reshape(shape)


def image_shape(images):
    """(channels, height, width) of images given as [N, H, W], [N, C, H, W] (C ≤ 4) or flat [N, D] with D a
    square number of at least 16 pixels (one channel); None for any other shape."""
    if images.ndim == 2 and images.shape[1] >= MIN_PIXELS and round(images.shape[1] ** 0.5) ** 2 == images.shape[1]:
        side = round(images.shape[1] ** 0.5)
        return 1, side, side
    if images.ndim == 3 and min(images.shape[1:]) >= 4:
        return (1,) + tuple(images.shape[1:])
    if images.ndim == 4 and images.shape[1] <= 4 and min(images.shape[2:]) >= 4:
        return tuple(images.shape[1:])
    return None


def to_unit_floats(images, where):
    """Images as uint8 (0..255) or floats in [0, 1], shaped [N, H, W], [N, C, H, W] or [N, H, W, C] (C ≤ 4)
    or flat [N, D] with D a square number of at least 16 pixels (784 = 28 × 28) → (float32 tensor [N, C·H·W],
    (C, H, W)); refuses other shapes, NaN and bad ranges."""
    images = np.asarray(images)
    if images.ndim == 4 and images.shape[3] <= 4 < images.shape[1]:  # channel-last [N, H, W, C]
        images = np.ascontiguousarray(np.transpose(images, (0, 3, 1, 2)))
    shape = image_shape(images)
    if images.shape[:1] == (0,) or shape is None:
        raise AmortizedPyroError("%s: expected images [N, H, W], [N, C, H, W] or [N, D] with D a square number of "
                                 "pixels (e.g. 784), got shape %s" % (where, images.shape))
    if images.dtype == np.uint8:
        out = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    elif np.issubdtype(images.dtype, np.floating):
        out = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32))
        if not torch.isfinite(out).all():
            raise AmortizedPyroError("%s: the images contain NaN or infinite values" % where)
        if out.min() < 0 or out.max() > 1:
            raise AmortizedPyroError("%s: float images must lie in [0, 1], found [%g, %g]"
                                     % (where, out.min(), out.max()))
    else:
        raise AmortizedPyroError("%s: images must be uint8 or floats in [0, 1], got %s" % (where, images.dtype))
    return out, shape


def to_grayscale(images, shape):
    """Colour images [N, 3·H·W] (channel-first) as their luminance [N, H·W] and (1, H, W); others unchanged."""
    if shape[0] != 3:
        return images, shape
    planes = images.reshape(len(images), 3, -1)
    return sum(w * planes[:, c] for c, w in enumerate(LUMA)), (1,) + tuple(shape[1:])


def read_idx_folder(folder):
    """The :class:`Pool` of a folder of IDX files: ``train-images…`` and/or ``t10k-images…``, with the
    ``…-labels-idx1-ubyte…`` files beside them where there are."""
    def find(prefix, kind="images-idx3"):
        hits = sorted(folder.glob("%s-%s-ubyte*" % (prefix, kind)))
        return hits[0] if hits else None

    def images(prefix):
        path = find(prefix)
        return to_unit_floats(read_idx(path), str(path)) if path else None

    def labels(prefix):
        path = find(prefix, "labels-idx1")
        return read_idx(path) if path and find(prefix) else None

    train, test = images("train"), images("t10k")
    if train is None and test is None:
        raise AmortizedPyroError("no IDX image files (train-images-idx3-ubyte[.gz], t10k-images-idx3-ubyte[.gz]) in %s"
                                 % folder)
    if train is None:
        return joined(test, None, folder, (labels("t10k"), None))
    return joined(train, test, folder, (labels("train"), labels("t10k")))


class ArraysOnly(pickle.Unpickler):
    """Unpickles NumPy arrays, dicts, lists and strings, and nothing that could run code: a data file is data.
    (Hand-written: pickle has no such mode, and CIFAR-10's batches are pickles.)"""
    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"),
               ("_codecs", "encode")}  # bytes, as Python 3 writes them in protocol 2

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError("refused to load %s.%s (a CIFAR-10 batch holds arrays only)" % (module, name))


def read_cifar_batch(path):
    """One CIFAR-10 python batch → (uint8 [n, 3, 32, 32], its labels [n] or None)."""
    try:
        batch = ArraysOnly(io.BytesIO(Path(path).read_bytes()), encoding="bytes").load()
        data = np.asarray(batch[b"data"] if b"data" in batch else batch["data"], dtype=np.uint8)
        labels = batch.get(b"labels", batch.get("labels"))
    except FileNotFoundError:
        raise AmortizedPyroError("missing CIFAR-10 batch %s" % path) from None
    except (OSError, EOFError, pickle.UnpicklingError, TypeError, KeyError, ValueError, AttributeError) as e:
        raise AmortizedPyroError("%s is not a CIFAR-10 python batch (%s)" % (path, e)) from None
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise AmortizedPyroError("%s: a CIFAR-10 batch's data is [n, 3072], got %s" % (path, data.shape))
    return data.reshape(-1, 3, 32, 32), None if labels is None else np.asarray(labels)


def read_cifar_folder(folder):
    """The :class:`Pool` of CIFAR-10's python batches in ``folder`` (``cifar-10-batches-py/``)."""
    parts = [read_cifar_batch(folder / name) for name in CIFAR_TRAIN]
    test, test_labels = read_cifar_batch(folder / "test_batch")
    labels = None if any(part[1] is None for part in parts) else np.concatenate([part[1] for part in parts])
    return joined(to_unit_floats(np.concatenate([part[0] for part in parts]), str(folder)),
                  to_unit_floats(test, str(folder / "test_batch")), folder, (labels, test_labels))


def read_svhn_file(path):
    """SVHN's ``X`` [32, 32, 3, n] from a .mat file → (uint8 [n, 3, 32, 32], its digits [n] from ``y``, where
    10 stands for 0, or None)."""
    from scipy.io import loadmat
    from scipy.io.matlab import MatReadError
    try:
        arrays = loadmat(path, variable_names=["X", "y"])
        images, labels = arrays.get("X"), arrays.get("y")
    except FileNotFoundError:
        raise AmortizedPyroError("missing SVHN file %s" % path) from None
    except (OSError, ValueError, TypeError, NotImplementedError, MatReadError) as e:
        raise AmortizedPyroError("%s is not an SVHN .mat file (%s)" % (path, str(e).splitlines()[0])) from None
    if images is None or images.ndim != 4 or images.shape[2] != 3:
        raise AmortizedPyroError("%s: SVHN's X is [32, 32, 3, n], got %s" % (
            path, "no X" if images is None else images.shape))
    return (np.ascontiguousarray(np.transpose(images, (3, 2, 0, 1))),
            None if labels is None else np.asarray(labels).reshape(-1) % 10)


def read_svhn_folder(folder):
    """The :class:`Pool` of SVHN's ``train_32x32.mat`` and ``test_32x32.mat`` in ``folder``."""
    (train, labels), (test, test_labels) = (read_svhn_file(folder / name) for name in SVHN_FILES)
    return joined(to_unit_floats(train, str(folder / SVHN_FILES[0])), to_unit_floats(test, str(folder / SVHN_FILES[1])),
                  folder, (labels, test_labels))


def is_cifar_folder(folder):
    return (folder / "test_batch").is_file() or (folder / "data_batch_1").is_file()


def is_svhn_folder(folder):
    return any((folder / name).is_file() for name in SVHN_FILES)


def read_folder(folder):
    """(train, test or None, shape) from a folder in any format above, told apart by its file names."""
    folder = Path(folder)
    if (folder / CIFAR_FOLDER).is_dir():
        folder = folder / CIFAR_FOLDER
    if is_cifar_folder(folder):
        return read_cifar_folder(folder)
    if is_svhn_folder(folder):
        return read_svhn_folder(folder)
    return read_idx_folder(folder)


def read_arrays(path):
    """The array of a .npy file, or {name: array} of a .npz file, read whole: bytes that are not one (corrupt, a
    truncated archive, a damaged member, an array of Python objects) are refused in one line."""
    try:
        arrays = np.load(path, allow_pickle=False)
        if isinstance(arrays, np.ndarray):
            return arrays
        with arrays:  # a member is read (and its CRC checked) only here
            return {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error):
        # numpy says "pickled (object) data" of any bytes without the .npy/.npz header: say what it is
        raise AmortizedPyroError("%s is not a readable .npy/.npz array file (corrupt, truncated, or an array of "
                                 "Python objects)" % path) from None


def read_array_file(path):
    """(train, test or None, shape) from .npy (one split) or .npz (``train``/``test`` keys, or ``images``)."""
    arrays = read_arrays(path)
    if isinstance(arrays, np.ndarray):
        return joined(to_unit_floats(arrays, str(path)), None, path)
    keys = set(arrays)
    if "train" in keys:
        train = to_unit_floats(arrays["train"], "%s[train]" % path)
        test = to_unit_floats(arrays["test"], "%s[test]" % path) if "test" in keys else None
        return joined(train, test, path, (arrays.get("train_labels"), arrays.get("test_labels")))
    if "images" not in keys:  # an array of another name is not taken for the images (issue 71: 'foo' was)
        raise AmortizedPyroError("%s: expected arrays 'train' (and 'test') or 'images', found %s"
                                 % (path, sorted(keys)))
    return joined(to_unit_floats(arrays["images"], "%s[images]" % path), None, path, (arrays.get("labels"), None))


def joined(train, test, where, labels=(None, None)):
    """The :class:`Pool` of two (images, shape) pairs that must agree in shape (test: or None) and their labels
    (arrays of integers, one per image, or None)."""
    (train, shape), test = train, test
    if test is not None:
        test, test_shape = test
        if test_shape != shape:
            raise AmortizedPyroError("%s: train and test images differ in shape (%s and %s)" % (
                where, "×".join(map(str, shape)), "×".join(map(str, test_shape))))
    return Pool(train, test, shape, *(_labels(y, x, where) for y, x in zip(labels, (train, test))))


def _labels(labels, images, where):
    """Class labels as int64 [n], one per image; None where there are none."""
    if labels is None or images is None:
        return None
    labels = np.asarray(labels).reshape(-1)
    if len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer) or (labels < 0).any():
        raise AmortizedPyroError("%s: %d labels for %d images (labels are class numbers 0, 1, ...: %s)"
                                 % (where, len(labels), len(images), labels.dtype))
    return torch.from_numpy(labels.astype(np.int64))
