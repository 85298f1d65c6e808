"""The committed tables that docs/results.md quotes are what their report step makes of committed files (issue 49,
item 6): each table whose first (or last) line names its command over folders under figures/ is made again by
that command into a temporary folder, and must be byte for byte the committed one (its command line aside, which
names the output folder). A number edited by hand in a table, or a report step that changed, fails here."""
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLES = ["figures/architectures/gaps.md", "figures/remedies/gaps.md", "figures/remedies/inference.md", "figures/sa-vi/gaps.md", "figures/quickstart/gaps.md",
          "figures/studies-end/original.md", "figures/studies-end/seeds12/original.md", "figures/capacity/capacity.md",
          "figures/informative/gaps/gaps.md", "figures/cvae-gap/gaps.md",
          "figures/held-out/held_out.md", "figures/plateau/plateau.md",
          "figures/beta/beta.md", "figures/converged/gaps.md", "figures/gap-vs-n/gaps.md"] + [
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


@pytest.mark.parametrize("table", TABLES)
def test_a_committed_table_is_made_again_from_committed_files(table, tmp_path):
    committed = (ROOT / table).read_text()
    args = shlex.split(command_of(committed))
    assert all(not a.startswith("runs/") for a in args), "reads files that are not committed"
    out = args.index("--out")
    args[out + 1] = str(tmp_path)
    done = subprocess.run([sys.executable, *args[1:]], cwd=ROOT, capture_output=True, text=True,
                          env={"MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PATH": "", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    made = (tmp_path / Path(table).name).read_text()
    assert without_command(made, tmp_path) == without_command(committed, ROOT / Path(table).parent)
