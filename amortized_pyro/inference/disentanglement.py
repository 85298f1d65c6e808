"""What a code says about known factors: active units and the Mutual Information Gap (the β study, issue 50).

Active units (Burda et al., 2016): latent dimension u is active when the variance over images of its posterior
mean, A_u = Cov_x(E_{q(z|x)}[z_u]), exceeds 10⁻².

The Mutual Information Gap (Chen et al., 2018), with the discrete estimator of disentanglement_lib (Locatello et
al., 2019): each code dimension z_j (the posterior means) is cut into ``bins`` equal-width bins between its
minimum and maximum, each factor v_k is discrete, and for each factor

    gap_k = (I(z_(1); v_k) − I(z_(2); v_k)) / H(v_k),

with z_(1), z_(2) the dimensions of largest and second-largest mutual information with v_k, the plug-in (empirical)
mutual information and entropy in nats. MIG is the mean of gap_k over the factors: 1 when each factor is read off one
dimension that no other dimension shares, 0 when the two best dimensions know a factor equally well. Written here
(no dependency on scikit-learn for one contingency table); the plug-in estimate is biased upwards by about
(levels_a − 1)(levels_b − 1) / 2n nats for independent variables, which the tests' exact cases avoid.
"""
import numpy as np

ACTIVE = 1e-2


def active_units(means, threshold=ACTIVE):
    """(number of active dimensions, A_u per dimension) of posterior means ``means`` [n, d]."""
    means = np.asarray(means, dtype=np.float64)
    variance = means.var(axis=0)
    return int((variance > threshold).sum()), variance


def discretize(codes, bins=20):
    """Each column of ``codes`` [n, d] as bin indices 0..bins−1 of ``bins`` equal-width bins over its range."""
    codes = np.asarray(codes, dtype=np.float64)
    low, high = codes.min(axis=0), codes.max(axis=0)
    width = np.where(high > low, (high - low) / bins, 1.0)
    return np.minimum(((codes - low) / width).astype(np.int64), bins - 1)


def entropy(a):
    """Plug-in entropy (nats) of the discrete values ``a`` [n]."""
    _, counts = np.unique(a, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def mutual_information(a, b):
    """Plug-in mutual information (nats) of the discrete values ``a`` and ``b`` [n]: Σ p(a, b) log p(a, b) / p(a) p(b)."""
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    joint = np.zeros((ia.max() + 1, ib.max() + 1))
    np.add.at(joint, (ia, ib), 1.0)
    joint /= joint.sum()
    pa, pb = joint.sum(axis=1, keepdims=True), joint.sum(axis=0, keepdims=True)
    nz = joint > 0
    return float((joint[nz] * np.log(joint[nz] / (pa @ pb)[nz])).sum())


def mutual_information_gap(codes, factors, bins=20):
    """(MIG, gap_k per factor, the matrix I(z_j; v_k) [d, K]) of posterior means ``codes`` [n, d] (d ≥ 2) against
    discrete factors ``factors`` [n, K] (module docstring)."""
    codes, factors = np.asarray(codes), np.asarray(factors)
    if codes.ndim != 2 or codes.shape[1] < 2 or len(codes) != len(factors):
        raise ValueError("MIG needs codes [n, d ≥ 2] and factors [n, K] of the same n: got %s and %s"
                         % (codes.shape, factors.shape))
    binned = discretize(codes, bins)
    mi = np.array([[mutual_information(binned[:, j], factors[:, k]) for k in range(factors.shape[1])]
                   for j in range(binned.shape[1])])
    top = np.sort(mi, axis=0)[::-1]
    gaps = (top[0] - top[1]) / np.array([entropy(factors[:, k]) for k in range(factors.shape[1])])
    return float(gaps.mean()), gaps, mi
