"""The gaps of several comparison folders in one table and one figure, with how far each run trained.

    python experiments/gap_tables.py figures/gap-vs-n/n1000 figures/gap-vs-n/n2500 figures/gap-vs-n/n8000 --by-n \
        --out figures/gap-vs-n
    python experiments/gap_tables.py figures/sa-vi/sa-vi-5 figures/sa-vi/sa-vi-5-unrolled figures/sa-vi/sa-vi-20 \
        --out figures/sa-vi

Reads the gap reports that ``compare --gap-images`` left in each run directory (FOLDER/runs/DATASET/RUN/
gap-{train,test}.json) and the runs' metrics, and writes into --out:
  gaps.md     the gap table (reports.format_reports: per configuration and split, the mean over training
              seeds of the image means ± the standard error over seeds), then per configuration: seeds, SVI
              steps, final ELBO per image, what the ELBO per image gained over the last 10% of the steps (a
              plateau: small against the whole run's gain), the largest fall of the ELBO per image from one
              epoch to the next after the first 10% of epochs (stability), and training ms per step (the
              runs' own clocks, on a shared CPU: see BENCHMARKS.md for step costs measured side by side), and the
              final train plug-in MSE (the runs' last evaluation)
  gaps.png    amortization, coupling and approximation gaps per configuration, train and test, ± 1 s.e. (the
              title says over what); a missing value (F-VI's held-out amortization gap) as "n/a", no bar; hatched
              where some optimization stopped at its step cap, by what it touches: the amortization gap "//"
              where some q* did (gaps.md's †), the coupling and approximation gaps "\\\\" where some q*_m did
              (gaps.md's ‡); the approximation gap against IWAE's log p(x)
With --against LABEL (repeatable) gaps.md ends with every other configuration's gaps minus that one's, in nats ±
the standard error and in standard errors: paired where both were measured on the same images of the same training
seeds and data (the per-image differences pooled as a gap is; each seed's own difference beside them), unpaired
where not, each row under a heading that says which and why (amortized_pyro.report.paired).
With --by-n each configuration's label names its N (training images), and the figure's title what else differs
between the N, as the runs recorded it (trained epochs, data source, settings).
"""
import argparse
import json
import math
import shlex
import textwrap
from pathlib import Path

from matplotlib.patches import Patch

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.gap.pooling import gap_over_seeds, seed_groups
from amortized_pyro.models.guides import display_order
from amortized_pyro.report.marks import capped_q_m, capped_q_star, plus_minus
from amortized_pyro.report.paired import GAPS, against_table
from amortized_pyro.report.style import save_figure, subplots
from amortized_pyro.report.tables import format_reports
from amortized_pyro.support.stats import mean_stderr
from amortized_pyro.runs.store import load_history, read_info



def data_id(data):
    """What a run's images are drawn from (its config.json's ``data``): the data's fingerprint, or where a run
    recorded none its source and split sizes."""
    return data.get("fingerprint") or json.dumps([data.get("source") or data.get("name"), data.get("n_obs"),
                                                  data.get("n_test")])


def collect(folders, by_n):
    """(gap reports, {label: [(config, history)]}) of every run with gap reports under the folders; each report
    with its run's :func:`data_id` (``data_id``) and training seed (``seed``), which pairing compares."""
    reports, runs = [], {}
    for folder in folders:
        for run_dir in sorted(Path(folder).glob("runs/*/*")):
            found = [json.loads(p.read_text()) for p in sorted(run_dir.glob("gap-*.json"))]
            if not found:
                continue
            info = read_info(run_dir)
            label = found[0]["label"] + (", N %d" % info["data"]["n_obs"] if by_n else "")
            for report in found:  # the training seed from config.json where a report of an earlier version lacks it
                report.update(label=label, data_id=data_id(info["data"]),
                              seed=report.get("seed", info["config"].get("seed")))
            reports += found
            runs.setdefault(label, []).append((info, load_history(run_dir)))
    return reports, runs


def pm(values, fmt="%.1f"):
    """The values' mean ± standard error (the mean alone for one value)."""
    return plus_minus(mean_stderr(values), fmt)


def training_table(runs):
    lines = ["| configuration | seeds | SVI steps | final ELBO / image | gained over the last 10% of steps | "
             "of the whole run's gain | largest one-epoch fall after the first 10% | training ms / step | "
             "final train MSE plug-in |", "|---" * 9 + "|"]
    for label, group in sorted(runs.items(), key=lambda item: display_order(item[0])):
        finals, lasts, shares, costs, steps, falls, mses = [], [], [], [], set(), [], []
        for info, history in group:
            config = info["config"]
            per_epoch = math.ceil(info["data"]["n_obs"] / min(config["batch_size"], info["data"]["n_obs"]))
            evaluated = [r for r in history if "train_plugin_mse" in r and not math.isnan(r["elbo_per_obs"])]
            end = evaluated[-1]
            before = min(evaluated, key=lambda r: abs(r["epoch"] - 0.9 * end["epoch"]))
            finals.append(end["elbo_per_obs"])
            mses.append(end["train_plugin_mse"])
            lasts.append(end["elbo_per_obs"] - before["elbo_per_obs"])
            shares.append(lasts[-1] / (end["elbo_per_obs"] - evaluated[0]["elbo_per_obs"]))
            costs.append(1000 * history[-1]["time"] / (history[-1]["epoch"] * per_epoch))
            elbos = [r["elbo_per_obs"] for r in history[len(history) // 10:]]
            falls.append(max(a - b for a, b in zip(elbos, elbos[1:])))  # training's stability
            steps.add(history[-1]["epoch"] * per_epoch)
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            label, len(group), "/".join(map(str, sorted(steps))), pm(finals), pm(lasts), pm(shares, "%.3f"),
            pm(falls), pm(costs, "%.0f"), pm(mses, "%.4f")))
    return "\n".join(lines)


# Each gap's bar hatched where an optimization that touches it stopped at its step cap: the amortization gap by
# a capped q* (gaps.md's †), the coupling and approximation gaps by a capped q*_m (gaps.md's ‡); and the legend's
# words for each hatch
HATCHES = {"amortization_gap": (capped_q_star, "//"), "coupling_gap": (capped_q_m, "\\\\"),
           "approximation_gap": (capped_q_m, "\\\\")}
HATCH_WORDS = {"//": "some q* stopped at its step cap,\nnot by the rule: the amortization\ngap a lower bound "
                     "(gaps.md's †)",
               "\\\\": "some q*_m stopped at its step cap:\nthe coupling gap may read low, the\napproximation "
                       "gap high (gaps.md's ‡)"}


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
    a missing value (F-VI has no held-out amortization gap) as no bar and "n/a"; hatched where an optimization
    that touches the gap stopped at its step cap (:data:`HATCHES`). ``note`` (a line under the title, e.g.
    :func:`by_n_note`). Returns the figure."""
    groups = seed_groups(reports)
    labels = sorted({label for label, _ in groups}, key=display_order)
    fig, axes = subplots(1, 3, figsize=(15, 5.2))
    over, hatches = set(), set()  # what the drawn error bars cover; the hatches drawn
    for ax, gap in zip(axes, GAPS):
        capped, hatch = HATCHES[gap]
        for offset, (split, color) in enumerate((("train", "tab:blue"), ("test", "tab:orange"))):
            xs, means, hatched, bars = [], [], [], []
            for i, label in enumerate(labels):
                x = i + (offset - 0.5) * 0.35
                group = groups.get((label, split))
                value = gap_over_seeds(group, gap) if group else None
                if value is None:  # missing: drawn as missing, not as a zero bar
                    ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=7, color=color)
                    continue
                xs.append(x)
                means.append(value["mean"])
                hatched.append(any(capped(r) for r in group))
                if not math.isnan(value["stderr"]):  # one image: no error bar rather than a zero one
                    bars.append((x, value["mean"], value["stderr"]))
                    over.add(covers(value, group))
            if xs:
                container = ax.bar(xs, means, width=0.35, color=color)
                for patch, cap in zip(container.patches, hatched):
                    if cap:
                        patch.set(hatch=hatch, edgecolor="black")
                        hatches.add(hatch)
            if bars:
                ax.errorbar(*zip(*bars), fmt="none", ecolor="black", capsize=3)
        ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(labels) - 0.4)  # every slot, an "n/a" one included, inside the axes
        ax.set(title=gap.replace("_", " ") + " (nats / image)")
        ax.axhline(0, color="black", linewidth=0.5)
    axes[2].set_ylabel(estimator_text(reports), fontsize=8)
    # the legend's own patches: the bars' would carry the first bar's hatch
    handles = [Patch(color="tab:blue", label="train"), Patch(color="tab:orange", label="test")]
    handles += [Patch(facecolor="white", edgecolor="black", hatch=hatch, label=words)
                for hatch, words in HATCH_WORDS.items() if hatch in hatches]
    axes[-1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    lines = [title + ": bars the mean over training seeds of the image means; error bars ± 1 s.e. over "
             + "; ".join(sorted(over) or ["nothing (a single image)"])]
    if note:
        lines += textwrap.wrap(note, 200)
    fig.suptitle("\n".join(lines), fontsize=9)
    return save_figure(fig, path)


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
        try:
            text += "\n" + against_table(reports, base) + "\n"
        except AmortizedPyroError as e:
            raise SystemExit(str(e)) from None
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
