"""Run directories: what a run writes and how it is read back (the one home of the on-disk format; what a
checkpoint holds and how a run is put back from it: :mod:`~amortized_pyro.runs.checkpoints`).

    config.json     the FitConfig, the data actually used (name, source, n_obs, n_test, x_dim, binarized, a
                    fingerprint of the images, the mean image's MSE), device, a random ``run_id`` (what is
                    derived from the run names it, with the epochs trained), library versions, and every
                    resume with the options it changed
    metrics.jsonl   one JSON object per finished epoch (missing values are null)
    checkpoint.pt   the last checkpoint: format, epoch, the guide's ``state_dict``, the optimizer's, every
                    random state (torch, CUDA, numpy, python, the evaluation's generator), the metrics so far
                    and the training time
    params.pt       the format and the guide's ``state_dict`` at the end
    summary.json    the final record and timings, written last: its presence marks a finished run

Every file is written whole to a temporary name and renamed into place, so a run killed at any moment
leaves the previous version intact; metrics lines are appended with one ``write`` each, and a resumed run
rewrites metrics.jsonl from its checkpoint. Tensors are read back onto the CPU and copied into modules
and optimizers on their own device, so random states stay CPU tensors whatever the device.
"""
import json
import os
import platform
import time
import uuid
from pathlib import Path

import torch

import pyro

from amortized_pyro.errors import AmortizedPyroError, RunExists
from amortized_pyro.runs.checkpoints import FORMAT, checkpoint_state, upgrade
from amortized_pyro.runs.layout import GAP_REPORTS
from amortized_pyro.runs.tensor_files import load_tensors
from amortized_pyro.support.jsonio import from_json, read_jsonl, to_json

RUN_FILES = ("config.json", "metrics.jsonl", "checkpoint.pt", "params.pt", "summary.json")
RENAMED_SETTINGS = {"elbo": "estimator"}  # config.json keys of earlier versions: their names today
_WRITTEN = {}  # every file this process wrote here, in order: what an interrupted command can say it keeps


def atomic_write(path, write):
    """``write(temporary_path)``, then rename onto ``path``: readers see the old file or the new one."""
    path = Path(path)
    tmp = path.with_name(".%s.tmp-%d" % (path.name, os.getpid()))
    write(tmp)
    os.replace(tmp, path)
    _WRITTEN[path] = None


def writes():
    """A mark for :func:`kept_since`: how many files this process has written so far."""
    return len(_WRITTEN)


def kept_since(mark):
    """The files written since ``mark`` (:func:`writes`) that are still there (a run that failed before its
    first checkpoint removes its own)."""
    return [p for p in list(_WRITTEN)[mark:] if p.exists()]


def write_report(path, report):
    """A gap report, written atomically. Its NaN (a standard error over one image) stay NaN tokens, which
    Python's json reads back: the report readers expect numbers there."""
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(report, indent=1) + "\n"))


def write_json(path, value):
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(value, indent=2, allow_nan=False) + "\n"))  # JSON: no NaN


def run_status(path):
    """"finished" (summary.json), "partial" (a checkpoint to resume from), "started" (run files, no
    checkpoint yet), or "empty" (no run files, or no directory: :func:`describe` tells them apart)."""
    path = Path(path)
    if (path / "summary.json").exists():
        return "finished"
    if (path / "checkpoint.pt").exists():
        return "partial"
    return "started" if any((path / name).exists() for name in RUN_FILES) else "empty"


STARTED = "it holds a run that never reached its first checkpoint (nothing to resume)"


def describe(path):
    """What ``path`` holds, as a clause for a message: it does not exist, holds no run, a run that never
    reached its first checkpoint, an interrupted run (to resume), or a finished run."""
    path = Path(path)
    if not path.exists():
        return "it does not exist"
    if not path.is_dir():
        return "it is a file, not a run directory"
    return {"empty": "it holds no run",
            "started": "%s; start it again with fit --out %s --overwrite and its options" % (STARTED, path),
            "partial": "it holds an interrupted run (continue it with fit --resume %s)" % path,
            "finished": "it holds a finished run"}[run_status(path)]


class RunWriter:
    """Writes a run directory as the run goes, so that an interrupted run keeps its finished epochs and
    its last checkpoint. ``mode`` is "new" (the directory must not hold a run), "overwrite" (its run files
    are removed first) or "resume" (it holds the run being continued). Checkpoints are written every
    ``every`` epochs or seconds (``kind``: "epochs" or "seconds"), at the end and when the run stops."""

    def __init__(self, out, info, mode="new", every=("seconds", 60.0)):
        self.out = Path(out)
        self.metrics_path = self.out / "metrics.jsonl"
        self.kind, self.every = every
        self.last_save = time.perf_counter()
        self.created = not self.out.exists()
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise AmortizedPyroError("cannot create the run directory %s: %s" % (out, e.strerror or e)) from None
        if mode == "new" and run_status(self.out) != "empty":
            raise RunExists(out, run_status(self.out))
        if mode == "overwrite":
            self.clear(self.out)
        if mode != "resume":
            info = dict(info, run_id=uuid.uuid4().hex, versions={"python": platform.python_version(),
                                                                   "torch": torch.__version__, "pyro": pyro.__version__},
                        resumes=[])
            self._claim(info)
        self.info = info

    @staticmethod
    def clear(out):
        """Remove a run's files from ``out``, and what was derived from it there (gap reports, ``gap*.json``);
        nothing else."""
        for name in RUN_FILES:
            (Path(out) / name).unlink(missing_ok=True)
        for derived in Path(out).glob(GAP_REPORTS):
            derived.unlink()

    def discard(self):
        """Undo a new run that failed before its first checkpoint: its files, and its directory if this
        writer made it, so that the same ``out`` can start the run again (there was nothing to resume)."""
        if run_status(self.out) != "started":
            return
        self.clear(self.out)
        if self.created and not any(self.out.iterdir()):
            self.out.rmdir()

    def _claim(self, info):
        """Create config.json exclusively: of two runs started into one directory, one is refused."""
        try:
            with open(self.out / "config.json", "x") as f:
                f.write(json.dumps(info, indent=2) + "\n")
            _WRITTEN[self.out / "config.json"] = None
        except FileExistsError:
            raise AmortizedPyroError("%s was just claimed by another run" % self.out) from None
        except OSError as e:
            raise AmortizedPyroError("cannot write into %s: %s" % (self.out, e.strerror or e)) from None

    def reopen(self, epoch, changed, config, history):
        """A resumed run's first writes, once everything it needs was read and its checkpoint restored: a finished
        run's summary.json removed (it is extended from its final checkpoint, which it keeps), the resume
        recorded in config.json, metrics.jsonl rewritten from the checkpoint's ``history``."""
        (self.out / "summary.json").unlink(missing_ok=True)
        self.info["resumes"].append({"from_epoch": epoch, "changed": changed})
        self.info["config"] = config
        write_json(self.out / "config.json", self.info)
        text = "".join(json.dumps(to_json(r)) + "\n" for r in history)
        atomic_write(self.metrics_path, lambda tmp: tmp.write_text(text))

    def add(self, record):
        """Append one metrics line with a single write, so a kill leaves whole lines only."""
        line = (json.dumps(to_json(record)) + "\n").encode()
        fd = os.open(self.metrics_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _WRITTEN[self.metrics_path] = None
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def checkpoint(self, guide, state, device, rng=None):
        checkpoint = checkpoint_state(guide, state, device, rng)
        atomic_write(self.out / "checkpoint.pt", lambda tmp: torch.save(checkpoint, tmp))
        self.last_save = time.perf_counter()

    def due(self, epoch):
        """Whether the checkpoint cadence asks for one after ``epoch``."""
        if self.kind == "epochs":
            return epoch % self.every == 0
        return time.perf_counter() - self.last_save >= self.every

    def finish(self, guide, final, mean_image_mse, train_seconds, epochs):
        atomic_write(self.out / "params.pt", lambda tmp: torch.save({"format": FORMAT, "guide": guide.state_dict()}, tmp))
        summary = {"final": to_json(final), "mean_image_mse": to_json(mean_image_mse),
                   "train_seconds": train_seconds, "ms_per_epoch": ms_per_epoch(train_seconds, epochs)}
        write_json(self.out / "summary.json", summary)


def ms_per_epoch(train_seconds, epochs):
    """The training cost per epoch, in milliseconds: the seconds spent in SVI steps over the epochs trained,
    the first epoch's set-up included, evaluations and checkpoints excluded (the ``train_seconds`` that
    :class:`~amortized_pyro.inference.training.TrainingState` counts). summary.json's ``ms_per_epoch`` and a
    comparison's "ms / epoch" (from the run's last record) are both this."""
    return 1000 * train_seconds / max(1, epochs)


def _load(path, what):
    try:
        if what.endswith(".pt"):
            value = upgrade(load_tensors(path / what, "%s in %s" % (what, path)))
            if not isinstance(value, dict) or value.get("format") != FORMAT:
                raise AmortizedPyroError("%s in %s was written by an earlier version of amortized_pyro (parameters in "
                                         "Pyro's global param store): it cannot be loaded or resumed; its metrics "
                                         "and results files stay readable" % (what, path))
            return value
        if what.endswith(".jsonl"):
            return [from_json(record) for record in read_jsonl(path / what)]
        return json.loads((path / what).read_text())
    except FileNotFoundError:
        raise AmortizedPyroError("%s is not a run directory (missing %s)" % (path, what)) from None
    except (ValueError, OSError) as e:
        raise AmortizedPyroError("cannot read %s in %s: %s" % (what, path, str(e).splitlines()[0])) from None


def read_info(path):
    """A run's config.json, its settings under today's names (:data:`RENAMED_SETTINGS`)."""
    info = _load(Path(path), "config.json")
    if isinstance(info.get("config"), dict):
        info["config"] = {RENAMED_SETTINGS.get(k, k): v for k, v in info["config"].items()}
    return info


def load_history(path):
    """The metrics of the epochs a run has written (metrics.jsonl)."""
    return _load(Path(path), "metrics.jsonl")


def read_run(path):
    """(config.json contents, history, the guide's state_dict) of a finished run, or of an interrupted one
    as of its last checkpoint; tensors on the CPU."""
    path = Path(path)
    status = run_status(path)
    if status == "finished":
        read_summary(path)
        return read_info(path), load_history(path), _load(path, "params.pt")["guide"]
    if status == "partial":
        checkpoint = read_checkpoint(path)
        return read_info(path), [from_json(r) for r in checkpoint["history"]], checkpoint["guide"]
    raise AmortizedPyroError("%s is not a run directory: %s" % (path, describe(path)))


def read_summary(path):
    """A finished run's summary.json, refused in one line where it is not one (whose presence alone would
    mark the run finished): the run's checkpoint writes it again."""
    path = Path(path)
    again = "remove it and run fit --resume %s to finish the run again from its last checkpoint" % path
    try:
        summary = _load(path, "summary.json")
    except AmortizedPyroError as e:
        raise AmortizedPyroError("%s: %s" % (e, again)) from None
    if not isinstance(summary, dict) or not isinstance(summary.get("final"), dict):
        raise AmortizedPyroError("summary.json in %s is not a run's summary (no final record): %s" % (path, again))
    return summary


def read_checkpoint(path):
    return _load(Path(path), "checkpoint.pt")
