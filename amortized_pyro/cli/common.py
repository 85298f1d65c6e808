"""What every command of the command line shares: errors as one line and an exit status (never a traceback
unless --debug), how to go on from an error, logging to stderr, and a few option types."""
import functools
import os
import sys
import traceback
from dataclasses import fields

import click
import torch

from amortized_pyro.cli.options import field_option, option_name
from amortized_pyro.errors import AmortizedPyroError, Diverged, FixedSettings, Interrupted, InvalidSettings, RunExists
from amortized_pyro.runs.config import FitConfig


DEBUG_ENV = "AMORTIZED_PYRO_DEBUG"
THREADS_ENV = "AMORTIZED_PYRO_THREADS"


def debugging():
    """--debug on the command line, or AMORTIZED_PYRO_DEBUG=1 in the environment."""
    context = click.get_current_context(silent=True)
    flag = context is not None and context.find_root().params.get("debug", False)
    return flag or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def friendly_errors(command):
    """The package's own errors (:class:`~amortized_pyro.errors.AmortizedPyroError`) and the host's known
    limits (memory, the file system) end in one line on stderr and exit status 1 (128 + signal number when a
    signal stopped the run), unless --debug (or AMORTIZED_PYRO_DEBUG=1) asks for the traceback. Anything else
    is a bug of ours: its traceback, and a line asking for a report (exit status 1)."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        code = 1
        try:
            return command(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own: usage errors (exit 2) and exits
        except (AmortizedPyroError, MemoryError, torch.OutOfMemoryError, OSError) as e:
            if debugging():
                raise
            code = getattr(e, "exit_code", 1)  # 128 + signal number for an interrupted run
            if isinstance(e, InvalidSettings):  # a usage error found once the options met each other
                code = 2
            if isinstance(e, AmortizedPyroError):
                message = hint(e)
            elif isinstance(e, (MemoryError, torch.OutOfMemoryError)):
                message = "out of memory: try a smaller --n-obs, --batch-size or --chunk"
            else:  # the file system: permissions, a full disk, a missing file
                message = "%s%s" % (e.strerror or e, ": %s" % e.filename if e.filename else "")
        except KeyboardInterrupt:
            message, code = "interrupted; results written so far are kept", 130
        except Exception:
            traceback.print_exc()
            message = ("this is a bug of amortized_pyro, not of your input: please report it with the traceback "
                       "above and the command")
        click.echo("Error: %s" % message, err=True)
        sys.exit(code)
    return wrapper


PROG = "python -m amortized_pyro"


def hint(error):
    """The error's line, with how to go on from the command line where there is a way."""
    if isinstance(error, FixedSettings):
        return "--resume continues a run as it was defined: it cannot change %s (only %s)" % (
            ", ".join(map(option_name, error.fields)), ", ".join(map(option_name, error.allowed)))
    if isinstance(error, InvalidSettings):
        return "%s (%s)" % (error, ", ".join(map(option_name, error.fields)))
    if isinstance(error, Interrupted) and error.out:
        return "%s: resume with %s fit --resume %s" % (error, PROG, error.out)
    if isinstance(error, Diverged) and error.out:
        return "%s: continue it with a lower learning rate, %s fit --resume %s --lr LR" % (error, PROG, error.out)
    if isinstance(error, RunExists):
        return "%s: use --resume %s to continue it or --overwrite to replace it" % (error, error.out)
    return str(error)


def device_option(command):
    """``--device`` as ``fit`` has it (auto, cpu, cuda or cuda:N, checked; default auto), for every command."""
    return field_option(next(f for f in fields(FitConfig) if f.name == "device"))(command)


def replicas_option(help):
    """``--replicas R`` (at least 1, default 1): seeds trained as one batched model; ``help`` says how here."""
    return click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True, help=help)


def n_images_option(default, help):
    """``--n-images N`` (at least 1): how many images a measurement takes; ``help`` says which."""
    return click.option("--n-images", default=default, show_default=True, type=click.IntRange(min=1), help=help)


def stderr_log(line):
    click.echo(line, err=True)


def overwrite_option(command):
    return click.option("--overwrite", is_flag=True,
                        help="Replace a run that --out already holds (otherwise refused).")(command)


class OutPath(click.Path):
    """click's Path, refusing the empty string (which would write into the current folder)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path: give a folder or file name", param, ctx)
        return super().convert(value, param, ctx)


def repeated(values):
    """The first value that ``values`` holds twice, or None."""
    seen = set()
    for value in values:
        if value in seen:
            return value
        seen.add(value)
    return None


def comma_separated(low=None, required=False, kind=int, check=None):
    """A click callback reading comma-separated values of ``kind`` (whole numbers by default), each >= ``low``
    where given, at least one where ``required``, none twice, and the list passed to ``check`` (which
    returns it or raises AmortizedPyroError, e.g. FitConfig's rules for a grid's values)."""
    noun = {int: "whole numbers", float: "numbers"}.get(kind, "values")

    def read(ctx, param, value):
        try:
            values = [kind(v.strip()) for v in str(value).split(",") if v.strip()]
        except ValueError:
            raise click.BadParameter("expected %s separated by commas, got %r" % (noun, value)) from None
        if required and not values:
            raise click.BadParameter("give at least one value")
        if low is not None and any(not v >= low for v in values):
            raise click.BadParameter("expected %s >= %s, got %r" % (noun, low, value))
        twice = repeated(values)
        if twice is not None:
            raise click.BadParameter("%s is given twice in %r" % (twice, value))
        try:
            return check(values) if check else values
        except AmortizedPyroError as e:
            raise click.BadParameter(str(e)) from None
    return read


step_counts = comma_separated(0)  # --refine-steps


def threads_option(command):
    """``--threads N`` (or AMORTIZED_PYRO_THREADS): torch's CPU threads for this command, default 1. On this
    project's 2-core machine one thread lost little on an idle machine and two threads per job were many times
    slower as soon as a second job ran beside them (bench/threads.sh, BENCHMARKS.md)."""
    def apply(ctx, param, value):
        torch.set_num_threads(value)
        return value
    return click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, envvar=THREADS_ENV,
                        expose_value=False, callback=apply,
                        help="CPU threads of torch (also %s). More than 1 pays only on an otherwise idle machine "
                             "(docs/scaling.md: Speed)." % THREADS_ENV)(command)
