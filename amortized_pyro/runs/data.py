"""Datasets: MNIST / FashionMNIST through torchvision, local IDX files, .npy/.npz arrays, and the
small real MNIST sample shipped with the package for offline use.

Every source ends as flattened float32 images in [0, 1]: a training subset of ``n_obs`` and a held-out
test subset of ``n_test``, both drawn deterministically from ``seed``. Where a source has one split only,
the two subsets are disjoint slices of one permutation of it. Binarizing (for the Bernoulli likelihood)
draws every pixel once, x_bin ~ Bernoulli(x), from a generator seeded with the same seed.
"""
import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from amortized_pyro.errors import AmortizedPyroError

SAMPLE_PATH = Path(__file__).parents[1] / "sample" / "mnist_sample.npz"
NAMED = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}
IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


@dataclass
class Data:
    """Training images ``train`` [N, D] and held-out images ``test`` [M, D], floats in [0, 1]."""

    train: torch.Tensor
    test: torch.Tensor
    source: str
    binarized: bool = False
    name: str = "data"
    origin: dict = None  # where to load the same images again: {"dataset", "data_dir", "seed"}, paths absolute

    def to(self, device):
        return Data(self.train.to(device), self.test.to(device), self.source, self.binarized, self.name, self.origin)

    def fingerprint(self):
        """SHA-256 of the training and test images (float32), to tell whether a run saw these images;
        computed once per Data (a comparison asks for it for every run)."""
        if "_fingerprint" not in self.__dict__:
            digest = hashlib.sha256()
            for x in (self.train, self.test):
                digest.update(str(tuple(x.shape)).encode())
                digest.update(x.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
            self.__dict__["_fingerprint"] = digest.hexdigest()
        return self.__dict__["_fingerprint"]

    def binarize(self, seed):
        """Each pixel drawn once as Bernoulli(intensity), reproducibly from ``seed``."""
        generator = torch.Generator().manual_seed(seed)
        train, test = ((torch.rand(x.shape, generator=generator) < x.cpu()).to(x) for x in (self.train, self.test))
        return Data(train, test, self.source + ", binarized", True, self.name, self.origin)

    def is_binary(self):
        return all(((x == 0) | (x == 1)).all().item() for x in (self.train, self.test))


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


MIN_PIXELS = 16


def to_unit_floats(images, where):
    """Images as uint8 (0..255) or floats in [0, 1], shaped [N, H, W] (H, W >= 4), [N, H, W, C], or flat
    [N, D] with D a square number of at least 16 pixels (784 = 28 × 28) → float32 tensor [N, D];
    refuses other shapes, NaN and bad ranges."""
    images = np.asarray(images)
    square = images.ndim == 2 and images.shape[1] >= MIN_PIXELS and round(images.shape[1] ** 0.5) ** 2 == images.shape[1]
    grid = images.ndim in (3, 4) and min(images.shape[1:3]) >= 4
    if images.shape[:1] == (0,) or not (square or grid):
        raise AmortizedPyroError("%s: expected images [N, H, W] or [N, D] with D a square number of pixels "
                                 "(e.g. 784), got shape %s" % (where, images.shape))
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
    return out


def read_idx_folder(folder):
    """(train, test or None) from a folder of IDX image files: ``train-images…`` and/or ``t10k-images…``."""
    def find(prefix):
        hits = sorted(folder.glob(prefix + "-images-idx3-ubyte*"))
        return to_unit_floats(read_idx(hits[0]), str(hits[0])) if hits else None

    train, test = find("train"), find("t10k")
    if train is None and test is None:
        raise AmortizedPyroError("no IDX image files (train-images-idx3-ubyte[.gz], t10k-images-idx3-ubyte[.gz]) in %s"
                                 % folder)
    return (train, test) if train is not None else (test, None)


def read_array_file(path):
    """(train, test or None) from .npy (one split) or .npz (``train``/``test`` keys, or ``images``)."""
    try:
        arrays = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        # numpy says "pickled (object) data" of any bytes without the .npy/.npz header: say what it is
        raise AmortizedPyroError("%s is not a readable .npy/.npz array file (corrupt, truncated, or an array of "
                                 "Python objects)" % path) from None
    if isinstance(arrays, np.ndarray):
        return to_unit_floats(arrays, str(path)), None
    with arrays:
        keys = set(arrays.files)
        if "train" in keys:
            train = to_unit_floats(arrays["train"], "%s[train]" % path)
            test = to_unit_floats(arrays["test"], "%s[test]" % path) if "test" in keys else None
            if test is not None and test.shape[1] != train.shape[1]:
                raise AmortizedPyroError("%s: train and test images differ in size (%d and %d pixels)"
                                         % (path, train.shape[1], test.shape[1]))
            return train, test
        key = "images" if "images" in keys else (keys.pop() if len(keys) == 1 else None)
        if key is None:
            raise AmortizedPyroError("%s: expected arrays 'train' (and 'test') or 'images', found %s"
                                     % (path, sorted(keys)))
        return to_unit_floats(arrays[key], "%s[%s]" % (path, key)), None


class TorchvisionBroken(AmortizedPyroError):
    """torchvision cannot be imported: its installation, not the data or the network."""


def read_torchvision(name, data_dir, download):
    """(train, test) through torchvision.datasets.MNIST / FashionMNIST, downloading into data_dir."""
    try:
        from torchvision import datasets
    except Exception as e:  # ImportError, or a torchvision built for another torch (RuntimeError, OSError)
        raise TorchvisionBroken("torchvision cannot be imported (%s: %s; install torch and torchvision together)"
                                % (type(e).__name__, first_line(e))) from None

    cls = getattr(datasets, NAMED[name])
    splits = [cls(str(data_dir), train=train, download=download).data.numpy() for train in (True, False)]
    return tuple(to_unit_floats(images, NAMED[name]) for images in splits)


def pick_subsets(pool, test_pool, n_obs, n_test, seed, log):
    """Deterministic training and test subsets; capped (and said so) where the source has fewer images."""
    generator = torch.Generator().manual_seed(seed)
    if test_pool is None:
        available = len(pool)
        if n_obs + n_test > available:
            n_test = min(n_test, available // 5)
            n_obs = min(n_obs, available - n_test)
            log("only %d images in this source: using n_obs=%d, n_test=%d" % (available, n_obs, n_test))
        order = torch.randperm(available, generator=generator)
        return pool[order[:n_obs]], pool[order[n_obs:n_obs + n_test]]
    if n_obs > len(pool) or n_test > len(test_pool):
        n_obs, n_test = min(n_obs, len(pool)), min(n_test, len(test_pool))
        log("this source has %d training and %d test images: using n_obs=%d, n_test=%d"
            % (len(pool), len(test_pool), n_obs, n_test))
    train_order = torch.randperm(len(pool), generator=generator)[:n_obs]
    test_order = torch.randperm(len(test_pool), generator=generator)[:n_test]
    return pool[train_order], test_pool[test_order]


def load_data(dataset="mnist", data_dir="data", n_obs=10000, n_test=1000, seed=0, download=True, log=print,
              binarize=False, allow_sample=True):
    """Load ``dataset`` (mnist | fashion-mnist | mnist-sample | a folder of IDX files | a .npy/.npz file),
    binarized from ``seed`` where asked; ``Data.name`` says what was used.

    MNIST that can be neither found in ``data_dir`` nor downloaded (or torchvision not imported) falls back,
    with one line through ``log`` saying which,
    to the shipped sample (the first 3,000 images of the real MNIST test set, named ``mnist-sample``), where
    ``allow_sample``; otherwise that is an error.
    """
    if n_obs < 1 or n_test < 0:
        raise AmortizedPyroError("need n_obs >= 1 and n_test >= 0, got %d and %d" % (n_obs, n_test))
    if dataset in NAMED:
        try:
            pool, test_pool = read_torchvision(dataset, data_dir, download)
            source = "%s (torchvision, %s)" % (NAMED[dataset], data_dir)
        except TorchvisionBroken as e:
            problem = str(e)
        except (RuntimeError, OSError, AmortizedPyroError) as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
            reason = " ".join(lines[:1] + lines[-1:] if len(lines) > 1 else lines)
            problem = "%s is not in %s and %s (%s)" % (NAMED[dataset], data_dir, "could not be downloaded" if download
                                                       else "downloading is off", reason)
        else:
            problem = None
        if problem:
            if dataset != "mnist" or not allow_sample:
                hint = "; --allow-sample uses the shipped 3,000-image MNIST sample instead" if dataset == "mnist" else ""
                raise AmortizedPyroError(problem + hint) from None
            log("%s: using the shipped MNIST sample instead (named mnist-sample in the run's name and results)"
                % problem)
            return load_data("mnist-sample", data_dir, n_obs, n_test, seed, download, log, binarize)
    elif dataset == "mnist-sample":
        pool, test_pool = read_array_file(SAMPLE_PATH)
        source = "shipped MNIST sample (first %d images of the MNIST test set)" % len(pool)
    else:
        path = Path(dataset)
        if path.is_dir():
            pool, test_pool = read_idx_folder(path)
        elif path.is_file() and path.suffix in (".npy", ".npz"):
            pool, test_pool = read_array_file(path)
        elif path.exists():
            raise AmortizedPyroError("%s: expected a folder of IDX files or a .npy/.npz file" % path)
        elif path.suffix in (".npy", ".npz", ".gz") or len(path.parts) > 1:
            raise AmortizedPyroError("no such file or folder: %s" % path)
        else:
            raise AmortizedPyroError("unknown dataset %r: use mnist, fashion-mnist, mnist-sample, "
                                     "a folder of IDX files or a .npy/.npz file" % dataset)
        source = str(path)
    train, test = pick_subsets(pool, test_pool, n_obs, n_test, seed, log)
    resolved = dataset if dataset in NAMED or dataset == "mnist-sample" else str(Path(dataset).resolve())
    data = Data(train, test, source, name=dataset,
                origin={"dataset": resolved, "data_dir": str(Path(data_dir).resolve()), "seed": seed})
    return data.binarize(seed) if binarize else data


def first_line(error):
    return (str(error).strip().splitlines() or [""])[0]
