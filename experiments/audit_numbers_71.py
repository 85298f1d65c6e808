"""The numbers of issue 71's rewritten sentences in docs/results.md, recomputed from committed files only:

  cvae      figures/cvae-accuracy/accuracy.jsonl: each setting's conditional accuracy (mean ± s.e. over seeds), its
            difference from the baseline in standard errors of the unpaired difference, the worst class (each
            seed's worst, and their mean), the classifier's leave-one-out accuracy per seed, the held-out MSE ratio;
            and the shared-z analogies' accuracy of figures/cvae-accuracy/base-analogies.txt
  seeds     the original study's decision with seeds 1 and 2 (figures/studies-end/seeds12/, seed 0's runs and its
            constant-VI and k = 1 in figures/studies-end/): each run's train plug-in MSE ÷ the mean image's, true
            ELBO per observation and first evaluated step below 0.9 × at 50,000 steps, the table's rows, the
            ranges and counts of the decision
  probe     figures/cvae-accuracy/probe.jsonl (experiments/cvae_probe.py): per variant, the mean ± s.e. over seeds of
            what its z carries (probes, bounds on I(z; c), KL, active dimensions), of its draws' and analogies'
            accuracy, and of what the decoder makes of the encoder's codes under another label
  diagnose  figures/diagnose/ranking.md: each score's lead (or lag) behind k̂ in Spearman correlation, per split,
            in standard errors of the unpaired difference, and what each score costs against k̂

    python experiments/audit_numbers_71.py [cvae | diagnose | seeds | probe]

Every number is printed with where it comes from; docs/results.md quotes them (tests/test_audit_numbers_71.py).
"""
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mean_se(values):
    values = list(values)
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def cvae():
    source = "figures/cvae-accuracy/accuracy.jsonl"
    print("\n## cvae (%s)" % source)
    by = defaultdict(dict)
    for line in (ROOT / source).read_text().splitlines():
        record = json.loads(line)
        by[record["variant"]][record["seed"]] = record
    base = mean_se([100 * r["accuracy"] for r in by["base"].values()])
    for variant, seeds in sorted(by.items()):
        m, se = mean_se([100 * r["accuracy"] for r in seeds.values()])
        worst = [100 * min(r["per_class"]) for r in seeds.values()]
        lead = (m - base[0]) / math.hypot(se, base[1])
        print("%s: %.1f ± %.1f %%, %+.1f points from the baseline (%.1f s.e., unpaired); worst class per seed %s, "
              "mean %.0f %%; classifier leave-one-out per seed %s; held-out MSE ratio %.2f" % (
                  variant, m, se, m - base[0], lead, ", ".join("%.1f" % w for w in worst), statistics.fmean(worst),
                  ", ".join("%.1f" % (100 * r["classifier_loo"]) for r in seeds.values()),
                  statistics.fmean(r["test_mse_ratio"] for r in seeds.values())))
    analogies = (ROOT / "figures/cvae-accuracy/base-analogies.txt").read_text()
    share = re.search(r"conditional accuracy ([\d.]+) % of (\d+) draws per class", analogies)
    print("base seed 0, one z shared by all ten rows: %s %% of %d draws (figures/cvae-accuracy/base-analogies.txt)"
          % (share.group(1), 10 * int(share.group(2))))


def diagnose():
    source = "figures/diagnose/ranking.md"
    print("\n## diagnose (%s)" % source)
    scores = {}
    for line in (ROOT / source).read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 4 and cells[1].isdigit():
            scores[cells[0]] = (int(cells[1]), *[tuple(map(float, c.split(" ± "))) for c in cells[2:]])
    khat_name = next(name for name in scores if name.startswith("Pareto"))
    passes, *khat = scores[khat_name]
    for name, (cost, *splits) in scores.items():
        if name == khat_name:
            continue
        parts = ["%s %.2f (%.1f s.e.)" % (split, k[0] - s[0], (k[0] - s[0]) / math.hypot(k[1], s[1]))
                 for split, k, s in zip(("train", "held out"), khat, splits)]
        print("k-hat minus %s: %s; its cost %d passes against k-hat's %d (%g times)"
              % (name, ", ".join(parts), cost, passes, passes / cost))


def minus(value, decimals=2):
    """``value`` as docs/results.md writes it: a Unicode minus, thousands with commas."""
    text = "{:,.{}f}".format(abs(value), decimals)
    return ("−" if value < 0 else "") + text


def seeds():
    folders = {"A-VI k=64": ["figures/studies-end/end-original-reference-amortized",
                             "figures/studies-end/seeds12/end-original-reference-amortized"],
               "F-VI": ["figures/studies-end/end-original-reference-per-datapoint",
                        "figures/studies-end/seeds12/end-original-reference-per-datapoint"],
               "constant-VI": ["figures/studies-end/end-original-reference-shared"],
               "A-VI k=1": ["figures/studies-end/end-original-reference-amortized-k1"]}
    print("\n## seeds (the original study at 50,000 steps, the authors' objective: %s)" % ", ".join(
        "%s/results.jsonl" % f for fs in folders.values() for f in fs))
    ends = {}
    for label, paths in folders.items():
        for path in paths:
            records = [json.loads(line) for line in (ROOT / path / "results.jsonl").read_text().splitlines()
                       if line.strip() and '"kind": "reconstruction"' not in line]
            base = next(r for r in records if r["kind"] == "baseline")["train_mse"]
            for seed in sorted({r["seed"] for r in records if r["kind"] == "metrics"}):
                rows = [r for r in records if r["kind"] == "metrics" and r["seed"] == seed
                        and r.get("train_plugin_mse") is not None]
                first = next((r["iteration"] for r in rows if r["train_plugin_mse"] / base < 0.9), None)
                ends[label, seed] = (rows[-1]["iteration"], rows[-1]["train_plugin_mse"] / base,
                                     rows[-1]["elbo_per_obs"], first)
    for (label, seed), (steps, ratio, elbo, first) in sorted(ends.items()):
        print("%s seed %d at %s steps: train plug-in MSE ÷ the mean image's %.2f, true ELBO per observation %s, first "
              "step below 0.9 × %s" % (label, seed, "{:,}".format(steps), ratio, minus(elbo),
                                        "never" if first is None else "{:,}".format(first)))
    for seed in (0, 1, 2):  # the rows of docs/results.md's table
        cells = []
        for label in ("A-VI k=64", "F-VI"):
            steps, ratio, elbo, first = ends[label, seed]
            cells.append("%.2f, %s, %s" % (ratio, minus(elbo), "never" if first is None else "{:,}".format(first)))
        print("table row: | %d | %s |" % (seed, " | ".join(cells)))
    a_vi = [ends["A-VI k=64", s] for s in (0, 1, 2)]
    f_vi = [ends["F-VI", s] for s in (0, 1, 2)]
    ratios, elbos, firsts = ([e[i] for e in a_vi] for i in (1, 2, 3))
    print("A-VI k=64, seeds 0-2: leaves the mean image (below 0.9 × at the end) in %d of 3, %.2f–%.2f × at the "
          "end, true ELBO %s to %s, below 0.9 × by %s–%s steps" % (
              sum(r < 0.9 for r in ratios), min(ratios), max(ratios), minus(max(elbos)), minus(min(elbos)),
              "{:,}".format(min(firsts)), "{:,}".format(max(firsts))))
    left = [s for s, e in enumerate(f_vi) if e[1] < 0.9]
    print("F-VI, seeds 0-2: leaves the mean image (below 0.9 × at the end) in %d of 3 (seed %s: %.2f ×); the others "
          "%s ×, true ELBO %s" % (len(left), ", ".join(map(str, left)), f_vi[left[0]][1],
                                  " and ".join("%.2f" % e[1] for s, e in enumerate(f_vi) if s not in left),
                                  " and ".join(minus(e[2]) for s, e in enumerate(f_vi) if s not in left)))
    for label in ("constant-VI", "A-VI k=1"):
        steps, ratio, elbo, first = ends[label, 0]
        print("%s seed 0: %.2f ×, true ELBO %s, below 0.9 × %s" % (label, ratio, minus(elbo),
                                                                      "never" if first is None else first))
    print("seed 0, F-VI's first step below 0.9 × over A-VI k=64's: %s / %s = %.1f ×" % (
        "{:,}".format(f_vi[0][3]), "{:,}".format(a_vi[0][3]), f_vi[0][3] / a_vi[0][3]))


PROBED = [  # (name printed, the record's value, scale, decimals, unit)
    ("linear probe from the means", lambda r: r["probe_means"]["accuracy"], 100, 1, " %"),
    ("I(mu; c) >=", lambda r: r["probe_means"]["bound"], 1, 2, " nats"),
    ("linear probe from draws", lambda r: r["probe_draws"]["accuracy"], 100, 1, " %"),
    ("I(z; c) >=", lambda r: r["probe_draws"]["bound"], 1, 2, " nats"),
    ("5-NN probe", lambda r: r["knn_accuracy"], 100, 1, " %"),
    ("KL", lambda r: r["kl_total"], 1, 1, " nats"),
    ("active dimensions (KL > 0.1)", lambda r: r["active"]["0.1"], 1, 1, ""),
    ("active dimensions (KL > 0.01)", lambda r: r["active"]["0.01"], 1, 1, ""),
    ("shared-z analogies", lambda r: r["analogy_accuracy"], 100, 1, " %"),
    ("independent draws", lambda r: r["draw_accuracy"], 100, 1, " %"),
    ("misread draws as the probe's class", lambda r: r["misread_as_probed"], 100, 1, " %"),
    ("independent", lambda r: r["misread_as_probed_independent"], 100, 1, " %"),
    ("misread draws as the nearest codes' class", lambda r: r["misread_as_nearest_codes"], 100, 1, " %"),
    ("independent", lambda r: r["misread_as_nearest_codes_independent"], 100, 1, " %"),
    ("draws among their row's codes", lambda r: r["draws_near_codes_of_row"], 100, 1, " %"),
    ("draws' distance ratio", lambda r: r["draw_distance_ratio"], 1, 2, ""),
    ("codes with their own class", lambda r: r["codes_own_class"], 100, 1, " %"),
    ("codes with another class, read as it", lambda r: r["codes_swapped_as_asked"], 100, 1, " %"),
    ("codes with another class, read as the image's", lambda r: r["codes_swapped_as_image"], 100, 1, " %"),
]


def probe():
    source = "figures/cvae-accuracy/probe.jsonl"
    print("\n## probe (%s; mean ± s.e. over seeds)" % source)
    by = defaultdict(dict)
    for line in (ROOT / source).read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            by[record["variant"]][record["seed"]] = record
    for variant, seeds in sorted(by.items()):
        parts = []
        for name, value, scale, decimals, unit in PROBED:
            m, se = mean_se([scale * value(r) for _, r in sorted(seeds.items())])
            parts.append("%s %.*f ± %.*f%s" % (name, decimals, m, decimals, se, unit))
        print("%s (seeds %s): %s" % (variant, ", ".join(map(str, sorted(seeds))), "; ".join(parts)))
    entropies = sorted({round(r["probe_means"]["entropy"], 3) for seeds in by.values() for r in seeds.values()})
    print("H(c) of the held-out labels: %s nats" % ", ".join("%.3f" % h for h in entropies))


PARTS = {"cvae": cvae, "diagnose": diagnose, "seeds": seeds, "probe": probe}

if __name__ == "__main__":
    for part in sys.argv[1:] or PARTS:
        PARTS[part]()
