"""Every bench script, the recurring ones in bench/ and the answered-once probes in bench/archive/, still imports
what it uses and parses its options (a smoke test: the benchmarks themselves run by hand, their results in
BENCHMARKS.md), and the interleaved bench's summary reads its log."""
import contextlib
import faulthandler
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch

import pyro

from in_process import run_python

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(str(p.relative_to(BENCH)) for p in [*BENCH.glob("*.py"), *BENCH.glob("archive/*.py")]
                 if p.name != "summarize_interleaved.py")


def test_the_recurring_benches_and_the_archived_probes_are_both_there():
    assert "bench_step.py" in SCRIPTS and any(s.startswith("archive/") for s in SCRIPTS)


# Every script's --help in one interpreter (each its own run, as ``python bench/NAME.py --help`` runs it: its folder
# first on the path, __main__): 18 interpreters' start-up cost 36 s of the suite (issue 60, item 6).
HELP_DRIVER = r"""
import contextlib, io, json, os, runpy, sys, traceback
found, path = {}, list(sys.path)
local = (os.path.abspath("bench"), os.path.abspath("tests"))
for script in sys.argv[1:]:
    for name, module in list(sys.modules.items()):  # the modules a script before took from bench/ or tests/ (its
        # own folders on the path): each script imports its own again (torch and the package stay loaded)
        if (getattr(module, "__file__", None) or "").startswith(local):
            del sys.modules[name]
    sys.argv, sys.path[:] = [script, "--help"], [os.path.dirname(os.path.abspath(script))] + path
    out, err, code = io.StringIO(), io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    except BaseException:
        code, err = 1, io.StringIO(traceback.format_exc())
    found[script] = [code, out.getvalue(), err.getvalue()]
print("\n" + json.dumps(found))
"""


@pytest.fixture(scope="module")
def helps():
    """script → (exit code, stdout, stderr) of ``python bench/SCRIPT --help`` from the repository root."""
    done = subprocess.run([sys.executable, "-c", HELP_DRIVER, *(str(Path("bench") / s) for s in SCRIPTS)],
                          capture_output=True, text=True, cwd=BENCH.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    return {script: found[str(Path("bench") / script)] for script in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_bench_script_starts(script, helps):
    """Started as the docs say, from the repository root: python bench/[archive/]NAME.py --help."""
    code, out, err = helps[script]
    assert code == 0, err[-2000:]
    if "__main__" in (BENCH / script).read_text():  # a script, not a module the others import
        assert "usage" in out.lower()


def test_every_bench_path_benchmarks_names_exists_and_every_archived_probe_is_named():
    """The bench scripts BENCHMARKS.md names are there, and each probe in bench/archive/ is named where its answer
    is (BENCHMARKS.md, or a docs page)."""
    root = BENCH.parent
    benchmarks = (root / "BENCHMARKS.md").read_text(encoding="utf-8")
    named = set(re.findall(r"(?<![\w./-])(bench/[\w/]*\w\.(?:py|sh))\b", benchmarks))
    assert "bench/bench_step.py" in named and not sorted(p for p in named if not (root / p).exists())
    answers = benchmarks + "".join(p.read_text(encoding="utf-8") for p in (root / "docs").glob("*.md"))
    probes = sorted(str(p.relative_to(root)) for p in BENCH.glob("archive/*") if p.suffix in (".py", ".sh"))
    assert probes and not [p for p in probes if p not in answers]


@pytest.mark.parametrize("script", sorted(str(p.relative_to(BENCH)) for p in BENCH.glob("**/*.sh")))
def test_a_bench_shell_script_parses(script):
    done = subprocess.run(["bash", "-n", str(BENCH / script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_interleaved_summary_takes_medians_per_checkout(tmp_path):
    log = tmp_path / "log"
    log.write_text("## abc1234 (/tmp/before), repeat 1\n| reference | amortized | 10.0 | 11.0 | 12.0 |\n"
                   "## def5678 (/work/main), repeat 1\n| reference | amortized | 10.0 | 11.0 | 10.5 |\n"
                   "## abc1234 (/tmp/before), repeat 2\n| reference | amortized | 10.0 | 11.0 | 14.0 |\n"
                   "## def5678 (/work/main), repeat 2\n| reference | amortized | 10.0 | 11.0 | 11.5 |\n")
    done = run_python(BENCH / "summarize_interleaved.py", log)  # in this process, as python would run it
    assert done.returncode == 0, done.stderr
    assert "| reference | amortized | abc1234 | 2 | 13.00 | 1.300 |" in done.stdout
    assert "| reference | amortized | def5678 | 2 | 11.00 | 1.100 |" in done.stdout


@contextlib.contextmanager
def as_its_own_process(seconds=300):
    """A bench run in this process (run_python), given back what its own process kept to itself: the environment
    (builder_step.py sets OMP_NUM_THREADS), Pyro's validation (on in a new process; builder_step.py turns it off)
    and the global random streams (both benches seed them); and its process's time limit: a run past ``seconds``
    ends this process, its stacks on stderr, as the limit failed the test."""
    streams = pyro.util.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)
    try:
        with mock.patch.dict(os.environ), pyro.validation_enabled(True):
            yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        pyro.util.set_rng_state(streams)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def test_the_builder_step_bench_runs_at_the_smallest_sizes():
    """bench/builder_step.py end to end at toy sizes: both models, both guides equal at the start, one row each."""
    with as_its_own_process():
        done = run_python(BENCH / "builder_step.py", "--blocks", "2", "--steps", "2", "--warmup", "1", "--vocab", "30",
                          "--topics", "3", "--lda-hidden", "8", "--lda-batch", "4", "--x-dim", "12", "--hidden", "8",
                          "--z-dim", "3", "--batch", "4", "--batches", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith(("| prodlda |", "| vae |"))]
    assert len(rows) == 2, done.stdout


def test_the_graph_step_bench_runs_on_the_cpu_with_capture_skipped():
    """bench/graph_step.py end to end at the small configuration: each guide's eager row, the captured column
    saying it was skipped, and the eager fit line (a lent GPU runs it at the reference size: cuda_session.sh)."""
    # its own process ran at OMP_NUM_THREADS=1: the script reads only torch's thread count (for its header line),
    # one in a test worker already (conftest.py)
    with as_its_own_process():
        done = run_python(BENCH / "graph_step.py", "--device", "cpu", "--configs", "small", "--guides", "amortized",
                          "shared", "--rounds", "2", "--steps", "2", "--fit-epochs", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| small |")]
    assert len(rows) == 2 and all("skipped (no CUDA)" in row for row in rows), done.stdout
    assert "# fit small, 1 epochs (10 steps), eager:" in done.stdout
