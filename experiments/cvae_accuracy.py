"""Whether a CVAE's draws show their class (issue 63): the conditional accuracy of finished conditional runs,
each as `sample RUN` measures it (amortized_pyro/report/class_accuracy.py: a 5-nearest-neighbour classifier on
the run's own labelled images), on --draws draws of z per class from p(z | c) decoded with θ at q(θ)'s mean
(the z draws seeded by --seed), then a table: per variant (the runs' folder name without its -seedS), the mean
over its seeds with the standard error over seeds, the classifier's own leave-one-out accuracy, and what the run
pays in reconstruction (its held-out plug-in MSE over the mean image's).

    python experiments/cvae_accuracy.py measure runs/cvae-accuracy/*-seed* --out figures/cvae-accuracy
    python experiments/cvae_accuracy.py table figures/cvae-accuracy/accuracy.jsonl --out figures/cvae-accuracy

``measure`` writes OUT/accuracy.jsonl (one record per run: the runs' parameters stay under runs/) and the table;
``table`` makes OUT/accuracy.md (its command first) again from the records alone.
"""
import argparse
import json
import math
import re
import sys
from pathlib import Path

import torch

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.models.generation import draw_grid
from amortized_pyro.report.class_accuracy import of_class_grid
from amortized_pyro.runs.fit import finished_run


def measured(run_dir, draws, seed):
    """The record of one run: its variant and seed (from its folder's name), accuracy overall and per class."""
    result, data = finished_run(run_dir, log=lambda line: None)
    if not result.model.n_classes:
        raise AmortizedPyroError("%s is not a conditional run" % run_dir)
    images = draw_grid(result.model, result.guide.global_mean(), draws, torch.Generator().manual_seed(seed))
    accuracy = of_class_grid(images, data)
    name = Path(run_dir).name
    found = re.fullmatch(r"(.+)-seed(\d+)", name)
    variant, run_seed = (found.group(1), int(found.group(2))) if found else (name, result.config.seed)
    final = [r for r in result.history if "test_plugin_mse" in r][-1]
    return {"run": str(run_dir), "variant": variant, "seed": run_seed, "accuracy": accuracy.overall,
            "per_class": accuracy.per_class, "draws": draws, "classifier_loo": accuracy.reference_accuracy,
            "references": accuracy.references, "k": accuracy.k,
            "test_mse_ratio": final["test_plugin_mse"] / result.mean_image_mse["test_mse"]}


def table(records, command):
    """The markdown table: one row per variant, in the order first seen."""
    variants = list(dict.fromkeys(r["variant"] for r in records))
    lines = ["Command: `%s`" % command, "",
             "| variant | seeds | conditional accuracy, % (mean ± s.e. over seeds) | per seed | worst class, % (mean) | "
             "classifier's leave-one-out, % | held-out plug-in MSE ÷ mean image's (mean) |", "|---|---|---|---|---|---|---|"]
    for variant in variants:
        rows = [r for r in records if r["variant"] == variant]
        values = [100 * r["accuracy"] for r in rows]
        mean = sum(values) / len(values)
        se = (math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))
              if len(values) > 1 else float("nan"))
        worst = min(sum(r["per_class"][c] for r in rows) / len(rows) for c in range(len(rows[0]["per_class"])))
        lines.append("| %s | %s | %.1f ± %.1f | %s | %.0f | %.1f | %.2f |" % (
            variant, ", ".join(str(r["seed"]) for r in rows), mean, se, ", ".join("%.1f" % v for v in values),
            100 * worst, 100 * rows[0]["classifier_loo"], sum(r["test_mse_ratio"] for r in rows) / len(rows)))
    return "\n".join(lines) + "\n"


def write_table(records, jsonl, out):
    command = "python experiments/cvae_accuracy.py table %s --out %s" % (jsonl, out)
    Path(out, "accuracy.md").write_text(table(records, command))
    print(table(records, command))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measure = commands.add_parser("measure", help="measure finished conditional runs")
    measure.add_argument("runs", nargs="+", help="finished conditional runs' folders, named VARIANT-seedS")
    measure.add_argument("--draws", type=int, default=200, help="z draws per class")
    measure.add_argument("--seed", type=int, default=0, help="seed of the z draws")
    remake = commands.add_parser("table", help="the table again from accuracy.jsonl")
    remake.add_argument("jsonl")
    for sub in (measure, remake):
        sub.add_argument("--out", required=True, help="the folder of accuracy.jsonl and accuracy.md")
    args = parser.parse_args()
    out = Path(args.out)
    if args.command == "table":
        records = [json.loads(line) for line in Path(args.jsonl).read_text().splitlines() if line.strip()]
        out.mkdir(parents=True, exist_ok=True)
        return write_table(records, args.jsonl, args.out)
    try:
        records = [measured(run, args.draws, args.seed) for run in args.runs]
    except AmortizedPyroError as error:
        sys.exit("cvae_accuracy.py: %s" % error)
    out.mkdir(parents=True, exist_ok=True)
    (out / "accuracy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_table(records, out / "accuracy.jsonl", args.out)


if __name__ == "__main__":
    main()
