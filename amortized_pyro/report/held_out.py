"""The held-out study (:mod:`amortized_pyro.gap.held_out`) as a table and two figures, from its rows and
references alone:

    format_held_out     a row per encoder and image set: its gap, and the gap left after refinement steps
    held_out_figures    held_out_gaps.png (the gap against the images an encoder trained on, a panel per
                        width) and held_out_tradeoff.png (held-out gap against training gap: plain encoders'
                        trajectories, regularized encoders, test-time refinement, the run's own encoder)

Every ± is the standard error over the runs (training seeds) of their image means (one run: over its
images); the images, θ draws and z draws of a run are shared by all its encoders.
"""
import numpy as np

from amortized_pyro.gap.pooling import over_seeds
from amortized_pyro.report.marks import negatives, plus_minus
from amortized_pyro.report.style import legend_outside, save_figure, subplots

SET_STYLES = {"train": ("tab:blue", "o", "-"), "train-unseen": ("tab:orange", "s", ":"), "test": ("tab:red", "^", "--")}
SET_NAMES = {"train": "training images", "train-unseen": "training images a subset encoder never saw",
             "test": "held-out images"}


def in_training(row):
    """Whether the row's image set is among its encoder's training images."""
    return row["set"] == "train" or (row["set"] == "train-unseen" and row["train_on"] in ("train", "train+test")) \
        or (row["set"] == "test" and row["train_on"] == "train+test")


def _left(rows, steps):
    return over_seeds([next((x["gap_left"] for x in r["refinement"] if x["steps"] == steps), None) for r in rows])


def _joint(references, name, steps=None):
    """The run's own (jointly trained) encoder's gap on set ``name`` over the runs, or after ``steps``."""
    sets = [ref["sets"][name] for ref in references]
    if steps is None:
        return over_seeds([s["amortization_gap"] for s in sets])
    return over_seeds([next((x["gap_left"] for x in s["refinement"] if x["steps"] == steps), None) for s in sets])


def groups(rows):
    """{(encoder name, set): [rows, one per run]} in the order the rows came."""
    out = {}
    for r in rows:
        out.setdefault((r["encoder"], r["set"]), []).append(r)
    return out


def format_held_out(rows, references):
    """A Markdown table of the study (module docstring) with what its ± covers."""
    steps = sorted({x["steps"] for r in rows for x in r["refinement"]})
    head = ["encoder", "trained on (images)", "image set", "in its training images", "runs", "epochs",
            "at the epoch cap", "reached its run's encoder", "amortization gap"] + \
           ["gap left after %d steps" % k for k in steps]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for name in ("train", "train-unseen", "test"):
        if references:
            lines.append("| run's own k=%s (trained with the decoder) | %s | %s | %s | %d | | | | %s | %s |" % (
                "/".join(map(str, sorted({r["width"] for r in references}))), "N", name, "yes" if name != "test" else "no", len(references), plus_minus(_joint(references, name)),
                " | ".join(plus_minus(_joint(references, name, k)) for k in steps)))
    for (encoder, name), group in groups(rows).items():
        lines.append("| %s | %d | %s | %s | %d | %.0f | %d | %d | %s | %s |" % (
            encoder, group[0]["n_train"], name, "yes" if in_training(group[0]) else "no", len(group),
            np.mean([r["epochs"] for r in group]), sum(r["encoder_capped"] for r in group),
            sum(r["reached_target"] for r in group), plus_minus(over_seeds([r["amortization_gap"] for r in group])),
            " | ".join(plus_minus(_left(group, k)) for k in steps)))
    if references:
        sets = list(references[0]["sets"])
        lines.append("\nThe decoder's own gaps (the same for every encoder of a run): coupling %s, approximation "
                     "(IWAE, a lower bound of log p(x)) %s." % (
                         ", ".join("%s %s" % (s, plus_minus(over_seeds([r["sets"][s]["coupling_gap"] for r in references])))
                                   for s in sets),
                         ", ".join("%s %s" % (s, plus_minus(over_seeds([r["sets"][s]["approximation_gap"]
                                                                  for r in references]))) for s in sets)))
        capped = sum(ref["sets"][s]["capped"] for ref in references for s in sets)
        if capped:
            lines.append("q* stopped at its step cap for %d of %d images: there L(q*) and every amortization gap "
                         "are lower bounds." % (capped, sum(ref["sets"][s]["n_images"] for ref in references
                                                             for s in sets)))
    lines += below_zero(rows)
    lines.append("\nnats per image; ± is the standard error over the runs (training seeds) of their image means; "
                 "the amortization gap is L(q*) − L(encoder) with one q* per image and run (every encoder of a run "
                 "is compared with the same q*, on the same θ and z draws). \"reached its run's encoder\": runs "
                 "whose fresh encoder ended at or above its run's jointly trained encoder's training objective on "
                 "the same images (early stopping does not try to).")
    return "\n".join(lines)


def below_zero(rows):
    """The note that counts each row's per-image amortization gaps below zero, with the lowest beside the row's
    mean: the one q* per image and run never had this fresh encoder's factor among its candidates, so a fresh
    encoder can beat it (q* is then not the optimum: the image's true gap is ≥ 0 and
    unknown), besides the scoring noise of a gap near zero."""
    found, total, below = [], 0, 0
    for (encoder, name), group in groups(rows).items():
        values = [v for r in group for v in r["per_image"]]
        total, below = total + len(values), below + sum(v < 0 for v in values)
        found.append(negatives("%s, %s:" % (encoder, name), values,
                               over_seeds([r["amortization_gap"] for r in group])["mean"]))
    found = [text for text in found if text]
    if not found:
        return ["\nNo per-image amortization gap of a fresh encoder is below zero (%d values)." % total]
    return ["\n%d of %d per-image amortization gaps of fresh encoders are below zero: %s. Each is L(q*) − L(encoder) "
            "against the run's one q* per image, which never had this encoder's factor among its candidates: "
            "where a fresh encoder's factor is better, q* is not the optimum there (the image's true gap is ≥ 0, "
            "and not known), besides the scoring noise of a gap near zero." % (
                below, total, "; ".join(found))]


def _train_on_position(train_on, n_obs):
    return n_obs + 1 if train_on == "train+test" else (n_obs if train_on == "train" else int(train_on))


def gaps_figure(rows, references, path):
    """The amortization gap against the images each unregularized encoder trained on, a panel per width, a
    colour, marker and line per image set (mean ± s.e. over runs); the transductive encoder at the right."""
    plain = [r for r in rows if r["regularizer"] == "none"]
    widths = sorted({r["width"] for r in plain})
    fig, axes = subplots(1, max(1, len(widths)), figsize=(6 * max(1, len(widths)), 4.5), squeeze=False)
    n_obs = max((r["n_train"] for r in plain if r["train_on"] == "train"), default=0)
    for ax, width in zip(axes[0], widths):
        for name, (color, marker, style) in SET_STYLES.items():
            found = {}
            for (encoder, s), group in groups([r for r in plain if r["width"] == width]).items():
                if s == name and not (s == "train-unseen" and in_training(group[0])):  # never-seen images only
                    found[_train_on_position(group[0]["train_on"], n_obs)] = (
                        group[0]["train_on"], over_seeds([r["amortization_gap"] for r in group]))
            xs = sorted(found)
            if xs:
                ax.errorbar(range(len(xs)), [found[x][1]["mean"] for x in xs], yerr=[found[x][1]["stderr"] for x in xs],
                            color=color, marker=marker, ls=style, capsize=3, label=SET_NAMES[name])
                ax.set_xticks(range(len(xs)), ["%s\n(+ held-out)" % n_obs if found[x][0] == "train+test" else str(x)
                                               for x in xs])
        ax.set(xlabel="images the fresh encoder trained on", ylabel="amortization gap L(q*) − L(encoder) (nats / image)",
               title="fresh k=%d encoders" % width)
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
    fig.suptitle("Fresh encoders on frozen decoders: mean over %d runs ± s.e. over the runs' image means"
                 % len({r["run"] for r in plain}), fontsize=10)
    legend_outside(axes[0][-1])
    return save_figure(fig, path)


def tradeoff_figure(rows, references, path):
    """Held-out gap against training gap: each run's plain k=64 encoder as it trained (a thin line per run,
    the recorded windows, with TRACE_SAMPLES z draws), the regularized encoders' and the refined ends (mean
    ± s.e. over runs, both axes), and the run's own encoder."""
    fig, ax = subplots(figsize=(8.5, 5))
    plain = [r for r in rows if r["regularizer"] == "none" and r["train_on"] == "train" and r["set"] == "test"]
    width = min((r["width"] for r in plain), default=None)
    for i, r in enumerate(r for r in plain if r["width"] == width):
        trace = [(t["train"], t["test"]) for t in r["trajectory"]]
        ax.plot(*zip(*trace), color="0.6", lw=0.8, label="k=%d during training (a line per run)" % width if i == 0 else None)

    def point(train, test, label, marker, color):
        if train is not None and test is not None:
            ax.errorbar(train["mean"], test["mean"], xerr=train["stderr"], yerr=test["stderr"], marker=marker,
                        color=color, ls="none", capsize=3, label=label)

    by = groups(rows)
    colors = iter(["tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:olive", "tab:cyan"])
    for encoder in dict.fromkeys(r["encoder"] for r in rows if r["train_on"] == "train" and r["width"] == width):
        train, test = by.get((encoder, "train")), by.get((encoder, "test"))
        if train and test:
            color = next(colors, "black")
            point(over_seeds([r["amortization_gap"] for r in train]), over_seeds([r["amortization_gap"] for r in test]),
                  encoder + " (end)", "o", color)
            if train[0]["regularizer"] == "none":
                for k, marker in zip(sorted({x["steps"] for x in train[0]["refinement"]}), ("P", "X", "D")):
                    point(_left(train, k), _left(test, k), encoder + ", then %d refinement steps" % k, marker, color)
    if references:
        point(_joint(references, "train"), _joint(references, "test"), "the run's own encoder", "*", "tab:red")
    ax.set(xlabel="amortization gap on training images (nats / image)",
           ylabel="amortization gap on held-out images (nats / image)",
           title="Held-out against training gap, encoders on frozen decoders (± s.e. over runs)")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return save_figure(fig, path)


def held_out_figures(rows, references, out):
    """Both figures into folder ``out``."""
    gaps_figure(rows, references, out / "held_out_gaps.png")
    tradeoff_figure(rows, references, out / "held_out_tradeoff.png")
