"""docs/layout.md lists every module of the package, and no module that is not there (both ways), so that the
page cannot drift from the tree."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def listed():
    """folder (relative to amortized_pyro/, "" for the package itself) → the module names the page gives it."""
    text = (ROOT / "docs" / "layout.md").read_text()
    block = text.split("```\n")[1]
    found, folder = {}, None
    for line in block.splitlines():
        head = re.match(r"(\s*)([a-z_]+)/\s", line)
        if head:
            folder = "" if head.group(2) == "amortized_pyro" else head.group(2)
        found.setdefault(folder, set()).update(re.findall(r"\b([a-z_]+\.py)\b", line))
    return found


def test_layout_lists_every_module_and_only_those():
    found = listed()
    package = ROOT / "amortized_pyro"
    tree = {"": {p.name for p in package.glob("*.py") if p.name != "__init__.py"}}
    for folder in package.iterdir():
        if folder.is_dir() and (folder / "__init__.py").exists():
            tree[folder.name] = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
    assert found == tree
