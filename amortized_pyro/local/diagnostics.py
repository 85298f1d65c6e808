"""Per-datapoint checks of a local factor q(z_n): the Pareto shape k̂ of its importance weights and the rank
statistics of simulation-based calibration, for any log joint.

**k̂** (Yao, Vehtari, Simpson & Gelman 2018, "Yes, but did it work?"). For one datapoint and one global value θ,
the importance weights of S draws z_s ~ q(z_n),

    log w_s = log p(x_n, z_s | θ) − log q(z_s)

(in the local sites' unconstrained space, Jacobian included, as every local quantity here), are Pareto-smoothed
and the fitted generalized Pareto shape k̂ of their upper tail read off: k̂ < 0.5 good, 0.5–0.7 usable, > 0.7 the
importance-sampling estimates built on q are unreliable (Vehtari et al. 2024's thresholds; for S draws the
sample-size-dependent one is min(1 − 1/log10 S, 0.7)). The smoothing and the fit are ArviZ's (``az.psislw``),
not written here. Where z_n has tens of dimensions, log w_s is a sum of many terms, heavy-tailed wherever q misses
the posterior, and k̂ can exceed 0.7 for every datapoint (the informative preset's MNIST runs, docs/results.md):
then the thresholds single no datapoint out and k̂ is read as a ranking (docs/diagnostics.md).

**Ranks** (Talts et al. 2018; per datapoint, through a factor: "local SBC"). For a simulated z_n (drawn from the
model's prior) and its simulated x_n, the rank of each coordinate of z_n among L draws of q(z_n | x_n): if q is
the exact posterior, every rank is uniform on {0, …, L}. :func:`uniformity` tests that, per coordinate.
"""
import math
import warnings

import numpy as np
import torch
from scipy import stats

THRESHOLDS = (0.5, 0.7)  # k̂: good below the first, usable below the second, unreliable above (Vehtari et al.)
GRADES = ("good", "usable", "unreliable")

KHAT_DRAWS = 25  # ArviZ fits k̂ on the largest min(S / 5, 3 √S) weights: at S ≤ 20 that tail is too short (k̂ = ∞)


CONSTANT = 1e-4  # nats: log weights whose standard deviation is below this are constant (q ∝ the target)


def pareto_khat(log_weights):
    """The Pareto shape k̂ of the importance weights ``log_weights`` [..., S] (draws along the last dimension),
    per leading entry: ArviZ's PSIS (``az.psislw``), the same fit ``az.loo`` reports. Where the log weights are
    constant (standard deviation below :data:`CONSTANT`: q is the target up to rounding) no tail exists to fit,
    and k̂ is −∞ (ArviZ's fit on rounding noise can return anything, +∞ included). Returns a float64 ndarray."""
    import arviz as az  # imported here: ArviZ costs ~1 s to import, and only the diagnostics need it
    values = torch.as_tensor(log_weights).detach().double().cpu().numpy()
    with warnings.catch_warnings():  # ArviZ warns per call where k̂ > 0.7: the caller reports k̂ itself
        warnings.simplefilter("ignore")
        khat = np.asarray(az.psislw(values)[1], dtype=np.float64)
    return np.where(values.std(-1) < CONSTANT, -np.inf, khat)


def grade(khat, samples=None):
    """The usual reading of each k̂ (:data:`GRADES`), a list of strings: good below 0.5, usable below 0.7 or, for
    ``samples`` draws, below :func:`sample_threshold` where that is lower, unreliable above; −∞ (constant weights)
    is good, NaN unreliable."""
    thresholds = usable_below(samples)
    return [GRADES[int(np.searchsorted(thresholds, k, side="right"))] if not np.isnan(k) else "unreliable"
            for k in np.ravel(khat)]


def usable_below(samples=None):
    """(good below, usable below) for k̂ from ``samples`` draws (None: the usual 0.5 and 0.7)."""
    good, usable = THRESHOLDS
    return (good, usable if samples is None else max(good, min(usable, sample_threshold(samples))))


def sample_threshold(samples):
    """Vehtari et al. (2024)'s k̂ threshold for S draws: min(1 − 1 / log10 S, 0.7)."""
    return min(1 - 1 / math.log10(samples), 0.7) if samples > 10 else 0.0


def ranks(truth, draws):
    """The rank of each coordinate of ``truth`` [..., D] among ``draws`` [L, ..., D]: how many draws fall below
    it, in {0, …, L} (a tie, of probability zero for a continuous q, counts as not below). Returns a LongTensor
    [..., D]."""
    return (draws < truth.unsqueeze(0)).sum(0)


def rank_bins(draws, simulations, most=20):
    """How many equal bins the ranks in {0, …, L} (``draws`` = L) are tested in: the largest divisor of L + 1
    that is at most ``most`` and leaves at least 5 simulations expected per bin (the chi-square test's rule of
    thumb); each bin then holds the same number of rank values, so the bins are equally likely under
    uniformity. 1 where no such divisor exists (then nothing is tested)."""
    cap = min(most, simulations // 5)
    return max([b for b in range(1, cap + 1) if (draws + 1) % b == 0], default=1)


def uniformity(rank_values, draws):
    """A chi-square test of uniform ranks per coordinate: ``rank_values`` [N, D] in {0, …, ``draws``}, N
    simulations. Returns {"bins", "p_values" [D] (None per coordinate where bins < 2), "p_value": the
    Bonferroni combination min(1, D · min_d p_d), a valid test of "every coordinate uniform" whatever the
    dependence between coordinates}."""
    rank_values = torch.as_tensor(rank_values).cpu()
    n, dims = rank_values.shape
    bins = rank_bins(draws, n)
    if bins < 2:
        return {"bins": bins, "p_values": [None] * dims, "p_value": None}
    binned = (rank_values * bins) // (draws + 1)
    counts = torch.stack([torch.bincount(binned[:, d], minlength=bins) for d in range(dims)]).numpy()
    p_values = stats.chisquare(counts, axis=1).pvalue
    return {"bins": bins, "p_values": [float(p) for p in p_values],
            "p_value": float(min(1.0, dims * float(np.min(p_values))))}
