"""The package's layers: a module imports only modules of its own layer or lower ones (imports inside
functions too), and only the base modules and the package's face sit at the top (docs/architecture.md)."""
import ast
from pathlib import Path

import amortized_pyro

ROOT = Path(amortized_pyro.__file__).parent
LAYERS = ("support", "local", "autoguides", "models", "inference", "runs", "gap", "study", "report", "cli")  # lowest first
BASE = ("errors", "settings")  # under every layer
FACADE = ("__init__", "__main__")  # the package's face: gathers from any layer


def rank(module):
    """The layer of a module path inside the package (a tuple of names): −1 for the base, None if none."""
    if len(module) == 1 and module[0] in BASE:
        return -1
    return LAYERS.index(module[0]) if module and module[0] in LAYERS else None


def imports(path, root):
    """(line, module path inside the package) of every import of a package module, relative or absolute."""
    here = path.relative_to(root).with_suffix("").parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "amortized_pyro":
                    yield node.lineno, tuple(alias.name.split(".")[1:])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base, module = here[:len(here) - node.level + 1], tuple((node.module or "").split(".")) if node.module else ()
            elif (node.module or "").split(".")[0] == "amortized_pyro":
                base, module = (), tuple(node.module.split(".")[1:])
            else:
                continue
            if module:
                yield node.lineno, base + module
            else:  # from . import x, from amortized_pyro import x
                for alias in node.names:
                    yield node.lineno, base + (alias.name,)


def upward_imports(root):
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        module = parts[:-1] if parts[-1] == "__init__" else parts
        if module in {(), ("__main__",)}:
            continue
        mine = rank(module)
        for line, target in imports(path, root):
            theirs = rank(target)
            if mine is None or theirs is None or theirs > mine:
                found.append("%s:%d imports amortized_pyro.%s" % (path.relative_to(root), line, ".".join(target)))
    return found


def test_only_the_base_and_the_face_sit_at_the_top():
    assert {p.stem for p in ROOT.glob("*.py")} <= set(BASE + FACADE)
    assert {p.parent.name for p in ROOT.glob("*/__init__.py")} == set(LAYERS)


def test_no_module_imports_a_higher_layer():
    found = upward_imports(ROOT)
    assert not found, "against the layers (%s):\n%s" % (" < ".join(LAYERS), "\n".join(found))


def test_the_check_sees_an_upward_import(tmp_path):
    """The check itself: an import of a higher layer, relative or absolute, at the top or in a function, is found."""
    for layer in ("local", "report"):
        (tmp_path / layer).mkdir()
        (tmp_path / layer / "__init__.py").write_text("")
    (tmp_path / "report" / "tables.py").write_text("X = 1\n")
    (tmp_path / "local" / "fine.py").write_text("from amortized_pyro.errors import AmortizedPyroError\n")
    (tmp_path / "local" / "bad.py").write_text("from ..report import tables\n\n\ndef f():\n"
                                               "    from amortized_pyro.report.tables import X\n")
    assert upward_imports(tmp_path) == ["local/bad.py:1 imports amortized_pyro.report",
                                        "local/bad.py:5 imports amortized_pyro.report.tables"]
