"""Where runs and what is derived from them live: every directory and file name the package makes for a run,
a pack, a comparison, a gap report or a capacity sweep, in one place."""
import re
import secrets
import time
from pathlib import Path

RUNS = Path("runs")  # where new runs and comparisons go unless told otherwise (relative to the working folder)
PACK_RUNS = "seed*"  # the run directories of a pack
GAP_REPORTS = "gap*.json"  # the gap reports a run directory may hold: derived from the run, cleared with it


def slug(text):
    """``text`` as a file-name part: θ and β spelled out, anything else but letters, digits, ``_.-`` becomes
    ``_``; no leading dot (a dataset given as ``../data/mnist`` must not make a hidden folder)."""
    text = str(text).replace("θ", "theta").replace("β", "beta")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).lstrip("._").rstrip("_")


def stamp():
    """TIME-XXXX: when, and a random suffix, so that two names made in the same second differ."""
    return "%s-%s" % (time.strftime("%Y%m%d-%H%M%S"), secrets.token_hex(2))


def new_run_dir(guide, width, dataset, seed):
    """runs/GUIDE[-wK]-DATA-seedS-TIME-XXXX for a run of ``guide`` (``width`` None where it has no encoder) on
    the data named ``dataset``."""
    tag = guide if width is None else "%s-w%d" % (guide, width)
    return RUNS / ("%s-%s-seed%d-%s" % (tag, slug(Path(dataset).stem or dataset), seed, stamp()))


def new_comparison_dir():
    return RUNS / ("compare-%s" % stamp())


def grid_run_dir(out, dataset, label, seed):
    """OUT/runs/DATA/LABEL-seedS: one run of a comparison's grid."""
    return Path(out) / "runs" / slug(dataset) / ("%s-seed%d" % (slug(label), seed))


def pack_run_dir(out, seed):
    """OUT/seedS: one run of a pack."""
    return Path(out) / ("seed%d" % seed)


def capacity_dir(run_dir):
    return Path(run_dir) / "capacity"


def gap_report_path(run_dir, split=None):
    """Where a run's gap report lives: RUN_DIR/gap.json (the ``gap`` command's default) or, one per split,
    RUN_DIR/gap-SPLIT.json (``compare``'s)."""
    return Path(run_dir) / ("gap.json" if split is None else "gap-%s.json" % split)
