"""Datasets: MNIST, FashionMNIST, CIFAR-10 and SVHN through torchvision, local folders and files in their
published formats (:mod:`amortized_pyro.runs.formats`), and the small real MNIST sample shipped with the
package for offline use.

Every source ends as flattened float32 images in [0, 1] (channel-first: a colour image is one row of 3·H·W
pixels) with their shape (channels, height, width): a training subset of ``n_obs`` and a held-out test
subset of ``n_test``, both drawn deterministically from ``seed``. Where a source has one split only, the two
subsets are disjoint slices of one permutation of it. Each image keeps its class label where the source has
them (``Data.train_labels``, ``Data.test_labels``; None where it has none: a conditional model then refuses it in
one line, :meth:`Data.labels_or_refuse`). ``grayscale`` turns colour images into their luminance. Binarizing (for the Bernoulli likelihood) draws every pixel once, x_bin ~ Bernoulli(x), from a
generator seeded with the same seed.
"""
import hashlib
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch

from amortized_pyro.autoguides.options import count, switch
from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.models.networks import default_image_shape
from amortized_pyro.runs.formats import (CIFAR_FOLDER, SVHN_FILES, joined, read_array_file, read_cifar_folder,
                                         read_folder, read_svhn_folder, to_grayscale, to_unit_floats)

SAMPLE_PATH = Path(__file__).parents[1] / "sample" / "mnist_sample.npz"
NAMED = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST", "cifar10": "CIFAR10", "svhn": "SVHN"}
LOCAL_HINT = {"cifar10": "put CIFAR-10's python batches (the folder %s/) into the data folder, or pass that folder "
                         "as the dataset" % CIFAR_FOLDER,
              "svhn": "put SVHN's %s into the data folder, or pass their folder as the dataset" % " and ".join(SVHN_FILES)}


@dataclass
class Data:
    """Training images ``train`` [N, D] and held-out images ``test`` [M, D], floats in [0, 1], each row an
    image of ``shape`` (channels, height, width) flattened channel-first."""

    train: torch.Tensor
    test: torch.Tensor
    source: str
    binarized: bool = False
    name: str = "data"
    origin: dict = None  # where to load the same images again: {"dataset", "data_dir", "seed", ...}, paths absolute
    shape: tuple = None  # (C, H, W); None: models.networks.default_image_shape of the rows' length
    train_labels: torch.Tensor = None  # int64 [N], each training image's class; None: the source has none
    test_labels: torch.Tensor = None  # int64 [M]

    def __post_init__(self):
        self.shape = tuple(self.shape) if self.shape is not None else default_image_shape(self.train.shape[1])

    def _with(self, train, test, source=None, binarized=None, shape=None, labels=None):
        """The same data with other images (and what else is given), the labels kept."""
        train_labels, test_labels = labels or (self.train_labels, self.test_labels)
        return Data(train, test, source or self.source, self.binarized if binarized is None else binarized,
                    self.name, self.origin, shape or self.shape, train_labels, test_labels)

    def to(self, device):
        move = (lambda t: None if t is None else t.to(device))
        return self._with(self.train.to(device), self.test.to(device),
                          labels=(move(self.train_labels), move(self.test_labels)))

    @property
    def n_classes(self):
        """How many classes the labels name (the largest label + 1), or None without labels."""
        if self.train_labels is None:
            return None
        return int(max(y.max().item() if len(y) else -1 for y in (self.train_labels, self.test_labels)
                       if y is not None)) + 1

    def labels_fingerprint(self):
        """SHA-256 of the training and test labels, or None without labels (beside :meth:`fingerprint`, which is the
        images' alone, so that runs recorded before labels were read keep theirs)."""
        if self.train_labels is None:
            return None
        digest = hashlib.sha256()
        for y in (self.train_labels, self.test_labels):
            digest.update(b"none" if y is None else y.detach().to("cpu", torch.int64).contiguous().numpy().tobytes())
        return digest.hexdigest()

    def labels_or_refuse(self, what="a conditional model"):
        """(train labels, test labels), or one line of AmortizedPyroError where the source has none."""
        if self.train_labels is None or (len(self.test) and self.test_labels is None):
            raise AmortizedPyroError("%s needs class labels, and %s has none (labels come with IDX label files, "
                                     "CIFAR-10's batches, SVHN's .mat files and .npz files with labels)"
                                     % (what, self.source))
        return self.train_labels, self.test_labels

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
        return self._with(train, test, self.source + ", binarized", True)

    def grayscale(self):
        """Colour images as their luminance (one channel); one-channel images as they are."""
        if self.shape[0] != 3:
            return self
        (train, _), (test, shape) = to_grayscale(self.train, self.shape), to_grayscale(self.test, self.shape)
        return self._with(train, test, self.source + ", grayscale", shape=shape)

    def is_binary(self):
        return all(((x == 0) | (x == 1)).all().item() for x in (self.train, self.test))


class TorchvisionBroken(AmortizedPyroError):
    """torchvision cannot be imported: its installation, not the data or the network."""


def torchvision_pairing():
    """What is installed, as a clause: torch's and torchvision's versions (their distributions' metadata, read
    without importing them) and the torch that torchvision asks for (its Requires-Dist)."""
    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None
    torch_version, vision_version = version("torch"), version("torchvision")
    if vision_version is None:
        return "installed: torch %s and no torchvision" % torch_version
    wants = [m.group(1).strip() for m in (re.match(r"torch(?![\w.-])\s*\(?([^;)]*)", r) for r in
                                          metadata.requires("torchvision") or []) if m]
    return "installed: torch %s and torchvision %s, which asks for torch %s" % (
        torch_version, vision_version, wants[0] if wants and wants[0] else "of any version")


def read_torchvision(name, data_dir, download):
    """(train, test, shape) through torchvision.datasets (MNIST, FashionMNIST, CIFAR10, SVHN), downloading into
    ``data_dir``; CIFAR-10's and SVHN's files are then read by :mod:`~amortized_pyro.runs.formats` (as are
    such files already there, which torchvision would refuse unless they are the full published ones)."""
    data_dir = Path(data_dir)
    own_reader = {"cifar10": lambda: read_cifar_folder(data_dir / CIFAR_FOLDER),
                  "svhn": lambda: read_svhn_folder(data_dir)}.get(name)
    present = (data_dir / CIFAR_FOLDER).is_dir() if name == "cifar10" else all((data_dir / f).is_file()
                                                                                for f in SVHN_FILES)
    if own_reader and present:
        return own_reader()
    if not download and not (own_reader or (data_dir / NAMED[name] / "raw").is_dir()):
        # torchvision's own answer ("Dataset not found"), without importing it: with downloading off and no files
        # there, a torchvision that cannot be imported changes nothing, and the message is about the data
        raise AmortizedPyroError("Dataset not found. You can use download=True to download it")
    if not download and own_reader:
        raise AmortizedPyroError("Dataset not found or corrupted. You can use download=True to download it")
    try:
        from torchvision import datasets
    except Exception as e:  # ImportError, or a torchvision built for another torch (RuntimeError, OSError)
        raise TorchvisionBroken("torchvision cannot be imported (%s: %s); %s"
                                % (type(e).__name__, first_line(e), torchvision_pairing())) from None
    cls = getattr(datasets, NAMED[name])
    splits = [cls(str(data_dir), download=download, **({"split": split} if name == "svhn" else
                                                        {"train": split == "train"})) for split in ("train", "test")]
    if own_reader:
        return own_reader()
    return joined(*(to_unit_floats(split.data.numpy(), NAMED[name]) for split in splits), NAMED[name],
                  tuple(torch.as_tensor(split.targets).numpy() for split in splits))


def pick_subsets(pool, n_obs, n_test, seed, log):
    """Deterministic training and test subsets of a :class:`~amortized_pyro.runs.formats.Pool`, images and labels
    alike: (train, test, train labels, test labels); capped (and said so) where the source has fewer images."""
    generator = torch.Generator().manual_seed(seed)
    take = (lambda t, rows: None if t is None else t[rows])
    if pool.test is None:
        available = len(pool.train)
        if n_obs + n_test > available:
            n_test = min(n_test, available // 5)
            n_obs = min(n_obs, available - n_test)
            log("only %d image%s in this source: using n_obs=%d, n_test=%d"
                % (available, "" if available == 1 else "s", n_obs, n_test))
        order = torch.randperm(available, generator=generator)
        rows, test_rows = order[:n_obs], order[n_obs:n_obs + n_test]
        return pool.train[rows], pool.train[test_rows], take(pool.train_labels, rows), take(pool.train_labels, test_rows)
    if n_obs > len(pool.train) or n_test > len(pool.test):
        n_obs, n_test = min(n_obs, len(pool.train)), min(n_test, len(pool.test))
        log("this source has %d training and %d test images: using n_obs=%d, n_test=%d"
            % (len(pool.train), len(pool.test), n_obs, n_test))
    rows = torch.randperm(len(pool.train), generator=generator)[:n_obs]
    test_rows = torch.randperm(len(pool.test), generator=generator)[:n_test]
    return pool.train[rows], pool.test[test_rows], take(pool.train_labels, rows), take(pool.test_labels, test_rows)


def checked_data(data):
    """``data`` where it is a :class:`Data`; a dataset's name or an array is refused in one line (an AttributeError
    at its first use before, issue 71)."""
    if not isinstance(data, Data):
        raise AmortizedPyroError("data must be a Data (load_data(...)), got %s: a dataset's name is the dataset= "
                                 "setting" % type(data).__name__)
    return data


def load_data(dataset="mnist", data_dir="data", n_obs=10000, n_test=1000, seed=0, download=True, log=print,
              binarize=False, allow_sample=True, grayscale=False):
    """Load ``dataset`` (mnist | fashion-mnist | cifar10 | svhn | mnist-sample | a folder of IDX files, of
    CIFAR-10's python batches or of SVHN's .mat files | a .npy/.npz file), as luminance where ``grayscale``,
    binarized from ``seed`` where asked; ``Data.name`` says what was used.

    MNIST that can be neither found in ``data_dir`` nor downloaded (or torchvision not imported) falls back,
    with one line through ``log`` saying which,
    to the shipped sample (the first 3,000 images of the real MNIST test set, named ``mnist-sample``), where
    ``allow_sample``; otherwise that is an error.
    """
    n_obs, n_test, seed = count("n_obs", n_obs, 1), count("n_test", n_test, 0), count("seed", seed, 0)
    for name, value in (("download", download), ("binarize", binarize), ("allow_sample", allow_sample),
                        ("grayscale", grayscale)):
        switch(name, value)  # binarize="yes" was taken as True (issue 71)
    if dataset in NAMED:
        try:
            pool = read_torchvision(dataset, data_dir, download)
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
                hint = {"mnist": "; --allow-sample uses the shipped 3,000-image MNIST sample instead"}.get(
                    dataset, "; " + LOCAL_HINT[dataset] if dataset in LOCAL_HINT else "")
                raise AmortizedPyroError(problem + hint) from None
            log("%s: using the shipped MNIST sample instead (named mnist-sample in the run's name and results)"
                % problem)
            return load_data("mnist-sample", data_dir, n_obs, n_test, seed, download, log, binarize,
                             grayscale=grayscale)
    elif dataset == "mnist-sample":
        pool = read_array_file(SAMPLE_PATH)
        source = "shipped MNIST sample (first %d images of the MNIST test set)" % len(pool.train)
    else:
        path = Path(dataset)
        if path.is_dir():
            pool = read_folder(path)
        elif path.is_file() and path.suffix in (".npy", ".npz"):
            pool = read_array_file(path)
        elif path.exists():
            raise AmortizedPyroError("%s: expected a folder (IDX files, CIFAR-10's python batches or SVHN's .mat "
                                     "files) or a .npy/.npz file" % path)
        elif path.suffix in (".npy", ".npz", ".gz") or len(path.parts) > 1:
            raise AmortizedPyroError("no such file or folder: %s" % path)
        else:
            raise AmortizedPyroError("unknown dataset %r: use mnist, fashion-mnist, cifar10, svhn, mnist-sample, "
                                     "a folder of image files or a .npy/.npz file" % dataset)
        source = str(path)
    train, test, train_labels, test_labels = pick_subsets(pool, n_obs, n_test, seed, log)
    resolved = dataset if dataset in NAMED or dataset == "mnist-sample" else str(Path(dataset).resolve())
    data = Data(train, test, source, name=dataset,
                origin={"dataset": resolved, "data_dir": str(Path(data_dir).resolve()), "seed": seed},
                shape=pool.shape, train_labels=train_labels, test_labels=test_labels)
    data = data.grayscale() if grayscale else data
    return data.binarize(seed) if binarize else data


def first_line(error):
    return (str(error).strip().splitlines() or [""])[0]
