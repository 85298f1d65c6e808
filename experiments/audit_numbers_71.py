"""The numbers of issue 71's rewritten sentences in docs/results.md, recomputed from committed files only:

  cvae      figures/cvae-accuracy/accuracy.jsonl: each setting's conditional accuracy (mean ± s.e. over seeds), its
            difference from the baseline in standard errors of the unpaired difference, the worst class (each
            seed's worst, and their mean), the classifier's leave-one-out accuracy per seed, the held-out MSE ratio;
            and the shared-z analogies' accuracy of figures/cvae-accuracy/base-analogies.txt
  diagnose  figures/diagnose/ranking.md: each score's lead (or lag) behind k̂ in Spearman correlation, per split,
            in standard errors of the unpaired difference, and what each score costs against k̂

    python experiments/audit_numbers_71.py [cvae | diagnose]

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


PARTS = {"cvae": cvae, "diagnose": diagnose}

if __name__ == "__main__":
    for part in sys.argv[1:] or PARTS:
        PARTS[part]()
