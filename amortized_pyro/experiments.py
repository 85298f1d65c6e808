"""Comparing guides: a grid of guides × encoder widths × seeds (× datasets) run through ``fit``.

All configurations of a dataset train on the same images (drawn, and binarized where asked, with
``data_seed``); the seeds vary initialisation and sampling. Each run keeps its own run directory; a finished one is reused and an
interrupted one resumed, only where its recorded config and data are the ones asked for. The results go
into one :class:`~amortized_pyro.results.Results` table.
"""
from dataclasses import asdict, replace
from pathlib import Path

from tqdm.auto import tqdm

from .config import FitConfig, check_values, first_difference
from .data import load_data
from .errors import AmortizedPyroError, Interrupted
from .guides import GUIDES
from .results import Results, label, slug
from .runs import read_info, run_status
from .train import fit, load_run, resume


def configurations(guides, widths):
    """(guide, width) pairs: one per encoder width for the amortized guide, one for each other guide;
    every guide and width checked by FitConfig's rules."""
    if not guides or ("amortized" in guides and not widths):
        raise AmortizedPyroError("give at least one guide (and, for the amortized guide, one width)")
    check_values("guide", guides)
    check_values("width", widths if "amortized" in guides else [])
    return [(g, w) for g in GUIDES if g in guides for w in (sorted(set(widths)) if g == "amortized" else [None])]


def run_one(config, data, run_dir, overwrite, progress, log):
    """Train one configuration of the grid into ``run_dir``, or reuse what is there: a finished run is
    reloaded and a checkpointed one resumed where its recorded config and data are the ones asked for;
    a run directory holding anything else is refused (``overwrite`` retrains it)."""
    status = run_status(run_dir) if run_dir else "empty"
    if status in ("finished", "partial") and not overwrite:
        info = read_info(run_dir)
        difference = first_difference(info["config"], asdict(config))
        if difference is None and info["data"].get("fingerprint") != data.fingerprint():
            difference = "other images (%s)" % info["data"].get("source")
        if difference:
            raise AmortizedPyroError("%s holds a run with %s: use --overwrite to retrain it, or another --out"
                                     % (run_dir, difference))
        if status == "finished":
            return load_run(run_dir, config.device)
        return resume(run_dir, data=data, progress=progress, log=log)
    return fit(config, data=data, out=run_dir, progress=progress, log=log, overwrite=overwrite or status == "started")


def compare(guides=GUIDES, widths=(1, 64, 128, 256), seeds=(0, 1, 2, 3, 4), datasets=("mnist",), out=None,
            study="compare", data_seed=0, progress=True, log=print, overwrite=False, allow_sample=False, **config):
    """Run every (dataset, guide, width, seed) of the grid and return :class:`Results`.

    ``config`` sets the other :class:`~amortized_pyro.FitConfig` fields (epochs, n_obs, batch_size, ...).
    With ``out``, each run writes ``out/runs/DATASET/LABEL-seedS`` and ``out/results.jsonl`` is rewritten
    after every run; runs found there are reused as :func:`run_one` says. A run that fails for its own reasons
    (it diverged, say) is recorded as a failure and the others go on. MNIST that cannot be had is an
    error unless ``allow_sample``, and then the shipped sample is named as such (``mnist-sample``).
    """
    base = FitConfig(**config).check()
    grid = configurations(list(guides), list(widths))
    if not seeds:
        raise AmortizedPyroError("give at least one seed")
    results = Results()
    out = Path(out) if out else None
    if out:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise AmortizedPyroError("cannot create %s: %s" % (out, e.strerror or e)) from None
    bar = tqdm(total=len(datasets) * len(grid) * len(seeds), desc="compare", unit="run", disable=not progress)
    for requested in datasets:
        data = load_data(requested, base.data_dir, base.n_obs, base.n_test, data_seed, base.download, log,
                         binarize=base.binarize, allow_sample=allow_sample)
        dataset = data.name
        results.add_baseline(dataset, data)
        for guide, width in grid:
            for seed in seeds:
                config = replace(base, guide=guide, width=width or base.width, seed=seed, dataset=dataset)
                run_dir = out / "runs" / slug(dataset) / ("%s-seed%d" % (slug(label(guide, width)), seed)) if out \
                    else None
                bar.set_postfix_str("%s %s seed %d" % (dataset, label(guide, width), seed))
                try:
                    result = run_one(config, data, run_dir, overwrite, progress, log)
                except Interrupted:
                    raise
                except AmortizedPyroError as e:  # this run's own failure (diverged, ...): report it, go on
                    log("%s %s seed %d failed: %s" % (dataset, label(guide, width), seed, e))
                    results.add_failure(dataset, label(guide, width), seed, str(e))
                else:
                    results.add_run(result, dataset, study, data.to(result.device), with_images=seed == seeds[0])
                if out:
                    results.save(out / "results.jsonl")
                bar.update()
    bar.close()
    return results
