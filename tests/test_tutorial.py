"""docs/tutorial.ipynb runs from start to end (CI executes it, so its numbers cannot rot) and prints what it says."""
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]


def test_tutorial_runs():
    notebook = nbformat.read(ROOT / "docs" / "tutorial.ipynb", as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        "commit the tutorial without outputs: CI's run is the one that counts"
    # no wall-clock limit: a test must not fail because the machine is slow (the notebook is sized to be quick)
    nbclient.NotebookClient(notebook, timeout=None, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for out in cell.outputs)
    ratios = {(line[:29].strip(), line.split()[-4]): float(line.split()[-3]) for line in text.splitlines()
              if line.startswith(("studies' regime", "informative regime"))}  # train plug-in MSE ÷ mean image's
    assert len(ratios) == 6, text
    # what its last cell says: with the defaults no guide beats the mean image yet; in the informative regime
    # A-VI does, well, and constant-VI does not
    assert all(ratios["studies' regime (defaults)", family] >= 0.95 for family in ("amortized", "per-datapoint", "shared"))
    assert ratios["informative regime", "amortized"] < 0.6 and ratios["informative regime", "shared"] > 0.95, text
    assert "| coupling_gap |" in text and "IWAE − AIS" in text, text  # the three gaps, both estimators
