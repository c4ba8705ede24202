"""The house holds its shape (issue 44): one door to Delta, no circles, modules of one idea.

Each test reads the source as text; none imports the package, so a failure
names the line to change rather than an import error.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "catalog_lake"
MODULES = sorted(PACKAGE.glob("*.py"))
#: A module past this many lines is probably two (``../shared/STYLE.md``).
MAX_LINES = 700


def imported(path: Path) -> set[str]:
    """The package's modules that ``path`` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found & {p.stem for p in MODULES}


def test_only_lake_py_imports_deltalake():
    importers = [
        p.name for p in MODULES if re.search(r"^\s*(from|import) deltalake\b", p.read_text(), re.M)
    ]
    assert importers == ["lake.py"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_module_is_over_700_lines(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


def test_the_imports_between_modules_make_no_circle():
    graph = {p.stem: imported(p) - {p.stem} for p in MODULES if p.stem != "__init__"}
    done: set[str] = set()

    def walk(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, " -> ".join([*path, module])
        if module in done:
            return
        for other in sorted(graph.get(module, ())):
            walk(other, (*path, module))
        done.add(module)

    for module in sorted(graph):
        walk(module, ())


def test_every_module_has_a_row_in_the_design_notes():
    """``docs/design.md`` says what each module owns; a new module gets its row there too."""
    design = (ROOT / "docs" / "design.md").read_text()
    unnamed = [p.name for p in MODULES if p.name != "__init__.py" and f"`{p.name}`" not in design]
    assert unnamed == []
