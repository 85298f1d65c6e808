"""Comparing guides: a grid of guides × encoder widths × seeds (× datasets), each run through ``fit``.

All configurations of a dataset train on the same images (drawn, and binarized where asked, with
``data_seed``); the seeds vary initialisation and sampling. Each run keeps its own run directory; a
finished one is reused and an interrupted one resumed, only where its recorded config and data are the
ones asked for (:func:`plan`). The runs go one after another in this process or as Ray tasks
(:mod:`amortized_pyro.study.executors`); either way the results are one
:class:`~amortized_pyro.study.results.Results` table, assembled in grid order.
"""
import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import torch

from amortized_pyro.autoguides.gap import checked_seed, checked_settings
from amortized_pyro.autoguides.options import count, switch
from amortized_pyro.errors import AmortizedPyroError, InvalidSettings
from amortized_pyro.gap.measure import measure_run
from amortized_pyro.inference.evaluation import reconstruct
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.models.conditional import model_data
from amortized_pyro.models.guides import ENCODER_GUIDES, GUIDES, config_label
from amortized_pyro.runs.config import FitConfig, check_values, first_difference
from amortized_pyro.settings import repeated
from amortized_pyro.runs.data import load_data
from amortized_pyro.runs.layout import gap_report_path, grid_run_dir
from amortized_pyro.runs.packs import is_pack
from amortized_pyro.runs.store import RunWriter, load_history, read_info, run_status, write_report
from amortized_pyro.study.clock import GridClock
from amortized_pyro.study.executors import Job, import_ray, run_local, run_ray
from amortized_pyro.study.results import Results

EXECUTORS = ("local", "ray")
RAY_OPTIONS = ("address", "cpus_per_run", "gpus_per_run", "retries")  # run_ray's settings


def configurations(guides, widths):
    """(guide, width) pairs: one per encoder width for the encoder guides, one for each other guide;
    every guide and width checked by FitConfig's rules."""
    encoders = any(g in ENCODER_GUIDES for g in guides)
    if not guides or (encoders and not widths):
        raise AmortizedPyroError("give at least one guide (and, for the encoder guides, one width)")
    check_values("guide", guides)
    check_values("width", widths if encoders else [])
    return [(g, w) for g in GUIDES if g in guides for w in (sorted(set(widths)) if g in ENCODER_GUIDES else [None])]


def grid_lists(guides, widths, seeds, datasets):
    """The grid's lists, refused in one line as the command line refuses them: not a list (a string is one value),
    a value FitConfig's rules refuse (that field's: guide, width, seed, dataset), a value given twice (it made the
    same runs twice, or was dropped without a word; issue 71)."""
    lists = []
    for name, values in (("guides", guides), ("widths", widths), ("seeds", seeds), ("datasets", datasets)):
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise AmortizedPyroError("%s must be a list, got %r" % (name, values))
        values = check_values(name[:-1], list(values))
        if not values and name in ("seeds", "datasets"):  # no guide, or no width for an encoder: configurations
            raise AmortizedPyroError("give at least one %s" % name[:-1])
        twice = repeated(values)
        if twice is not None:
            raise AmortizedPyroError("%s: %r is given twice in %r" % (name, twice, values))
        lists.append(values)
    return lists


def plan(job, overwrite):
    """Before any run starts: refuse a run directory that holds a run with other settings or other images
    (naming the first difference), or clear it where ``overwrite``."""
    status = run_status(job.run_dir) if job.run_dir else "empty"
    if status not in ("finished", "partial"):
        return
    if overwrite:
        RunWriter.clear(job.run_dir)
        return
    info = read_info(job.run_dir)
    difference = first_difference(info["config"], asdict(job.config))
    if difference is None and info["data"].get("fingerprint") != job.data.fingerprint():
        difference = "other images (%s, fingerprint %s; these: %s, %s)" % (
            info["data"].get("source"), info["data"].get("fingerprint", "")[:12], job.data.source,
            job.data.fingerprint()[:12])
    if difference:
        raise AmortizedPyroError("%s holds a run with %s: use --overwrite to retrain it, or another --out"
                                 % (job.run_dir, difference))


# compare's quicker gap: AIS of 200 steps read 0.8 nats below its 5,000-step value on an informative run, gap's
# default of 1,000 steps 0.1 (BENCHMARKS.md, AIS sweep); q* capped at 1,500 steps
COMPARE_GAP = GapSettings(theta_draws=4, importance_samples=1000, samples=100, max_steps=1500, ais_steps=200)
FLOW_STEPS_FACTOR = 2  # at flow_lr 0.01 a flow's q* took 1,660 and 1,740 steps on average (train, held-out; the
# remedies study's flow-2 run of seed 0 measured with gap --lr 0.01 --max-steps 3000): every step cap of a flow
# guide's report, its Gaussian q*'s too, is twice --gap-max-steps
COMPARE_REFINE = (0, 5, 20, 100)  # refinement rows measured (0: the guide's own factor); tables show the rest
WIDTHS = (1, 64, 128, 256)
N_IMAGES = 5  # reconstructions shown per configuration


def gap_reports(job, n_images, overwrite, log, settings=None, progress=False, place=(0, 2)):
    """The gap reports (train, test) of a finished run: from ``RUN_DIR/gap-SPLIT.json`` where they were made
    with these settings from this very run (its ``run_id`` and epochs), else measured now
    (:func:`amortized_pyro.gap.measure.measure_run`) and saved there. A report of another run (retrained,
    extended) is measured again, saying so; one made with other settings is refused unless ``overwrite``.
    ``place``: (reports before these, reports in all), for the lines that say which is measured."""
    reports = []
    refine_steps = () if job.config.flow else COMPARE_REFINE  # a flow's factor is not Gaussian: no refinement rows
    settings = settings or COMPARE_GAP
    if job.config.flow:  # q* of a flow family at its lower flow_lr: twice the steps
        settings = replace(settings, max_steps=FLOW_STEPS_FACTOR * settings.max_steps)
    run = (read_info(job.run_dir).get("run_id"), len(load_history(job.run_dir)))
    for number, split in enumerate(("train", "test"), place[0] + 1):
        which = "gaps %d of %d: %s, %s images" % (number, place[1], job.name(), split)
        path = gap_report_path(job.run_dir, split)
        images = min(n_images, (job.data.train if split == "train" else job.data.test).shape[0])
        if path.exists():
            report = json.loads(path.read_text())
            if (report.get("run_id"), report.get("trained_epochs")) != run:
                log("%s was measured on another state of the run: measuring again" % path)
            elif any(row["steps"] and "kept_steps" not in row for row in report.get("refinement", ())):
                log("%s was measured before refinement rows kept their best iterate: measuring again" % path)
            elif settings.same_as(report["settings"], report.get("q_family") == "flow") and \
                    (report["n_images"], report.get("refine_steps")) == (images, list(refine_steps)):
                log("%s: measured before (%s)" % (which, path.name))
                reports.append(report)
                continue
            elif not overwrite:
                raise AmortizedPyroError("%s was measured with other settings: use --overwrite to measure again" % path)
        log("%s: measuring" % which)
        report = measure_run(job.run_dir, split, n_images, settings, refine_steps, job.config.device, log, progress)
        write_report(path, report)
        reports.append(report)
    return reports


def compare(guides=GUIDES, widths=WIDTHS, seeds=(0, 1, 2, 3, 4), datasets=("mnist",), out=None,
            study="compare", data_seed=0, progress=True, log=print, overwrite=False, allow_sample=False,
            executor="local", ray_options=None, gap_images=0, gap_settings=None, replicas=1, **config):
    """Run every (dataset, guide, width, seed) of the grid and return :class:`Results`.

    ``config`` sets the other :class:`~amortized_pyro.FitConfig` fields (epochs, n_obs, batch_size, ...).
    With ``out``, each run writes ``out/runs/DATASET/LABEL-seedS`` and ``out/results.jsonl`` is rewritten
    as runs end; runs found there are reused as :func:`plan` says. A run that fails for its own reasons (it
    diverged, say) is recorded as a failure and the others go on. MNIST that cannot be had is an error
    unless ``allow_sample``, and then the shipped sample is named as such (``mnist-sample``). ``executor``
    is "local" or "ray" (``ray_options``: address, cpus_per_run, gpus_per_run, retries; needs ``out``).
    ``gap_images`` > 0 measures, once training is done, the gaps of every finished run (each seed) on its
    first ``gap_images`` training and test images (:func:`gap_reports`),
    with ``gap_settings`` (a :class:`~amortized_pyro.local.gaps.GapSettings`; default and the command line's: COMPARE_GAP).
    ``replicas`` > 1 trains each configuration's seeds that many at a time as one batched model (local
    executor; :func:`~amortized_pyro.study.executors.run_local`): the same runs, the same results.
    Each argument is refused in one line, as the command line refuses it, before anything is read or written.
    """
    fields = FitConfig.__dataclass_fields__
    unknown = [k for k in config if k not in fields or fields[k].metadata["grid"]]  # a seed= was ignored (issue 71)
    if unknown:
        raise InvalidSettings("compare takes no setting %s (its settings are FitConfig's fields; guide, width, seed "
                              "and dataset are the grid's lists guides, widths, seeds, datasets)"
                              % ", ".join(unknown), unknown)
    base = FitConfig(**config).check()
    guides, widths, seeds, datasets = grid_lists(guides, widths, seeds, datasets)
    grid = configurations(guides, widths)
    if executor not in EXECUTORS:
        raise AmortizedPyroError("unknown executor %r: choose local or ray" % executor)
    if out is not None and not (isinstance(out, (str, os.PathLike)) and str(out).strip()):  # '' was None
        raise AmortizedPyroError("out must name a folder for the runs and results (None: nothing is written), got %r"
                                 % (out,))
    checked_seed(count("data_seed", data_seed), "data_seed")
    count("gap_images", gap_images)
    count("replicas", replicas, 1)
    gap_settings = checked_settings(COMPARE_GAP if gap_settings is None else gap_settings, "gap_settings")
    for name, value in (("progress", progress), ("overwrite", overwrite), ("allow_sample", allow_sample)):
        switch(name, value)  # overwrite="no" read as True, clearing the runs
    if not isinstance(study, str):
        raise AmortizedPyroError("study must be a string (the name figure titles show), got %r" % (study,))
    if not callable(log):
        raise AmortizedPyroError("log must be a function taking a line (print, say), got %r" % (log,))
    if ray_options is not None and not (isinstance(ray_options, dict) and set(ray_options) <= set(RAY_OPTIONS)):
        raise AmortizedPyroError("ray_options must be a dict of %s, got %r" % (", ".join(RAY_OPTIONS), ray_options))
    out = Path(out) if out is not None else None
    if executor == "ray" and replicas > 1:
        raise AmortizedPyroError("replicas pack seeds into one process: use the local executor")
    if (executor == "ray" or gap_images) and out is None:
        raise AmortizedPyroError("the Ray executor and the gap measurements need run directories: give --out")
    if out and ((out / "config.json").exists() or is_pack(out)):
        raise AmortizedPyroError("%s is a run directory of fit (it holds a run's config.json%s): a comparison writes "
                                 "runs/ and results beside it there; give compare a folder of its own with --out"
                                 % (out, "" if (out / "config.json").exists() else ", in seed*/"))
    if out:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise AmortizedPyroError("cannot create %s: %s" % (out, e.strerror or e)) from None
    jobs, loaded = [], {}
    for requested in datasets:
        data = load_data(requested, base.data_dir, base.n_obs, base.n_test, data_seed, base.download, log,
                         binarize=base.binarize, allow_sample=allow_sample, grayscale=base.grayscale)
        if data.name in loaded:  # the same runs twice, in one folder
            raise AmortizedPyroError("datasets %r and %r both load %s: give it once"
                                     % (loaded[data.name], requested, data.name))
        loaded[data.name] = requested
        for guide, width in grid:
            for seed in seeds:
                config = replace(base, guide=guide, width=width or base.width, seed=seed, dataset=data.name)
                name = config_label(config)
                run_dir = grid_run_dir(out, data.name, name, seed) if out else None
                jobs.append(Job(data.name, name, seed, config, run_dir, data))
    for job in jobs:
        plan(job, overwrite)
    if executor == "ray":
        import_ray()  # Ray missing: said in its one line before anything else is
    clock = GridClock(jobs, len(jobs) if gap_images else 0, log)
    # the trial times one run as it trains alone, here: not Ray's workers, nor seeds packed as one model
    clock.start(next((job for job in jobs if clock.left[id(job)]), None) if executor == "local" and replicas == 1
                else None)
    if executor == "ray":
        outcomes = run_ray(jobs, progress, log, **(ray_options or {}))
    else:
        outcomes = run_local(jobs, progress, log, replicas)
    finished = {}
    for job, outcome in outcomes:
        if isinstance(outcome, str):
            log("%s failed: %s" % (job.name(), outcome))
        finished[id(job)] = outcome
        clock.ran(job)
        results = assemble(jobs, finished, study, seeds[0])
        if out:
            results.save(out / "results.jsonl")
    results = assemble(jobs, finished, study, seeds[0])
    if gap_images:
        measured = [job for job in jobs if not isinstance(finished.get(id(job)), str)]
        clock.measuring(len(measured))
        for number, job in enumerate(measured):
            results.gaps.extend(gap_reports(job, gap_images, overwrite, log, gap_settings, progress,
                                            (2 * number, 2 * len(measured))))
            results.save(out / "results.jsonl")
            clock.measured()
    return results


def assemble(jobs, finished, study, first_seed):
    """The results table of the jobs finished so far, in grid order (whatever order they ended in)."""
    results = Results()
    for job in jobs:
        if results.baseline(job.dataset) is None:
            results.add_baseline(job.dataset, job.data)
        outcome = finished.get(id(job))
        if isinstance(outcome, str):
            results.add_failure(job.dataset, job.label, job.seed, outcome)
        elif outcome is not None:
            results.add_run(outcome, job.dataset, study, job.data.train.shape[0])
            if job.seed == first_seed:
                results.add_images(job.dataset, reconstructions(outcome, job.data.to(outcome.device)), job.data.shape)
    return results


def reconstructions(result, data):
    """(split, who, images) of the first training and test images: the originals and ``result``'s plug-in
    reconstructions (None where its guide has no factor for them)."""
    train, test = data.train[:N_IMAGES], data.test[:N_IMAGES]
    inputs = model_data(result.model, data)  # a conditional run reads them with their labels
    name = config_label(result.config)
    train_idx = torch.arange(len(train), device=train.device)
    return [("train", "original", train), ("test", "original", test),
            ("train", name, reconstruct(result.model, result.guide, inputs.train[:N_IMAGES], train_idx)),
            ("test", name, reconstruct(result.model, result.guide, inputs.test[:N_IMAGES]))]
