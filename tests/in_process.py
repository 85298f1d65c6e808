"""``python SCRIPT ARGS`` and ``python -m amortized_pyro ARGS`` run in the test's own process, as a new interpreter
would run them (the arguments, the script's folder on the path, the working folder, Python's default warnings
written to stderr, an uncaught exception's traceback on stderr and exit status 1, ``sys.exit("message")``'s
message on stderr), answered as :class:`subprocess.CompletedProcess`. Each new interpreter costs its start and
the imports of torch and Pyro (about 2.5 s here), which a test that is not about processes need not pay; a test
about processes (a kill, a signal, a launcher) starts real ones."""
import contextlib
import io
import os
import runpy
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

import torch
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def as_a_new_process(argv, cwd, path):
    """The working folder, sys.argv and sys.path[0] of ``python ARGV`` run in ``cwd`` (``path``: the folder put
    first on sys.path), Python's default warning filters with warnings written to sys.stderr, and torch's thread
    count and matplotlib's figures given back after."""
    before = os.getcwd(), sys.argv, list(sys.path), torch.get_num_threads()

    def show(message, category, filename, lineno, file=None, line=None):
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    os.chdir(cwd)
    sys.argv = [str(a) for a in argv]
    sys.path.insert(0, str(path))
    try:
        with warnings.catch_warnings():
            warnings.resetwarnings()  # Python's own defaults (the -W / PYTHONWARNINGS-less ones)
            for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
                warnings.filterwarnings("ignore", category=category)  # each put first: the list ends in this order
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            warnings.showwarning = show
            yield
    finally:
        os.chdir(before[0])
        sys.argv, sys.path[:] = before[1], before[2]
        torch.set_num_threads(before[3])
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")


def run_python(script, *args, cwd=ROOT):
    """``python SCRIPT ARGS`` in ``cwd``, in this process: its exit status, stdout and stderr."""
    script = Path(script) if Path(script).is_absolute() else Path(cwd) / script
    out, err, status = io.StringIO(), io.StringIO(), 0
    with as_a_new_process([script, *args], cwd, script.parent), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exit:  # as Python's own exit: None 0, an int itself, anything else printed and 1
            if exit.code is None or isinstance(exit.code, int):
                status = exit.code or 0
            else:
                print(exit.code, file=sys.stderr)
                status = 1
        except BaseException:  # noqa: B036 -- an uncaught exception: its traceback, exit status 1
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
    return subprocess.CompletedProcess(["python", str(script), *map(str, args)], status, out.getvalue(),
                                       err.getvalue())


def run_cli(*args, cwd=ROOT):
    """``python -m amortized_pyro ARGS`` in ``cwd``, in this process (click's CliRunner on the package's command
    line, as its main() runs it): its exit status, stdout and stderr."""
    from amortized_pyro.cli.commands import cli

    args = [str(a) for a in args]
    with as_a_new_process(["python -m amortized_pyro", *args], cwd, cwd):
        result = CliRunner().invoke(cli, args, prog_name="python -m amortized_pyro")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "Traceback (most recent call last):\n" + "".join(traceback.format_tb(result.exc_info[2])) + \
            "".join(traceback.format_exception_only(*result.exc_info[:2]))
    return subprocess.CompletedProcess(["python", "-m", "amortized_pyro", *args], result.exit_code, result.stdout,
                                       stderr)
