"""click options generated from the fields of a settings dataclass (:class:`~amortized_pyro.runs.config.FitConfig`,
:class:`~amortized_pyro.local.gaps.GapSettings`: help, range, choices), and ``--config FILE``, which reads a TOML
preset into click's ``default_map`` so that options given on the command line override it."""
import functools
import sys
import math
from dataclasses import fields

import click
from click.core import ParameterSource

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.runs.config import read_preset


class FiniteFloat(click.FloatRange):
    """click's FloatRange, refusing NaN and infinities (which pass its comparisons)."""

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        if not math.isfinite(value):
            self.fail("%r is not a finite number" % value, param, ctx)
        return value


class Parsed(click.ParamType):
    """A text option read by a field's ``parse`` function: text it cannot read is a usage error (exit 2)."""

    def __init__(self, parse):
        self.parse, self.name = parse, parse.__doc__.strip().splitlines()[0]

    def convert(self, value, param, ctx):
        try:
            self.parse(value)
        except ValueError:
            self.fail("cannot read %r (%s)" % (value, self.name), param, ctx)
        return value


def option_name(name):
    return "--" + name.replace("_", "-")


def given(names):
    """Those of ``names`` (parameters of the command running) given on the command line (or in the environment),
    not defaults: a preset's keys (--config) are defaults, which every guide takes."""
    ctx, sources = click.get_current_context(), (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    return [n for n in names if ctx.get_parameter_source(n) in sources]


def field_option(f, prefix="", default=None):
    """The click option of one settings field: its type, range or choices, default (the field's, or
    ``default``'s value of it: a settings instance) and help; ``prefix`` before its name (``gap_`` →
    ``--gap-lr``, keyword ``gap_lr``)."""
    m = f.metadata
    value = f.default if default is None else getattr(default, f.name)
    if f.type is bool:
        name = f.name.replace("_", "-")
        name = prefix.replace("_", "-") + name
        return click.option("--%s/--no-%s" % (name, name), prefix + f.name, default=value, show_default=True,
                            help=m["help"])
    if m["choices"]:
        kind = click.Choice(m["choices"])
    elif m["parse"]:
        kind = Parsed(m["parse"])
    elif f.type is int:
        kind = click.IntRange(min=m["low"], max=m["high"], min_open=m["open_low"], max_open=m["open_high"])
    elif f.type is float:
        kind = FiniteFloat(min=m["low"], max=m["high"], min_open=m["open_low"], max_open=m["open_high"])
    else:
        kind = str
    return click.option(option_name(prefix + f.name), prefix + f.name, type=kind, default=value, show_default=True,
                        help=m["help"])


def settings_options(settings, grid=True, progress=True, prefix="", defaults=None):
    """Decorator adding an option per field of the dataclass ``settings``: every field (``grid=True``) or
    all but those that ``compare`` takes as lists; and ``--progress/--no-progress`` where ``progress``.
    ``prefix`` and ``defaults`` (an instance of ``settings``): as :func:`field_option`'s."""
    options = [field_option(f, prefix, defaults) for f in fields(settings) if grid or not f.metadata["grid"]]
    if progress:
        options.append(click.option("--progress/--no-progress", default=_on_a_terminal,
                                    show_default="where stderr is a terminal",
                                    help="Show a progress bar (in a log or a pipe, a line per phase instead: bars "
                                         "flooded logs, issue 71)."))
    return lambda command: functools.reduce(lambda cmd, option: option(cmd), reversed(options), command)


def _on_a_terminal():
    return sys.stderr.isatty()


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
