"""The plateau, measured: when A-VI and F-VI leave the mean image, under the authors' objective (not an ELBO)
and under the true ELBO, and what q(θ)'s scale does meanwhile.

    python experiments/plateau_report.py runs/plateau-reference runs/plateau-elbo [more comparison folders] \
        --out figures/plateau

Reads each comparison folder's results.jsonl (written by experiments/plateau.sh; the study's name says the
objective), and writes into --out: plateau.md (per run: steps trained, the first evaluated step whose train
plug-in MSE is below 0.9 × the mean image's, s̄ there, at its smallest and at the end, the final ratio and true ELBO; then
mean ± standard error over seeds), plateau.png (plots.plateau_figure) and results.jsonl (the merged table).
"""
import argparse
import math
import statistics
from pathlib import Path

from amortized_pyro.report.figures import STUDY_RUN, plateau_figure
from amortized_pyro.study.results import Results, leaves_plateau

FRACTION = 0.9


def merged(folders):
    parts = [Results.load(Path(folder) / "results.jsonl") for folder in folders]
    baselines = {b["dataset"]: b for part in parts for b in part.baselines}
    return Results([r for p in parts for r in p.rows], [], list(baselines.values()))


def pm(values, fmt):
    values = [v for v in values if v is not None]
    if not values:
        return "never"
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return (fmt + " ± " + fmt + " (%d)") % (statistics.fmean(values), se, len(values))


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
    (out / "plateau.md").write_text("\n".join(lines) + "\n")
    plateau_figure(results, out / "plateau.png", FRACTION)
    print("\n".join(lines))
    print("wrote plateau.md, plateau.png and results.jsonl into %s" % out)


if __name__ == "__main__":
    main()
