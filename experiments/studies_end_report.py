"""The original study at its own length (issue 48): every run of experiments/studies-end.sh's original study, drawn
from the small files mirrored under figures/studies-end/ (each run's config.json, metrics.jsonl, summary.json
and gap-*.json), so that it can be redrawn without runs/.

    python experiments/studies_end_report.py figures/studies-end/end-original-* --out figures/studies-end

Writes into --out: original.md (per run: steps trained of 50,000; the train and test plug-in MSE and the
predictive ones ÷ the mean image's at the last evaluation; the true ELBO per observation there; the first
evaluated step below 0.9 × and below 0.5 × the mean image's train plug-in MSE; the three gaps where a gap report
exists) and original.png (train and test plug-in MSE ÷ the mean image's against steps, a line per run, clipped at
``YMAX``, the mean image at 1 and the 0.9 and 0.5 levels dotted). A run not finished is drawn as far as it got and marked so.
"""
import argparse
import json
import math
from pathlib import Path

from amortized_pyro.report.style import save_figure, subplots

TOTAL_STEPS = 50000
LEVELS = (0.9, 0.5)
YMAX = 1.5  # the first few hundred steps start far above the mean image: clipped, the plateau and after shown
# The authors' saved arrays (charlesm93/AVI-when-and-why, FashionMNIST, N 10,000, 5,000 epochs of 10 steps, 10
# seeds; medians), as issue 48 read them: final train MSE, and the epoch where the train MSE fell below 0.03.
AUTHORS = (("A-VI k=1", 0.0504, None), ("A-VI k=64", 0.0244, 1821), ("A-VI k=128", 0.0244, 1742),
           ("A-VI k=256", 0.0243, 1713), ("F-VI", 0.0265, 2731), ("constant-VI", 0.0868, None))


def runs(folders):
    """(label, objective, its rows, config, data, finished, gap reports) per run directory under the folders."""
    for folder in folders:
        for metrics in sorted(Path(folder).glob("runs/*/*/metrics.jsonl")):
            info = json.loads((metrics.parent / "config.json").read_text())
            config = info["config"]
            rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
            name = {"amortized": "A-VI k=%d" % config["width"], "per-datapoint": "F-VI",
                    "shared": "constant-VI"}[config["guide"]]
            gaps = {path.stem.split("-", 1)[1]: json.loads(path.read_text())
                    for path in sorted(metrics.parent.glob("gap-*.json"))}
            yield (name, config["objective"], [r for r in rows if r.get("train_plugin_mse") is not None], config,
                   info["data"], (metrics.parent / "summary.json").exists(), gaps)


def steps_of(row, config, data):
    return row["epoch"] * math.ceil(data["n_obs"] / min(config["batch_size"], data["n_obs"]))


def first_below(rows, config, data, level):
    base = data["mean_image_mse"]["train_mse"]
    return next((steps_of(r, config, data) for r in rows if r["train_plugin_mse"] < level * base), None)


def ratio(value, base):
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else "%.2f" % (value / base)


def gap_cell(gaps, split):
    report = gaps.get(split)
    if report is None:
        return "not measured"
    parts = []
    for key in ("amortization_gap", "coupling_gap", "approximation_gap"):
        value = report.get(key)
        parts.append("n/a" if not value or value.get("mean") is None else "%.1f ± %.1f" % (value["mean"], value["stderr"]))
    return " / ".join(parts)


def table(found):
    lines = ["| objective | configuration | steps | train plug-in ÷ mean image | train predictive ÷ | test plug-in ÷ "
             "| test predictive ÷ | true ELBO / obs | first step < 0.9 × | first step < 0.5 × | gaps, train: "
             "amortization / coupling / approximation (nats per image) | gaps, test |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, objective, rows, config, data, finished, gaps in found:
        if not rows:
            continue
        last, base = rows[-1], data["mean_image_mse"]
        lines.append("| %s | %s | %d%s | %s | %s | %s | %s | %.2f | %s | %s | %s | %s |" % (
            objective, name, steps_of(last, config, data), "" if finished else " (going on)",
            ratio(last["train_plugin_mse"], base["train_mse"]), ratio(last.get("train_predictive_mse"), base["train_mse"]),
            ratio(last.get("test_plugin_mse"), base["test_mse"]), ratio(last.get("test_predictive_mse"), base["test_mse"]),
            last["elbo_per_obs"], first_below(rows, config, data, 0.9) or "not yet",
            first_below(rows, config, data, 0.5) or "not yet", gap_cell(gaps, "train"), gap_cell(gaps, "test")))
    return lines


def figure(found, path, seeds=(0,)):
    fig, axes = subplots(1, 2, figsize=(12, 4.5), sharey=True)
    colours = {(name, objective): "C%d" % i for i, (name, objective, *_) in enumerate(found)}  # the same in both panels
    for ax, split in zip(axes, ("train", "test")):
        on_the_mean = []  # configurations whose last ratio rounds to 1.00: their lines lie on the mean image's
        for name, objective, rows, config, data, finished, _ in found:
            points = [(steps_of(r, config, data), r["%s_plugin_mse" % split] / data["mean_image_mse"]["%s_mse" % split])
                      for r in rows if r.get("%s_plugin_mse" % split) is not None]
            label = "%s, %s" % (name, "authors' objective" if objective == "reference" else "ELBO")
            if points:
                ax.plot(*zip(*points), ls="-" if objective == "reference" else "--", color=colours[name, objective],
                        label=label + ("" if finished else " (going on)"))
                if round(points[-1][1], 2) == 1.0:
                    on_the_mean.append(label)
        if on_the_mean:  # lines drawn over each other there: named, so that none is hidden
            ax.text(0.98, 0.97, "on the mean image's line (1.00 at the end):\n" + "\n".join(on_the_mean),
                    transform=ax.transAxes, ha="right", va="top", fontsize=6.5)
        for level in (1.0,) + LEVELS:
            ax.axhline(level, color="grey", ls=":" if level < 1 else "-", lw=1)
        ax.set_xlim(0, TOTAL_STEPS)
        ax.set_ylim(0, YMAX)
        ax.set_xlabel("SVI steps (B = 1,000)")
        ax.set_title("training images" if split == "train" else "held-out images (F-VI has no factor for them)")
    axes[0].set_ylabel("plug-in MSE ÷ the mean image's (clipped at %g)" % YMAX)
    fig.suptitle("The original study at its length (MNIST 8,000 / 2,000, seed %s): 1 is the mean image (z unused), "
                 "0.9 and 0.5 dotted" % ", ".join(map(str, seeds)), fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        axes[1].legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    save_figure(fig, path)
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    found = list(runs(args.folders))
    seeds = sorted({config.get("seed", 0) for _, _, _, config, *_ in found})
    if len(seeds) > 1:  # several seeds of one configuration (issue 60, item 12): each row and line names its seed
        found = [("%s seed %d" % (name, config.get("seed", 0)), objective, rows, config, *rest)
                 for name, objective, rows, config, *rest in found]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    authors = ["", "The authors' FashionMNIST medians (10 seeds, N 10,000, 50,000 steps), for shape, not decimals: "
               + "; ".join("%s final train MSE %.4f, below 0.03 at epoch %s" % (n, m, e or "never") for n, m, e in AUTHORS)
               + " (an epoch is 10 steps there)."]
    command = ["", "Command: `python experiments/studies_end_report.py %s --out %s`" % (" ".join(args.folders), args.out)]
    (out / "original.md").write_text("\n".join(table(found) + authors + command) + "\n")
    figure(found, out / "original.png", seeds)
    print("wrote original.md and original.png into %s" % out)


if __name__ == "__main__":
    main()
