"""Figures of a comparison, drawn from its saved results alone (matplotlib, PNG).

    fig1_neg_elbo       −ELBO per observation against epoch on a log scale; where the ELBO turns positive
                        (as it can with a sharp normal likelihood), the ELBO itself on a linear axis
                        (:func:`elbo_axis`; never a symmetric-log axis, whose linear band around zero
                        draws a cliff)
    fig2_train_mse      plug-in (solid) and posterior-predictive (dotted) reconstruction MSE on the
                        training images against epoch, the mean training image's MSE a wide pale dashed
                        line under them (constant-VI's curves lie on it)
    fig3_test_mse       the same on held-out images (F-VI has none)
    fig4_speed          SVI steps until the train plug-in MSE falls below a fraction (0.9) of the mean
                        image's, i.e. until z is used: per seed, linear between the two evaluations around
                        the crossing, with a bar between them (:func:`crossing`); ms of SVI steps per epoch,
                        and the training seconds until z is used by the runs' clocks
    fig5_reconstructions_DATASET   originals and every configuration's reconstructions, side by side
    fig6_elbo_seeds     the ELBO curve of every seed, one panel per configuration, on fig1's axis
    fig7_gaps           (with measured gaps; also from ``gap`` reports) the amortization gap against encoder width, train and test,
                        with F-VI and constant-VI as reference lines, and the gap left after k refinement steps

Curves show the mean over seeds with a band from the lowest to the highest seed (named in the legend).
"""
import math
from pathlib import Path

import numpy as np

from amortized_pyro.models.guides import display_order
from amortized_pyro.report.gap_figures import gap_figure
from amortized_pyro.report.marks import spread
from amortized_pyro.report.style import configuration_colors, empty_panel, legend_outside, save_figure, subplots
from amortized_pyro.runs.layout import slug
from amortized_pyro.study.results import PLATEAU_FRACTION

BAND = "band: lowest to highest seed"
REFERENCE_LOOK = dict(color="tab:orange", ls="--", lw=5, alpha=0.4, zorder=1)  # wide and pale, under the curves


def _curves(results, dataset, key):
    """{label: (epochs, values [seeds, epochs])} for one dataset, configurations in display order."""
    per_label = {}
    for (ds, name, seed), rows in sorted(results.runs().items()):
        if ds == dataset:
            per_label.setdefault(name, []).append(rows)
    curves = {}
    for name in sorted(per_label, key=display_order):
        length = min(len(rows) for rows in per_label[name])
        values = np.array([[r[key] for r in rows[:length]] for rows in per_label[name]], dtype=float)
        if not np.isnan(values).all():
            curves[name] = (np.array([r["epoch"] for r in per_label[name][0][:length]]), values)
    return curves


def _title(results, dataset, what):
    rows = [r for r in results.rows if r["dataset"] == dataset]
    seeds = len({r["seed"] for r in rows})
    study = rows[0]["study"]
    return "%s\n(%s study: %s, N=%d, %d epochs, %d seed%s)" % (
        what, study, dataset, rows[0]["n_obs"], max(r["epoch"] for r in rows), seeds, "s" * (seeds > 1))


def set_log_scale(ax, values):
    """Log scale where every value is positive, else a linear axis (never symmetric-log: its linear band
    around zero bends the curves into a cliff and crowds its ticks)."""
    finite = np.concatenate([np.ravel(v) for v in values]) if values else np.array([1.0])
    finite = finite[np.isfinite(finite)]
    ax.set_yscale("log" if not len(finite) or finite.min() > 0 else "linear")


def elbo_axis(results):
    """How fig1 and fig6 draw the ELBO: (sign, log scale or not, axis label, what: its name and why this axis):
    −ELBO on a log scale where every ELBO is negative; where some turn positive (a sharp normal likelihood's
    density exceeds 1) −ELBO has no log scale, and the ELBO itself is drawn on a linear axis."""
    values = np.array([r["elbo_per_obs"] for r in results.rows], dtype=float)
    if (values[np.isfinite(values)] < 0).all():
        return -1, True, "−ELBO per observation (nats, log scale; lower is better)", ("−ELBO", "")
    return 1, False, "ELBO per observation (nats; higher is better)", \
        ("ELBO", " (it turns positive here, so −ELBO has no log scale: a linear axis)")


def curve_figure(results, keys, ylabel, what, path, log_scale=False, negate=False, baseline=None):
    """One panel per dataset: the mean over seeds of each key in ``keys`` (solid, then dotted) against epoch,
    with a min–max band; ``baseline`` names the mean-image key to draw as a dashed line."""
    datasets = sorted({r["dataset"] for r in results.rows})
    fig, axes = subplots(1, len(datasets), figsize=(9.5 * len(datasets), 4.5), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        plotted, band = [], False
        for key, style in zip(keys, ("-", ":")):
            curves = _curves(results, dataset, key)
            colors = configuration_colors(list(curves))
            for name, (epochs, values) in curves.items():
                values = -values if negate else values
                plotted.append(values)
                tag = name if len(keys) == 1 else "%s (%s)" % (name, key.split("_")[1])
                ax.plot(epochs, np.nanmean(values, 0), style, color=colors[name], label=tag, lw=1.5, zorder=3)
                if len(values) > 1 and style == "-":
                    ax.fill_between(epochs, np.nanmin(values, 0), np.nanmax(values, 0), color=colors[name], alpha=0.2,
                                    lw=0, zorder=2)
                    band = True
        reference = results.baseline(dataset) if baseline else None
        if reference and reference[baseline] == reference[baseline]:
            ax.axhline(reference[baseline], label="mean training image (ignores z)", **REFERENCE_LOOK)
        if band:  # what the shading is, once per panel
            ax.fill_between([], [], color="0.5", alpha=0.3, lw=0, label=BAND)
        ax.set(xlabel="epoch", ylabel=ylabel, title=_title(results, dataset, what))
        ax.title.set_fontsize(9)
        if log_scale:
            set_log_scale(ax, plotted)
        ax.grid(alpha=0.3)
        legend_outside(ax)
    return save_figure(fig, path)


def crossing(rows, baseline, fraction=PLATEAU_FRACTION):
    """Where a run's train plug-in MSE first fell below ``fraction`` × the mean image's, between its evaluations:
    {"before", "after": the SVI steps of the evaluations around it (0 before the first one), "steps": linear
    between them in the MSE (None where the first evaluation is already below: no value before it),
    "seconds": the run's training clock there (evaluations excluded; the time per step between the two
    evaluations), "by_seconds": the clock at "after"}; None where it never fell below, or no mean image was
    saved. Unlike the first evaluation below (the table's iterations), not set by how often the run was
    evaluated."""
    target = fraction * baseline["train_mse"] if baseline else math.nan
    for i, row in enumerate(rows):
        if row["train_plugin_mse"] < target:
            prev = rows[i - 1] if i else {"iteration": 0, "time": 0.0, "train_plugin_mse": math.nan}
            share = (prev["train_plugin_mse"] - target) / (prev["train_plugin_mse"] - row["train_plugin_mse"])
            known = math.isfinite(share)
            return {"before": prev["iteration"], "after": row["iteration"], "by_seconds": row["time"],
                    "steps": prev["iteration"] + share * (row["iteration"] - prev["iteration"]) if known else None,
                    "seconds": prev["time"] + share * (row["time"] - prev["time"]) if known else None}
    return None


def _spacing(runs):
    """"N" or "N–M": the SVI steps between a dataset's consecutive evaluations."""
    gaps = sorted({b["iteration"] - a["iteration"] for group in runs.values() for rows in group
                   for a, b in zip(rows, rows[1:])}) or [0]
    return "%d" % gaps[0] if len(gaps) == 1 else "%d–%d" % (gaps[0], gaps[-1])


def speed_figure(results, path, fraction=PLATEAU_FRACTION):
    """Per dataset, above: the SVI steps until the train plug-in MSE falls below ``fraction`` × the mean
    image's, a point per seed that got there (:func:`crossing`: linear between the two evaluations around it,
    a bar between them; a triangle at the first evaluation, its bar from step 0, where that one was already
    below), or a line saying that no run did (no axes then); below: the training time per epoch
    (:func:`~amortized_pyro.runs.store.ms_per_epoch`), mean ± the standard error over seeds (none with one
    seed), in each bar the training seconds until z was used by the runs' clocks (mean over seeds)."""
    datasets = sorted({r["dataset"] for r in results.rows})
    summary = {(r["dataset"], r["label"]): r for r in results.summary(fraction)}
    fig, axes = subplots(2, len(datasets), figsize=(6.5 * len(datasets), 8.5), squeeze=False)
    for col, dataset in enumerate(datasets):
        runs = {}
        for (ds, name, seed), rows in results.runs().items():
            if ds == dataset:
                runs.setdefault(name, []).append(rows)
        names = sorted(runs, key=display_order)
        colors, baseline = configuration_colors(names), results.baseline(dataset)
        found = {n: [c for c in (crossing(rows, baseline, fraction) for rows in runs[n]) if c] for n in names}
        ax = axes[0][col]
        title = _title(results, dataset, "Speed: SVI steps until train plug-in MSE < %g × the mean image's (z used)"
                       % fraction)
        if any(found.values()):
            for i, name in enumerate(names):
                offsets = np.linspace(-0.15, 0.15, len(found[name])) if len(found[name]) > 1 else [0.0]
                for dx, c in zip(offsets, found[name]):
                    y = c["after"] if c["steps"] is None else c["steps"]
                    ax.errorbar([i + 1 + dx], [y], yerr=[[y - c["before"]], [c["after"] - y]], capsize=3, ms=5,
                                fmt="v" if c["steps"] is None else "o", color=colors[name])
                ax.annotate("%d/%d seeds" % (len(found[name]), len(runs[name])), (i + 1, 0),
                            xycoords=("data", "axes fraction"), xytext=(0, 3), textcoords="offset points",
                            ha="center", fontsize=7)
            ax.set_xticks(range(1, len(names) + 1), names)
            ax.set(xlim=(0.5, len(names) + 0.5), ylim=(-0.08 * ax.get_ylim()[1], ax.get_ylim()[1]), ylabel="SVI steps")
            title += ("\nper seed: ● linear between the two evaluations around the crossing, the bar between them\n"
                      "(evaluated every %s steps); ▼ already below at its first evaluation, the bar from step 0"
                      % _spacing(runs))
        else:  # nothing to draw: say so, with no axes to read values off
            empty_panel(ax, "no run reached train plug-in MSE < %g × the mean image's (0/%d runs)" % (
                fraction, sum(map(len, runs.values()))) if baseline else "no mean-image MSE saved: speed not measured")
        ax.set_title(title, fontsize=8)
        ms = [summary[(dataset, n)]["ms_per_epoch"] for n in names]
        ax = axes[1][col]
        ax.bar(range(len(names)), [m[0] for m in ms], yerr=[0 if np.isnan(m[1]) else m[1] for m in ms],
               color=[colors[n] for n in names], capsize=3)
        for i, name in enumerate(names):
            timed = [c["seconds"] for c in found[name] if c["seconds"] is not None]
            if found[name]:
                ax.annotate("z used after\n≈ %.3g s" % np.mean(timed) if timed else "z used by\n≤ %.3g s" % max(
                    c["by_seconds"] for c in found[name]), (i, 0), xytext=(0, 4), textcoords="offset points",
                            ha="center", fontsize=7, bbox=dict(boxstyle="round", fc="white", alpha=0.8, lw=0))
        ax.set_xticks(range(len(names)), names)
        ax.set(ylabel="training time per epoch (ms)", title="SVI time per epoch, evaluations excluded (%s);\nin a "
               "bar: training seconds until z was used, by the runs' clocks" % spread(
                   [len(runs[n]) for n in names], "mean ± s.e. over seeds", "no error bar"))
        ax.title.set_fontsize(8)
        for a in axes[:, col]:
            a.tick_params(axis="x", labelsize=8, rotation=20)
            a.grid(alpha=0.3, axis="y")
    return save_figure(fig, path)


def reconstruction_figure(results, dataset, path):
    """Originals and every configuration's reconstructions of ``dataset``, or None where none were saved."""
    recs = [r for r in results.reconstructions if r["dataset"] == dataset]
    if not recs:
        return None
    names = ["original"] + sorted({r["label"] for r in recs if r["label"] != "original"}, key=display_order)
    images = {(r["label"], r["split"]): np.array(r["images"]) for r in recs}
    n = max(len(v) for v in images.values())
    side = int(round(np.sqrt(next(iter(images.values())).shape[1])))
    channels, height, width = recs[0].get("shape") or (1, side, side)  # results of earlier versions: gray squares
    fig, axes = subplots(2 * n, len(names), figsize=(1.2 * len(names), 1.2 * 2 * n + 0.8), squeeze=False)
    for col, name in enumerate(names):
        for s, split in enumerate(("train", "test")):
            for i in range(n):
                ax = axes[s * n + i][col]
                ax.set_xticks([])
                ax.set_yticks([])
                block = images.get((name, split))
                if block is not None and i < len(block):
                    if channels == 1:
                        ax.imshow(block[i].reshape(height, width), cmap="gray", vmin=0, vmax=1)
                    else:  # channel-first rows, drawn as height × width × colour
                        ax.imshow(block[i].reshape(channels, height, width).transpose(1, 2, 0).clip(0, 1))
                else:
                    ax.text(0.5, 0.5, "n/a", ha="center", va="center", fontsize=7, transform=ax.transAxes)
                if i == 0 and s == 0:
                    ax.set_title(name, fontsize=7)
                if col == 0:
                    ax.set_ylabel("%s %d" % (split, i + 1), fontsize=7)
    fig.suptitle(_title(results, dataset, "Plug-in reconstructions m(Ω(E[z]; E[θ])); F-VI has no q(z) for test images"),
                 fontsize=8)
    return save_figure(fig, path)


def seeds_figure(results, path):
    """The ELBO of every seed, a panel per (dataset, configuration), on fig1's axis (:func:`elbo_axis`)."""
    datasets = sorted({r["dataset"] for r in results.rows})
    names = sorted({r["label"] for r in results.rows}, key=display_order)
    panels = [(dataset, name) for dataset in datasets for name in names]
    sign, log, ylabel, what = elbo_axis(results)
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, (dataset, name) in zip(axes.flat, panels):
        curves = _curves(results, dataset, "elbo_per_obs")
        if name in curves:
            epochs, values = curves[name]
            seeds = sorted({s for (ds, n, s) in results.runs() if (ds, n) == (dataset, name)})
            for seed, seed_values in zip(seeds, values):
                ax.plot(epochs, sign * seed_values, lw=1, label="seed %d" % seed)
            ax.legend(fontsize=7)
            ax.set_yscale("log" if log else "linear")
        ax.set_title("%s: %s" % (dataset, name), fontsize=8)
        ax.set_xlabel("epoch", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(_title(results, datasets[0], "%s of every seed%s" % what), fontsize=9)
    return save_figure(fig, path)


def plot_all(results, out, fraction=PLATEAU_FRACTION):
    """Draw every figure into ``out``; returns the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "fig1_neg_elbo.png", out / "fig2_train_mse.png", out / "fig3_test_mse.png", out / "fig4_speed.png"]
    sign, log, ylabel, what = elbo_axis(results)
    curve_figure(results, ["elbo_per_obs"], ylabel, "".join(what), paths[0], log_scale=log, negate=sign < 0)
    for split, path in (("train", paths[1]), ("test", paths[2])):
        curve_figure(results, ["%s_plugin_mse" % split, "%s_predictive_mse" % split],
                     "%s reconstruction MSE" % split, "%s MSE: plug-in (solid), predictive (dotted)" % split.title(),
                     path, log_scale=True, baseline="%s_mse" % split)
    speed_figure(results, paths[3], fraction)
    for dataset in sorted({r["dataset"] for r in results.rows}):
        path = out / ("fig5_reconstructions_%s.png" % slug(dataset))
        if reconstruction_figure(results, dataset, path) is not None:
            paths.append(path)
    paths.append(out / "fig6_elbo_seeds.png")
    seeds_figure(results, paths[-1])
    if results.gaps:
        paths.append(out / "fig7_gaps.png")
        gap_figure(results.gaps, paths[-1])
    return paths

