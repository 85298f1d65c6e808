"""Run directories: what a run writes and reads back.

    config.json     the FitConfig, the data actually used (source, n_obs, n_test, x_dim, binarized, the mean
                    image's MSE), the device, library versions
    metrics.jsonl   one JSON object per epoch (written as training goes; missing values are null)
    params.pt       Pyro's param-store state (``get_state()``), saved with torch.save
    summary.json    the final record and timings, written last: its presence marks a finished run
"""
import json
import math
import platform
from pathlib import Path

import torch

import pyro

from .errors import AmortizedPyroError


def _json_safe(record):
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def _from_json(record):
    return {k: (math.nan if v is None else v) for k, v in record.items()}


class RunWriter:
    """Writes a run directory as the run goes, so that an interrupted run keeps its finished epochs."""

    def __init__(self, out, config, data_info, device):
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.json").unlink(missing_ok=True)
        info = {"config": config, "data": data_info, "device": device,
                "versions": {"python": platform.python_version(), "torch": torch.__version__,
                             "pyro": pyro.__version__}}
        (self.out / "config.json").write_text(json.dumps(info, indent=2) + "\n")
        self.metrics_path = self.out / "metrics.jsonl"
        self._metrics = open(self.metrics_path, "w")

    def add(self, record):
        self._metrics.write(json.dumps(_json_safe(record)) + "\n")
        self._metrics.flush()

    def finish(self, result):
        self._metrics.close()
        torch.save(result.param_state, self.out / "params.pt")
        summary = {"final": _json_safe(result.final), "mean_image_mse": result.mean_image_mse,
                   "train_seconds": result.train_seconds,
                   "ms_per_epoch": 1000 * result.train_seconds / len(result.history)}
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def read_run(path, map_location="cpu"):
    """(config.json contents, history, param-store state) of a finished run directory."""
    path = Path(path)
    try:
        info = json.loads((path / "config.json").read_text())
        history = [_from_json(json.loads(line)) for line in (path / "metrics.jsonl").read_text().splitlines()]
        state = torch.load(path / "params.pt", map_location=map_location, weights_only=False)
    except FileNotFoundError as e:
        raise AmortizedPyroError("%s is not a finished run directory (missing %s)" % (path, Path(e.filename).name)) \
            from None
    except (ValueError, RuntimeError, EOFError) as e:
        raise AmortizedPyroError("cannot read the run in %s: %s" % (path, str(e).splitlines()[0])) from None
    return info, history, state
