"""Figures of gap measurements (matplotlib, PNG), from the reports alone:

    gap_figure          the amortization gap against encoder width, train and test, with F-VI and
                        constant-VI as reference lines, and the gap left after k refinement steps
    capacity_figure     fresh encoders on a frozen q(θ): the amortization gap against width, per number of hidden layers
"""
import matplotlib
import matplotlib.ticker
import numpy as np

from amortized_pyro.autoguides.capacity import layers_of
from amortized_pyro.gap.pooling import gap_over_seeds, over_seeds, refinement_over_seeds, seed_groups
from amortized_pyro.models.guides import ENCODER_GUIDES, FAMILIES, display_order
from amortized_pyro.report.marks import spread
from amortized_pyro.report.style import FAMILY_COLORS, empty_panel, legend_outside, save_figure, subplots
from amortized_pyro.report.tables import capacity_seeds


# train and test: a line style, a marker and its fill each
SPLIT_LOOKS = {"train": {"ls": "-", "marker": "o", "mfc": None}, "test": {"ls": "--", "marker": "s", "mfc": "none"}}
# a configuration's own colour and marker in the refinement panel: qualitative colours (F-VI's red and
# constant-VI's gray left to them) and markers, so that no two configurations look alike
QUALITATIVE = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
ZERO_AT = 0.5  # where the refinement panel's log axis draws 0 steps (the guide's own factor)


def configuration_looks(labels):
    """{label: (colour, marker)} for configurations in display order: a marker each; the families without
    an encoder in their own colours, the encoder configurations in qualitative colours, one each."""
    families, looks, encoders = list(FAMILIES.values()), {}, 0
    for i, label in enumerate(labels):
        family = families[display_order(label)[0]]
        color = QUALITATIVE[encoders % len(QUALITATIVE)] if family.encoder else FAMILY_COLORS[family.name]
        encoders += family.encoder
        looks[label] = (color, MARKERS[i % len(MARKERS)])
    return looks


def no_refinement(reports):
    """Why none of ``reports`` has a gap left after refinement to draw, in a few lines."""
    why = [text for text, applies in (
        ("flow guides: their factor is not Gaussian,\nso their refinement is not measured",
         lambda r: r.get("q_family") == "flow"),
        ("F-VI has no factor of its own for held-out images", lambda r: r.get("elbo_guide") is None),
        ("measured without --refine-steps\n(`gap --refine-steps 0,5,20` measures the gap left after that many steps)",
         lambda r: r.get("q_family") != "flow" and r.get("elbo_guide") is not None))
        if any(applies(r) for r in reports)]
    return "No refinement to draw:\n" + ";\n".join(why)


def gap_figure(reports, path):
    """Amortization gap (mean ± standard error over images) against encoder width, with F-VI and
    constant-VI as horizontal lines in a ± s.e. band; and the gap left after k refinement steps (± s.e. over
    images), per configuration. Left, a colour per family; a line joins a family's neighbouring widths among
    the widths measured (the ticks) and breaks where it lacks one. Right, a colour and a marker per
    configuration. Both: train solid with filled markers, test dashed with open ones (left: circles and
    squares). Several training seeds of a configuration: their mean ± the standard error over seeds and
    images (:func:`~amortized_pyro.gap.pooling.pooled`). A panel with nothing to draw says why instead
    (:func:`no_refinement`)."""
    groups = seed_groups(reports)
    spread_text = spread([len(group) for group in groups.values()],
                         "mean over training seeds ± s.e. over seeds and images", "mean ± s.e. over images")
    one = {key: dict(group[0], amortization_gap=gap_over_seeds(group, "amortization_gap"),
                     refinement=[dict(row, gap_left=refinement_over_seeds(group, row["steps"]))
                                 for row in group[0]["refinement"]])
           for key, group in groups.items()}
    fig, (left, right) = subplots(1, 2, figsize=(14, 4.5))
    widths = sorted({r["width"] for r in one.values() if r["guide"] in ENCODER_GUIDES})
    for split, looks in SPLIT_LOOKS.items():
        for guide in ENCODER_GUIDES:
            encoder = {r["width"]: r["amortization_gap"] for r in one.values()
                       if r["split"] == split and r["guide"] == guide and r["amortization_gap"]}
            if encoder:  # on the grid of every width measured: NaN (no line) where this family has none
                gaps = [encoder.get(w, {"mean": np.nan, "stderr": np.nan}) for w in widths]
                left.errorbar(widths, [g["mean"] for g in gaps], yerr=[g["stderr"] for g in gaps], capsize=3,
                              color=FAMILY_COLORS[guide], label="%s, %s images" % (FAMILIES[guide].label, split),
                              **looks)
        for r in one.values():
            if r["split"] == split and r["guide"] not in ENCODER_GUIDES and r["amortization_gap"] is not None:
                gap, color = r["amortization_gap"], FAMILY_COLORS[r["guide"]]
                left.axhline(gap["mean"], color=color, ls=looks["ls"], lw=1,
                             label="%s, %s images (± s.e.)" % (r["label"], split))
                left.axhspan(gap["mean"] - gap["stderr"], gap["mean"] + gap["stderr"], color=color, alpha=0.12, lw=0)
    left.set(xscale="log", xlabel="encoder width k", ylabel="amortization gap L(q*) − L(q_guide) (nats / image)",
             title="Amortization gap (%s)" % spread_text)
    if widths:  # the widths themselves as ticks, not powers of ten, from half the least to twice the most: one
        left.set_xticks(widths, [str(w) for w in widths])  # width sits in the middle, not at a decade's edge
        left.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        left.set_xlim(widths[0] / 2, widths[-1] * 2)
    refinable = sorted((r for r in one.values() if r["refinement"] and r["elbo_guide"]),  # from the guide's own factor
                       key=lambda r: (r["split"], display_order(r["label"])))
    looks = configuration_looks(sorted({r["label"] for r in refinable}, key=display_order))
    for r in refinable:
        color, marker = looks[r["label"]]
        steps = [max(row["steps"], ZERO_AT) for row in r["refinement"]]
        right.errorbar(steps, [row["gap_left"]["mean"] for row in r["refinement"]],
                       yerr=[row["gap_left"]["stderr"] for row in r["refinement"]], capsize=3, color=color,
                       **dict(SPLIT_LOOKS[r["split"]], marker=marker), label="%s, %s" % (r["label"], r["split"]))
    right.set(xscale="log", xlabel="refinement steps k from the guide's factor\n(log axis, which has no 0: k = 0, "
              "the guide's own factor, drawn at %g)" % ZERO_AT, ylabel="gap left L(q*) − L(q_k) (nats / image)",
              title="Semi-amortized refinement (%s)" % spread_text)
    if refinable:  # the steps measured as ticks, 0 among them where it is drawn
        steps = sorted({row["steps"] for r in refinable for row in r["refinement"]})
        right.set_xticks([max(k, ZERO_AT) for k in steps], [str(k) for k in steps])
        right.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    if not refinable:
        empty_panel(right, no_refinement(reports))
    if not left.containers and not left.lines:
        empty_panel(left, "No amortization gap to draw:\nno guide has a factor of its own for these images\n"
                          "(F-VI on held-out images)")
    for ax in (left, right):
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
        legend_outside(ax)
    return save_figure(fig, path)


SHORT = "×: an encoder stopped at the epoch cap\nor short of its run's own level"


def capacity_figure(rows, path):
    """The amortization gap against encoder width (the widths as ticks), a colour per number of hidden layers, train solid with
    filled circles and test dashed with open squares, each point the mean over its encoders' seeds ± the standard error over the seeds' image
    means, or with one seed its mean ± the standard error over images: the title says which; a red × on a point
    where one of its encoders stopped at the epoch cap or short of its target (not by the rule)."""
    fig, ax = subplots(figsize=(8.5, 4.5))
    groups = capacity_seeds(rows)
    counts = sorted({layers_of(r) for r in rows})  # hidden layers
    colors = dict(zip(counts, matplotlib.colormaps.get_cmap("viridis")(np.linspace(0.1, 0.8, len(counts)))))
    for hidden in counts:
        for split, looks in SPLIT_LOOKS.items():
            widths = sorted(w for (w, d, s) in groups if (d, s) == (hidden, split))
            gaps = [over_seeds([r["amortization_gap"] for r in groups[(width, hidden, split)]]) for width in widths]
            if widths:
                ax.errorbar(widths, [g["mean"] for g in gaps], yerr=[g["stderr"] for g in gaps], color=colors[hidden],
                            capsize=3, label="%d hidden layer%s, %s images" % (hidden, "s" * (hidden > 1), split), **looks)
            short = [(w, g["mean"]) for w, g in zip(widths, gaps) if any(
                r.get("encoder_capped") or r.get("reached_target") is False for r in groups[(w, hidden, split)])]
            if short:  # not at the rule: an encoder stopped at the epoch cap, or short of its target
                ax.plot(*zip(*short), marker="x", markersize=11, color="red", linestyle="none",
                        label=None if any(h.get_label() == SHORT for h in ax.lines) else SHORT)
    widths = sorted({r["width"] for r in rows})
    title = spread([len(g) for g in groups.values()], "mean over encoder seeds ± s.e. over the seeds' image means",
                   "mean ± s.e. over images")
    ax.set(xscale="log", xlabel="encoder width k", ylabel="amortization gap L(q*) − L(q_encoder) (nats / image)",
           title="Fresh encoders on a frozen q(θ) (%s)" % title)
    ax.set_xticks(widths, [str(w) for w in widths])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return save_figure(fig, path)
