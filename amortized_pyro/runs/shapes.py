"""A synthetic image set whose generative factors are known, for the β study (issue 50, item 5): a white shape on a
black 28 × 28 canvas, as dSprites (Matthey et al., 2017) draws them at 64 × 64, with four independent factors

    shape   0 square, 1 disc, 2 triangle (pointing up)        3 values; also the image's class label
    scale   half-widths 2, 3, 4, 5 pixels                      4 values
    x, y    the centre at pixels 7, 9, ..., 21 (columns, rows)  8 values each

drawn uniformly and independently for each image by an explicit generator (``numpy.random.default_rng(seed)``), so
a seed gives the same images on every machine. Every shape fits its canvas at every scale and position. The pixel
(r, c) is lit where its centre satisfies, with dx = c − x and dy = r − y:

    square    |dx| ≤ s and |dy| ≤ s
    disc      dx² + dy² ≤ s²
    triangle  −s ≤ dy ≤ s and |dx| ≤ (dy + s) / 2

:func:`write_shapes` saves a train/test split in the ``.npz`` layout that every loader reads (``train``, ``test``,
``train_labels``, ``test_labels``), with the factors' indices beside them (``train_factors``, ``test_factors``
[n, 4], in the order of :data:`FACTORS`) for the disentanglement scores.
"""
from pathlib import Path

import numpy as np

from amortized_pyro.errors import AmortizedPyroError

SIDE = 28
FACTORS = ("shape", "scale", "x", "y")
SHAPES = ("square", "disc", "triangle")
HALF_WIDTHS = (2, 3, 4, 5)
CENTRES = tuple(range(7, 22, 2))
LEVELS = (len(SHAPES), len(HALF_WIDTHS), len(CENTRES), len(CENTRES))


def render(factors):
    """uint8 images [n, 28, 28] (0 or 255) of factor indices ``factors`` [n, 4] (shape, scale, x, y)."""
    factors = np.asarray(factors)
    shape, s = factors[:, 0], np.asarray(HALF_WIDTHS)[factors[:, 1]]
    x, y = np.asarray(CENTRES)[factors[:, 2]], np.asarray(CENTRES)[factors[:, 3]]
    rows, cols = np.mgrid[:SIDE, :SIDE]
    dx = cols[None] - x[:, None, None]
    dy = rows[None] - y[:, None, None]
    s = s[:, None, None]
    square = (np.abs(dx) <= s) & (np.abs(dy) <= s)
    disc = dx ** 2 + dy ** 2 <= s ** 2
    triangle = (dy >= -s) & (dy <= s) & (2 * np.abs(dx) <= dy + s)
    lit = np.where(shape[:, None, None] == 0, square, np.where(shape[:, None, None] == 1, disc, triangle))
    return lit.astype(np.uint8) * 255


def draw_factors(n, rng):
    """Factor indices [n, 4], each factor uniform over its levels and independent of the others."""
    return np.stack([rng.integers(0, levels, size=n) for levels in LEVELS], axis=1)


def shapes(n, seed):
    """(uint8 images [n, 28, 28], factor indices [n, 4]) drawn by ``numpy.random.default_rng(seed)``."""
    factors = draw_factors(n, np.random.default_rng(seed))
    return render(factors), factors


def write_shapes(path, n_train, n_test, seed):
    """Write ``n_train`` + ``n_test`` images of one draw (seed ``seed``) to the new ``.npz`` file ``path`` (refused
    if it exists: nothing is overwritten); the labels are the shapes."""
    path = Path(path)
    if path.suffix != ".npz":
        raise AmortizedPyroError("%s: the shapes are written as a .npz file" % path)
    images, factors = shapes(n_train + n_test, seed)
    split = {"train": slice(0, n_train), "test": slice(n_train, None)}
    arrays = {}
    for name, rows in split.items():
        arrays[name] = images[rows]
        arrays[name + "_labels"] = factors[rows, 0]
        arrays[name + "_factors"] = factors[rows]
    try:
        with open(path, "xb") as out:  # exclusive create
            np.savez_compressed(out, factor_names=np.asarray(FACTORS), **arrays)
    except FileExistsError:
        raise AmortizedPyroError("%s exists: choose another path (nothing is overwritten)" % path) from None
    return path
