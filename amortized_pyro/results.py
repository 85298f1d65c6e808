"""A comparison's results: one tidy table, its per-configuration summary and that summary in Markdown.

Rows (``kind``): ``metrics``, one per (dataset, configuration, seed, evaluated epoch) with the ELBO, the
plug-in and predictive reconstruction MSEs (train and test) and training time; ``reconstruction``, a few
reconstructed images per configuration; ``baseline``, per dataset, the MSE of the mean training image (the
reconstruction that ignores z); ``failure``, a run that did not finish; ``gap``, a configuration's measured
amortization and approximation gaps on training or test images. All live in one JSON-lines file, which
``plot`` reads alone.

Whether z carries information is read off the ratio of the final train plug-in MSE to the mean image's:
"yes" at 0.5 or below, "partly" up to 0.9, "no" above (the reconstructions are then the mean image).
"""
import json
import math
import re
import statistics
from pathlib import Path

import torch

from .errors import AmortizedPyroError
from .evaluation import MSE_KEYS, mean_image_mse, reconstruct
from .guides import ENCODER_GUIDES

FAMILY = {"amortized": "A-VI", "semi-amortized": "SA-VI", "per-datapoint": "F-VI", "shared": "constant-VI"}
N_IMAGES = 5
MSE_THRESHOLD = 0.07
INFORMATIVE, PARTLY = 0.5, 0.9


def label(guide, width=None):
    """The name a configuration goes by in tables and legends: ``A-VI k=64``, ``SA-VI k=64``, ``F-VI``,
    ``constant-VI``."""
    return "%s k=%d" % (FAMILY[guide], width) if guide in ENCODER_GUIDES else FAMILY[guide]


def display_order(name):
    """A-VI by width, SA-VI by width, then F-VI, then constant-VI."""
    family, _, width = name.partition(" k=")
    return (("A-VI", "SA-VI", "F-VI", "constant-VI").index(family), int(width or 0))


def slug(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_")


def uses_z(ratio):
    """"yes", "partly" or "no" for a plug-in MSE / mean-image MSE ratio (see the module docstring)."""
    if math.isnan(ratio):
        return "n/a"
    return "yes" if ratio <= INFORMATIVE else "partly" if ratio <= PARTLY else "no"


def _nan(value):
    return math.nan if value is None else value


class Results:
    """The comparison's tidy ``rows`` (dicts), ``reconstructions`` and ``baselines``; saved as JSON lines."""

    def __init__(self, rows=(), reconstructions=(), baselines=(), failures=(), gaps=()):
        self.rows = list(rows)
        self.reconstructions = list(reconstructions)
        self.baselines = list(baselines)
        self.failures = list(failures)
        self.gaps = list(gaps)  # reports of amortized_pyro.gap.measure_run, one per configuration and split

    def add_failure(self, dataset, name, seed, error):
        """A run of the grid that did not finish (diverged, bad data): reported, not averaged."""
        self.failures.append({"kind": "failure", "dataset": dataset, "label": name, "seed": seed, "error": error})

    def add_baseline(self, dataset, data):
        """The MSE of the mean training image on the training and test images."""
        self.baselines = [b for b in self.baselines if b["dataset"] != dataset]
        self.baselines.append(dict(kind="baseline", dataset=dataset, label="mean training image",
                                   **mean_image_mse(data)))

    def baseline(self, dataset):
        return next((b for b in self.baselines if b["dataset"] == dataset), None)

    def add_run(self, result, dataset, study, data, with_images=False):
        """Add a finished run's evaluated epochs; ``with_images`` adds its plug-in reconstructions of the
        first training and test images (and the originals, once per dataset)."""
        c = result.config
        name = label(c.guide, c.width)
        steps_per_epoch = math.ceil(data.train.shape[0] / min(c.batch_size, data.train.shape[0]))
        common = {"study": study, "dataset": dataset, "guide": c.guide,
                  "width": c.width if c.guide in ENCODER_GUIDES else None, "label": name, "seed": c.seed,
                  "n_obs": data.train.shape[0]}
        for record in result.history:
            if "train_plugin_mse" in record:
                self.rows.append(dict(common, kind="metrics", epoch=record["epoch"],
                                      iteration=record["epoch"] * steps_per_epoch, elbo=record["elbo"],
                                      elbo_per_obs=record["elbo_per_obs"], time=record["time"],
                                      **{k: record.get(k, math.nan) for k in MSE_KEYS}))
        if not with_images:
            return
        train_x, test_x = data.train[:N_IMAGES], data.test[:N_IMAGES]
        train_idx = torch.arange(len(train_x), device=train_x.device)
        with result.params():
            images = [("train", "original", train_x), ("test", "original", test_x),
                      ("train", name, reconstruct(result.model, result.guide, train_x, train_idx)),
                      ("test", name, reconstruct(result.model, result.guide, test_x))]
        for split, who, x in images:
            if x is not None and len(x) and not self._has(dataset, who, split):
                self.reconstructions.append({"kind": "reconstruction", "dataset": dataset, "label": who,
                                             "split": split, "images": _round(x)})

    def _has(self, dataset, name, split):
        return any((r["dataset"], r["label"], r["split"]) == (dataset, name, split) for r in self.reconstructions)

    def save(self, path):
        with open(path, "w") as f:
            gaps = [dict({k: v for k, v in g.items() if k != "per_image"}, kind="gap",
                         refinement=[{k: v for k, v in r.items() if k != "per_image"} for r in g["refinement"]])
                    for g in self.gaps]
            for row in self.rows + self.baselines + self.failures + gaps + self.reconstructions:
                f.write(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v)
                                    for k, v in row.items()}) + "\n")

    @classmethod
    def load(cls, path):
        try:
            lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            raise AmortizedPyroError("no results file at %s" % path) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise AmortizedPyroError("%s is not a results file (JSON lines): %s" % (path, e)) from None
        numeric = MSE_KEYS + ("elbo", "elbo_per_obs")
        rows = [{k: (_nan(v) if k in numeric else v) for k, v in r.items()}
                for r in lines if r.get("kind") == "metrics"]
        if not rows:
            raise AmortizedPyroError("%s holds no metrics rows" % path)
        baselines = [{k: _nan(v) for k, v in r.items()} for r in lines if r.get("kind") == "baseline"]
        return cls(rows, [r for r in lines if r.get("kind") == "reconstruction"], baselines,
                   [r for r in lines if r.get("kind") == "failure"], [r for r in lines if r.get("kind") == "gap"])

    def runs(self):
        """{(dataset, label, seed): [rows in epoch order]}."""
        runs = {}
        for row in self.rows:
            runs.setdefault((row["dataset"], row["label"], row["seed"]), []).append(row)
        return runs

    def summary(self, threshold=MSE_THRESHOLD):
        """A row per (dataset, configuration): final ELBO, MSEs, whether z is used, time, gap to F-VI, speed."""
        groups = {}
        for (dataset, name, seed), rows in self.runs().items():
            groups.setdefault((dataset, name), []).append(rows)
        table = []
        for (dataset, name), runs in groups.items():
            finals = [rows[-1] for rows in runs]
            reached = [iterations_to(rows, threshold) for rows in runs]
            row = {"dataset": dataset, "label": name, "seeds": len(runs), "epochs": finals[0]["epoch"],
                   "elbo_per_obs": _mean_sd([f["elbo_per_obs"] for f in finals]),
                   "ms_per_epoch": _mean_sd([ms_per_epoch(rows) for rows in runs]),
                   "iterations_to_threshold": _mean_sd([r for r in reached if r is not None]),
                   "seeds_reaching_threshold": sum(r is not None for r in reached),
                   "mean_image_mse": self.baseline(dataset)}
            row.update({key: _mean_sd([f.get(key, math.nan) for f in finals]) for key in MSE_KEYS})
            baseline = row["mean_image_mse"]["train_mse"] if row["mean_image_mse"] else math.nan
            row["mse_ratio"] = row["train_plugin_mse"][0] / baseline
            row["uses_z"] = uses_z(row["mse_ratio"])
            table.append(row)
        for row in table:
            reference = next((r for r in table if r["dataset"] == row["dataset"] and r["label"] == "F-VI"), None)
            gap = reference["elbo_per_obs"][0] - row["elbo_per_obs"][0] if reference else math.nan
            row["gap_to_fvi"] = gap
            # a percentage of |ELBO| means nothing once the ELBO can be positive (a sharp normal likelihood)
            negative = reference is not None and reference["elbo_per_obs"][0] < 0
            row["gap_to_fvi_percent"] = 100 * gap / abs(reference["elbo_per_obs"][0]) if negative else math.nan
        return sorted(table, key=lambda r: (r["dataset"], display_order(r["label"])))


def _round(images):
    return [[round(v, 4) for v in row] for row in images.detach().cpu().clamp(-1, 2).tolist()]


def _mean_sd(values):
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return (math.nan, math.nan)
    return (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)


def ms_per_epoch(rows):
    """Training milliseconds per epoch after the first evaluated epoch (which holds the one-off set-up:
    validation, JIT compilation); over the whole run where only one epoch was evaluated."""
    first, last = rows[0], rows[-1]
    if last["epoch"] == first["epoch"]:
        return 1000 * last["time"] / last["epoch"]
    return 1000 * (last["time"] - first["time"]) / (last["epoch"] - first["epoch"])


def iterations_to(rows, threshold):
    """The first evaluated iteration at which the train plug-in MSE is below ``threshold`` (None if never)."""
    return next((r["iteration"] for r in rows if r["train_plugin_mse"] < threshold), None)


def format_summary(table, threshold=MSE_THRESHOLD, failures=()):
    """The summary as a Markdown table (mean ± sd over seeds), with the mean image's MSE and the runs that
    failed under it."""
    def pm(pair, fmt):
        return "n/a" if math.isnan(pair[0]) else (fmt + " ± " + fmt) % pair

    def num(value, fmt):
        return "n/a" if math.isnan(value) else fmt % value

    lines = ["| dataset | configuration | seeds | epochs | final ELBO / obs (nats) | gap to F-VI (nats/obs) | gap (%%) "
             "| train MSE plug-in | train MSE predictive | test MSE plug-in | test MSE predictive "
             "| plug-in ÷ mean image | z informative | ms / epoch | iterations to train MSE < %g |" % threshold,
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        reached = ("%s (%d/%d seeds)" % (pm(r["iterations_to_threshold"], "%.0f"), r["seeds_reaching_threshold"],
                                         r["seeds"]) if r["seeds_reaching_threshold"] else "not reached")
        lines.append("| %s |" % " | ".join([
            r["dataset"], r["label"], str(r["seeds"]), str(r["epochs"]), pm(r["elbo_per_obs"], "%.2f"),
            num(r["gap_to_fvi"], "%.2f"), num(r["gap_to_fvi_percent"], "%.2f")]
            + [pm(r[key], "%.4f") for key in MSE_KEYS[0::2] + MSE_KEYS[1::2]]
            + [num(r["mse_ratio"], "%.2f"), r["uses_z"], pm(r["ms_per_epoch"], "%.0f"), reached]))
    notes = {r["dataset"]: r["mean_image_mse"] for r in table if r["mean_image_mse"]}
    for dataset, b in sorted(notes.items()):
        lines.append("\n%s: the mean training image, which ignores z, has train MSE %.4f and test MSE %.4f."
                     % (dataset, b["train_mse"], b["test_mse"]))
    for f in failures:
        lines.append("\nFAILED, not in the table: %s %s seed %d: %s" % (f["dataset"], f["label"], f["seed"], f["error"]))
    return "\n".join(lines)
