"""The gallery's page and figure from its runs: ``docs/gallery.md`` (a table per model, one summary table, the lines
that swap each model's guide, what was refused and why) and ``figures/gallery/heldout.png`` (each guide's held-out
ELBO per datapoint minus the hand-written guide's, seed by seed), every number read from the runs' JSON lines.

    python experiments/gallery/report.py [--runs figures/gallery/runs.jsonl]

Means are over the seeds that finished; ± is the standard error over those seeds (n − 1 in the variance); a
difference from the hand-written guide is paired by seed.

Every line is read under the name ``common.label`` gives it: an encoder builder's name says its scale link
(``amortized+softplus``, the builder's default and the page's default A-VI guide, ``common.DEFAULT``;
``amortized+exp``), and the lines recorded before names said it (``amortized``, ``builder-body``, ...: all built with
exp, then the default) are read with ``+exp``, their numbers untouched. Where a (model, guide, seed, optimizer,
budget) was run again (the default's runs, again with the training-split gap and diagnose; M2's default again with the
gap through its AutoGuideList, refused before), the tables read the
latest line, and the page says whether the earlier ones' numbers were reproduced.
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
from common import DEFAULT, DIAGNOSE, ENCODERS, GAP_POINTS, label  # noqa: E402
from run import LIST_REFUSED, MODELS  # noqa: E402

from amortized_pyro.support.jsonio import read_jsonl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("guide", "optimizer", "seeds run (stopped)", "train ELBO", "held-out ELBO", "held-out IW bound",
           "downstream", "ms/step", "amortization gap", "gap on training datapoints")
NUMBERS = ("steps", "stopped", "train_elbo", "heldout_elbo", "heldout_iw", "heldout_recon", "downstream", "gap",
           "gap_stderr", "gap_refused")
"""A line's measured numbers, those a run again of the same (model, guide, seed, optimizer, budget) should repeat."""
GAP = ("gap", "gap_stderr", "gap_refused")
"""The gap's of :data:`NUMBERS`: not compared where the earlier line's gap was refused as run.LIST_REFUSED."""
BEFORE = (" (recorded before measure_gap measured an AutoGuideList's builder part with the other parts' sites held at "
          "their draws; the default's lines were run again with it)")
"""Said after a refusal of run.LIST_REFUSED in a model's list of refusals."""
LARGE_GAP = 1.0
"""A large amortization gap: above 1 nat per datapoint (the issue's threshold for a builder's shortfall)."""
CLOSES = {("vae", "builder-body+exp"): ("builder-body+hand-start+exp", "the builder's start: σ_n starting at "
                                       "init_scale 0.1 costs the nat at 600 steps, not the heads (torch's heads "
                                       "alone do not close it)"),
          ("vae", "builder-body+torch-heads+exp"): ("builder-body+hand-start+exp", "σ_n's start (init_scale=1, the "
                                                    "hand-written guide's, closes it)")}
"""Where a guide falls short of the hand-written one: (the guide that closes it, why), found by the runs named."""


def read(records):
    """(the lines the tables read: each under its label, the latest line of each (model, guide, seed, optimizer,
    budget); the repeats: (key, whether every earlier line's numbers are the latest's, the latest's ms/step ÷ the
    first's or None, whether it was run again to measure a gap refused before as run.LIST_REFUSED: the gap's numbers
    then not compared) for each key run again)."""
    latest, earlier = {}, defaultdict(list)
    for r in records:
        r = dict(r, guide=label(r), recorded_as=r["guide"])
        key = (r["model"], r["guide"], r["seed"], r["optimizer"], r["budget"])
        if key in latest:
            earlier[key].append(latest[key])
        latest[key] = r
    repeats = [(key, all(all(old.get(f) == latest[key].get(f) for f in NUMBERS if not (f in GAP and listed(old)))
                         for old in olds),
                latest[key]["ms_per_step"] / olds[0]["ms_per_step"]
                if latest[key].get("ms_per_step") and olds[0].get("ms_per_step") else None,
                any(listed(old) for old in olds) and not listed(latest[key]))
               for key, olds in earlier.items()]
    return list(latest.values()), repeats


def listed(record):
    """Whether a line's gap was refused as run.LIST_REFUSED (an AutoGuideList, before measure_gap measured one)."""
    return LIST_REFUSED in (record.get("gap_refused") or "")


def held_note(rows):
    """' (given the draws of y)' where measure_gap held sites of these lines (an AutoGuideList's other parts'),
    else ''."""
    names = sorted({name for r in rows for name in r.get("gap_held") or ()})
    return " (given the draws of %s)" % ", ".join(names) if names else ""


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
                    refusals[guide].add("measure_gap: " + r["gap_refused"] + (BEFORE if listed(r) else ""))
                for field in ("train_gap", "khat", "calibration"):
                    if r.get(field + "_refused"):
                        refusals[guide].add("%s: %s" % ({"train_gap": "measure_gap on training datapoints",
                                                          "khat": "diagnose's k̂ (importance_diagnostics)",
                                                          "calibration": "diagnose's calibration (local_sbc)"}[field],
                                                         r[field + "_refused"]
                                                         + (BEFORE if LIST_REFUSED in r[field + "_refused"] else "")))
            gaps = mean_se([r.get("gap") for r in done])
            if gaps == "—" and done and done[0].get("gap_refused"):
                gaps = "refused"
            train_gaps = mean_se([r.get("train_gap") for r in done])
            if train_gaps == "—" and any(r.get("train_gap_refused") for r in done):
                train_gaps = "refused"
            gaps, train_gaps = (value + held_note(done) if value not in ("—", "refused") else value
                                for value in (gaps, train_gaps))
            name = done[0]["downstream_name"] if done else ""
            lines.append("| %s | %s | %s (%d) | %s | %s | %s | %s | %s | %s | %s |" % (
                guide, optimizer, ", ".join(str(r["seed"]) for r in rows), len(rows) - len(done),
                mean_se([r.get("train_elbo") for r in done]), mean_se([r.get("heldout_elbo") for r in done]),
                mean_se([r.get("heldout_iw") for r in done]),
                mean_se([r.get("downstream") for r in done]) + (" (%s)" % name.replace("|", "\\|") if name else ""),
                mean_se([r.get("ms_per_step") for r in rows]), gaps, train_gaps))
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
                    spec.NAME, optimizer, "**%s**" % guide if guide == DEFAULT else guide,
                    "held out" if held else "training", mean_se(list(diff.values())),
                    len(diff), len(mine), ratio))
    return lines


def paired_values(runs, guide, optimizer, field, other):
    """{seed: this guide's ``field`` − its ``other``} for the seeds where both were measured."""
    found = {r["seed"]: (r.get(field), r.get(other)) for r in runs
             if r["guide"] == guide and r["optimizer"] == optimizer}
    return {s: a - b for s, (a, b) in found.items() if a is not None and b is not None}


def mean(values):
    values = list(values)
    return sum(values) / len(values)


def diagnosis(runs, brief=False):
    """What diagnose says of the trained default A-VI guide of one model's runs, one line per optimizer (none: not
    run with diagnose); ``brief``: k̂'s median and share above its threshold, and calibration's rejections alone."""
    out = []
    for optimizer in dict.fromkeys(r["optimizer"] for r in runs):
        mine = [r for r in runs if r["guide"] == DEFAULT and r["optimizer"] == optimizer and r["stopped"] is None
                and ("khat" in r or "khat_refused" in r)]
        stopped = [r for r in runs if r["guide"] == DEFAULT and r["optimizer"] == optimizer and r["stopped"]]
        if not mine:
            if stopped:
                out.append("%s: training stopped in %d of %d seeds, nothing to diagnose" % (
                    optimizer, len(stopped), len([r for r in runs if r["guide"] == DEFAULT
                                                   and r["optimizer"] == optimizer])))
            continue
        parts, short = [], []
        khat = [(r["seed"], k, r["khat_threshold"]) for r in mine for k in r.get("khat") or []]
        if khat:
            values = sorted(k for _, k, _ in khat)
            limit = khat[0][2]
            median = values[len(values) // 2] if len(values) % 2 else 0.5 * sum(values[len(values) // 2 - 1:
                                                                                        len(values) // 2 + 1])
            short.append("k̂ median %.2f, %.0f %% of datapoints above %.2f" % (
                median, 100 * sum(k > limit for k in values) / len(values), limit))
            parts.append("k̂ of its importance weights (%d draws of z at each of %d θ draws, the first %d %s "
                         "datapoints, seeds %s): median %.2f over %d datapoints, %.0f %% above %.2f (importance "
                         "sampling from q unreliable), %.0f %% below 0.5 (good); diagnose read seed %d as: \"%s\"" % (
                             DIAGNOSE["samples"], DIAGNOSE["theta_draws"], GAP_POINTS,
                             "held-out" if mine[0]["diagnose_split"] == "test" else "training",
                             ", ".join(str(s) for s in sorted({s for s, _, _ in khat})), median, len(values),
                             100 * sum(k > limit for k in values) / len(values), limit,
                             100 * sum(k < 0.5 for k in values) / len(values), mine[0]["seed"],
                             mine[0]["khat_reading"]))
        refused = sorted({r["khat_refused"] for r in mine if r.get("khat_refused")})
        parts += ["k̂ refused: %s" % line for line in refused]
        short += ["k̂ refused (%s)" % line for line in refused]
        calibrated = [r for r in mine if r.get("calibration_p") is not None]
        if calibrated:
            parts.append("calibration through the encoder (local SBC, %d simulated datapoints, %d draws of q each; "
                         "Bonferroni p over the coordinates): p = %s for seeds %s, uniform ranks rejected at 0.01 in "
                         "%d of %d" % (DIAGNOSE["simulations"], DIAGNOSE["sbc_draws"],
                                       ", ".join("%.2g" % r["calibration_p"] for r in calibrated),
                                       ", ".join(str(r["seed"]) for r in calibrated),
                                       sum(r["calibration_p"] < 0.01 for r in calibrated), len(calibrated)))
        if calibrated:
            short.append("calibration rejected at 0.01 in %d of %d seeds" % (
                sum(r["calibration_p"] < 0.01 for r in calibrated), len(calibrated)))
        refused = sorted({r["calibration_refused"] for r in mine if r.get("calibration_refused")})
        parts += ["calibration refused: %s" % line for line in refused]
        short += ["calibration refused (%s)" % line.split(" of amortized_pyro")[0] for line in refused]
        out.append("%s: %s" % (optimizer, "; ".join(short if brief else parts)))
    return out


def findings(all_runs, repeats=()):
    """What the tables say, computed from them: the encoder builders' stops under each scale link; the default
    A-VI guide against the hand-written one; the guides short of it by more than 1 nat per datapoint or 1 % of its
    ELBO, and what closes it; the default's amortization gap on held-out and training datapoints; what diagnose
    says of it; and whether the runs made again repeat the earlier lines."""
    stops, short, default, gaps, diagnosed = defaultdict(lambda: [0, 0]), [], [], [], []
    large, split = [], defaultdict(list)  # split: "held out" / "both" / "training" → the large-gap models
    for name in MODELS:
        spec = importlib.import_module(name)
        runs = [r for r in all_runs if r["model"] == spec.NAME]
        for r in runs:
            base, _, link = r["guide"].rpartition("+")
            if base in ENCODERS:
                count = stops[(spec.NAME, r["optimizer"], link)]
                count[0] += r["stopped"] is not None and r["steps"] > 0  # a refusal at the first call: the model's
                count[1] += 1
        key = compared_on(runs)
        for optimizer in spec.OPTIMIZERS:
            hand = [r[key] for r in runs if r["guide"] == "hand" and r["optimizer"] == optimizer and r.get(key)]
            limit = max(1.0, 0.01 * abs(mean(hand))) if hand else None
            for guide in spec.GUIDES[1:]:
                diff = paired(runs, guide, optimizer)
                if diff and hand and mean(diff.values()) < -limit:
                    line = "%s %s (%s): %.2f over %d seeds" % (spec.NAME, guide, optimizer, mean(diff.values()),
                                                                len(diff))
                    if (spec.NAME, guide) in CLOSES:
                        closer, why = CLOSES[(spec.NAME, guide)]
                        closed = paired(runs, closer, optimizer)
                        line += ", why: %s (%s: %s)" % (why, closer, mean_se(list(closed.values())))
                    short.append(line)
            mine = [r for r in runs if r["guide"] == DEFAULT and r["optimizer"] == optimizer]
            if mine:
                diff = paired(runs, DEFAULT, optimizer)
                stopped = sum(r["stopped"] is not None for r in mine)
                verdict = ("no seed to compare" if not diff else "short" if mean(diff.values()) < -limit
                           else "within 1 nat or 1 %" if mean(diff.values()) < 0 else "above it")
                closes = ""
                if stopped == len(mine):  # another optimizer of the model under which it trains: the option
                    others = [(o, [r for r in runs if r["guide"] == DEFAULT and r["optimizer"] == o])
                              for o in spec.OPTIMIZERS if o != optimizer]
                    closes = "".join("; the optimizer %s closes it: trained in %d of %d seeds, %s" % (
                        o, sum(r["stopped"] is None for r in rows), len(rows),
                        mean_se(list(paired(runs, DEFAULT, o).values()))) for o, rows in others
                        if any(r["stopped"] is None for r in rows))
                default.append("%s%s %s%s (%s%s)" % (
                    spec.NAME, "" if len(spec.OPTIMIZERS) == 1 else " (%s)" % optimizer,
                    mean_se(list(diff.values())) if diff else "—",
                    ", stopped in %d of %d seeds" % (stopped, len(mine)) if stopped else "", verdict, closes))
        done = [r for r in runs if r["guide"] == DEFAULT and r.get("gap") is not None]
        if done:
            train = [r for r in done if r.get("train_gap") is not None]
            held = [r["gap"] for r in done]
            conditional = getattr(spec, "GAP_CONDITIONAL", "conditional on the draws of its held sites")
            text = "%s%s %s held out" % (spec.NAME, " (%s)" % conditional if any(r.get("gap_held") for r in done)
                                         else "", mean_se(held))
            if train:
                excess = [r["gap"] - r["train_gap"] for r in train]
                share = mean(excess) / mean(r["gap"] for r in train)
                text += ", %s on training datapoints (held-out − training %s, paired by seed: %.0f %% of the " \
                        "held-out gap)" % (mean_se([r["train_gap"] for r in train]), mean_se(excess), 100 * share)
                if mean(held) > LARGE_GAP:
                    large.append(spec.NAME)
                    split["held out" if share > 2 / 3 else "training" if share < 1 / 3 else "both"].append(
                        "%s (%.0f %%)" % (spec.NAME, 100 * share))
            gaps.append(text)
        for line in diagnosis(runs, brief=True):
            diagnosed.append("%s (%s" % (spec.NAME, line.replace(": ", "): ", 1)))
    where = sorted({key[:2] for key in stops})
    stopped = ["%s (%s): %s with exp, %s with softplus" % (
        model, optimizer, *("%d of %d" % tuple(stops[(model, optimizer, link)]) if stops[(model, optimizer, link)][1]
                            else "not run" for link in ("exp", "softplus")))
        for model, optimizer in where
        if stops[(model, optimizer, "exp")][0] or stops[(model, optimizer, "softplus")][0]]
    reproduced = sum(same for _, same, _, _ in repeats)
    slower = sorted(ratio for _, _, ratio, _ in repeats if ratio is not None)
    remeasured = sum(gap for _, _, _, gap in repeats)
    out = ["* **Stops** of the encoder builders (A-VI, SA-VI, IA-VI, flow; a refusal at the first call, the model's, "
           "excluded), the earlier default exp scale link against the default softplus, runs of all seeds: %s; none "
           "elsewhere." % ("; ".join(stopped) or "none"),
           "* **The default A-VI guide** (`AutoAmortizedNormal(model)`, `%s`) against the hand-written guide, "
           "nats per datapoint (paired by seed; the held-out ELBO, or the training one where the hand-written guide "
           "is per-datapoint): %s." % (DEFAULT, "; ".join(default)),
           "* **Short of the hand-written guide** by more than 1 nat per datapoint or 1 %% of its ELBO (paired by "
           "seed), any guide: %s." % ("; ".join(short) or "none"),
           "* **The default A-VI guide's amortization gap** (nats per datapoint, mean ± s.e. over seeds, on the "
           "first %d held-out datapoints and on the first %d training ones): %s. Large (above %g nat per "
           "datapoint): %s. Of these, the held-out part (held-out − training, the encoder's generalization) is more "
           "than two thirds of the gap for %s; less than a third, the gap there on the training datapoints too (the "
           "encoder's fit, not its generalization), for %s; between, about as much of each, for %s." % (
               GAP_POINTS, GAP_POINTS, "; ".join(gaps), LARGE_GAP, ", ".join(large) or "none",
               ", ".join(split["held out"]) or "none", ", ".join(split["training"]) or "none",
               ", ".join(split["both"]) or "none"),
           "* **What diagnose says of the trained default guide** (each model's section says more; k̂ and local SBC "
           "at common.DIAGNOSE's budget, the first %d held-out datapoints): %s." % (
               GAP_POINTS, "; ".join(diagnosed) or "not run")]
    if repeats:
        again = (" (%d of them, M2's, again to measure the gap through its AutoGuideList, refused before)" % remeasured
                 if remeasured else "")
        out.append("* **Run again**: %d (model, guide, seed) lines of the default guide were run again to record the "
                   "training-split gap and diagnose%s; %d of them repeated every number of the earlier line exactly "
                   "(ELBOs, IW bound, downstream, and the held-out gap where the earlier line measured it), %d did "
                   "not. Their ms/step was %.1f× the earlier lines' (median over them; the CPU shared with other "
                   "work): the ms/step ratios of lines run at different times carry that."
                   % (len(repeats), again, reproduced, len(repeats) - reproduced,
                      slower[len(slower) // 2] if slower else float("nan")))
    return out


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
        for tick in ax.get_xticklabels():
            if tick.get_text() == DEFAULT:  # the default A-VI guide, AutoAmortizedNormal(model)
                tick.set_fontweight("bold")
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


def page(records, runs_path, figure_path):
    """The page's text from the runs' JSON lines ``records`` (as recorded: :func:`read` labels them)."""
    all_runs, repeats = read(records)
    out = ["# The gallery: Pyro's amortized examples, their hand-written guides against the builders", "",
           "Generated by `python experiments/gallery/report.py` from `%s` (the runs: `OMP_NUM_THREADS=1 python "
           "experiments/gallery/run.py all --seeds 0 1 2 --out %s`); do not edit by hand. What each run measures: "
           "the docstring of `experiments/gallery/common.py`; each model's data, sizes, optimizer and budget: its "
           "module's docstring, quoted below." % (runs_path, runs_path), "",
           "A guide's name says its scale link: `+softplus`, σ_n = softplus of the scale head, "
           "`AutoAmortizedNormal`'s default since commit 18d653a (**`%s`** is the default A-VI guide, "
           "`AutoAmortizedNormal(model)`), "
           "and `+exp`, σ_n = exp of it, the default before (and Pyro's examples/vae's); each passes its link "
           "explicitly, so a recorded name run again is built the same. The lines recorded before names said it "
           "(named `amortized`, `builder-body`, ...; all built with exp) are read with `+exp` "
           "(`experiments/gallery/common.py`'s `label`), their numbers untouched." % DEFAULT, "",
           "![held-out ELBO relative to the hand-written guide (the default A-VI guide's name in bold)](%s)"
           % figure_path, "", "## Summary", ""]
    out += summary(all_runs)
    out += ["", "## What they show", ""] + findings(all_runs, repeats)
    out += ["", "## Running it", ""] + running()
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
            "standard errors over seeds, not over datapoints; a hand-written guide's gap is refused (below). M2's is "
            "its AutoGuideList's builder part's, q(z | x), with y held at one draw per datapoint by the classifier "
            "(the list's other part) and the model conditioned on it: a gap conditional on those draws (one per "
            "datapoint), not the gap with y summed out as TraceEnum_ELBO sums it in training. The "
            "training and held-out gaps are taken on different datapoints (the first 16 of each split), so their "
            "difference holds the datapoints' spread too.",
            "* diagnose is run at a small budget (`common.DIAGNOSE`: k̂ from %d draws of z at %d θ draws, whose "
            "threshold is lower than 0.7; calibration from %d simulated datapoints, a test of little power) and on the "
            "default A-VI guide alone." % (DIAGNOSE["samples"], DIAGNOSE["theta_draws"], DIAGNOSE["simulations"]),
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
        said = diagnosis(runs)
        out += ["What diagnose says about the trained default guide (`%s`, the swap above):" % DEFAULT, ""]
        out += ["* %s" % line for line in said] if said else ["* not run with diagnose yet"]
        out += [""]
        if refusals:
            out += ["Refused or stopped:", ""]
            for guide, why in refusals.items():
                out += ["* %s: %s" % (guide, line) for line in sorted(why)]
    return "\n".join(out) + "\n"


def running(path=ROOT / "figures/gallery/wall-times.txt"):
    """The commands and the wall times of the runs that made the lines (``/usr/bin/time`` of each job, collected by
    ``grep -h wall runs/gallery/*.log | sort -u > figures/gallery/wall-times.txt``)."""
    by = {}
    for line in path.read_text().splitlines():
        model, rest = line.split(" ", 1)
        by.setdefault(model, []).append(rest)
    out = ["One model, every guide it lists, seeds 0–2: `OMP_NUM_THREADS=1 python experiments/gallery/run.py MODEL "
           "--seeds 0 1 2 --out figures/gallery/runs.jsonl` (resumable: a recorded line is kept); all nine: `... "
           "run.py all ...`; a subset of guides: `--guides`. Wall times of the jobs that wrote the lines, on the "
           "2-core CPU here, one thread a job, two jobs (or a job and other work) at once; each job ran a subset of "
           "the model's guides (named by seeds alone: the first job, every guide the model listed then, and on five "
           "models a second, the softplus variants and the hand-written guide again; then the default with diagnose, "
           "and the other softplus builders), so a model's jobs' sum bounds one run of all its guides at that load "
           "from above:", ""]
    for model in MODELS:
        jobs = by.get(model, [])
        total = sum(float(job.rsplit("wall ", 1)[1].split()[0]) for job in jobs)
        out.append("* %s: %s; sum %.0f s (%.1f min)" % (model, "; ".join(jobs), total, total / 60))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="figures/gallery/runs.jsonl")
    parser.add_argument("--doc", default="docs/gallery.md")
    parser.add_argument("--figure", default="figures/gallery/heldout.png")
    args = parser.parse_args()
    runs = read_jsonl(ROOT / args.runs)
    figure(read(runs)[0], ROOT / args.figure)
    (ROOT / args.doc).write_text(page(runs, args.runs, "../" + args.figure))
    print("wrote %s and %s from %d runs" % (args.doc, args.figure, len(runs)))


if __name__ == "__main__":
    main()
