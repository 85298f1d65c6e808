"""Where the runs of experiments/studies-end.sh stand, finished or not: per run, the last evaluated epoch,
the SVI steps it stands for (of the study's), its plug-in and predictive MSEs against the mean image's,
and the true ELBO per observation, read from each run's own files (config.json, metrics.jsonl).

    python experiments/studies_end_status.py runs/end-*/ > figures/studies-end/status.md
"""
import argparse
import json
import math
from pathlib import Path

TOTAL_STEPS = {"seed": 5000, "original": 50000}


def status(folder):
    """One row per run directory under a comparison folder runs/end-STUDY-OBJECTIVE-GUIDE."""
    study, objective = Path(folder).name.split("-")[1:3]
    for metrics in sorted(Path(folder).glob("runs/*/*/metrics.jsonl")):
        info = json.loads((metrics.parent / "config.json").read_text())
        config, data = info["config"], info["data"]
        steps_per_epoch = math.ceil(data["n_obs"] / min(config["batch_size"], data["n_obs"]))
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        last = next((r for r in reversed(rows) if r.get("train_plugin_mse") is not None), None)
        if last is None:
            continue
        finished = (metrics.parent / "summary.json").exists()
        base = data["mean_image_mse"]
        yield ("| %s | %s | %s | %d of %d%s | %s | %s | %s | %s | %s |" % (
            study, objective, metrics.parent.name.rsplit("-seed", 1)[0].replace("_", " ").replace("k 64", "k=64"),
            last["epoch"] * steps_per_epoch, TOTAL_STEPS[study], "" if finished else ", going on",
            with_ratio(last["train_plugin_mse"], base["train_mse"]), fmt(last.get("train_predictive_mse")),
            with_ratio(last.get("test_plugin_mse"), base["test_mse"]), fmt(last.get("test_predictive_mse")),
            fmt(last.get("elbo_per_obs"), "%.2f")))


def with_ratio(mse, base):
    """An MSE and its ratio to the mean image's, or n/a (F-VI has no factor for test images)."""
    return "n/a" if mse is None else "%.4f (%.2f)" % (mse, mse / base)


def fmt(value, form="%.4f"):
    return "n/a" if value is None else form % value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    args = parser.parse_args()
    print("| study | objective | configuration | steps | train MSE plug-in (÷ mean image) | train MSE predictive "
          "| test MSE plug-in (÷ mean image) | test MSE predictive | true ELBO / obs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for folder in args.folders:
        if Path(folder).is_dir():
            for row in status(folder):
                print(row)


if __name__ == "__main__":
    main()
