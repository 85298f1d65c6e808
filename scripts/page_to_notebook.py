"""Make a docs page's notebook from the page: its ```python blocks become code cells, the text between
them markdown cells, so that the page and the notebook say the same and the test suite can execute both.

    python scripts/page_to_notebook.py docs/your-model.md        # writes docs/your-model.ipynb
"""
import argparse
import re
import sys
from pathlib import Path

import nbformat

FENCE = re.compile(r"^```python\n(.*?)^```\n", re.S | re.M)


def notebook_of(page):
    """The notebook (nbformat v4, without outputs) of a page's text."""
    cells, at = [], 0
    for match in FENCE.finditer(page):
        text = page[at:match.start()].strip()
        if text:
            cells.append(nbformat.v4.new_markdown_cell(text))
        cells.append(nbformat.v4.new_code_cell(match.group(1).rstrip("\n")))
        at = match.end()
    if page[at:].strip():
        cells.append(nbformat.v4.new_markdown_cell(page[at:].strip()))
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for number, cell in enumerate(notebook.cells):  # ids fixed by position: the same page gives the same file
        cell["id"] = "cell-%d" % number
    return notebook


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="a markdown page under docs/")
    page = parser.parse_args().page
    if not page.is_file():
        sys.exit("no such page: %s" % page)
    out = page.with_suffix(".ipynb")
    nbformat.write(notebook_of(page.read_text()), out)
    print("wrote %s" % out)


if __name__ == "__main__":
    main()
