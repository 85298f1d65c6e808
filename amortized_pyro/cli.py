"""Command line: ``python -m amortized_pyro fit|compare|plot``, a thin layer over the Python API."""
import functools
import re
import sys
import time
from pathlib import Path

import click

from .errors import AmortizedPyroError
from .guides import GUIDES
from .inference import FitConfig, fit

DEFAULTS = FitConfig()


def training_options(command):
    """The options every training command shares, one per FitConfig field (guide, width, seed excepted)."""
    options = [
        click.option("--dataset", default=DEFAULTS.dataset, show_default=True,
                     help="mnist, fashion-mnist, mnist-sample (shipped, offline), a folder of IDX files, "
                          "or a .npy/.npz file of images."),
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
                     help="Compile the ELBO with torch.jit (JitTrace_ELBO)."),
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
    dataset = re.sub(r"[^A-Za-z0-9_-]+", "_", Path(config.dataset).stem or config.dataset)
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


def main():
    cli(prog_name="python -m amortized_pyro")
