"""The synthetic shapes with known factors (issue 50, item 5): drawn from a seed, each factor what it says, and read
back by the package's loader with the shapes as labels."""
import numpy as np
import pytest

from amortized_pyro import AmortizedPyroError
from amortized_pyro.runs.formats import read_array_file
from amortized_pyro.runs.shapes import CENTRES, HALF_WIDTHS, LEVELS, render, shapes, write_shapes


def test_a_seed_gives_the_same_images_and_another_seed_others():
    a, fa = shapes(200, seed=3)
    b, fb = shapes(200, seed=3)
    c, _ = shapes(200, seed=4)
    assert np.array_equal(a, b) and np.array_equal(fa, fb) and not np.array_equal(a, c)
    assert a.shape == (200, 28, 28) and a.dtype == np.uint8 and set(np.unique(a)) <= {0, 255}
    for k, levels in enumerate(LEVELS):  # every level of every factor is drawn
        assert set(fa[:, k]) == set(range(levels))


def every_combination():
    grids = np.meshgrid(*(np.arange(levels) for levels in LEVELS), indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], axis=1)


def test_each_factor_is_what_it_says():
    factors = every_combination()
    lit = render(factors) > 0
    s = np.asarray(HALF_WIDTHS)[factors[:, 1]]
    x, y = np.asarray(CENTRES)[factors[:, 2]], np.asarray(CENTRES)[factors[:, 3]]
    area = lit.sum(axis=(1, 2))
    rows, cols = np.mgrid[:28, :28]
    # the square: (2s + 1)² pixels, centred exactly on (x, y); the disc: centred exactly, area about π s²
    square, disc, triangle = (factors[:, 0] == k for k in range(3))
    assert np.array_equal(area[square], (2 * s[square] + 1) ** 2)
    for which in (square, disc):
        assert np.allclose((lit[which] * cols).sum(axis=(1, 2)) / area[which], x[which])
        assert np.allclose((lit[which] * rows).sum(axis=(1, 2)) / area[which], y[which])
    assert np.all(np.abs(area[disc] - np.pi * s[disc] ** 2) < 2 * np.pi * s[disc])  # within one pixel ring
    # the triangle points up: its top half holds fewer pixels than its bottom half
    top = (lit[triangle] & (rows < y[triangle, None, None])).sum(axis=(1, 2))
    assert np.all(top < area[triangle] - top)
    # nothing touches the canvas's edge, at any scale and position
    assert not lit[:, 0].any() and not lit[:, -1].any() and not lit[:, :, 0].any() and not lit[:, :, -1].any()
    # area grows with scale within each shape
    for k in range(3):
        means = [area[(factors[:, 0] == k) & (factors[:, 1] == j)].mean() for j in range(len(HALF_WIDTHS))]
        assert np.all(np.diff(means) > 0)


def test_written_shapes_load_with_the_shapes_as_labels(tmp_path):
    path = write_shapes(tmp_path / "shapes.npz", 300, 100, seed=0)
    pool = read_array_file(path)
    images, factors = shapes(400, seed=0)
    assert pool.shape == (1, 28, 28) and pool.train.shape == (300, 784) and pool.test.shape == (100, 784)
    assert np.allclose(pool.train.numpy(), images[:300].reshape(300, -1) / 255.0)
    assert np.array_equal(pool.train_labels.numpy(), factors[:300, 0])
    assert np.array_equal(pool.test_labels.numpy(), factors[300:, 0])
    with np.load(path) as arrays:
        assert np.array_equal(arrays["test_factors"], factors[300:])
        assert list(arrays["factor_names"]) == ["shape", "scale", "x", "y"]
    with pytest.raises(AmortizedPyroError, match="exists"):
        write_shapes(path, 10, 10, seed=1)
    with pytest.raises(AmortizedPyroError, match=".npz"):
        write_shapes(tmp_path / "shapes.npy", 10, 10, seed=1)
