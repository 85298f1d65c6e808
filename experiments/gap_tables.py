"""The gaps of several comparison folders in one table and one figure, with how far each run trained.

    python experiments/gap_tables.py runs/gap-n-2500 runs/gap-n-8000 --by-n --out figures/gap-vs-n
    python experiments/gap_tables.py runs/sa-vi-5 runs/sa-vi-5-unrolled runs/sa-vi-20 --out figures/sa-vi

Reads the gap reports that ``compare --gap-images`` left in each run directory (FOLDER/runs/DATASET/RUN/
gap-{train,test}.json) and the runs' metrics, and writes into --out:
  gaps.md     the gap table (reports.format_reports: per configuration and split, the mean over training
              seeds of the image means ± the standard error over seeds), then per configuration: seeds, SVI
              steps, final ELBO per image, what the ELBO per image gained over the last 10% of the steps (a
              plateau: small against the whole run's gain), the largest fall of the ELBO per image from one
              epoch to the next after the first 10% of epochs (stability), and training ms per step (the
              runs' own clocks, on a shared CPU: see BENCHMARKS.md for step costs measured side by side)
  gaps.png    amortization, coupling and approximation gaps per configuration, train and test, ± s.e.
With --by-n each configuration's label names its N (training images).
"""
import argparse
import json
import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from amortized_pyro.gap.pooling import gap_over_seeds, seed_groups
from amortized_pyro.models.guides import display_order
from amortized_pyro.report.tables import format_reports
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
    if len(values) < 2:
        return fmt % values[0]
    return (fmt + " ± " + fmt) % (statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values)))


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


def figure(reports, path, title):
    groups = seed_groups(reports)
    labels = sorted({label for label, _ in groups}, key=display_order)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=False)
    for ax, gap in zip(axes, GAPS):
        for offset, (split, color) in enumerate((("train", "tab:blue"), ("test", "tab:orange"))):
            values = [gap_over_seeds(groups[label, split], gap) if (label, split) in groups else None for label in labels]
            xs = [i + (offset - 0.5) * 0.35 for i in range(len(labels))]
            ax.bar(xs, [v["mean"] if v else 0 for v in values], width=0.35, color=color, label=split,
                   yerr=[v["stderr"] if v and not math.isnan(v["stderr"]) else 0 for v in values], capsize=3)
        ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
        ax.set(title=gap.replace("_", " ") + " (nats / image)")
        ax.axhline(0, color="black", linewidth=0.5)
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(title + ": mean over training seeds ± s.e. over seeds and images together (amortized_pyro.gap.pooling)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--by-n", action="store_true", help="name each configuration's N in its label")
    parser.add_argument("--title", default="Gaps")
    args = parser.parse_args()
    reports, runs = collect(args.folders, args.by_n)
    if not reports:
        raise SystemExit("no gap reports under %s" % ", ".join(args.folders))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = format_reports(reports) + "\n\n" + training_table(runs) + "\n"
    (out / "gaps.md").write_text("Command: python experiments/gap_tables.py %s%s --out %s\n\n%s"
                                 % (" ".join(args.folders), " --by-n" if args.by_n else "", args.out, text))
    figure(reports, out / "gaps.png", args.title)
    print(text)


if __name__ == "__main__":
    main()
