"""Comparing guides: a grid of guides × encoder widths × seeds (× datasets) run through ``fit``.

The result is one tidy table, a row per (dataset, configuration, seed, evaluated epoch) with the ELBO,
train/test reconstruction MSE and training time, plus a few reconstructed images per configuration and,
per dataset, the MSE of the mean training image (the reconstruction that ignores z, a baseline). All
live in one JSON-lines file (``kind`` = ``metrics``, ``reconstruction`` or ``baseline``), which ``plot``
reads alone.
All configurations of a dataset train on the same images (drawn with ``data_seed``); the seeds vary
initialisation and sampling. Each run keeps its own run directory, and a finished one is reused.
"""
import json
import math
import re
import statistics
from dataclasses import replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .data import load_data
from .errors import AmortizedPyroError
from .evaluation import reconstruct
from .guides import GUIDES
from .inference import FitConfig, fit, load_run

FAMILY = {"amortized": "A-VI", "per-datapoint": "F-VI", "shared": "constant-VI"}
N_IMAGES = 5
MSE_THRESHOLD = 0.07


def label(guide, width=None):
    """The name a configuration goes by in tables and legends: ``A-VI k=64``, ``F-VI``, ``constant-VI``."""
    return "%s k=%d" % (FAMILY[guide], width) if guide == "amortized" else FAMILY[guide]


def configurations(guides, widths):
    """(guide, width) pairs: one per encoder width for the amortized guide, one for each other guide."""
    unknown = [g for g in guides if g not in GUIDES]
    if unknown or not guides:
        raise AmortizedPyroError("unknown guide(s) %s: choose from %s" % (", ".join(unknown), ", ".join(GUIDES)))
    if "amortized" in guides and (not widths or min(widths) < 1):
        raise AmortizedPyroError("the amortized guide needs encoder widths >= 1, got %s" % (list(widths),))
    return [(g, w) for g in GUIDES if g in guides for w in (sorted(set(widths)) if g == "amortized" else [None])]


def slug(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_")


class Results:
    """The comparison's tidy ``rows`` (dicts) and ``reconstructions``; saved and loaded as JSON lines."""

    def __init__(self, rows=(), reconstructions=(), baselines=()):
        self.rows = list(rows)
        self.reconstructions = list(reconstructions)
        self.baselines = list(baselines)

    def add_baseline(self, dataset, data):
        """The MSE of the mean training image on the training and test images: what a decoder that
        ignores z can reach at best."""
        mean = data.train.mean(0)
        mse = {split: (x - mean).pow(2).mean().item() if len(x) else math.nan
               for split, x in (("train_mse", data.train), ("test_mse", data.test))}
        self.baselines = [b for b in self.baselines if b["dataset"] != dataset]
        self.baselines.append(dict(kind="baseline", dataset=dataset, label="mean training image", **mse))

    def baseline(self, dataset):
        return next((b for b in self.baselines if b["dataset"] == dataset), None)

    def add_run(self, result, dataset, study, data, with_images=False):
        """Add a finished run's evaluated epochs; ``with_images`` adds its reconstructions of the first
        training and test images (and the originals, once per dataset)."""
        c = result.config
        name = label(c.guide, c.width)
        steps_per_epoch = math.ceil(data.train.shape[0] / c.batch_size)
        common = {"study": study, "dataset": dataset, "guide": c.guide,
                  "width": c.width if c.guide == "amortized" else None, "label": name, "seed": c.seed,
                  "n_obs": data.train.shape[0]}
        for record in result.history:
            if "train_mse" in record:
                self.rows.append(dict(common, kind="metrics", epoch=record["epoch"],
                                      iteration=record["epoch"] * steps_per_epoch, elbo=record["elbo"],
                                      elbo_per_obs=record["elbo_per_obs"], train_mse=record["train_mse"],
                                      test_mse=record["test_mse"], time=record["time"]))
        if not with_images:
            return
        train_x, test_x = data.train[:N_IMAGES], data.test[:N_IMAGES]
        images = [("train", "original", train_x), ("test", "original", test_x),
                  ("train", name, reconstruct(result.guide, train_x, torch.arange(len(train_x), device=train_x.device))),
                  ("test", name, reconstruct(result.guide, test_x))]
        for split, who, x in images:
            if x is not None and len(x) and not self._has(dataset, who, split):
                self.reconstructions.append({"kind": "reconstruction", "dataset": dataset, "label": who,
                                             "split": split, "images": _round(x)})

    def _has(self, dataset, name, split):
        return any((r["dataset"], r["label"], r["split"]) == (dataset, name, split) for r in self.reconstructions)

    def save(self, path):
        with open(path, "w") as f:
            for row in self.rows + self.baselines + self.reconstructions:
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
        rows = [{k: (math.nan if v is None and k in ("train_mse", "test_mse") else v) for k, v in r.items()}
                for r in lines if r.get("kind") == "metrics"]
        if not rows:
            raise AmortizedPyroError("%s holds no metrics rows" % path)
        baselines = [{k: (math.nan if v is None else v) for k, v in r.items()}
                     for r in lines if r.get("kind") == "baseline"]
        return cls(rows, [r for r in lines if r.get("kind") == "reconstruction"], baselines)

    def runs(self):
        """{(dataset, label, seed): [rows in epoch order]}."""
        runs = {}
        for row in self.rows:
            runs.setdefault((row["dataset"], row["label"], row["seed"]), []).append(row)
        return runs

    def summary(self, threshold=MSE_THRESHOLD):
        """A row per (dataset, configuration): final ELBO, MSEs, time per epoch, gap to F-VI, speed."""
        groups = {}
        for (dataset, name, seed), rows in self.runs().items():
            groups.setdefault((dataset, name), []).append(rows)
        table = []
        for (dataset, name), runs in groups.items():
            finals = [rows[-1] for rows in runs]
            reached = [iterations_to(rows, threshold) for rows in runs]
            table.append({"dataset": dataset, "label": name, "seeds": len(runs),
                          "epochs": finals[0]["epoch"],
                          "elbo_per_obs": _mean_sd([f["elbo_per_obs"] for f in finals]),
                          "train_mse": _mean_sd([f["train_mse"] for f in finals]),
                          "test_mse": _mean_sd([f["test_mse"] for f in finals]),
                          "ms_per_epoch": _mean_sd([ms_per_epoch(rows) for rows in runs]),
                          "iterations_to_threshold": _mean_sd([r for r in reached if r is not None]),
                          "seeds_reaching_threshold": sum(r is not None for r in reached),
                          "mean_image_mse": self.baseline(dataset)})
        for row in table:
            reference = next((r for r in table if r["dataset"] == row["dataset"] and r["label"] == "F-VI"), None)
            gap = reference["elbo_per_obs"][0] - row["elbo_per_obs"][0] if reference else math.nan
            row["gap_to_fvi"] = gap
            row["gap_to_fvi_percent"] = 100 * gap / abs(reference["elbo_per_obs"][0]) if reference else math.nan
        return sorted(table, key=lambda r: (r["dataset"], display_order(r["label"])))


def _round(images):
    return [[round(v, 4) for v in row] for row in images.detach().cpu().clamp(-1, 2).tolist()]


def _mean_sd(values):
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return (math.nan, math.nan)
    return (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)


def display_order(name):
    """A-VI by width, then F-VI, then constant-VI."""
    if name.startswith("A-VI"):
        return (0, int(name.split("=")[1]))
    return (1, 0) if name == "F-VI" else (2, 0)


def ms_per_epoch(rows):
    """Training milliseconds per epoch after the first evaluated epoch (which holds the one-off set-up:
    validation, JIT compilation); over the whole run where only one epoch was evaluated."""
    first, last = rows[0], rows[-1]
    if last["epoch"] == first["epoch"]:
        return 1000 * last["time"] / last["epoch"]
    return 1000 * (last["time"] - first["time"]) / (last["epoch"] - first["epoch"])


def iterations_to(rows, threshold):
    """The first evaluated iteration at which the train MSE is below ``threshold`` (None if never)."""
    return next((r["iteration"] for r in rows if r["train_mse"] < threshold), None)


def format_summary(table, threshold=MSE_THRESHOLD):
    """The summary as a Markdown table (mean ± sd over seeds)."""
    def pm(pair, fmt):
        return "n/a" if math.isnan(pair[0]) else (fmt + " ± " + fmt) % pair

    lines = ["| dataset | configuration | seeds | epochs | final ELBO / obs (nats) | gap to F-VI (nats/obs) | gap (%%) "
             "| train MSE | test MSE | ms / epoch | iterations to train MSE < %g |" % threshold,
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        reached = ("%s (%d/%d seeds)" % (pm(r["iterations_to_threshold"], "%.0f"), r["seeds_reaching_threshold"],
                                         r["seeds"]) if r["seeds_reaching_threshold"] else "not reached")
        lines.append("| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            r["dataset"], r["label"], r["seeds"], r["epochs"], pm(r["elbo_per_obs"], "%.2f"),
            "n/a" if math.isnan(r["gap_to_fvi"]) else "%.2f" % r["gap_to_fvi"],
            "n/a" if math.isnan(r["gap_to_fvi_percent"]) else "%.2f" % r["gap_to_fvi_percent"],
            pm(r["train_mse"], "%.4f"), pm(r["test_mse"], "%.4f"), pm(r["ms_per_epoch"], "%.0f"), reached))
    notes = {r["dataset"]: r["mean_image_mse"] for r in table if r["mean_image_mse"]}
    for dataset, b in sorted(notes.items()):
        lines.append("\n%s: the mean training image, which ignores z, has train MSE %.4f and test MSE %.4f."
                     % (dataset, b["train_mse"], b["test_mse"]))
    return "\n".join(lines)


def compare(guides=GUIDES, widths=(1, 64, 128, 256), seeds=(0, 1, 2, 3, 4), datasets=("mnist",), out=None,
            study="compare", data_seed=0, progress=True, log=print, **config):
    """Run every (dataset, guide, width, seed) of the grid and return :class:`Results`.

    ``config`` sets the other :class:`~amortized_pyro.FitConfig` fields (epochs, n_obs, batch_size, ...).
    With ``out``, each run writes ``out/runs/DATASET/LABEL-seedS``; runs finished there before are
    reloaded instead of trained again, and ``out/results.jsonl`` is rewritten after every run.
    """
    base = FitConfig(**config).check()
    grid = configurations(list(guides), list(widths))
    if not seeds:
        raise AmortizedPyroError("give at least one seed")
    results = Results()
    out = Path(out) if out else None
    bar = tqdm(total=len(datasets) * len(grid) * len(seeds), desc="compare", unit="run", disable=not progress)
    for dataset in datasets:
        data = load_data(dataset, base.data_dir, base.n_obs, base.n_test, data_seed, base.download, log)
        results.add_baseline(dataset, data)
        for guide, width in grid:
            for seed in seeds:
                config = replace(base, guide=guide, width=width or base.width, seed=seed, dataset=dataset)
                run_dir = out / "runs" / slug(dataset) / ("%s-seed%d" % (slug(label(guide, width)), seed)) if out \
                    else None
                bar.set_postfix_str("%s %s seed %d" % (dataset, label(guide, width), seed))
                if run_dir and (run_dir / "summary.json").exists():
                    result = load_run(run_dir, base.device)
                else:
                    result = fit(config, data=data, out=run_dir, progress=progress, log=log)
                results.add_run(result, dataset, study, data.to(result.device), with_images=seed == seeds[0])
                if out:
                    results.save(out / "results.jsonl")
                bar.update()
    bar.close()
    return results
