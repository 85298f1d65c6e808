"""The plateau, measured: when A-VI and F-VI leave the mean image, under the authors' objective (not an ELBO)
and under the true ELBO, and what q(θ)'s scale does meanwhile.

    python experiments/plateau_report.py runs/plateau-*/ --out figures/plateau
    python experiments/plateau_report.py figures/plateau --out figures/plateau   (again from its merged results.jsonl)

Reads each comparison folder's results.jsonl (written by experiments/plateau.sh; the study's name says the
objective), and writes into --out: plateau.md (per run: steps trained, the first evaluated step whose train
plug-in MSE is below 0.9 × the mean image's, s̄ there, at its smallest and at the end, the final ratio and true ELBO; then
mean ± standard error over seeds), plateau.png (:func:`figure`) and results.jsonl (the merged table).
"""
import argparse
from pathlib import Path

from amortized_pyro.models.guides import display_order
from amortized_pyro.report.marks import plus_minus
from amortized_pyro.report.style import configuration_colors, legend_outside, save_figure, subplots
from amortized_pyro.study.results import Results, leaves_plateau
from amortized_pyro.support.stats import mean_stderr

FRACTION = 0.9
STYLES = ("-", "--", ":", "-.")  # a line style per study (objective)


STUDY_RUN = ("study", "dataset", "label", "seed")  # merged studies: the same configuration and seed in each


def merged(folders):
    parts = [Results.load(Path(folder) / "results.jsonl") for folder in folders]
    baselines = {b["dataset"]: b for part in parts for b in part.baselines}
    return Results([r for p in parts for r in p.rows], [], list(baselines.values()))


def figure(results, path, fraction=FRACTION):
    """Train plug-in MSE ÷ the mean image's, and q(θ)'s mean scale s̄, against steps: a colour per configuration,
    a line style per study (objective), a line per seed; ``fraction`` × the mean image dotted. Where two
    objectives' curves coincide (F-VI, which stays on the plateau under both) neither hides the other: the first
    study is drawn wide and pale, each later one thinner and darker on top of it, so both show. Returns the figure."""
    fig, (left, right) = subplots(1, 2, figsize=(12, 4.5))
    studies = sorted({r["study"] for r in results.rows})
    names = sorted({r["label"] for r in results.rows}, key=display_order)
    colors = configuration_colors(names)
    spare = iter("C%d" % i for i in range(10))  # configurations configuration_colors does not know
    colors = {n: colors.get(n) or next(spare) for n in names}
    runs = results.runs(by=STUDY_RUN)
    labelled = set()
    for (study, dataset, name, seed), rows in sorted(runs.items()):
        index = studies.index(study)
        baseline = results.baseline(dataset)["train_mse"]
        steps = [r["iteration"] for r in rows]
        tag = None if (study, name) in labelled else "%s, %s" % (study, name)  # one entry per group of seeds
        labelled.add((study, name))
        later = index / max(1, len(studies) - 1)  # 0 for the first study drawn, 1 for the last
        line = dict(ls=STYLES[index % len(STYLES)], color=colors[name], lw=3.5 - 2.3 * later, alpha=0.4 + 0.6 * later,
                    zorder=2 + index, label=tag)
        left.plot(steps, [r["train_plugin_mse"] / baseline for r in rows], **line)
        right.plot(steps, [r["theta_scale_mean"] for r in rows], **line)
    left.axhline(fraction, color="black", ls=":", lw=1, label="%g × mean image" % fraction)
    left.set(xlabel="steps", ylabel="train plug-in MSE ÷ mean image's (log scale)", yscale="log",
             title="Leaving the mean-image plateau")
    right.set(xlabel="steps", ylabel="mean scale s̄ of q(θ)", yscale="log", title="q(θ)'s scale")
    for ax in (left, right):
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
        legend_outside(ax)
        if ax.get_legend():
            ax.get_legend().set_title("study, configuration\n(a line per seed)", prop={"size": 7})
    return save_figure(fig, path)


def pm(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "never"
    return "%s (%d)" % (plus_minus(mean_stderr(values), fmt), len(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    results = merged(args.folders)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results.save(out / "results.jsonl")
    lines = ["| study | configuration | seed | steps trained | first step < %g × mean image | s̄ there | final MSE ÷ mean "
             "image | smallest s̄ (step) | final s̄ | final true ELBO / obs |" % FRACTION, "|---|---|---|---|---|---|---|---|---|---|"]
    groups = {}
    for (study, dataset, name, seed), rows in sorted(results.runs(by=STUDY_RUN).items()):
        base = results.baseline(dataset)["train_mse"]
        left, last = leaves_plateau(rows, base, FRACTION), rows[-1]
        low = min(rows, key=lambda r: r["theta_scale_mean"])
        lines.append("| %s | %s | %d | %d | %s | %s | %.3f | %.4f (%d) | %.4f | %.2f |" % (
            study, name, seed, last["iteration"], left["iteration"] if left else "not yet",
            "%.4f" % left["theta_scale_mean"] if left else "–", last["train_plugin_mse"] / base,
            low["theta_scale_mean"], low["iteration"], last["theta_scale_mean"], last["elbo_per_obs"]))
        groups.setdefault((study, name), []).append((left["iteration"] if left else None,
                                                     last["train_plugin_mse"] / base, last["theta_scale_mean"]))
    lines += ["", "Over seeds (mean ± standard error (seeds); the first-step column over the seeds that left):", "",
              "| study | configuration | seeds | seeds below %g × mean image | first step there | final MSE ÷ mean "
              "image | final s̄ |" % FRACTION, "|---|---|---|---|---|---|---|"]
    for (study, name), values in sorted(groups.items()):
        first = [v[0] for v in values]
        lines.append("| %s | %s | %d | %d | %s | %s | %s |" % (
            study, name, len(values), sum(f is not None for f in first), pm(first, "%.0f"),
            pm([v[1] for v in values], "%.3f"), pm([v[2] for v in values], "%.4f")))
    command = "Command: python experiments/plateau_report.py %s --out %s" % (" ".join(args.folders), args.out)
    (out / "plateau.md").write_text("\n".join([command, ""] + lines) + "\n")
    figure(results, out / "plateau.png", FRACTION)
    print("\n".join(lines))
    print("wrote plateau.md, plateau.png and results.jsonl into %s" % out)


if __name__ == "__main__":
    main()
