"""Figures of a comparison, drawn from its saved results alone (matplotlib, PNG).

    fig1_neg_elbo       −ELBO per observation against epoch (log scale; symmetric-log where the ELBO
                        turns positive, as it can with a sharp normal likelihood)
    fig2_train_mse      plug-in (solid) and posterior-predictive (dotted) reconstruction MSE on the
                        training images against epoch, with the mean training image's MSE as a dashed line
    fig3_test_mse       the same on held-out images (F-VI has none)
    fig4_speed          SVI steps until the train plug-in MSE falls below a fraction (0.9) of the mean
                        image's, i.e. until z is used (box over seeds), and ms of SVI steps per epoch
    fig5_reconstructions_DATASET   originals and every configuration's reconstructions, side by side
    fig6_elbo_seeds     the −ELBO curve of every seed, one panel per configuration
    fig7_gaps           (with measured gaps; also from ``gap`` reports) the amortization gap against encoder width, train and test,
                        with F-VI and constant-VI as reference lines, and the gap left after k refinement steps

Curves show the mean over seeds with a band from the minimum to the maximum seed.
"""
from pathlib import Path

import numpy as np

from amortized_pyro.models.guides import display_order
from amortized_pyro.report.gap_figures import gap_figure
from amortized_pyro.report.style import configuration_colors, legend_outside, save_figure, subplots
from amortized_pyro.report.tables import spread
from amortized_pyro.runs.layout import slug
from amortized_pyro.study.results import PLATEAU_FRACTION, iterations_to_leave


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
    """Log scale, or symmetric-log where some values are not positive."""
    finite = np.concatenate([np.ravel(v) for v in values]) if values else np.array([1.0])
    finite = finite[np.isfinite(finite)]
    if len(finite) and finite.min() <= 0:
        ax.set_yscale("symlog", linthresh=max(1.0, float(np.abs(finite).min())))
    else:
        ax.set_yscale("log")


def curve_figure(results, keys, ylabel, what, path, log_scale=False, negate=False, baseline=None):
    """One panel per dataset: the mean over seeds of each key in ``keys`` (solid, then dotted) against epoch,
    with a min–max band; ``baseline`` names the mean-image key to draw as a dashed line."""
    datasets = sorted({r["dataset"] for r in results.rows})
    fig, axes = subplots(1, len(datasets), figsize=(9.5 * len(datasets), 4.5), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        plotted = []
        for key, style in zip(keys, ("-", ":")):
            curves = _curves(results, dataset, key)
            colors = configuration_colors(list(curves))
            for name, (epochs, values) in curves.items():
                values = -values if negate else values
                plotted.append(values)
                tag = name if len(keys) == 1 else "%s (%s)" % (name, key.split("_")[1])
                ax.plot(epochs, np.nanmean(values, 0), style, color=colors[name], label=tag, lw=1.5)
                if len(values) > 1 and style == "-":
                    ax.fill_between(epochs, np.nanmin(values, 0), np.nanmax(values, 0), color=colors[name],
                                    alpha=0.2)
        reference = results.baseline(dataset) if baseline else None
        if reference and reference[baseline] == reference[baseline]:
            ax.axhline(reference[baseline], color="black", ls="--", lw=1, label="mean training image (ignores z)")
        ax.set(xlabel="epoch", ylabel=ylabel, title=_title(results, dataset, what))
        ax.title.set_fontsize(9)
        if log_scale:
            set_log_scale(ax, plotted)
        ax.grid(alpha=0.3)
        legend_outside(ax)
    return save_figure(fig, path)


def speed_figure(results, path, fraction=PLATEAU_FRACTION):
    """Per dataset, above: the SVI steps until the train plug-in MSE falls below ``fraction`` × the mean
    image's (a box over the seeds that got there), or a line saying that no run did (no axes then); below:
    the training time per epoch (:func:`~amortized_pyro.runs.store.ms_per_epoch`), mean ± the standard error
    over seeds (none with one seed)."""
    datasets = sorted({r["dataset"] for r in results.rows})
    summary = {(r["dataset"], r["label"]): r for r in results.summary(fraction)}
    fig, axes = subplots(2, len(datasets), figsize=(6.5 * len(datasets), 8), squeeze=False)
    for col, dataset in enumerate(datasets):
        runs = {}
        for (ds, name, seed), rows in results.runs().items():
            if ds == dataset:
                runs.setdefault(name, []).append(rows)
        names = sorted(runs, key=display_order)
        baseline = results.baseline(dataset)
        reached = [[i for i in (iterations_to_leave(r, baseline, fraction) for r in runs[n]) if i is not None]
                   for n in names]
        ax = axes[0][col]
        what = "SVI steps until train plug-in MSE < %g × the mean image's (z used)" % fraction
        ax.set_title(_title(results, dataset, "Speed: " + what), fontsize=9)
        if any(reached):
            ax.boxplot([r if r else [np.nan] for r in reached], tick_labels=names)
            for i, (name, r) in enumerate(zip(names, reached)):
                ax.annotate("%d/%d seeds" % (len(r), len(runs[name])), (i + 1, 0), xycoords=("data", "axes fraction"),
                            xytext=(0, 3), textcoords="offset points", ha="center", fontsize=7)
            ax.set_ylabel("SVI steps")
        else:  # nothing to draw: say so, with no axes to read values off
            ax.text(0.5, 0.5, "no run reached train plug-in MSE < %g × the mean image's (0/%d runs)" % (
                fraction, sum(map(len, runs.values()))) if baseline else "no mean-image MSE saved: speed not measured",
                    ha="center", va="center", fontsize=9, transform=ax.transAxes)
            ax.set_axis_off()
        ms = [summary[(dataset, n)]["ms_per_epoch"] for n in names]
        seeds = [len(runs[n]) for n in names]
        ax = axes[1][col]
        ax.bar(range(len(names)), [m[0] for m in ms], yerr=[0 if np.isnan(m[1]) else m[1] for m in ms],
               color=[configuration_colors(names)[n] for n in names], capsize=3)
        ax.set_xticks(range(len(names)), names)
        ax.set(ylabel="training time per epoch (ms)", title="SVI time per epoch, evaluations excluded (%s)" % spread(
            seeds, "mean ± s.e. over seeds", "no error bar"))
        ax.title.set_fontsize(9)
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
    datasets = sorted({r["dataset"] for r in results.rows})
    names = sorted({r["label"] for r in results.rows}, key=display_order)
    panels = [(dataset, name) for dataset in datasets for name in names]
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, (dataset, name) in zip(axes.flat, panels):
        curves = _curves(results, dataset, "elbo_per_obs")
        if name in curves:
            epochs, values = curves[name]
            seeds = sorted({s for (ds, n, s) in results.runs() if (ds, n) == (dataset, name)})
            for seed, seed_values in zip(seeds, values):
                ax.plot(epochs, -seed_values, lw=1, label="seed %d" % seed)
            ax.legend(fontsize=7)
            set_log_scale(ax, [-values])
        ax.set_title("%s: %s" % (dataset, name), fontsize=8)
        ax.set_xlabel("epoch", fontsize=8)
        ax.set_ylabel("−ELBO per observation (nats)", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(_title(results, datasets[0], "−ELBO of every seed"), fontsize=9)
    return save_figure(fig, path)


def plot_all(results, out, fraction=PLATEAU_FRACTION):
    """Draw every figure into ``out``; returns the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "fig1_neg_elbo.png", out / "fig2_train_mse.png", out / "fig3_test_mse.png", out / "fig4_speed.png"]
    curve_figure(results, ["elbo_per_obs"], "−ELBO per observation (nats)", "−ELBO", paths[0], log_scale=True, negate=True)
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

