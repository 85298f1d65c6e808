"""The numbers behind issue 60 item 11's corrections to docs/results.md, recomputed from committed files only:

  original   the original study (seed 0, the authors' objective): the first evaluated step at which A-VI k = 64 and
             F-VI are below 0.9 × the mean image's train plug-in MSE and at or below F-VI's final ratio, one
             threshold for both, in steps and on the runs' own clocks (the metrics records' ``time``: seconds of
             SVI steps, evaluations left out, no resumes)
  intervals  every 3-seed comparison docs/results.md says it could have missed something in: the difference,
             its standard error and its 95 % interval mean ± t·s.e., t from Student's t with S − 1 degrees of
             freedom (3 training seeds: 2, t = 4.30); paired by the pooling rule where gaps.md pairs them,
             unpaired (√(s.e.₁² + s.e.₂²), t still at 2 degrees of freedom: conservative) where docs/results.md
             compares unpaired means
  beta       the β-VAE's held-out amortization gap (standard decoder) per β, and β against β: the smallest mean
             against every other, neighbours against each other, paired by (seed, image) as above

    python experiments/audit_numbers_60.py [original] [intervals] [beta]

Every number is printed with where it comes from; docs/results.md quotes them.
"""
import json
import statistics
import sys
from pathlib import Path

from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gap_tables import collect  # noqa: E402  (experiments/ is not a package)

from amortized_pyro.gap.pooling import (gap_over_seeds, refinement_over_seeds, seed_groups,  # noqa: E402
                                        unpaired_because)
from amortized_pyro.report.paired import GAPS, difference  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def rows(path):
    return [json.loads(line) for line in (ROOT / path).read_text().splitlines() if line.strip()]


def t95(dof):
    return stats.t.ppf(0.975, dof)


def interval(mean, se, dof):
    half = t95(dof) * se
    return "%+.1f ± %.1f (%.2f s.e.); 95%% interval %+.1f to %+.1f (± %.1f = %.2f × s.e., %d d.o.f.)" % (
        mean, se, abs(mean) / se, mean - half, mean + half, half, t95(dof), dof)


def original():
    print("\n## original (figures/studies-end/end-original-reference-{amortized,per-datapoint}/results.jsonl)")
    runs = {}
    for name in ("amortized", "per-datapoint"):
        records = rows("figures/studies-end/end-original-reference-%s/results.jsonl" % name)
        base = next(r for r in records if r.get("kind") == "baseline")["train_mse"]
        runs[name] = (base, [r for r in records
                             if r.get("kind") == "metrics" and r.get("train_plugin_mse") is not None])
    (base, a_vi), (base_f, f_vi) = runs["amortized"], runs["per-datapoint"]
    assert base == base_f, "the two runs' mean images differ"
    final = f_vi[-1]["train_plugin_mse"] / base
    print("mean training image's train MSE %.6f; F-VI's final ratio %.4f at %d steps (%.1f s)"
          % (base, final, f_vi[-1]["iteration"], f_vi[-1]["time"]))
    firsts = []
    for label, level in (("below 0.9 ×", lambda r: r["train_plugin_mse"] / base < 0.9),
                         ("at or below F-VI's final %.4f ×" % final, lambda r: r["train_plugin_mse"] / base <= final)):
        a, f = next(r for r in a_vi if level(r)), next(r for r in f_vi if level(r))
        firsts.append((label, a["iteration"], f["iteration"]))
        print("%s: A-VI k=64 at %d steps (%.1f s), F-VI at %d (%.1f s): %.2f × in steps, %.2f × on the runs' clocks"
              % (label, a["iteration"], a["time"], f["iteration"], f["time"], f["iteration"] / a["iteration"],
                 f["time"] / a["time"]))
        after = [r["train_plugin_mse"] / base for r in f_vi if r["iteration"] >= f["iteration"]]
        print("  F-VI from %d steps on: %.4f to %.4f ×" % (f["iteration"], min(after), max(after)))
    a_step, f_step = a_vi[-1]["time"] / a_vi[-1]["iteration"], f_vi[-1]["time"] / f_vi[-1]["iteration"]
    print("the runs' clocks, seconds per step over the whole run: A-VI k=64 %.4f, F-VI %.4f (ratio %.2f)"
          % (a_step, f_step, a_step / f_step))
    bench = "bench/results/studies-end-cost-2026-11-25.md"  # 6 epochs of 8 steps each, the idle CPU, side by side
    table = (line.split("|") for line in (ROOT / bench).read_text().splitlines())
    epoch = {cells[2]: float(cells[3]) for cells in table if len(cells) > 3 and cells[1].strip() == "reference"}
    a_bench, f_bench = epoch[" A-VI k=64 "] / 8, epoch[" F-VI "] / 8
    print("%s, seconds per step: A-VI k=64 %.4f, F-VI %.4f (ratio %.2f); the runs' clocks ÷ the bench's: A-VI %.2f, "
          "F-VI %.2f" % (bench, a_bench, f_bench, a_bench / f_bench, a_step / a_bench, f_step / f_bench))
    for label, a, f in firsts:
        print("%s at the bench's step costs: %.2f × in time" % (label, f * f_bench / (a * a_bench)))


def held_out_regularizers():
    print("\n### held-out regularizers (figures/held-out/held_out.jsonl; over the 3 runs, paired by run)")
    gap = {}
    for r in rows("figures/held-out/held_out.jsonl"):
        gap.setdefault((r["width"], r["train_on"], r["set"], r["regularizer"], r["strength"]), {})[r["run"]] = \
            r["amortization_gap"]["mean"]
    plain = gap[(64, "train", "test", "none", 0.0)]
    for (width, train_on, split, regularizer, strength), per_run in sorted(gap.items(), key=str):
        if regularizer != "none" and split == "test" and width == 64:
            diffs = [per_run[run] - plain[run] for run in sorted(per_run)]
            se = statistics.stdev(diffs) / len(diffs) ** 0.5
            print("k=64 %s %g, held-out gap minus the plain encoder's: %s" % (
                regularizer, strength, interval(statistics.fmean(diffs), se, len(diffs) - 1)))


def paired_rows(title, folders, pairs):
    """The amortization gap of each (label, base) pair in ``pairs``, both splits, as gaps.md pairs it."""
    print("\n### %s (%s; amortization gap, first minus second)" % (title, " ".join(folders)))
    reports, _ = collect([str(ROOT / f) for f in folders], False)
    groups = seed_groups(reports)
    for label, base in pairs:
        for split in ("train", "test"):
            if (label, split) not in groups or (base, split) not in groups:
                continue
            group, other = groups[(label, split)], groups[(base, split)]
            why = unpaired_because(group, other, GAPS)
            value = difference(group, other, GAPS[0], why)
            if value is None:
                continue
            print("%s − %s, %s, %s: %s" % (label, base, split, "paired" if why is None else "unpaired (%s)" % why,
                                           interval(value["mean"], value["stderr"], len(group) - 1)))


def refined_against_sa_vi():
    folders = ["figures/sa-vi/sa-vi-5", "figures/sa-vi/sa-vi-5-unrolled", "figures/sa-vi/sa-vi-20"]
    print("\n### A-VI's encoder refined at test time against SA-VI's own gap (%s; unpaired, as docs/results.md "
          "compares them)" % " ".join(folders))
    groups = seed_groups(collect([str(ROOT / f) for f in folders], False)[0])
    for steps, label in ((5, "SA-VI k=64 r=5"), (20, "SA-VI k=64 r=20")):
        for split in ("train", "test"):
            refined = refinement_over_seeds(groups[("A-VI k=64", split)], steps)
            sa_vi = gap_over_seeds(groups[(label, split)], GAPS[0])
            se = (refined["stderr"] ** 2 + sa_vi["stderr"] ** 2) ** 0.5
            print("A-VI refined %d steps (%.1f ± %.1f) − %s (%.1f ± %.1f), %s: %s" % (
                steps, refined["mean"], refined["stderr"], label, sa_vi["mean"], sa_vi["stderr"], split,
                interval(refined["mean"] - sa_vi["mean"], se, len(groups[(label, split)]) - 1)))


def intervals():
    print("\n## intervals (95 %: mean ± t·s.e., t with S − 1 degrees of freedom)")
    held_out_regularizers()
    avi = ["A-VI k=64", "A-VI k=64, point θ", "A-VI k=64, conv decoder", "A-VI k=64, conv decoder, point θ"]
    paired_rows("decoders", ["figures/architectures/mlp-normal", "figures/architectures/mlp-none",
                             "figures/architectures/conv-normal", "figures/architectures/conv-none"],
                [(a, b) for i, a in enumerate(avi) for b in avi[i + 1:]])
    refined_against_sa_vi()
    remedies = ["a-vi", "f-vi", "flow-2", "flow-4", "f-vi-flow-2", "ia-vi-5", "sa-vi-5", "sa-vi-5-momentum", "sa-vi-20"]
    paired_rows("remedies", ["figures/remedies/" + f for f in remedies],
                [(label, "A-VI k=64") for label in ("A-VI k=64, flow K=2", "A-VI k=64, flow K=4", "SA-VI k=64 r=5",
                                                    "SA-VI k=64 r=5 momentum", "SA-VI k=64 r=20", "IA-VI k=64 T=5")])
    paired_rows("CVAE", ["figures/cvae-gap/vae", "figures/cvae-gap/cvae"],
                [("A-VI k=64, conditional", "A-VI k=64"), ("F-VI, conditional", "F-VI")])


def beta():
    print("\n## beta (figures/beta/runs/*-standard-b*-s*/gap-test.json; held-out amortization gap, standard "
          "decoder; each β against the smallest and its neighbours, paired by (seed, image) by the pooling rule)")
    for dataset in ("mnist", "shapes"):
        groups = {}
        for path in sorted((ROOT / "figures/beta/runs").glob("%s-standard-b*-s*/gap-test.json" % dataset)):
            report = json.loads(path.read_text())
            report.setdefault("data_id", dataset)
            groups.setdefault(float(path.parent.name.split("-b")[1].split("-s")[0]), []).append(report)
        betas = sorted(groups)
        for b in betas:
            value = gap_over_seeds(groups[b], GAPS[0])
            print("%s β %g: %.2f ± %.2f (pooled; seeds' image means %s)" % (
                dataset, b, value["mean"], value["stderr"],
                ", ".join("%.2f" % r["amortization_gap"]["mean"] for r in sorted(groups[b], key=lambda r: r["seed"]))))
        low = min(betas, key=lambda b: gap_over_seeds(groups[b], GAPS[0])["mean"])
        pairs = [(b, low) for b in betas if b != low] + [(a, b) for a, b in zip(betas[1:], betas) if low not in (a, b)]
        for first, second in pairs:
            why = unpaired_because(groups[first], groups[second], GAPS)
            value = difference(groups[first], groups[second], GAPS[0], why)
            way = "paired" if why is None else "unpaired (%s)" % why
            print("%s β %g − β %g, %s: %s" % (dataset, first, second, way,
                                              interval(value["mean"], value["stderr"], len(groups[first]) - 1)))


if __name__ == "__main__":
    parts = sys.argv[1:] or ["original", "intervals", "beta"]
    for part in parts:
        {"original": original, "intervals": intervals, "beta": beta}[part]()
