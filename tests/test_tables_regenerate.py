"""The committed tables that docs/results.md quotes are what their report step makes of committed files (issue 49,
item 6): each table whose first (or last) line names its command over folders under figures/ is made again by
that command into a temporary folder, and must be byte for byte the committed one (its command line aside, which
names the output folder). A number edited by hand in a table, or a report step that changed, fails here. The
command runs in this process (``runpy``, as ``python`` would run it: its arguments, its folder on the path, the
repository as the working folder): 39 interpreters' start-up and imports cost 140 s of the suite (issue 60, item 6).
The figures a command makes beside its table are built but not laid out and rasterized (an empty file stands for
each PNG): no test reads them here, and laying out and writing them cost two thirds of this file's time; what the
figures show is read where they are tested (test_compare.py, test_experiment_figures.py, ...)."""
import os
import re
import runpy
import shlex
import sys
from pathlib import Path

import matplotlib
import pytest
import torch

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from amortized_pyro.cli.common import THREADS_ENV  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TABLES = ["figures/architectures/gaps.md", "figures/remedies/gaps.md", "figures/remedies/inference.md", "figures/sa-vi/gaps.md", "figures/quickstart/gaps.md",
          "figures/studies-end/original.md", "figures/studies-end/seeds12/original.md", "figures/capacity/capacity.md",
          "figures/informative/gaps/gaps.md", "figures/cvae-gap/gaps.md",
          "figures/held-out/held_out.md", "figures/plateau/plateau.md",
          "figures/beta/beta.md", "figures/converged/gaps.md", "figures/gap-vs-n/gaps.md",
          "figures/cvae-accuracy/accuracy.md", "figures/diagnose/ranking.md", "figures/diagnose/partial.md"] + [
              "figures/%s/summary.md" % study for study in (
              "gap-vs-n/n1000", "gap-vs-n/n2500", "gap-vs-n/n8000", "offline", "offline-long", "seed-study-cpu",
              "seed-long-study-cpu", "original-study-cpu", "original-long-study-cpu", "informative", "informative-ablation/preset", "informative-ablation/obs1",
              "informative-ablation/init-e-2", "informative-ablation/obs1-init-e-2", "informative-ablation/lr1e-3",
              "sa-vi/sa-vi-5", "sa-vi/sa-vi-5-unrolled", "sa-vi/sa-vi-20")] + [
              "figures/studies-end/cuda/end-seed-%s/summary.md" % run for run in (
              "reference-amortized", "elbo-amortized", "reference-per-datapoint", "elbo-per-datapoint",
              "reference-shared", "elbo-shared")]


def command_of(text):
    """The ``Command: python experiments/...`` (or ``python -m amortized_pyro plot``) line of a table (first line,
    or the last, in backquotes)."""
    for line in text.splitlines():
        found = re.match(r"Command: `?(python (?:experiments/\S+\.py|-m amortized_pyro plot) .*?)`?( \(\d+ \w+\))?$",
                         line.strip())
        if found:
            return found.group(1)
    raise AssertionError("no Command: line")


def without_command(text, out):
    return "\n".join(line for line in text.splitlines() if not line.startswith("Command:")).replace(str(out), "OUT")


def placeholder_png(fig, where, *args, **kwargs):
    """Figure.savefig here: an empty file where the PNG would be (the figure built, not laid out or drawn)."""
    if isinstance(where, (str, os.PathLike)):
        Path(where).touch()


def run_as_python_would(args, monkeypatch):
    """``python experiments/X.py ...`` or ``python -m amortized_pyro ...`` (``args`` after ``python``) run in this
    process from the repository's root; a non-zero exit fails."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.setattr(Figure, "tight_layout", lambda fig, *args, **kwargs: None)  # figures: not read here
    monkeypatch.setattr(Figure, "savefig", placeholder_png)
    threads = torch.get_num_threads()  # the CLI sets torch's threads (--threads): given back after
    if args[0] == "-m":
        monkeypatch.setattr(sys, "argv", [args[1], *args[2:]])
        run = lambda: runpy.run_module(args[1], run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        monkeypatch.setattr(sys, "argv", list(args))
        monkeypatch.syspath_prepend(str(ROOT / Path(args[0]).parent))
        run = lambda: runpy.run_path(str(ROOT / args[0]), run_name="__main__")  # noqa: E731
    try:
        run()
    except SystemExit as exit:
        assert exit.code in (None, 0), exit.code
    finally:
        plt.close("all")
        torch.set_num_threads(threads)


@pytest.mark.parametrize("table", TABLES)
def test_a_committed_table_is_made_again_from_committed_files(table, tmp_path, monkeypatch):
    committed = (ROOT / table).read_text()
    args = shlex.split(command_of(committed))
    assert all(not a.startswith("runs/") for a in args), "reads files that are not committed"
    out = args.index("--out")
    args[out + 1] = str(tmp_path)
    run_as_python_would(args[1:], monkeypatch)
    made = (tmp_path / Path(table).name).read_text()
    assert without_command(made, tmp_path) == without_command(committed, ROOT / Path(table).parent)
