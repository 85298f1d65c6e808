"""The numbers behind issue 49's corrections to docs/results.md, recomputed from committed files only:

  held-out     the "more images for the encoder alone" trend run by run: per run, the held-out gap's change from
               500 to 1,000 and from 1,000 to 2,500 training images, its mean ± s.e. over the runs and the signs;
               the regularizers' smallest detectable effect (2 × the paired s.e. over runs)
  gap-vs-n     the training gap's steps between N (their difference in s.e.), how many training images 20 and 100
               refinement steps from the encoder's output beat q* at each N, and AIS − IWAE unrounded
  converged    the ELBO gained over the last tenth of steps, as figures/converged/gaps.md holds it

    python experiments/audit_numbers.py

Every number is printed with where it comes from; docs/results.md quotes them.
"""
import glob
import json
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rows(path):
    return [json.loads(line) for line in (ROOT / path).read_text().splitlines() if line.strip()]


def mean_se(values):
    values = list(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return statistics.fmean(values), se


def fmt(values):
    m, se = mean_se(values)
    signs = "every run" if all(v > 0 for v in values) or all(v < 0 for v in values) else "signs mixed"
    return "%.1f ± %.1f (per run: %s; %s)" % (m, se, ", ".join("%.1f" % v for v in values), signs)


def held_out():
    print("\n## held-out (figures/held-out/held_out.jsonl)")
    gap = defaultdict(dict)  # (width, set, regularizer, strength) -> run -> image-mean gap
    for r in rows("figures/held-out/held_out.jsonl"):
        key = (r["width"], r["train_on"], r["set"], r["regularizer"], r["strength"])
        gap[key][r["run"]] = r["amortization_gap"]["mean"]
    for width in (64, 1024):
        for a, b in ((500, 1000), (1000, "train")):  # "train": all 2,500 training images
            first, second = gap[(width, a, "test", "none", 0.0)], gap[(width, b, "test", "none", 0.0)]
            print("k=%d, held-out gap, %s -> %s images: change %s" % (
                width, a, b, fmt([second[run] - first[run] for run in sorted(first)])))
    plain = gap[(64, "train", "test", "none", 0.0)]
    for (width, train_on, split, regularizer, strength), per_run in sorted(gap.items(), key=str):
        if regularizer != "none" and split == "test" and width == 64:
            diffs = [per_run[run] - plain[run] for run in sorted(per_run)]
            m, se = mean_se(diffs)
            print("k=64 %s %g, held-out gap minus the plain encoder's: %s; smallest effect 3 runs could detect "
                  "(2 × s.e., 2 degrees of freedom): %.0f nats" % (regularizer, strength, fmt(diffs), 2 * se))


def gap_vs_n():
    print("\n## gap-vs-n (figures/gap-vs-n/n*/runs/*/*/gap-*.json)")
    for n in ("1000", "2500", "8000"):
        beat = defaultdict(int)
        total, ais_iwae = 0, []
        for path in sorted(glob.glob(str(ROOT / ("figures/gap-vs-n/n%s/runs/*/*/gap-train.json" % n)))):
            report = json.loads(Path(path).read_text())
            total += len(report["images"])
            for row in report["refinement"]:
                beat[row["steps"]] += sum(v < 0 for v in row["per_image"])
        for path in sorted(glob.glob(str(ROOT / ("figures/gap-vs-n/n%s/runs/*/*/gap-*.json" % n)))):
            report = json.loads(Path(path).read_text())
            ais_iwae.append((report["split"], -report["iwae_minus_ais"]["mean"]))
        print("N %s: training images where refinement from the encoder's output beats q*: %s of %d; AIS − IWAE per "
              "report (split, nats): %s" % (n, ", ".join("%d steps %d" % kv for kv in sorted(beat.items()) if kv[0]),
                                            total, ", ".join("%s %.2f" % sv for sv in ais_iwae)))
    text = (ROOT / "figures/gap-vs-n/gaps.md").read_text()
    print("gaps.md's training rows (amortization gap column as printed):")
    for line in text.splitlines():
        if re.match(r"\| *A-VI.*\| *train *\|", line) or re.match(r"\| *[0-9,]+ *\| *train", line):
            print("  " + line[:160])


def converged():
    print("\n## converged (figures/converged/gaps.md, and each run's summary.json and metrics.jsonl under runs/)")
    for line in (ROOT / "figures/converged/gaps.md").read_text().splitlines():
        if "last 10%" in line or re.match(r"\| (A-VI k=64|F-VI) \| 3 \| [0-9]", line):
            print("  " + line)
    finals = {}  # (label, seed) -> (final ELBO per image, train plug-in MSE, test plug-in MSE, test MSE at epoch 500)
    for path in sorted(ROOT.glob("figures/converged/runs/*/*-seed*/summary.json")):
        label, seed = path.parent.name.rsplit("-seed", 1)
        final = json.loads(path.read_text())["final"]
        at_500 = [r for r in rows(path.parent.relative_to(ROOT) / "metrics.jsonl") if r.get("epoch") == 500]
        finals[(label, int(seed))] = (final["elbo_per_obs"], final["train_plugin_mse"], final["test_plugin_mse"],
                                      at_500[0].get("test_plugin_mse") if at_500 else None)
    if not finals:
        print("  no run files under figures/converged/runs/ (python experiments/study.py converged --report-only)")
        return
    for (label, seed), (elbo, train, test, test_500) in sorted(finals.items()):
        print("  %s seed %d: final ELBO per image %.2f, train plug-in MSE %.4f, test plug-in MSE %s (at epoch 500: %s)"
              % (label, seed, elbo, train, "n/a" if test is None else "%.4f" % test,
                 "n/a" if test_500 is None else "%.4f" % test_500))
    seeds = sorted(seed for label, seed in finals if label == "F-VI" and ("A-VI_k_64", seed) in finals)
    print("  F-VI - A-VI k=64, final ELBO per image, paired over seeds: %s" % fmt(
        [finals[("F-VI", s)][0] - finals[("A-VI_k_64", s)][0] for s in seeds]))
    # (the train plug-in MSEs' means over seeds: gaps.md's training table)
    print("  A-VI k=64 test plug-in MSE, mean over seeds: %.4f" % statistics.fmean(
        finals[("A-VI_k_64", s)][2] for s in seeds))


if __name__ == "__main__":
    held_out()
    gap_vs_n()
    converged()
