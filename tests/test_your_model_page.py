"""docs/your-model.md (the page) and docs/your-model.ipynb (made from it): the notebook is the page's, it runs
from start to end, and what it prints agrees with the closed forms of its linear-Gaussian model."""
import re
import runpy
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "your-model.md"


def table(text, header):
    """The rows {first cell: [the other cells]} of the printed markdown table under ``header``."""
    lines = text.splitlines()
    start = lines.index(header) + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def numbers(cell):
    return [float(v) for v in re.findall(r"-?\d+\.\d+", cell)]


def test_notebook_is_the_page():
    notebook_of = runpy.run_path(str(ROOT / "scripts" / "page_to_notebook.py"))["notebook_of"]
    committed = nbformat.read(ROOT / "docs" / "your-model.ipynb", as_version=4)
    made = notebook_of(PAGE.read_text())
    assert [(c.cell_type, c.source) for c in committed.cells] == [(c.cell_type, c.source) for c in made.cells], \
        "docs/your-model.ipynb is stale: python scripts/page_to_notebook.py docs/your-model.md"
    assert not any(cell.get("outputs") for cell in committed.cells if cell.cell_type == "code")


def test_page_runs_and_agrees_with_closed_forms():
    notebook = nbformat.read(ROOT / "docs" / "your-model.ipynb", as_version=4)
    nbclient.NotebookClient(notebook, timeout=None, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs)
    rows = {name: numbers(cells[0])[:1] + numbers(cells[1]) for name, cells in
            table(text, "| quantity | measured (± s.e. over datapoints) | closed form |").items()}
    measured, exact = {k: v[0] for k, v in rows.items()}, {k: v[1] for k, v in rows.items()}
    assert exact["approximation_gap"] > 0.3  # a model where the mean-field family costs something
    # what the page says to expect (stated tolerances; test_autoguide_gap.py derives them from standard errors)
    assert abs(measured["log_px_ais"] - exact["log_px"]) < 0.05, text
    assert measured["log_px"] < exact["log_px"] + 0.02, text  # IWAE: a lower bound
    assert abs(measured["amortization_gap"] - exact["amortization_gap"]) < 0.05, text
    assert "coupling gap: None" in text and "coupling_gap" not in rows, text  # no global latent: no coupling term
    assert 0.5 * exact["approximation_gap"] < measured["approximation_gap"] < exact["approximation_gap"] + 0.05, text
    vae = table(text, "| images | amortization gap | approximation gap | log p(x) (IWAE) |")
    assert set(vae) == {"train", "test"} and all(numbers(cells[0])[0] > 0 for cells in vae.values()), text
