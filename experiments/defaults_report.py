"""The tables of figures/defaults-vs-hand (issue 68, item 1) from its runs' JSON lines, as docs/your-model.md
shows them: ``python experiments/defaults_report.py [figures/defaults-vs-hand]``.

Per guide and budget: the held-out ELBO per image (or cell) averaged over seeds, with the seeds' standard error,
and its difference from the hand-written guide's, seed by seed (same seed, same data order, same test images)."""
import math
import sys
from collections import defaultdict
from pathlib import Path

from amortized_pyro.support.jsonio import read_jsonl


def mean_se(values):
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def vae_table(runs, hand):
    """guide × epochs: mean ± s.e. over seeds, and the paired difference from ``hand``."""
    by = defaultdict(dict)  # (guide, epochs) → seed → elbo
    for run in runs:
        for epochs, result in run["epochs"].items():
            by[(run["guide"], int(epochs))][run["seed"]] = result["elbo"]
    rows = ["| guide | epochs | seeds | held-out ELBO per image | minus %s's (paired by seed) |" % hand,
            "|---|---|---|---|---|"]
    for (guide, epochs), seeds in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0] != hand, kv[0][0])):
        mean, se = mean_se(list(seeds.values()))
        paired = [seeds[s] - by[(hand, epochs)][s] for s in seeds if s in by.get((hand, epochs), {})]
        difference = "" if guide == hand or not paired else "%+.2f ± %.2f" % mean_se(paired)
        rows.append("| %s | %d | %s | %.2f ± %.2f | %s |" % (guide, epochs, ",".join(map(str, sorted(seeds))),
                                                            mean, se, difference))
    return "\n".join(rows)


def count_table(runs):
    by = defaultdict(dict)
    for run in runs:
        by[run["guide"]][run["seed"]] = run
    rows = ["| guide | seeds | steps taken | held-out ELBO per cell | minus hand's (paired) | Spearman ρ of median l_n |",
            "|---|---|---|---|---|---|"]
    for guide, seeds in sorted(by.items(), key=lambda kv: kv[0] != "hand"):
        finished = {s: r for s, r in seeds.items() if r["stopped"] is None}
        steps = ",".join(str(seeds[s]["steps"]) for s in sorted(seeds))
        if not finished:
            rows.append("| %s | %s | %s (stopped: %s) | | | |" % (guide, ",".join(map(str, sorted(seeds))), steps,
                                                                 next(iter(seeds.values()))["stopped"]))
            continue
        elbo = mean_se([r["held_out_elbo"] for r in finished.values()])
        rho = mean_se([r["library_spearman"] for r in finished.values()])
        paired = [r["held_out_elbo"] - by["hand"][s]["held_out_elbo"] for s, r in finished.items()
                  if s in by.get("hand", {})]
        difference = "" if guide == "hand" else "%+.2f ± %.2f" % mean_se(paired)
        rows.append("| %s | %s | %s | %.2f ± %.2f | %s | %.3f ± %.3f |" % (
            guide, ",".join(map(str, sorted(seeds))), steps, *elbo, difference, *rho))
    return "\n".join(rows)


def main():
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "figures/defaults-vs-hand")
    print("Pyro's VAE (examples/vae's sizes), `runs.jsonl`:\n")
    print(vae_table(read_jsonl(folder / "runs.jsonl"), "hand"))
    if (folder / "readme.jsonl").exists():
        print("\nThe README's first example's model, `readme.jsonl`:\n")
        print(vae_table(read_jsonl(folder / "readme.jsonl"), "readme-model-hand"))
    print("\nThe scANVI-style count model, `counts.jsonl`:\n")
    print(count_table(read_jsonl(folder / "counts.jsonl")))


if __name__ == "__main__":
    main()
