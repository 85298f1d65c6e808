"""Command line: ``python -m amortized_pyro fit|compare|plot``, a thin layer over the Python API.

The training options are generated from :class:`~amortized_pyro.config.FitConfig`'s fields (their help,
range and choices); ``--config FILE`` reads a TOML preset into click's ``default_map``, so that options
given on the command line override it.
"""
import functools
import math
import sys
import time
from dataclasses import fields
from pathlib import Path

import click

from .config import FitConfig, option_name, read_preset
from .errors import AmortizedPyroError
from .results import slug
from .guides import GUIDES
from .train import fit


class FiniteFloat(click.FloatRange):
    """click's FloatRange, refusing NaN and infinities (which pass its comparisons)."""

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        if not math.isfinite(value):
            self.fail("%r is not a finite number" % value, param, ctx)
        return value


def field_option(f):
    """The click option of one FitConfig field: its type, range or choices, default and help."""
    m = f.metadata
    if f.type is bool:
        name = f.name.replace("_", "-")
        return click.option("--%s/--no-%s" % (name, name), f.name, default=f.default, show_default=True,
                            help=m["help"])
    if m["choices"]:
        kind = click.Choice(m["choices"])
    elif f.type is int:
        kind = click.IntRange(min=m["low"], max=m["high"], min_open=m["open_low"], max_open=m["open_high"])
    elif f.type is float:
        kind = FiniteFloat(min=m["low"], max=m["high"], min_open=m["open_low"], max_open=m["open_high"])
    else:
        kind = str
    return click.option(option_name(f.name), f.name, type=kind, default=f.default, show_default=True,
                        help=m["help"])


def config_options(grid):
    """Decorator adding an option per FitConfig field: every field (``grid=True``, for ``fit``) or all but
    those that ``compare`` takes as lists."""
    options = [field_option(f) for f in fields(FitConfig) if grid or not f.metadata["grid"]]
    options.append(click.option("--progress/--no-progress", default=True, show_default=True,
                                help="Show a progress bar."))
    return lambda command: functools.reduce(lambda cmd, option: option(cmd), reversed(options), command)


def load_config_file(ctx, param, value):
    """``--config FILE``: the preset's settings become the defaults of this command's options."""
    if value is None:
        return None
    try:
        settings, compare = read_preset(value)
    except AmortizedPyroError as e:
        raise click.BadParameter(str(e)) from None
    names = {p.name for p in ctx.command.params}
    if ctx.command.name == "compare":
        grid = [k for k in settings if k in ("guide", "width", "seed")]
        if grid:
            raise click.BadParameter("%s: set %s in its [compare] table (as guides, widths, seeds) for compare"
                                     % (value, ", ".join(grid)))
        if "dataset" in settings:
            compare.setdefault("datasets", settings.pop("dataset"))
        for key in ("guides", "widths", "seeds"):
            if isinstance(compare.get(key), list):
                compare[key] = ",".join(str(v) for v in compare[key])
        if isinstance(compare.get("datasets"), str):
            compare["datasets"] = [compare["datasets"]]
        settings.update(compare)
    ctx.default_map = {**(ctx.default_map or {}), **{k: v for k, v in settings.items() if k in names}}
    return value


def config_file_option(command):
    return click.option("--config", "config_file", type=click.Path(dir_okay=False), is_eager=True,
                        expose_value=False, callback=load_config_file,
                        help="A TOML preset (e.g. experiments/informative.toml); options given on the "
                             "command line override it.")(command)


def friendly_errors(command):
    """Runtime failures end in one line on stderr and exit status 1, never a traceback."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except AmortizedPyroError as e:
            message = str(e)
        except KeyboardInterrupt:
            message = "interrupted; results written so far are kept"
        except MemoryError:
            message = "out of memory: try a smaller --n-obs or --batch-size"
        except RuntimeError as e:  # torch's own, e.g. CUDA out of memory
            message = str(e).strip().splitlines()[0]
        click.echo("Error: %s" % message, err=True)
        sys.exit(1)
    return wrapper


def default_out(config):
    dataset = slug(Path(config.dataset).stem or config.dataset)
    width = "-w%d" % config.width if config.guide == "amortized" else ""
    return Path("runs") / ("%s%s-%s-seed%d-%s" % (config.guide, width, dataset, config.seed,
                                                 time.strftime("%Y%m%d-%H%M%S")))


def split_config(options):
    """FitConfig fields and the remaining CLI-only options."""
    names = {f.name for f in fields(FitConfig)}
    return ({k: v for k, v in options.items() if k in names}, {k: v for k, v in options.items() if k not in names})


def stderr_log(line):
    click.echo(line, err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
def cli():
    """Amortized vs per-datapoint variational inference in a Bayesian deep generative model (Pyro)."""


@cli.command("fit")
@config_file_option
@config_options(grid=True)
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Run directory (default: runs/GUIDE-DATASET-seedS-TIME).")
@friendly_errors
def fit_command(out, **options):
    """Train one guide with SVI and write config, per-epoch metrics, parameters and a summary to --out."""
    settings, extra = split_config(options)
    config = FitConfig(**settings).check()
    out = Path(out) if out else default_out(config)
    result = fit(config, out=out, progress=extra["progress"], log=stderr_log)
    click.echo(result.summary())


def int_list(ctx, param, value):
    try:
        numbers = [int(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("expected whole numbers separated by commas, got %r" % value) from None
    if not numbers:
        raise click.BadParameter("give at least one value")
    if param.name == "widths" and min(numbers) < 1:
        raise click.BadParameter("encoder widths must be >= 1, got %r" % value)
    return numbers


def name_list(ctx, param, value):
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in GUIDES]
    if unknown or not names:
        raise click.BadParameter("unknown guide(s) %s: choose from %s" % (", ".join(unknown) or "(none)", ", ".join(GUIDES)))
    return names


def write_comparison(results, out, threshold):
    """results.jsonl, summary.md and every figure into ``out``; prints the summary table."""
    from .plots import plot_all
    from .results import format_summary

    results.save(out / "results.jsonl")
    table = format_summary(results.summary(threshold), threshold)
    (out / "summary.md").write_text(table + "\n")
    paths = plot_all(results, out, threshold)
    click.echo(table)
    click.echo("wrote %s, %s and %d figures into %s" % ("results.jsonl", "summary.md", len(paths), out))


def mse_threshold_option(command):
    return click.option("--mse-threshold", default=0.07, show_default=True, type=FiniteFloat(min=0, min_open=True),
                        help="Train plug-in MSE that counts as 'reached' in the speed figure and table.")(command)


@cli.command("compare")
@config_file_option
@click.option("--guides", default=",".join(GUIDES), show_default=True, callback=name_list,
              help="Comma-separated guides to compare.")
@click.option("--widths", default="1,64,128,256", show_default=True, callback=int_list,
              help="Comma-separated encoder widths for the amortized guide.")
@click.option("--seeds", default="0,1,2,3,4", show_default=True, callback=int_list,
              help="Comma-separated seeds (initialisation and sampling; the data subset is fixed by --data-seed).")
@click.option("--dataset", "datasets", multiple=True, default=[FitConfig.dataset], show_default=True,
              help=FitConfig.__dataclass_fields__["dataset"].metadata["help"] + " Repeat for several datasets.")
@click.option("--data-seed", default=0, show_default=True, type=int,
              help="Seed of the training/test subsets (and binarization), the same for every configuration.")
@click.option("--study", default="compare", show_default=True, help="Name of the study, shown in figure titles.")
@mse_threshold_option
@config_options(grid=False)
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Output folder (default: runs/compare-TIME). Re-running with the same --out skips finished runs.")
@friendly_errors
def compare_command(guides, widths, seeds, datasets, data_seed, study, mse_threshold, out, **options):
    """Run guides × widths × seeds (× datasets); write the results table, a summary and all figures."""
    from .experiments import compare

    settings, extra = split_config(options)
    out = Path(out) if out else Path("runs") / ("compare-" + time.strftime("%Y%m%d-%H%M%S"))
    results = compare(guides, widths, seeds, datasets, out=out, study=study, data_seed=data_seed,
                      progress=extra["progress"], log=stderr_log, **settings)
    write_comparison(results, out, mse_threshold)


@cli.command("plot")
@click.argument("results_file", metavar="RESULTS", type=click.Path(dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Folder for the figures (default: the folder holding RESULTS).")
@mse_threshold_option
@friendly_errors
def plot_command(results_file, out, mse_threshold):
    """Redraw every figure (and summary.md) from a saved results.jsonl alone."""
    from .plots import plot_all
    from .results import Results, format_summary

    results = Results.load(results_file)
    out = Path(out) if out else Path(results_file).parent
    paths = plot_all(results, out, mse_threshold)
    (out / "summary.md").write_text(format_summary(results.summary(mse_threshold), mse_threshold) + "\n")
    click.echo("wrote %d figures and summary.md into %s" % (len(paths), out))


def main():
    cli(prog_name="python -m amortized_pyro")

