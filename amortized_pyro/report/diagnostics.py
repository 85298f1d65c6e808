"""What ``diagnose`` prints and draws of a run's diagnostics (:mod:`amortized_pyro.gap.diagnose`): per split the
k̂ of each factor (median, range, the share in each of the usual grades) and what the thresholds say there; the
calibration test; a histogram of k̂ and the ranks' ECDF differences with simultaneous bands (ArviZ's
``plot_ecdf``, Säilynoja et al. 2022)."""
import numpy as np

from amortized_pyro.local.diagnostics import GRADES, usable_below
from amortized_pyro.report.style import save_figure, subplots

SMALL_P = 0.01  # the level the output reads a p-value at (tests/test_diagnose.py's ALPHA)
ECDF_PANELS = 4
KHAT_DRAWN_UP_TO = 20  # k̂ beyond it (+∞ where too few draws) drawn at it  # coordinates drawn: the ones with the lowest p-values


def _khat_line(name, summary):
    khat = np.asarray(summary["khat"], dtype=float)
    shares = ", ".join("%s %.0f %%" % (g, 100 * np.mean([s == g for s in summary["grade"]])) for g in GRADES)
    return "  %-12s k̂ median %.2f (%.2f to %.2f); %s; log-weight spread median %.1f" % (
        name, np.median(khat), np.min(khat), np.max(khat), shares, np.median(summary["spread"]))


def format_diagnosis(report):
    """The report as lines of text."""
    lines = ["%s (%s, seed %d): k̂ from %d z draws at each of %d θ draws per image (good < %.2f, usable < %.2f, "
             "unreliable above)" % (report["run"], report["guide"], report["seed"], report["samples"],
                                    report["theta_draws"], *usable_below(report["samples"]))]
    for split, found in report["splits"].items():
        lines.append("%s: %d images (gap seed %d)" % (split, len(found["images"]), found["gap_seed"]))
        lines += [_khat_line(name, found[name]) for name in found if isinstance(found[name], dict)]
        lines.append("  reading: " + found["reading"])
    calibration = report.get("calibration")
    if calibration is None:
        lines.append("calibration: not measured (a per-datapoint guide has no factor for simulated images)")
    elif calibration["p_value"] is None:
        lines.append("calibration: too few simulations to test (%d)" % calibration["simulations"])
    else:
        p = calibration["p_value"]
        said = ("below %g: q(z|x) is not the fitted model's posterior on the model's own simulations" % SMALL_P
                if p < SMALL_P else "no departure from uniform ranks at this many simulations")
        lines.append("calibration: %d simulated images, ranks among %d draws of q in %d bins: p %s for \"every "
                     "coordinate uniform\" (Bonferroni over %d coordinates): %s"
                     % (calibration["simulations"], calibration["draws"], calibration["bins"],
                        "= %.3g" % p if p > 0 else "< 1e-300", calibration["size"], said))
    return "\n".join(lines)


def khat_figure(report, path):
    """A histogram of k̂ per split and factor, the thresholds marked."""
    splits = list(report["splits"])
    fig, axes = subplots(1, len(splits), figsize=(5 * len(splits), 3.5), squeeze=False)
    for ax, split in zip(axes[0], splits):
        found = report["splits"][split]
        names = [n for n in found if isinstance(found[n], dict)]
        values = [np.clip(np.asarray(found[n]["khat"], dtype=float), -1, KHAT_DRAWN_UP_TO) for n in names]
        ax.hist(values, bins=20, label=names, histtype="step", linewidth=1.5)
        for t in usable_below(report["samples"]):
            ax.axvline(t, color="grey", linestyle=":")
        ax.set_xlabel("Pareto k-hat per image (−∞ drawn at −1, above %g at %g)" % ((KHAT_DRAWN_UP_TO,) * 2))
        ax.set_ylabel("images")
        ax.set_title("%s: %d images" % (split, len(found["images"])))
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def uniform_ranks(draws):
    """A sampler of the fractional ranks (r + ½) / (L + 1), r uniform on {0, …, L}: what ArviZ's bands are
    calibrated on for a discrete variable."""
    def sample(n, random_state=None):
        generator = random_state if random_state is not None else np.random.default_rng()
        return (generator.integers(0, draws + 1, n) + 0.5) / (draws + 1)
    return sample


def ecdf_figure(calibration, path):
    """The ranks' ECDF minus the uniform CDF for the :data:`ECDF_PANELS` coordinates of lowest p-value, with
    ArviZ's simultaneous 95 % bands (evaluated at the rank boundaries, where discrete ranks and the uniform
    agree)."""
    import arviz as az
    ranks = np.asarray(calibration["ranks"], dtype=float)
    draws, p_values = calibration["draws"], calibration["p_values"]
    order = np.argsort([p if p is not None else 1.0 for p in p_values])[:ECDF_PANELS]
    fig, axes = subplots(1, len(order), figsize=(3.2 * len(order), 3), squeeze=False)
    points = np.arange(1, draws + 1) / (draws + 1)
    for ax, d in zip(axes[0], order):
        az.plot_ecdf((ranks[:, d] + 0.5) / (draws + 1), cdf=lambda u: np.clip(u, 0, 1), eval_points=points,
                     difference=True, confidence_bands=True, ax=ax, rvs=uniform_ranks(draws),
                     random_state=np.random.default_rng(0))
        p = p_values[d]
        ax.set_title("u[%d]: p %s" % (d, "n/a" if p is None else "= %.2g" % p if p > 0 else "< 1e-300"), fontsize=9)
        ax.set_xlabel("fractional rank")
    axes[0][0].set_ylabel("ECDF − uniform")
    return save_figure(fig, path)
