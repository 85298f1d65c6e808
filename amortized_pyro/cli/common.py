"""What every command of the command line shares: errors as one line and an exit status (never a traceback
unless --debug), how to go on from an error, logging to stderr, and a few option types."""
import contextlib
import functools
import os
import re
import sys
import traceback
import warnings
from dataclasses import fields
from pathlib import Path

import click
import torch

from amortized_pyro.cli.options import field_option, option_name
from amortized_pyro.errors import AmortizedPyroError, Diverged, FixedSettings, Interrupted, InvalidSettings, RunExists
from amortized_pyro.runs.config import FitConfig
from amortized_pyro.runs.store import STARTED, kept_since, writes
from amortized_pyro.settings import repeated


DEBUG_ENV = "AMORTIZED_PYRO_DEBUG"
THREADS_ENV = "AMORTIZED_PYRO_THREADS"
MEMORY_WORDS = ("can't allocate memory", "not enough memory", "out of memory", "failed to allocate",
                "overflow when unpacking", "integer multiplication overflow", "negative dimension",
                "too large to convert to c")  # torch's and Python's words for sizes beyond the host or a tensor
SIZES = {"width", "hidden", "z_dim", "n_obs", "n_test", "batch_size", "particles", "encoder_layers", "flow",
         "iterations", "refine_steps", "predictive_draws", "replicas", "n_images", "gap_images", "chunk", "samples",
         "importance_samples", "theta_draws", "score_draws", "select_draws", "step_samples", "ais_chains",
         "encoder_batch_size"}  # the options that set how much memory a command takes


def debugging():
    """--debug on the command line, or AMORTIZED_PYRO_DEBUG=1 in the environment."""
    context = click.get_current_context(silent=True)
    flag = context is not None and context.find_root().params.get("debug", False)
    return flag or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def friendly_errors(command):
    """The package's own errors (:class:`~amortized_pyro.errors.AmortizedPyroError`) and the host's known
    limits (memory, sizes beyond a tensor's, the file system) end in one line on stderr and exit status 1 (2 for
    a usage error, 128 + signal number when a signal stopped the run; Ctrl-C elsewhere says what was kept),
    unless --debug (or AMORTIZED_PYRO_DEBUG=1) asks for the traceback. Anything else is a bug of ours: its
    traceback, and a line asking for a report (exit status 1)."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        code, mark = 1, writes()
        try:
            with one_line_warnings():
                return command(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own: usage errors (exit 2) and exits
        except KeyboardInterrupt:
            message, code = interrupted(kept_since(mark)), 130
        except Exception as e:
            if not isinstance(e, (AmortizedPyroError, OSError)) and not out_of_memory(e):
                traceback.print_exc()
                message = ("this is a bug of amortized_pyro, not of your input: please report it with the "
                           "traceback above and the command")
            elif debugging():
                raise
            else:
                code, message = user_error(e)
        click.echo("Error: %s" % message, err=True)
        sys.exit(code)
    return wrapper


@contextlib.contextmanager
def one_line_warnings():
    """While it lasts, the package's own warnings (a gap q* never measured, a model run one draw at a time) are
    printed as one line, ``warning: …``, not as Python's two (the category, then a line of our source: issue 71);
    other libraries' warnings as Python prints them."""
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if category.__module__.startswith("amortized_pyro."):
                click.echo("warning: %s" % message, err=True)
            else:
                shown(message, category, filename, lineno, file, line)
        warnings.showwarning = show
        yield


PROG = "python -m amortized_pyro"


def user_error(e):
    """(exit status, line) of the package's own error, the file system's, or memory running out."""
    if isinstance(e, AmortizedPyroError):  # 128 + signal number for an interrupted run; 2 for a usage error
        return 2 if isinstance(e, InvalidSettings) else getattr(e, "exit_code", 1), hint(e)
    if isinstance(e, OSError):  # permissions, a full disk, a missing file
        return 1, "%s%s" % (e.strerror or e, ": %s" % e.filename if e.filename else "")
    return 1, too_large(e)


def out_of_memory(error):
    """Whether ``error`` is memory running out, or a size beyond what a tensor can have (torch says either
    as a RuntimeError or TypeError at the allocation)."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(error, (RuntimeError, TypeError, OverflowError)) and any(
        word in str(error).lower() for word in MEMORY_WORDS)


def too_large(error):
    """The line of :func:`out_of_memory`: the command's size options given above their defaults, the one
    furthest above first (the likely cause), and how many bytes torch was asked for where it says."""
    context = click.get_current_context(silent=True)
    above = []
    for param in context.command.params if context else ():
        value, default = context.params.get(param.name), param.default
        if param.name.removeprefix("gap_") in SIZES and isinstance(value, int) and isinstance(default, int) \
                and value > max(default, 1):
            above.append((value / max(default, 1), "%s %d" % (option_name(param.name), value), default))
    asked = re.search(r"allocate (\d+) bytes", str(error))
    asked = " (%.3g GB asked for)" % (int(asked.group(1)) / 1e9) if asked else ""
    if not above:
        return "out of memory%s: try a smaller --n-obs, --batch-size or --chunk" % asked
    above.sort(reverse=True)
    return "out of memory%s at the sizes asked for: %s is the furthest above its default (%d), give it a smaller " \
           "value%s" % (asked, above[0][1], above[0][2], "" if len(above) == 1 else " (also above their defaults: %s)"
                        % ", ".join(a[1] for a in above[1:]))


def interrupted(kept):
    """The line of a command stopped by Ctrl-C outside a run's epochs (which stop at a checkpoint
    themselves): what it had written, ``kept``, is kept, or nothing was written."""
    if not kept:
        return "interrupted; nothing was written"
    folders = sorted({str(p.parent) for p in kept})
    return "interrupted; what was written so far is kept in %s%s" % (
        folders[0], " and %d other folder(s)" % (len(folders) - 1) if len(folders) > 1 else "")


def check_writable(path):
    """Refuse at once, before any work, to write ``path`` into a folder that is missing or read-only."""
    folder = Path(path).parent
    if not folder.is_dir():
        raise AmortizedPyroError("cannot write %s: the folder %s does not exist" % (path, folder))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise AmortizedPyroError("cannot write %s: %s is read-only (give --out a file in a folder you can write)"
                                 % (path, folder))


@contextlib.contextmanager
def left_empty_removed(path):
    """Where the block fails, remove the folder ``path`` and its parents that did not exist before it and that
    it left empty (a command's --out); never anything else."""
    path, missing = Path(path) if path else None, []
    while path is not None and not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    try:
        yield
    except BaseException:
        for folder in missing:  # the deepest first; rmdir leaves a folder that holds anything
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def no_empty_out(name):
    """Decorator of a command whose option ``name`` is the folder it writes: a failure leaves no empty folder
    (:func:`left_empty_removed`)."""
    def decorate(command):
        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            with left_empty_removed(kwargs.get(name)):
                return command(*args, **kwargs)
        return wrapper
    return decorate


def hint(error):
    """The error's line, with how to go on from the command line where there is a way."""
    if isinstance(error, FixedSettings):
        return "--resume continues a run as it was defined: it cannot change %s (only %s)" % (
            ", ".join(map(option_name, error.fields)), ", ".join(map(option_name, error.allowed)))
    if isinstance(error, InvalidSettings):
        named = all(option_name(f) in str(error) for f in error.fields)
        return str(error) if named else "%s (%s)" % (error, ", ".join(map(option_name, error.fields)))
    if isinstance(error, Interrupted) and error.out:
        return "%s: resume with %s fit --resume %s" % (error, PROG, error.out)
    if isinstance(error, Diverged) and error.out:
        return "%s: continue it with a lower learning rate, %s fit --resume %s --lr LR" % (error, PROG, error.out)
    if isinstance(error, RunExists) and error.status == "started":
        return "%s: %s: --overwrite starts it there again, or give another --out" % (error.out, STARTED)
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


def comma_separated(low=None, required=False, kind=int, check=None, high=None):
    """A click callback reading comma-separated values of ``kind`` (whole numbers by default), each >= ``low``
    and <= ``high`` where given, at least one where ``required``, none twice, and the list passed to ``check``
    (which returns it or raises AmortizedPyroError, e.g. FitConfig's rules for a grid's values)."""
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
        if high is not None and any(v > high for v in values):
            raise click.BadParameter("expected %s of at most %s, got %r" % (noun, high, value))
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
    slower as soon as a second job ran beside them (bench/archive/threads.sh, BENCHMARKS.md)."""
    def apply(ctx, param, value):
        torch.set_num_threads(value)
        return value
    return click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, envvar=THREADS_ENV,
                        expose_value=False, callback=apply,
                        help="CPU threads of torch (also %s). More than 1 pays only on an otherwise idle machine "
                             "(docs/scaling.md: Speed)." % THREADS_ENV)(command)
