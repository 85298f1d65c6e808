"""The gallery's page and figure from its runs: ``docs/gallery.md`` (a table per model, one summary table, the lines
that swap each model's guide, what was refused and why) and ``figures/gallery/heldout.png`` (each guide's held-out
ELBO per datapoint minus the hand-written guide's, seed by seed), every number read from the runs' JSON lines.

    python experiments/gallery/report.py [--runs figures/gallery/runs.jsonl]

Means are over the seeds that finished; ± is the standard error over those seeds (n − 1 in the variance); a
difference from the hand-written guide is paired by seed.
"""
import argparse
import importlib
import math
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import MODELS  # noqa: E402

from amortized_pyro.support.jsonio import read_jsonl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("guide", "optimizer", "seeds run (stopped)", "train ELBO", "held-out ELBO", "held-out IW bound",
           "downstream", "ms/step", "amortization gap")


def mean_se(values):
    """'m ± s.e.' of the finite values ('m' alone for one, '—' for none)."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "—"
    m = sum(values) / len(values)
    if len(values) == 1:
        return "%.2f" % m
    se = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values))
    return "%.2f ± %.2f" % (m, se)


def compared_on(runs, hand="hand"):
    """The ELBO every guide of a model is compared on: the held-out one where the hand-written guide serves new
    data, else the training one."""
    held = any(r.get("heldout_elbo") is not None for r in runs if r["guide"] == hand)
    return "heldout_elbo" if held else "train_elbo"


def paired(runs, guide, optimizer, hand="hand"):
    """{seed: this guide's compared ELBO − the hand guide's} for the seeds where both finished."""
    key = compared_on(runs, hand)
    own = {r["seed"]: r.get(key) for r in runs if r["guide"] == guide and r["optimizer"] == optimizer}
    base = {r["seed"]: r.get(key) for r in runs if r["guide"] == hand and r["optimizer"] == optimizer}
    return {s: own[s] - base[s] for s in own if s in base and own[s] is not None and base[s] is not None}


def model_table(runs, spec):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    refusals = defaultdict(set)
    for optimizer in spec.OPTIMIZERS:
        for guide in spec.GUIDES:
            rows = [r for r in runs if r["guide"] == guide and r["optimizer"] == optimizer]
            if not rows:
                continue
            done = [r for r in rows if r["stopped"] is None]
            for r in rows:
                if r["stopped"]:
                    refusals[guide].add("training stopped (step %d of %d): %s" % (r["steps"] + 1, r["budget"],
                                                                                   r["stopped"]))
                if r.get("gap_refused"):
                    refusals[guide].add("measure_gap: " + r["gap_refused"])
            gaps = mean_se([r.get("gap") for r in done])
            if gaps == "—" and done and done[0].get("gap_refused"):
                gaps = "refused"
            name = done[0]["downstream_name"] if done else ""
            lines.append("| %s | %s | %s (%d) | %s | %s | %s | %s | %s | %s |" % (
                guide, optimizer, ", ".join(str(r["seed"]) for r in rows), len(rows) - len(done),
                mean_se([r.get("train_elbo") for r in done]), mean_se([r.get("heldout_elbo") for r in done]),
                mean_se([r.get("heldout_iw") for r in done]),
                mean_se([r.get("downstream") for r in done]) + (" (%s)" % name.replace("|", "\\|") if name else ""),
                mean_se([r.get("ms_per_step") for r in rows]), gaps))
    return lines, refusals


def summary(all_runs):
    lines = ["| model | optimizer | guide | compared on | ELBO − hand-written (paired by seed) | ms/step ÷ hand's |",
             "|---|---|---|---|---|---|"]
    for name in MODELS:
        spec = importlib.import_module(name)
        runs = [r for r in all_runs if r["model"] == spec.NAME]
        for optimizer in spec.OPTIMIZERS:
            hand = [r for r in runs if r["guide"] == "hand" and r["optimizer"] == optimizer]
            hand_ms = [r["ms_per_step"] for r in hand if r.get("ms_per_step")]
            for guide in spec.GUIDES[1:]:
                diff = paired(runs, guide, optimizer)
                mine = [r for r in runs if r["guide"] == guide and r["optimizer"] == optimizer]
                if not mine:
                    continue
                ms = [r["ms_per_step"] for r in mine if r.get("ms_per_step")]
                ratio = "%.1f×" % ((sum(ms) / len(ms)) / (sum(hand_ms) / len(hand_ms))) if ms and hand_ms else "—"
                held = compared_on(runs) == "heldout_elbo"
                lines.append("| %s | %s | %s | %s | %s (%d of %d seeds) | %s |" % (
                    spec.NAME, optimizer, guide, "held out" if held else "training", mean_se(list(diff.values())),
                    len(diff), len(mine), ratio))
    return lines


def findings(all_runs):
    """What the tables say, computed from them: the encoder builders' stops under each scale link, the builders
    short of the hand-written guide by more than 1 nat per datapoint or 1 % of its ELBO, and each model's
    amortization gap of the default A-VI guide."""
    stops, short, gaps = defaultdict(lambda: [0, 0]), [], []  # (model, optimizer, link) → [stopped, runs]
    for name in MODELS:
        spec = importlib.import_module(name)
        runs = [r for r in all_runs if r["model"] == spec.NAME]
        for r in runs:
            if r["guide"].split("+")[0] in ("amortized", "semi-amortized", "iterative", "flow"):
                link = "softplus" if r["guide"].endswith("+softplus") else "exp"
                count = stops[(spec.NAME, r["optimizer"], link)]
                count[0] += r["stopped"] is not None and r["steps"] > 0  # a refusal at the first call: the model's
                count[1] += 1
        key = compared_on(runs)
        for optimizer in spec.OPTIMIZERS:
            hand = [r[key] for r in runs if r["guide"] == "hand" and r["optimizer"] == optimizer and r.get(key)]
            for guide in spec.GUIDES[1:]:
                diff = paired(runs, guide, optimizer)
                if diff and hand:
                    mean = sum(diff.values()) / len(diff)
                    if mean < -max(1.0, 0.01 * abs(sum(hand) / len(hand))):
                        short.append("%s %s (%s): %.2f over %d seeds" % (spec.NAME, guide, optimizer, mean, len(diff)))
        gap = [r["gap"] for r in runs if r["guide"] == "amortized" and r.get("gap") is not None]
        if gap:
            gaps.append("%s %s" % (spec.NAME, mean_se(gap)))
    where = sorted({key[:2] for key in stops})
    stopped = ["%s (%s): %d of %d with exp, %s with softplus" % (
        model, optimizer, *stops[(model, optimizer, "exp")],
        "%d of %d" % tuple(stops[(model, optimizer, "softplus")]) if stops[(model, optimizer, "softplus")][1]
        else "not run") for model, optimizer in where
        if stops[(model, optimizer, "exp")][0] or stops[(model, optimizer, "softplus")][0]]
    return ["* **Stops** of the encoder builders (A-VI, SA-VI, IA-VI, flow; a refusal at the first call, the model's, "
            "excluded), "
            "the default exp scale link against `scale_link=\"softplus\"`, runs of all seeds: %s; none elsewhere."
            % ("; ".join(stopped) or "none"),
            "* **Short of the hand-written guide** by more than 1 nat per datapoint or 1 %% of its ELBO (paired by "
            "seed): %s." % ("; ".join(short) or "none"),
            "* **The default A-VI guide's amortization gap** (nats per datapoint, mean ± s.e. over seeds, held-out "
            "datapoints unless the guide has no factor for them): %s. Whether it is mostly the held-out part (the "
            "encoder's generalization) is not measured here: the gap was taken on one split." % "; ".join(gaps)]


def figure(all_runs, path):
    models = [importlib.import_module(name) for name in MODELS]
    models = [m for m in models if any(r["model"] == m.NAME for r in all_runs)]
    columns = min(3, len(models))
    rows = -(-len(models) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(models):]:
        ax.set_visible(False)
    for ax, spec in zip(axes.flat, models):
        runs = [r for r in all_runs if r["model"] == spec.NAME]
        guides = spec.GUIDES[1:]
        for i, guide in enumerate(guides):
            for j, optimizer in enumerate(spec.OPTIMIZERS):
                diff = paired(runs, guide, optimizer)
                x = i + 0.2 * j
                ax.scatter([x] * len(diff), list(diff.values()), s=14, color="C%d" % j, zorder=3,
                           label=optimizer if i == 0 and len(spec.OPTIMIZERS) > 1 else None)
                if diff:
                    ax.hlines(sum(diff.values()) / len(diff), x - 0.15, x + 0.15, color="C%d" % j)
        ax.axhline(0, color="grey", lw=0.8)
        held = compared_on(runs) == "heldout_elbo"
        ax.set_title("%s (%s)" % (spec.NAME, "held out" if held else "training ELBO"), fontsize=9)
        ax.set_xticks(range(len(guides)))
        ax.set_xticklabels(guides, rotation=45, ha="right", fontsize=7)
        ax.set_yscale("symlog", linthresh=1.0)
        values = [v for guide in guides for optimizer in spec.OPTIMIZERS
                  for v in paired(runs, guide, optimizer).values()] or [0.0]
        ax.set_ylim(min(min(values), -1.0) * 1.6, max(max(values), 1.0) * 1.6)  # every seed's dot inside, 0 shown
        if len(spec.OPTIMIZERS) > 1:
            ax.legend(fontsize=6)
    for row in axes:
        row[0].set_ylabel("ELBO per datapoint − hand-written's\n(nats; dots: seeds, bar: mean)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def page(all_runs, runs_path, figure_path):
    out = ["# The gallery: Pyro's amortized examples, their hand-written guides against the builders", "",
           "Generated by `python experiments/gallery/report.py` from `%s` (the runs: `OMP_NUM_THREADS=1 python "
           "experiments/gallery/run.py all --seeds 0 1 2 --out %s`); do not edit by hand. What each run measures: "
           "the docstring of `experiments/gallery/common.py`; each model's data, sizes, optimizer and budget: its "
           "module's docstring, quoted below." % (runs_path, runs_path), "",
           "![held-out ELBO relative to the hand-written guide](%s)" % figure_path, "", "## Summary", ""]
    out += summary(all_runs)
    out += ["", "## What they show", ""] + findings(all_runs)
    out += ["", "## What the numbers do not show", "",
            "* Seeds vary the initialization and the minibatches only: each model has one simulated (or shipped) "
            "data set, one budget and one learning rate, all small enough for a 2-core CPU; a guide that is still "
            "improving at the budget's end is measured there, not at convergence.",
            "* The held-out ELBO leaves out the global KL term (the same for every q(z) given q(θ), but q(θ) "
            "differs between guides: the hand-written LDA and sparse gamma guides have their own); the sparse gamma "
            "DEF's ELBO estimates are heavy-tailed (a rare draw near the Gamma(0.1) spike at 0 moves the mean by "
            "orders of magnitude), so its means are noisy beyond their standard errors.",
            "* The hand-written LDA guide's doc topics are a point mass (Delta): its 'ELBO' has no entropy term "
            "and is not a bound on log p(x); compare LDA guides on topic recovery.",
            "* The amortization gap is measured by `measure_gap` on 16 datapoints with a small budget "
            "(`common.GAP_SETTINGS`: q* from at most 400 steps, 2 θ draws): a lower bound on the gap, with "
            "standard errors over seeds, not over datapoints; a hand-written guide's gap is refused (below).",
            "* ms/step is one process on one CPU thread beside other work on the machine: a ratio, not a rate."]
    for name in MODELS:
        spec = importlib.import_module(name)
        runs = [r for r in all_runs if r["model"] == spec.NAME]
        out += ["", "## %s" % spec.NAME, "", spec.__doc__.strip(), ""]
        if not runs:
            out += ["Not run yet.", ""]
            continue
        lines, refusals = model_table(runs, spec)
        out += lines + ["", "The lines that swap the guide:", "",
                        "<!-- not run: a fragment of the model's file in experiments/gallery/, not a program -->",
                        "```python", spec.SWAP, "```", ""]
        if refusals:
            out += ["Refused or stopped:", ""]
            for guide, why in refusals.items():
                out += ["* %s: %s" % (guide, line) for line in sorted(why)]
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="figures/gallery/runs.jsonl")
    parser.add_argument("--doc", default="docs/gallery.md")
    parser.add_argument("--figure", default="figures/gallery/heldout.png")
    args = parser.parse_args()
    runs = read_jsonl(ROOT / args.runs)
    figure(runs, ROOT / args.figure)
    (ROOT / args.doc).write_text(page(runs, args.runs, "../" + args.figure))
    print("wrote %s and %s from %d runs" % (args.doc, args.figure, len(runs)))


if __name__ == "__main__":
    main()
