"""Command line: ``python -m amortized_pyro fit|compare|plot``, a thin layer over the Python API."""
import functools
import sys
import time
from pathlib import Path

import click

from .errors import AmortizedPyroError
from .experiments import slug
from .guides import GUIDES
from .inference import FitConfig, fit

DEFAULTS = FitConfig()
DATASET_HELP = ("mnist, fashion-mnist, mnist-sample (shipped, offline), a folder of IDX files, "
                "or a .npy/.npz file of images.")


def training_options(command):
    """The options every training command shares, one per FitConfig field (guide, width, seed and
    dataset excepted: ``compare`` takes lists of those)."""
    options = [
        click.option("--data-dir", default=DEFAULTS.data_dir, show_default=True, type=click.Path(file_okay=False),
                     help="Where torchvision finds or downloads MNIST/FashionMNIST."),
        click.option("--download/--no-download", default=DEFAULTS.download, show_default=True,
                     help="Try to download MNIST/FashionMNIST when it is not in --data-dir."),
        click.option("--n-obs", default=DEFAULTS.n_obs, show_default=True, type=click.IntRange(min=1),
                     help="Training images N (a deterministic subset chosen by --seed)."),
        click.option("--n-test", default=DEFAULTS.n_test, show_default=True, type=click.IntRange(min=0),
                     help="Held-out test images for the test MSE."),
        click.option("--epochs", default=DEFAULTS.epochs, show_default=True, type=click.IntRange(min=1),
                     help="Passes over the N training images."),
        click.option("--batch-size", default=DEFAULTS.batch_size, show_default=True, type=click.IntRange(min=1),
                     help="Minibatch size B; local ELBO terms are scaled by N/B."),
        click.option("--lr", default=DEFAULTS.lr, show_default=True, type=click.FloatRange(min=0, min_open=True),
                     help="Adam learning rate."),
        click.option("--weight-decay", default=DEFAULTS.weight_decay, show_default=True,
                     type=click.FloatRange(min=0),
                     help="AdamW's decoupled weight decay on the variational parameters (0 = plain Adam)."),
        click.option("--particles", default=DEFAULTS.particles, show_default=True, type=click.IntRange(min=1),
                     help="Vectorized samples per ELBO estimate."),
        click.option("--z-dim", default=DEFAULTS.z_dim, show_default=True, type=click.IntRange(min=1),
                     help="Latent dimension."),
        click.option("--hidden", default=DEFAULTS.hidden, show_default=True, type=click.IntRange(min=1),
                     help="Decoder hidden width H."),
        click.option("--prior-scale", default=DEFAULTS.prior_scale, show_default=True,
                     type=click.FloatRange(min=0, min_open=True), help="Prior std of every decoder weight."),
        click.option("--obs-scale", default=DEFAULTS.obs_scale, show_default=True,
                     type=click.FloatRange(min=0, min_open=True), help="Likelihood std of every pixel."),
        click.option("--init-scale", default=DEFAULTS.init_scale, show_default=True,
                     type=click.FloatRange(min=0, min_open=True), help="Initial std of q(θ) (e^-2)."),
        click.option("--device", default=DEFAULTS.device, show_default=True,
                     help="auto (CUDA when available), cpu, cuda or cuda:N."),
        click.option("--eval-every", default=DEFAULTS.eval_every, show_default=True, type=click.IntRange(min=1),
                     help="Evaluate train/test reconstruction MSE every this many epochs (and at the end)."),
        click.option("--jit/--no-jit", default=DEFAULTS.jit, show_default=True,
                     help="Compile the ELBO with torch.jit (JitTrace_ELBO, the same estimator with less Python per step); "
                          "falls back to the plain one, saying so, where it does not compile."),
        click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar."),
    ]
    return functools.reduce(lambda cmd, option: option(cmd), reversed(options), command)


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
    fields = set(FitConfig.__dataclass_fields__)
    return ({k: v for k, v in options.items() if k in fields},
            {k: v for k, v in options.items() if k not in fields})


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """Amortized vs per-datapoint variational inference in a Bayesian deep generative model (Pyro)."""


@cli.command("fit")
@click.option("--guide", type=click.Choice(GUIDES), default=DEFAULTS.guide, show_default=True,
              help="Family of q(z_n): amortized (encoder, A-VI), per-datapoint (F-VI) or shared (constant-VI).")
@click.option("--width", default=DEFAULTS.width, show_default=True, type=click.IntRange(min=1),
              help="Encoder width k of the amortized guide.")
@click.option("--seed", default=DEFAULTS.seed, show_default=True, type=int,
              help="Seeds data subsets, initialisation and sampling.")
@click.option("--dataset", default=DEFAULTS.dataset, show_default=True, help=DATASET_HELP)
@training_options
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Run directory (default: runs/GUIDE-DATASET-seedS-TIME).")
@friendly_errors
def fit_command(out, **options):
    """Train one guide with SVI and write config, per-epoch metrics, parameters and a summary to --out."""
    fields, extra = split_config(options)
    config = FitConfig(**fields)
    out = Path(out) if out else default_out(config)
    result = fit(config, out=out, progress=extra["progress"], log=lambda line: click.echo(line, err=True))
    click.echo(result.summary())


def int_list(ctx, param, value):
    try:
        numbers = [int(v) for v in value.split(",") if v.strip()]
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
    from .experiments import format_summary
    from .plots import plot_all

    results.save(out / "results.jsonl")
    table = format_summary(results.summary(threshold), threshold)
    (out / "summary.md").write_text(table + "\n")
    paths = plot_all(results, out, threshold)
    click.echo(table)
    click.echo("wrote %s, %s and %d figures into %s" % ("results.jsonl", "summary.md", len(paths), out))


@cli.command("compare")
@click.option("--guides", default=",".join(GUIDES), show_default=True, callback=name_list,
              help="Comma-separated guides to compare.")
@click.option("--widths", default="1,64,128,256", show_default=True, callback=int_list,
              help="Comma-separated encoder widths for the amortized guide.")
@click.option("--seeds", default="0,1,2,3,4", show_default=True, callback=int_list,
              help="Comma-separated seeds (initialisation and sampling; the data subset is fixed by --data-seed).")
@click.option("--dataset", "datasets", multiple=True, default=[DEFAULTS.dataset], show_default=True,
              help=DATASET_HELP + " Repeat for several datasets.")
@click.option("--data-seed", default=0, show_default=True, type=int,
              help="Seed of the training/test subsets, the same for every configuration.")
@click.option("--study", default="compare", show_default=True, help="Name of the study, shown in figure titles.")
@click.option("--mse-threshold", default=0.07, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Train MSE that counts as 'reached' in the speed figure and table.")
@training_options
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Output folder (default: runs/compare-TIME). Re-running with the same --out skips finished runs.")
@friendly_errors
def compare_command(guides, widths, seeds, datasets, data_seed, study, mse_threshold, out, **options):
    """Run guides × widths × seeds (× datasets); write the results table, a summary and all figures."""
    from .experiments import compare

    fields, extra = split_config(options)
    out = Path(out) if out else Path("runs") / ("compare-" + time.strftime("%Y%m%d-%H%M%S"))
    results = compare(guides, widths, seeds, datasets, out=out, study=study, data_seed=data_seed,
                      progress=extra["progress"], log=lambda line: click.echo(line, err=True), **fields)
    write_comparison(results, out, mse_threshold)


@cli.command("plot")
@click.argument("results_file", metavar="RESULTS", type=click.Path(dir_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Folder for the figures (default: the folder holding RESULTS).")
@click.option("--mse-threshold", default=0.07, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Train MSE that counts as 'reached' in the speed figure and table.")
@friendly_errors
def plot_command(results_file, out, mse_threshold):
    """Redraw every figure (and summary.md) from a saved results.jsonl alone."""
    from .experiments import Results, format_summary
    from .plots import plot_all

    results = Results.load(results_file)
    out = Path(out) if out else Path(results_file).parent
    paths = plot_all(results, out, mse_threshold)
    (out / "summary.md").write_text(format_summary(results.summary(mse_threshold), mse_threshold) + "\n")
    click.echo("wrote %d figures and summary.md into %s" % (len(paths), out))


def main():
    cli(prog_name="python -m amortized_pyro")
