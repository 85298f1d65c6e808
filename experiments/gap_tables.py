"""The gaps of several comparison folders in one table and one figure, with how far each run trained.

    python experiments/gap_tables.py runs/gap-vs-n/n1000 runs/gap-vs-n/n2500 runs/gap-vs-n/n8000 --by-n \
        --out figures/gap-vs-n
    python experiments/gap_tables.py runs/sa-vi-5 runs/sa-vi-5-unrolled runs/sa-vi-20 --out figures/sa-vi

Reads the gap reports that ``compare --gap-images`` left in each run directory (FOLDER/runs/DATASET/RUN/
gap-{train,test}.json) and the runs' metrics, and writes into --out:
  gaps.md     the gap table (reports.format_reports: per configuration and split, the mean over training
              seeds of the image means ± the standard error over seeds), then per configuration: seeds, SVI
              steps, final ELBO per image, what the ELBO per image gained over the last 10% of the steps (a
              plateau: small against the whole run's gain), the largest fall of the ELBO per image from one
              epoch to the next after the first 10% of epochs (stability), and training ms per step (the
              runs' own clocks, on a shared CPU: see BENCHMARKS.md for step costs measured side by side)
  gaps.png    amortization, coupling and approximation gaps per configuration, train and test, ± 1 s.e. (the
              title says over what); a missing value (F-VI's held-out amortization gap) as "n/a", no bar; hatched
              where some q* or q*_m stopped at its step cap; the approximation gap against IWAE's log p(x)
With --against LABEL (repeatable) gaps.md ends with every other configuration's gaps minus that one's, in nats and
in standard errors. With --by-n each configuration's label names its N (training images), and the figure's title what else differs
between the N, as the runs recorded it (trained epochs, data source, settings).
"""
import argparse
import json
import math
import shlex
import textwrap
from pathlib import Path

from matplotlib.patches import Patch

from amortized_pyro.gap.pooling import gap_over_seeds, seed_groups
from amortized_pyro.models.guides import display_order
from amortized_pyro.report.style import save_figure, subplots
from amortized_pyro.report.tables import format_reports, hit_cap, plus_minus
from amortized_pyro.support.stats import mean_stderr
from amortized_pyro.runs.store import load_history, read_info

GAPS = ("amortization_gap", "coupling_gap", "approximation_gap")


def collect(folders, by_n):
    """(gap reports, {label: [(config, history)]}) of every run with gap reports under the folders."""
    reports, runs = [], {}
    for folder in folders:
        for run_dir in sorted(Path(folder).glob("runs/*/*")):
            found = [json.loads(p.read_text()) for p in sorted(run_dir.glob("gap-*.json"))]
            if not found:
                continue
            info = read_info(run_dir)
            label = found[0]["label"] + (", N %d" % info["data"]["n_obs"] if by_n else "")
            for report in found:
                report["label"] = label
            reports += found
            runs.setdefault(label, []).append((info, load_history(run_dir)))
    return reports, runs


def pm(values, fmt="%.1f"):
    """The values' mean ± standard error (the mean alone for one value)."""
    return plus_minus(mean_stderr(values), fmt)


def training_table(runs):
    lines = ["| configuration | seeds | SVI steps | final ELBO / image | gained over the last 10% of steps | "
             "of the whole run's gain | largest one-epoch fall after the first 10% | training ms / step |",
             "|---" * 8 + "|"]
    for label, group in sorted(runs.items(), key=lambda item: display_order(item[0])):
        finals, lasts, shares, costs, steps, falls = [], [], [], [], set(), []
        for info, history in group:
            config = info["config"]
            per_epoch = math.ceil(info["data"]["n_obs"] / min(config["batch_size"], info["data"]["n_obs"]))
            evaluated = [r for r in history if "train_plugin_mse" in r and not math.isnan(r["elbo_per_obs"])]
            end = evaluated[-1]
            before = min(evaluated, key=lambda r: abs(r["epoch"] - 0.9 * end["epoch"]))
            finals.append(end["elbo_per_obs"])
            lasts.append(end["elbo_per_obs"] - before["elbo_per_obs"])
            shares.append(lasts[-1] / (end["elbo_per_obs"] - evaluated[0]["elbo_per_obs"]))
            costs.append(1000 * history[-1]["time"] / (history[-1]["epoch"] * per_epoch))
            elbos = [r["elbo_per_obs"] for r in history[len(history) // 10:]]
            falls.append(max(a - b for a, b in zip(elbos, elbos[1:])))  # training's stability
            steps.add(history[-1]["epoch"] * per_epoch)
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s |" % (
            label, len(group), "/".join(map(str, sorted(steps))), pm(finals), pm(lasts), pm(shares, "%.3f"),
            pm(falls), pm(costs, "%.0f")))
    return "\n".join(lines)


HATCH = "//"  # a bar whose configuration had some q* or q*_m stopped at its step cap


def covers(value, group):
    """What one bar's error bar covers: pooling's own account (amortized_pyro.gap.pooling.pooled), else, for one
    seed's report without per-image values, the report's; else (several seeds without per-image values) the
    seeds' image means."""
    if "over" in value:
        return value["over"]
    return group[0].get("stderr_over", "images") if len(group) == 1 else "the seeds' image means"


def estimator_text(reports):
    """Which log p(x) the approximation gap is measured against: local/gaps.py takes IWAE's, log p(x) by
    importance sampling, a stochastic lower bound of log p(x), so the gap log p(x) − L(q*_m) is a lower bound too."""
    ks = "/".join(map(str, sorted({r["settings"]["importance_samples"] for r in reports})))
    text = "log p(x) by IWAE (K = %s), a lower bound: the gap is a lower bound" % ks
    if any(r.get("log_px_ais") for r in reports):
        text += "\n(AIS, where measured: IWAE − AIS in gaps.md)"
    return text


# Run bookkeeping (where and how a run was kept) and the fields that make a configuration's label: left out of
# what differs between the N.
NOT_COMPARED = ("seed", "n_obs", "data_dir", "download", "device", "checkpoint_every", "eval_every", "guide", "width",
                "refine_steps", "refine_grad")


def by_n_note(reports, runs):
    """What differs between the N (training images) besides N, from what the runs recorded: each N's trained
    epochs (the gap reports' ``trained_epochs``), its data source (config.json), and every other setting of
    config.json whose values differ between the N."""
    epochs = {}
    for r in reports:
        epochs.setdefault(r.get("run_id"), set()).add(r.get("trained_epochs", "?"))
    per_n = {}  # {N: {field: {values}}}
    for group in runs.values():
        for info, _ in group:
            fields = per_n.setdefault(info["data"]["n_obs"], {})
            fields.setdefault("trained epochs", set()).update(epochs.get(info.get("run_id"), {"?"}))
            fields.setdefault("data", set()).add(info["data"].get("source") or info["data"]["name"])
            for key, value in info["config"].items():
                if key not in NOT_COMPARED:
                    fields.setdefault(key, set()).add(json.dumps(value))  # hashable, as written

    def show(key):
        values = [frozenset(f.get(key, ())) for f in per_n.values()]
        if len(set(values)) == 1:
            return "%s: %s at every N" % (key, "/".join(sorted(map(str, values[0]))))
        return "%s: %s" % (key, "; ".join("N %d: %s" % (n, "/".join(sorted(map(str, f.get(key, ())))) or "–")
                                         for n, f in sorted(per_n.items())))

    keys = sorted({k for f in per_n.values() for k in f} - {"trained epochs", "data"})
    differing = [show(k) for k in keys if len({frozenset(f.get(k, ())) for f in per_n.values()}) > 1]
    return "Besides N: %s. %s. Other settings that differ between the N: %s." % (
        show("trained epochs"), show("data"), "; ".join(differing) or "none")


def figure(reports, path, title, note=None):
    """The amortization, coupling and approximation gaps per configuration, train and test, as bars ± 1 s.e.;
    a missing value (F-VI has no held-out amortization gap) as no bar and "n/a"; hatched where some q* or q*_m
    stopped at its step cap. ``note`` (a line under the title, e.g. :func:`by_n_note`). Returns the figure."""
    groups = seed_groups(reports)
    labels = sorted({label for label, _ in groups}, key=display_order)
    fig, axes = subplots(1, 3, figsize=(15, 5.2))
    over = set()  # what the drawn error bars cover
    for ax, gap in zip(axes, GAPS):
        for offset, (split, color) in enumerate((("train", "tab:blue"), ("test", "tab:orange"))):
            xs, means, capped, bars = [], [], [], []
            for i, label in enumerate(labels):
                x = i + (offset - 0.5) * 0.35
                group = groups.get((label, split))
                value = gap_over_seeds(group, gap) if group else None
                if value is None:  # missing: drawn as missing, not as a zero bar
                    ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7, color=color)
                    continue
                xs.append(x)
                means.append(value["mean"])
                capped.append(any(hit_cap(r) for r in group))
                if not math.isnan(value["stderr"]):  # one image: no error bar rather than a zero one
                    bars.append((x, value["mean"], value["stderr"]))
                    over.add(covers(value, group))
            if xs:
                container = ax.bar(xs, means, width=0.35, color=color)
                for patch, cap in zip(container.patches, capped):
                    if cap:
                        patch.set(hatch=HATCH, edgecolor="black")
            if bars:
                ax.errorbar(*zip(*bars), fmt="none", ecolor="black", capsize=3)
        ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(labels) - 0.4)  # every slot, an "n/a" one included, inside the axes
        ax.set(title=gap.replace("_", " ") + " (nats / image)")
        ax.axhline(0, color="black", linewidth=0.5)
    axes[2].set_ylabel(estimator_text(reports), fontsize=8)
    # the legend's own patches: the bars' would carry the first bar's hatch
    handles = [Patch(color="tab:blue", label="train"), Patch(color="tab:orange", label="test")]
    if any(hit_cap(r) for r in reports):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch=HATCH, label="hatched: some q* or q*_m\n"
                             "stopped at its step cap, not\nby the rule (see gaps.md)"))
    axes[-1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    lines = [title + ": bars the mean over training seeds of the image means; error bars ± 1 s.e. over "
             + "; ".join(sorted(over) or ["nothing (a single image)"])]
    if note:
        lines += textwrap.wrap(note, 200)
    fig.suptitle("\n".join(lines), fontsize=9)
    return save_figure(fig, path)


def against_table(reports, base):
    """Every other configuration's three gaps minus ``base``'s, split by split: the difference of the pooled
    means and that difference over √(s.e.₁² + s.e.₂²), the standard errors taken as independent (each
    configuration trained its own decoders; where the images are the same the pairing is left unused, which
    makes the ratio conservative)."""
    groups = seed_groups(reports)
    if not any(label == base for label, _ in groups):
        raise SystemExit("--against %s: no such configuration (there are: %s)" % (
            base, ", ".join(sorted({label for label, _ in groups}, key=display_order))))
    lines = ["Each configuration's gaps minus %s's (nats per image; in brackets, the difference over its standard "
             "error, the two standard errors taken as independent):" % base, "",
             "| configuration | split | " + " | ".join(g.replace("_", " ") for g in GAPS) + " |", "|---" * 5 + "|"]
    for (label, split), group in sorted(groups.items(), key=lambda item: (display_order(item[0][0]),
                                                                          item[0][1] != "train")):
        if label == base or (base, split) not in groups:
            continue
        cells = []
        for name in GAPS:
            mine, theirs = gap_over_seeds(group, name), gap_over_seeds(groups[(base, split)], name)
            if mine is None or theirs is None or math.isnan(mine["mean"]) or math.isnan(theirs["mean"]):
                cells.append("n/a")
                continue
            difference = mine["mean"] - theirs["mean"]
            cells.append("%+.1f (%+.1f s.e.)" % (difference, difference / math.hypot(mine["stderr"], theirs["stderr"])))
        lines.append("| %s | %s | %s |" % (label, split, " | ".join(cells)))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--by-n", action="store_true", help="name each configuration's N in its label")
    parser.add_argument("--title", default="Gaps")
    parser.add_argument("--against", metavar="LABEL", action="append", default=[],
                        help="add each configuration's gaps minus this one's (e.g. 'A-VI k=64'), in standard errors; "
                             "repeat for more tables")
    args = parser.parse_args()
    reports, runs = collect(args.folders, args.by_n)
    if not reports:
        raise SystemExit("no gap reports under %s" % ", ".join(args.folders))
    text = format_reports(reports) + "\n\n" + training_table(runs) + "\n"
    for base in args.against:  # a label not there stops here, before anything is written
        text += "\n" + against_table(reports, base) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = " --title %s" % shlex.quote(args.title) + "".join(" --against %s" % shlex.quote(base)
                                                                 for base in args.against)
    (out / "gaps.md").write_text("Command: python experiments/gap_tables.py %s%s --out %s%s\n\n%s"
                                 % (" ".join(args.folders), " --by-n" if args.by_n else "", args.out, options, text))
    figure(reports, out / "gaps.png", args.title, by_n_note(reports, runs) if args.by_n else None)
    print(text)


if __name__ == "__main__":
    main()
