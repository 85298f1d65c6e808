"""Figures of gap measurements (matplotlib, PNG), from the reports alone:

    gap_figure          the amortization gap against encoder width, train and test, with F-VI and
                        constant-VI as reference lines, and the gap left after k refinement steps
    capacity_figure     fresh encoders on a frozen q(θ): the amortization gap against width, per depth
"""
import matplotlib
import matplotlib.ticker
import numpy as np

from amortized_pyro.gap.pooling import gap_over_seeds, over_seeds, refinement_over_seeds, seed_groups
from amortized_pyro.models.guides import ENCODER_GUIDES, display_order
from amortized_pyro.report.style import FAMILY_COLORS, configuration_colors, legend_outside, save_figure, subplots


def gap_figure(reports, path):
    """Amortization gap (mean ± standard error over images) against encoder width, with F-VI and
    constant-VI as horizontal lines in a ± s.e. band; and the gap left after k refinement steps (± s.e. over
    images), per configuration. A colour per family (left) or configuration (right), a line style per split
    (train solid, test dashed): no two lines look alike. Several training seeds of a configuration: their mean
    ± the standard error over seeds and images (:func:`~amortized_pyro.gap.pooling.pooled`)."""
    groups = seed_groups(reports)
    spread = ("mean over training seeds ± s.e. over seeds and images" if max(map(len, groups.values()), default=1) > 1
              else "mean ± s.e. over images")
    one = {key: dict(group[0], amortization_gap=gap_over_seeds(group, "amortization_gap"),
                     refinement=[dict(row, gap_left=refinement_over_seeds(group, row["steps"]))
                                 for row in group[0]["refinement"]])
           for key, group in groups.items()}
    fig, (left, right) = subplots(1, 2, figsize=(14, 4.5))
    split_styles = {"train": "-", "test": "--"}
    widths = set()
    for split, style in split_styles.items():
        for guide in ENCODER_GUIDES:
            encoder = sorted((r for r in one.values() if r["split"] == split and r["guide"] == guide), key=lambda r: r["width"])
            widths.update(r["width"] for r in encoder)
            if encoder:
                left.errorbar([r["width"] for r in encoder], [r["amortization_gap"]["mean"] for r in encoder],
                              yerr=[r["amortization_gap"]["stderr"] for r in encoder], marker="o", ls=style,
                              color=FAMILY_COLORS[guide], capsize=3,
                              label="%s, %s images" % (encoder[0]["label"].split(" ")[0], split))
        for r in one.values():
            if r["split"] == split and r["guide"] not in ENCODER_GUIDES and r["amortization_gap"] is not None:
                gap, color = r["amortization_gap"], FAMILY_COLORS[r["guide"]]
                left.axhline(gap["mean"], color=color, ls=style, lw=1, label="%s, %s images (± s.e.)" % (r["label"], split))
                left.axhspan(gap["mean"] - gap["stderr"], gap["mean"] + gap["stderr"], color=color, alpha=0.12, lw=0)
    left.set(xscale="log", xlabel="encoder width k", ylabel="amortization gap L(q*) − L(q_guide) (nats / image)",
             title="Amortization gap (%s)" % spread)
    if widths:  # the widths themselves as ticks, not powers of ten
        left.set_xticks(sorted(widths), [str(w) for w in sorted(widths)])
        left.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    refinable = sorted((r for r in one.values() if r["refinement"] and r["elbo_guide"]),  # from the guide's own factor
                       key=lambda r: (r["split"], display_order(r["label"])))
    colors = configuration_colors(sorted({r["label"] for r in refinable}, key=display_order))
    for r in refinable:
        steps = [max(row["steps"], 0.5) for row in r["refinement"]]
        right.errorbar(steps, [row["gap_left"]["mean"] for row in r["refinement"]],
                       yerr=[row["gap_left"]["stderr"] for row in r["refinement"]], marker="o", capsize=3,
                       color=colors[r["label"]], ls=split_styles[r["split"]], label="%s, %s" % (r["label"], r["split"]))
    right.set(xscale="log", xlabel="refinement steps from the guide's factor (0 plotted at 0.5)",
              ylabel="gap left L(q*) − L(q_k) (nats / image)", title="Semi-amortized refinement (%s)" % spread)
    for ax in (left, right):
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
        legend_outside(ax)
    return save_figure(fig, path)


def capacity_figure(rows, path):
    """The amortization gap against encoder width (the widths as ticks), a colour per depth, train solid and
    test dashed, mean ± s.e. over the encoders' seeds."""
    fig, ax = subplots(figsize=(8.5, 4.5))
    depths = sorted({r["depth"] for r in rows})
    colors = dict(zip(depths, matplotlib.colormaps.get_cmap("viridis")(np.linspace(0.1, 0.8, len(depths)))))
    for depth in depths:
        for split, style in (("train", "-"), ("test", "--")):
            widths = sorted({r["width"] for r in rows if (r["depth"], r["split"]) == (depth, split)})
            gaps = [over_seeds([r["amortization_gap"] for r in rows if (r["width"], r["depth"], r["split"]) ==
                                (width, depth, split)]) for width in widths]
            if widths:
                ax.errorbar(widths, [g["mean"] for g in gaps], yerr=[g["stderr"] for g in gaps], marker="o", ls=style,
                            color=colors[depth], capsize=3, label="%d hidden layer%s, %s images"
                            % (depth, "s" * (depth > 1), split))
    widths = sorted({r["width"] for r in rows})
    ax.set(xscale="log", xlabel="encoder width k", ylabel="amortization gap L(q*) − L(q_encoder) (nats / image)",
           title="Fresh encoders on a frozen q(θ) (mean ± s.e. over encoder seeds)")
    ax.set_xticks(widths, [str(w) for w in widths])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return save_figure(fig, path)
