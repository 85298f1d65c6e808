"""A comparison's results: one tidy table and its per-configuration summary (in Markdown: reports.py).

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
from pathlib import Path

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.inference.evaluation import MSE_KEYS, mean_image_mse
from amortized_pyro.models.guides import FAMILIES, config_label, display_order
from amortized_pyro.runs.store import atomic_write, ms_per_epoch
from amortized_pyro.support.jsonio import from_json, read_jsonl, to_json
from amortized_pyro.support.stats import mean_stderr

PLATEAU_FRACTION = 0.9  # 'left the mean-image plateau': train plug-in MSE below 0.9 × the mean image's
INFORMATIVE, PARTLY = 0.5, 0.9


def uses_z(ratio):
    """"yes", "partly" or "no" for a plug-in MSE / mean-image MSE ratio (see the module docstring)."""
    if math.isnan(ratio):
        return "n/a"
    return "yes" if ratio <= INFORMATIVE else "partly" if ratio <= PARTLY else "no"


class Results:
    """The comparison's tidy ``rows`` (dicts), ``reconstructions`` and ``baselines``; saved as JSON lines."""

    def __init__(self, rows=(), reconstructions=(), baselines=(), failures=(), gaps=()):
        self.rows = list(rows)
        self.reconstructions = list(reconstructions)
        self.baselines = list(baselines)
        self.failures = list(failures)
        self.gaps = list(gaps)  # reports of amortized_pyro.gap.measure.measure_run, one per configuration and split

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

    def add_run(self, result, dataset, study, n_obs):
        """Add a finished run's evaluated epochs (``n_obs`` training images)."""
        c = result.config
        steps_per_epoch = math.ceil(n_obs / min(c.batch_size, n_obs))
        common = {"study": study, "dataset": dataset, "guide": c.guide,
                  "width": c.width if FAMILIES[c.guide].encoder else None, "label": config_label(c),
                  "seed": c.seed, "n_obs": n_obs}
        for record in result.history:
            if "train_plugin_mse" in record:
                self.rows.append(dict(common, kind="metrics", epoch=record["epoch"],
                                      iteration=record["epoch"] * steps_per_epoch, elbo=record["elbo"],
                                      elbo_per_obs=record["elbo_per_obs"], time=record["time"],
                                      theta_scale_mean=record.get("theta_scale_mean", math.nan),
                                      **{k: record.get(k, math.nan) for k in MSE_KEYS}))

    def add_images(self, dataset, images, shape):
        """Reconstructed images, ``(split, who, tensor [n, D] or None)`` each, of ``shape`` (C, H, W); the
        originals once per dataset."""
        for split, who, x in images:
            if x is not None and len(x) and not self._has(dataset, who, split):
                self.reconstructions.append({"kind": "reconstruction", "dataset": dataset, "label": who,
                                             "split": split, "shape": list(shape), "images": _round(x)})

    def _has(self, dataset, name, split):
        return any((r["dataset"], r["label"], r["split"]) == (dataset, name, split) for r in self.reconstructions)

    def save(self, path):
        """The table as JSON lines, written atomically."""
        gaps = [dict({k: v for k, v in g.items() if k != "per_image"}, kind="gap",
                     refinement=[{k: v for k, v in r.items() if k != "per_image"} for r in g["refinement"]])
                for g in self.gaps]
        text = "".join(json.dumps(to_json(row)) + "\n"
                       for row in self.rows + self.baselines + self.failures + gaps + self.reconstructions)
        atomic_write(Path(path), lambda tmp: tmp.write_text(text))

    @classmethod
    def load(cls, path):
        try:
            lines = read_jsonl(path)
        except FileNotFoundError:
            raise AmortizedPyroError("no results file at %s" % path) from None
        except UnicodeDecodeError as e:
            raise AmortizedPyroError("%s is not a results file (JSON lines): %s" % (path, e)) from None
        numeric = MSE_KEYS + ("elbo", "elbo_per_obs", "theta_scale_mean")
        rows = [from_json(r, numeric) for r in lines if r.get("kind") == "metrics"]
        if not rows:
            raise AmortizedPyroError("%s holds no metrics rows" % path)
        baselines = [from_json(r) for r in lines if r.get("kind") == "baseline"]
        return cls(rows, [r for r in lines if r.get("kind") == "reconstruction"], baselines,
                   [r for r in lines if r.get("kind") == "failure"], [r for r in lines if r.get("kind") == "gap"])

    def runs(self, by=("dataset", "label", "seed")):
        """{(dataset, label, seed): [rows in epoch order]}; ``by`` names other fields that tell runs apart
        (("study", "dataset", "label", "seed") where several studies are merged)."""
        runs = {}
        for row in self.rows:
            runs.setdefault(tuple(row[key] for key in by), []).append(row)
        return runs

    def summary(self, fraction=PLATEAU_FRACTION):
        """A row per (dataset, configuration): final ELBO, MSEs, whether z is used, time, gap to F-VI, speed;
        each quantity over seeds as (mean, standard error over seeds) (:func:`mean_stderr`)."""
        groups = {}
        for (dataset, name, seed), rows in self.runs().items():
            groups.setdefault((dataset, name), []).append(rows)
        table = []
        for (dataset, name), runs in groups.items():
            finals = [rows[-1] for rows in runs]
            reached = [iterations_to_leave(rows, self.baseline(dataset), fraction) for rows in runs]
            row = {"dataset": dataset, "label": name, "seeds": len(runs),
                   # each distinct value over the seeds ("2300/2600": seeds stopped by a rule at different lengths)
                   "epochs": distinct(f["epoch"] for f in finals), "steps": distinct(f["iteration"] for f in finals),
                   "n_obs": sorted({f["n_obs"] for f in finals}),
                   "elbo_per_obs": mean_stderr([f["elbo_per_obs"] for f in finals]),
                   "ms_per_epoch": mean_stderr([ms_per_epoch(f["time"], f["epoch"]) for f in finals]),  # summary.json's
                   "iterations_to_leave": mean_stderr([r for r in reached if r is not None]),
                   "seeds_leaving": sum(r is not None for r in reached),
                   "mean_image_mse": self.baseline(dataset)}
            row.update({key: mean_stderr([f.get(key, math.nan) for f in finals]) for key in MSE_KEYS})
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


def distinct(values):
    """The distinct values, sorted, joined by "/" (one value: itself, as text)."""
    return "/".join(str(v) for v in sorted(set(values)))


def _round(images):
    return [[round(v, 4) for v in row] for row in images.detach().cpu().clamp(-1, 2).tolist()]


def iterations_to_leave(rows, baseline, fraction=PLATEAU_FRACTION):
    """The iteration (SVI step) of :func:`leaves_plateau` given the comparison's mean-image baseline, or None
    (never left, or no baseline to compare with)."""
    row = leaves_plateau(rows, baseline["train_mse"], fraction) if baseline else None
    return row["iteration"] if row else None


def load_gap_reports(folder):
    """The gap reports (dicts with the gaps, as ``gap`` writes them) among the .json files in ``folder``;
    other JSON (a run's config.json, summary.json) is passed over; none at all is an error."""
    reports = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            value = json.loads(path.read_text())
        except (ValueError, OSError) as e:
            raise AmortizedPyroError("cannot read %s: %s" % (path, e)) from None
        if isinstance(value, dict) and "amortization_gap" in value and "refinement" in value:
            reports.append(value)
    if not reports:
        raise AmortizedPyroError("%s holds no gap reports (the .json files `gap` writes)" % folder)
    return reports


def leaves_plateau(rows, mean_image_mse, fraction=PLATEAU_FRACTION):
    """The first evaluated row whose train plug-in MSE is below ``fraction`` × the mean image's (the run
    has left the mean-image plateau there), or None."""
    return next((r for r in rows if r["train_plugin_mse"] < fraction * mean_image_mse), None)
