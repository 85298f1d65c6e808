"""Command line: ``python -m amortized_pyro fit|compare|plot|sample|gap|gap-report|capacity``, a thin layer over the
Python API (the gap commands in :mod:`amortized_pyro.cli.gap_commands`).

The training options are generated from :class:`~amortized_pyro.runs.config.FitConfig`'s fields
(:mod:`amortized_pyro.cli.options`); ``--config FILE`` reads a TOML preset, which options given on the command
line override.
"""
import signal
from dataclasses import fields
from pathlib import Path

import click
import torch
from click.core import ParameterSource
from matplotlib.backend_bases import FigureCanvasBase

from amortized_pyro.cli.common import (DEBUG_ENV, OutPath, check_writable, comma_separated, friendly_errors,
                                       left_empty_removed, overwrite_option, replicas_option, stderr_log,
                                       threads_option)
from amortized_pyro.cli.gap_commands import GAP_COMMANDS
from amortized_pyro.cli.options import FiniteFloat, config_file_option, given, option_name, settings_options
from amortized_pyro.errors import AmortizedPyroError, FixedSettings, Interrupted, InvalidSettings
from amortized_pyro.local.gaps import GapSettings
from amortized_pyro.settings import INT64_MAX
from amortized_pyro.models.guides import ENCODER_GUIDES, GUIDES, config_label
from amortized_pyro.report.tables import summary_text
from amortized_pyro.runs.config import FitConfig, check_applicable, check_stop_gain, check_values
from amortized_pyro.runs.fit import RESUMABLE_CHANGES, check_finished, fit, load_run, resume
from amortized_pyro.runs.images import prepare_data, run_data
from amortized_pyro.runs.layout import new_comparison_dir, new_run_dir
from amortized_pyro.runs.packs import fit_replicas, is_pack, resume_pack
from amortized_pyro.study.comparison import COMPARE_GAP, WIDTHS, compare
from amortized_pyro.study.results import PLATEAU_FRACTION, Results


def default_out(config, data):
    """runs/GUIDE[-wK]-DATA-seedS-TIME-XXXX: named for the data actually used, unique (random suffix)."""
    return new_run_dir(config.guide, config.width if config.guide in ENCODER_GUIDES else None, data.name, config.seed)


def split_config(options):
    """FitConfig fields and the remaining CLI-only options."""
    names = {f.name for f in fields(FitConfig)}
    return ({k: v for k, v in options.items() if k in names}, {k: v for k, v in options.items() if k not in names})


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--debug", is_flag=True, help="Show the full traceback of an error (also: %s=1)." % DEBUG_ENV)
def cli(debug):
    """Amortized vs per-datapoint variational inference in a Bayesian deep generative model (Pyro)."""


@cli.command("fit")
@config_file_option
@settings_options(FitConfig, grid=True)
@click.option("--out", type=OutPath(file_okay=False), default=None,
              help="Run directory (default: runs/GUIDE[-wK]-DATASET-seedS-TIME-XXXX, unique; -wK for the encoder guides).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None,
              help="Continue the run in this directory from its last checkpoint, with its own config; options "
                   "given on the command line (e.g. a lower --lr) change it.")
@replicas_option("Train seeds --seed … --seed+R−1 as one batched model (a replica dimension on every parameter "
                   "and draw), each exactly the run of its seed, on the images of --seed, into OUT/seedS.")
@overwrite_option
@threads_option
@friendly_errors
def fit_command(out, resume_dir, replicas, overwrite, **options):
    """Train one guide with SVI and write config, per-epoch metrics, checkpoints, parameters and a summary
    to --out."""
    settings, extra = split_config(options)
    if resume_dir:
        if out or overwrite or replicas > 1:
            raise click.UsageError("--resume continues the run(s) in its own directory: drop --out, --overwrite "
                                   "and --replicas")
        ctx = click.get_current_context()
        changes = {k: v for k, v in settings.items()
                   if ctx.get_parameter_source(k) in (ParameterSource.COMMANDLINE, ParameterSource.DEFAULT_MAP)}
        if is_pack(resume_dir):
            fixed = sorted(set(changes) - set(RESUMABLE_CHANGES))
            if fixed:
                raise FixedSettings(fixed, RESUMABLE_CHANGES)
            results = resume_pack(resume_dir, None, progress=extra["progress"], log=stderr_log, **changes)
        else:
            results = [resume(resume_dir, progress=extra["progress"], log=stderr_log, **changes)]
    else:
        check_applicable([settings["guide"]], given(settings), option_name)
        check_stop_gain(given(settings), settings["stop_window"])
        config = FitConfig(**settings).check()
        data = prepare_data(config, None, stderr_log)
        out = Path(out) if out else default_out(config, data)
        if replicas > 1:
            results = fit_replicas(config, replicas, data, out, extra["progress"], stderr_log, overwrite)
        else:
            results = [fit(config, data=data, out=out, progress=extra["progress"], log=stderr_log, overwrite=overwrite)]
    click.echo("\n\n".join(result.summary() for result in results))


def grid_values(field, kind):
    """--guides, --widths, --seeds: comma-separated values, each checked by FitConfig field ``field``'s rules."""
    return comma_separated(required=True, kind=kind, check=lambda values: check_values(field, values))


def write_comparison(results, out, fraction):
    """results.jsonl, summary.md and every figure into ``out``; prints the summary table."""
    from amortized_pyro.report.figures import plot_all

    results.save(out / "results.jsonl")
    table = summary_text(results, fraction)
    (out / "summary.md").write_text(table + "\n")
    if not results.rows:
        raise AmortizedPyroError("every run of the grid failed (see %s)" % (out / "summary.md"))
    paths = plot_all(results, out, fraction)
    click.echo(table)
    click.echo("wrote %s, %s and %d figures into %s" % ("results.jsonl", "summary.md", len(paths), out))


def plateau_fraction_option(command):
    return click.option("--plateau-fraction", default=PLATEAU_FRACTION, show_default=True,
                        type=FiniteFloat(min=0, min_open=True),
                        help="The speed figure and table count the SVI steps until the train plug-in MSE falls below "
                             "this fraction of the mean training image's (which ignores z): leaving the plateau.")(command)


@cli.command("compare")
@config_file_option
@click.option("--guides", default=",".join(GUIDES), show_default=True, callback=grid_values("guide", str),
              help="Comma-separated guides to compare.")
@click.option("--widths", default=",".join(map(str, WIDTHS)), show_default=True, callback=grid_values("width", int),
              help="Comma-separated encoder widths for the amortized guide.")
@click.option("--seeds", default="0,1,2,3,4", show_default=True, callback=grid_values("seed", int),
              help="Comma-separated seeds (initialisation and sampling; the data subset is fixed by --data-seed).")
@click.option("--dataset", "datasets", multiple=True, default=[FitConfig.dataset], show_default=True,
              help=FitConfig.__dataclass_fields__["dataset"].metadata["help"] + " Repeat for several datasets.")
@click.option("--data-seed", default=0, show_default=True, type=int,
              help="Seed of the training/test subsets (and binarization), the same for every configuration.")
@click.option("--study", default="compare", show_default=True, help="Name of the study, shown in figure titles.")
@plateau_fraction_option
@settings_options(FitConfig, grid=False)
@click.option("--out", type=OutPath(file_okay=False), default=None,
              help="Output folder (default: runs/compare-TIME-XXXX). Re-running with the same --out reuses "
                   "finished runs and resumes interrupted ones whose config and data match.")
@overwrite_option
@click.option("--allow-sample", is_flag=True,
              help="Where MNIST cannot be had, use the shipped 3,000-image sample (named mnist-sample).")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Run the grid's runs one after another here (local), or as Ray tasks (ray; pip install -e \".[ray]\").")
@click.option("--ray-address", default=None,
              help="Ray to use: none starts one on this machine; auto or ray://HOST:PORT joins a running cluster "
                   "(then --out must be on storage every node shares).")
@click.option("--ray-cpus-per-run", default=1.0, show_default=True, type=FiniteFloat(min=0, min_open=True),
              help="CPUs each run's Ray task asks for.")
@click.option("--ray-gpus-per-run", default=None, type=FiniteFloat(min=0),
              help="GPUs each run's Ray task asks for  [default: 1 where the runs use CUDA, else 0].")
@click.option("--ray-retries", default=3, show_default=True, type=click.IntRange(min=0),
              help="How often Ray retries a run whose worker died (the retry resumes from the run's checkpoint).")
@click.option("--gap-images", default=0, show_default=True, type=click.IntRange(min=0),
              help="After training, measure the gaps of every run (each seed) on this many training and test images "
                   "(as the gap command, with the --gap-* settings; refinement 0/5/20/100 steps, none for a flow "
                   "guide, whose caps are twice --gap-max-steps); the tables give the mean over seeds ± its "
                   "standard error; 0 = not.")
@settings_options(GapSettings, progress=False, prefix="gap_", defaults=COMPARE_GAP)
@replicas_option("Train each configuration's seeds this many at a time as one batched model (local executor): "
                   "each replica is exactly the run of its seed, so the runs and the tables are the same.")
@threads_option
@friendly_errors
def compare_command(guides, widths, seeds, datasets, data_seed, study, plateau_fraction, out, overwrite, allow_sample,
                    executor, ray_address, ray_cpus_per_run, ray_gpus_per_run, ray_retries, gap_images, replicas,
                    **options):
    """Run guides × widths × seeds (× datasets); write the results table, a summary and all figures."""
    gap_settings = GapSettings(**{f.name: options.pop("gap_" + f.name) for f in fields(GapSettings)})
    settings, extra = split_config(options)
    check_applicable(guides, given(settings), option_name)
    check_stop_gain(given(settings), settings["stop_window"])
    without = [g for g in guides if g not in ENCODER_GUIDES]
    if without and given(["widths"]):  # a note, not a refusal: the study scripts give one --widths to each guide
        stderr_log("note: --widths applies to the guides with an encoder only: not to %s (one run per seed)"
                   % ", ".join(without))
    ray_options = dict(address=ray_address, cpus_per_run=ray_cpus_per_run, gpus_per_run=ray_gpus_per_run,
                       retries=ray_retries)
    out = Path(out) if out else new_comparison_dir()
    with left_empty_removed(out):  # a comparison that fails before writing anything leaves no folder
        try:
            results = compare(guides, widths, seeds, datasets, out=out, study=study, data_seed=data_seed,
                              progress=extra["progress"], log=stderr_log, overwrite=overwrite, allow_sample=allow_sample,
                              executor=executor, ray_options=ray_options, gap_images=gap_images,
                              gap_settings=gap_settings, replicas=replicas, **settings)
        except Interrupted as e:
            stopped = AmortizedPyroError("interrupted by %s: finished runs are kept in %s; run the same command again "
                                         "to resume (the interrupted run continues from its checkpoint)"
                                         % (signal.Signals(e.signum).name, out))
            stopped.exit_code = e.exit_code
            raise stopped from None
        write_comparison(results, out, plateau_fraction)


@cli.command("plot")
@click.argument("results_file", metavar="RESULTS", type=click.Path(dir_okay=False))
@click.option("--out", type=OutPath(file_okay=False), default=None,
              help="Folder for the figures (default: the folder holding RESULTS).")
@plateau_fraction_option
@threads_option
@friendly_errors
def plot_command(results_file, out, plateau_fraction):
    """Redraw every figure (and summary.md) from a saved results.jsonl alone."""
    from amortized_pyro.report.figures import plot_all

    results = Results.load(results_file)
    out = Path(out) if out else Path(results_file).parent
    paths = plot_all(results, out, plateau_fraction)
    command = "python -m amortized_pyro plot %s --out %s%s" % (results_file, out, "" if plateau_fraction == PLATEAU_FRACTION
                                                                 else " --plateau-fraction %r" % plateau_fraction)
    (out / "summary.md").write_text("Command: %s\n\n%s\n" % (command, summary_text(results, plateau_fraction)))
    click.echo("wrote %d figures and summary.md into %s" % (len(paths), out))


MAX_GRID = 100  # rows and columns of the sample command's grid (issue 71: 100,000 per class ran out of memory)


@cli.command("sample")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False))
@click.option("--per-class", default=8, show_default=True, type=click.IntRange(min=1, max=MAX_GRID),
              help="Draws of z per row: per class for a conditional run, per row for an unconditional one (at most "
                   "%d: a grid of 100 × 100 images of 28 × 28 pixels is a PNG of about 3,000 × 3,000)." % MAX_GRID)
@click.option("--rows", default=10, show_default=True, type=click.IntRange(min=1, max=MAX_GRID),
              help="Rows of independent draws for an unconditional run (a conditional run has one per class).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0, max=INT64_MAX),
              help="Seed of the z draws.")
@click.option("--same-z", is_flag=True, help="A conditional run's analogies: each column one draw of z's noise, "
              "shared by every class's row (the same style in each class).")
@click.option("--out", type=OutPath(dir_okay=False), default=None,
              help="The PNG to write (default: RUN_DIR/samples.png); an existing file is refused unless --overwrite.")
@click.option("--overwrite", is_flag=True, help="Replace the file --out names.")
@threads_option
@friendly_errors
def sample_command(run_dir, per_class, rows, seed, same_z, out, overwrite):
    """Draw images from a finished run: for a conditional run one row per class, z ~ p(z | c) decoded with θ at
    q(θ)'s mean (class-conditional generation); for an unconditional run rows of independent z ~ N(0, I)."""
    from amortized_pyro.models.generation import draw_grid
    from amortized_pyro.report.samples import sample_figure

    out = Path(out) if out else Path(run_dir) / "samples.png"
    formats = FigureCanvasBase.get_supported_filetypes()
    if out.suffix.lower()[1:] not in formats:
        raise InvalidSettings("--out: matplotlib writes no %r file; name a .png (or %s)"
                              % (out.suffix or "suffix-less", ", ".join("." + f for f in sorted(formats) if f != "png")),
                              ["out"])
    if out.exists() and not overwrite:
        raise AmortizedPyroError("%s exists: --overwrite to replace it, or --out another file" % out)
    check_finished(run_dir)
    check_writable(out)
    result = load_run(run_dir)
    model, generator = result.model, torch.Generator().manual_seed(seed)
    if same_z and not model.n_classes:
        raise InvalidSettings("--same-z shares each column's z across classes: it needs a conditional run",
                              ["same_z"])
    if model.n_classes and given(["rows"]):
        raise InvalidSettings("--rows sets an unconditional run's rows: this conditional run draws one row per class",
                              ["rows"])
    images = draw_grid(model, result.guide.global_mean(), per_class, generator,
                       n_rows=None if model.n_classes else rows, same_z=same_z)
    theta = "θ̂ (a point-estimated decoder)" if result.config.decoder_prior == "none" else "θ at q(θ)'s mean"
    if model.n_classes:
        prior = "N(0, I)" if model.class_prior == "standard" else "the learned N(μ_c, σ_c²)"
        names, title = ["class %d" % c for c in range(model.n_classes)], (
            "Class-conditional samples of %s: row c, z ~ p(z | c) = %s%s, shown as E[x | z, c, θ] with %s (seed %d)"
            % (config_label(result.config), prior, ", each column's noise shared by every row" if same_z else "",
               theta, seed))
    else:
        names, title = ["draws %d" % (r + 1) for r in range(rows)], (
            "Samples of %s (unconditional: rows are independent draws, not classes): z ~ N(0, I), shown as "
            "E[x | z, θ] with %s (seed %d)" % (config_label(result.config), theta, seed))
    sample_figure(images.cpu().numpy(), model.image_shape, names, title, out)
    click.echo("wrote %s (%d rows of %d images%s)" % (out, len(names), per_class, "" if model.n_classes else
                                                       ": an unconditional run's rows, --per-class draws in each"))
    if model.n_classes:
        click.echo(_class_accuracy_line(run_dir, result, images))


def _class_accuracy_line(run_dir, result, images):
    """Whether a conditional run's draws show their class (report/class_accuracy.py), on the run's own labelled
    images; where they cannot be read, a line saying so (the grid is written either way)."""
    from amortized_pyro.report.class_accuracy import of_class_grid
    from amortized_pyro.runs.store import read_info

    try:
        data = run_data(run_dir, read_info(run_dir), result.config, None, log=lambda line: None)
    except AmortizedPyroError as error:
        return "conditional accuracy not measured: the run's labelled images cannot be read (%s)" % error
    return of_class_grid(images, data).line()


for command in GAP_COMMANDS:
    cli.add_command(command)


def main():
    cli(prog_name="python -m amortized_pyro")

