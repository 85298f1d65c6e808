"""Active units and the Mutual Information Gap on codes whose answer is known exactly (issue 50, item 5)."""
import itertools
import math

import numpy as np
import pytest

from amortized_pyro.inference.disentanglement import (active_units, entropy, mutual_information,
                                                      mutual_information_gap)

LEVELS = (3, 4, 8, 8)  # the shapes' factors


@pytest.fixture(scope="module")
def grid():
    """Every combination of the factors once (768 rows): in a full factorial design the factors are exactly
    independent, so the plug-in mutual information between two of them is exactly 0."""
    return np.array(list(itertools.product(*(range(levels) for levels in LEVELS))))


def test_entropy_and_mutual_information_match_their_closed_forms(grid):
    for k, levels in enumerate(LEVELS):
        assert entropy(grid[:, k]) == pytest.approx(math.log(levels), abs=1e-12)  # uniform over its levels
        assert mutual_information(grid[:, k], grid[:, k]) == pytest.approx(math.log(levels), abs=1e-12)
        for other in range(len(LEVELS)):
            if other != k:
                assert mutual_information(grid[:, k], grid[:, other]) == pytest.approx(0.0, abs=1e-12)
    # a deterministic function that merges levels: I = H(f(v)); 8 levels → 4 pairs: log 4
    assert mutual_information(grid[:, 2] // 2, grid[:, 2]) == pytest.approx(math.log(4), abs=1e-12)


def test_a_code_that_is_the_factors_scores_one(grid):
    codes = grid * 0.37 - 1.0  # one dimension per factor, each its factor, rescaled
    mig, gaps, mi = mutual_information_gap(codes, grid)
    assert mig == pytest.approx(1.0, abs=1e-12)
    assert np.allclose(np.diag(mi), np.log(LEVELS), atol=1e-12)


def test_a_factor_read_off_two_dimensions_scores_zero_for_that_factor(grid):
    codes = np.concatenate([grid, grid[:, 2:3] * 2.0], axis=1)  # x twice
    mig, gaps, _ = mutual_information_gap(codes, grid)
    assert gaps[2] == pytest.approx(0.0, abs=1e-12)
    assert mig == pytest.approx(3 / 4, abs=1e-12)


def test_a_rotated_code_scores_less_than_an_aligned_one(grid):
    """x and y mixed by a 45° rotation: each rotated dimension knows a part of both, so x's and y's gaps shrink
    from 1 (aligned) to what the rotated dimensions' information leaves; shape and scale stay at 1."""
    rotated = grid.astype(float)
    rotated[:, 2], rotated[:, 3] = grid[:, 2] + grid[:, 3], grid[:, 2] - grid[:, 3]
    mig, gaps, _ = mutual_information_gap(rotated, grid, bins=15)  # 15 values of x + y, 15 of x − y: one bin each
    assert gaps[0] == pytest.approx(1.0) and gaps[1] == pytest.approx(1.0)
    # I(x + y; x) = H(x + y) − H(x + y | x) = H(x + y) − H(y), and I(x − y; x) is the same: the gap is 0
    assert gaps[2] == pytest.approx(0.0, abs=1e-12) and gaps[3] == pytest.approx(0.0, abs=1e-12)
    assert mig == pytest.approx(0.5, abs=1e-12)


def test_noise_codes_score_near_zero():
    rng = np.random.default_rng(0)
    factors = np.stack([rng.integers(0, levels, 20000) for levels in LEVELS], axis=1)
    mig, _, mi = mutual_information_gap(rng.normal(size=(20000, 6)), factors)
    # plug-in bias for independent variables: about (20 − 1)(levels − 1) / 2n nats, at most 19·7/40000 = 0.0033
    assert mi.max() < 3 * 19 * 7 / (2 * 20000)
    assert 0 <= mig < 0.01


def test_active_units_count_dimensions_whose_means_vary_above_one_hundredth():
    rng = np.random.default_rng(1)
    scales = np.array([1.0, 0.2, 0.05, 0.0])  # variances 1, 0.04, 0.0025, 0
    means = rng.standard_normal((50000, 4)) * scales
    count, variance = active_units(means)
    assert count == 2
    assert np.allclose(variance, scales ** 2, rtol=0.03, atol=1e-12)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="MIG needs"):
        mutual_information_gap(np.zeros((10, 1)), np.zeros((10, 2), dtype=int))
