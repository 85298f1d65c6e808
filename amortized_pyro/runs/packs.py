"""Packs: runs of one configuration at several seeds, trained as one batched model
(:mod:`amortized_pyro.inference.replicas`) and written as the single runs they equal, one run directory each.

``fit --replicas R --seed S --out DIR`` trains seeds S … S+R−1 on the images of seed S (as a comparison's
seeds share its ``--data-seed``) into DIR/seed{S+r}; ``fit --resume DIR`` resumes such a folder as a pack;
``compare --replicas R`` packs each configuration's seeds R at a time.
"""
from dataclasses import replace
from pathlib import Path

from amortized_pyro.errors import AmortizedPyroError, Diverged, Interrupted, InvalidSettings
from amortized_pyro.inference.replicas import Pack, Stream, check_pack
from amortized_pyro.inference.training import train
from amortized_pyro.runs.config import FitConfig
from amortized_pyro.runs.fit import TrainingRun, load_run, resume
from amortized_pyro.runs.images import prepare_data, run_data
from amortized_pyro.runs.layout import PACK_RUNS, pack_run_dir
from amortized_pyro.runs.store import read_checkpoint, read_info, read_run, run_status
from amortized_pyro.support.devices import resolve_device


def pack_dirs(out, configs):
    """The run directory of each replica in the pack folder ``out``: ``out/seed{seed}``."""
    return [pack_run_dir(out, c.seed) for c in configs]


def begin(config, data, device, run_dir, status, overwrite, changes, log):
    """One replica's :class:`~amortized_pyro.runs.fit.TrainingRun` opened as :func:`amortized_pyro.runs.fit.fit`
    or ``resume`` would (new and seeded, or from its checkpoint) and started, and its random stream captured:
    (run, stream)."""
    if status == "partial":
        info = read_info(run_dir)
        run_data(run_dir, info, config, data)
        run = TrainingRun.resumed(run_dir, info, config, data, device, changes, log)
    else:
        run = TrainingRun.new(config, data, device, run_dir, "overwrite" if overwrite or status == "started" else "new")
    run.start()
    return run, Stream(device)


def fit_pack(configs, data, run_dirs=None, progress=True, log=print, overwrite=False, changes=None):
    """Train the runs ``configs`` (one configuration at several seeds) as one batched model on ``data``, each
    into its run directory (``run_dirs``, or nothing written): all new, or all standing at checkpoints of
    the same epoch (resumed, ``changes`` recorded as a resume records them). Returns their FitResults."""
    check_pack(configs)
    device = resolve_device(configs[0].device)
    data = data.to(device)
    run_dirs = run_dirs or [None] * len(configs)
    statuses = [(resume_status(d, c) if changes is not None else run_status(d)) if d else "empty"
                for c, d in zip(configs, run_dirs)]
    if set(statuses) - {"empty", "started"} and set(statuses) != {"partial"}:
        raise AmortizedPyroError("a pack's runs must all be new or all be partial, not %s" % ", ".join(statuses))
    if set(statuses) == {"partial"} and len({read_checkpoint(d)["epoch"] for d in run_dirs}) > 1:
        raise AmortizedPyroError("a pack's runs must stand at the same epoch to resume together")
    begun = [begin(c, data, device, d, s, overwrite, changes or {}, log)
             for c, d, s in zip(configs, run_dirs, statuses)]
    runs, streams = map(list, zip(*begun))
    try:
        train(Pack([r.model for r in runs], [r.guide for r in runs], [r.state for r in runs], streams,
                   [r.writer for r in runs], configs[0]), data, configs[0], progress)
    except (Diverged, Interrupted) as e:
        raise runs[e.replica if isinstance(e, Diverged) else 0].stopped(e) from None
    return [run.finish() for run in runs]


def fit_replicas(config, replicas, data=None, out=None, progress=True, log=print, overwrite=False):
    """``replicas`` seeds config.seed, config.seed + 1, … trained as one model on the images of config.seed,
    into ``out``/seed{seed} where given; their FitResults."""
    config = config.check()
    if config.graph:  # each replica draws from its own generator: each would need registering with the graph
        raise InvalidSettings("--graph does not capture packs of replicas (their per-replica random streams): "
                              "run the seeds one by one with --graph, or the pack without it", ["graph"])
    data = prepare_data(config, data, log)
    configs = [replace(config, seed=config.seed + r) for r in range(replicas)]
    return fit_pack(configs, data, pack_dirs(out, configs) if out else None, progress, log, overwrite)


def is_pack(path):
    """Whether ``path`` is a pack folder (no run of its own; run directories seed*/)."""
    path = Path(path)
    return not (path / "config.json").exists() and any(p.is_dir() for p in path.glob(PACK_RUNS))


def resume_status(run_dir, config):
    """The status of a replica's run to a resume with ``config``: a finished run given more epochs is "partial",
    extended from its final checkpoint as :func:`~amortized_pyro.runs.fit.resume` extends one, once every file of
    it was read (a damaged one is refused before anything changes)."""
    status = run_status(run_dir)
    if status == "finished" and config.epochs > read_info(run_dir)["config"]["epochs"]:
        read_run(run_dir)
        return "partial"
    return status


def resume_pack(path, data=None, progress=True, log=print, **changes):
    """Resume the pack folder ``path`` (its runs at one checkpoint) on their images (``data`` where given,
    checked), with ``changes`` to their schedule as :func:`amortized_pyro.runs.fit.resume` takes them."""
    run_dirs = sorted((p for p in Path(path).glob(PACK_RUNS) if p.is_dir()), key=lambda p: p.name)
    configs = [replace(FitConfig(**read_info(d)["config"]), **changes).check() for d in run_dirs]
    statuses = [resume_status(d, c) for d, c in zip(run_dirs, configs)]
    if set(statuses) == {"finished"}:
        log("%s: finished runs, nothing to resume (give more --epochs to extend them)" % path)
        return [load_run(d) for d in run_dirs]
    if len({read_checkpoint(d)["epoch"] for d, s in zip(run_dirs, statuses) if s == "partial"}) > 1:
        log("%s: its runs stand at different checkpoints (a kill between them): resuming them one by one" % path)
        return [resume(d, data, progress, log, **changes) for d in run_dirs]
    data = run_data(run_dirs[0], read_info(run_dirs[0]), configs[0], data, log)
    return fit_pack(configs, data, run_dirs, progress, log, changes=changes)
