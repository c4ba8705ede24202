"""The house holds its shape: one storage room for Delta, no circles, modules of one idea.

Each test reads the source as text; none imports the package, so a failure
names the line to change rather than an import error.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "catalog_lake"
MODULES = sorted(PACKAGE.rglob("*.py"))
#: The storage room: the only code that talks to Delta Lake.
STORAGE = PACKAGE / "lake"
#: A module past this many lines is probably two (``../shared/STYLE.md``).
MAX_LINES = 700
#: What only the storage room does: open a Delta table or its log, call a Delta table's
#: methods, write a data file.
DELTA_ONLY = re.compile(
    r"\b(DeltaTable|write_deltalake|scan_delta|_delta_log|get_add_actions|file_uris"
    r"|transaction_version|create_write_transaction|update_incremental|pq\.write_table"
    r"|ParquetWriter)\b|\.delta\("
)


def name_of(path: Path) -> str:
    """A module's dotted name under the package (``lake.tables``; a package by its folder)."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {name_of(p) for p in MODULES}


def imported(path: Path) -> set[str]:
    """The package's modules that ``path`` imports, at any depth of its code."""
    here = name_of(path).split(".") if path.name == "__init__.py" else name_of(path).split(".")[:-1]
    if path.name == "__init__.py" and here == [""]:
        here = []
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
            target = [*base, *(node.module.split(".") if node.module else [])]
            candidates = [".".join(target)] if node.module else []
            candidates += [".".join([*target, alias.name]) for alias in node.names]
            found.update(c for c in candidates if c in NAMES)
    return found


def test_only_the_storage_room_imports_deltalake():
    importers = [
        str(p.relative_to(PACKAGE))
        for p in MODULES
        if re.search(r"^\s*(from|import) deltalake\b", p.read_text(), re.M)
    ]
    assert importers and all(name.startswith("lake/") for name in importers), importers


@pytest.mark.parametrize(
    "path", [p for p in MODULES if STORAGE not in p.parents], ids=lambda p: p.name
)
def test_no_module_outside_the_storage_room_opens_a_log_writes_a_file_or_calls_a_table(path):
    lines = [
        f"{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if DELTA_ONLY.search(line) and not line.lstrip().startswith(("#", '"', "``"))
    ]
    assert lines == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_700_lines(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


def test_no_module_is_squeezed_under_the_limit():
    """A module meets the limit by holding one idea, never by skipping the formatter."""
    squeezed = [
        f"{p.relative_to(PACKAGE)}:{n}"
        for p in MODULES
        for n, line in enumerate(p.read_text().splitlines(), start=1)
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert squeezed == []
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", str(PACKAGE)],
        capture_output=True,
        text=True,
    )
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr


def test_the_imports_between_modules_make_no_circle():
    graph = {name_of(p): imported(p) - {name_of(p)} for p in MODULES if name_of(p)}
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
    unnamed = [
        str(p.relative_to(PACKAGE))
        for p in MODULES
        if p.name != "__init__.py" and f"`{p.relative_to(PACKAGE)}`" not in design
    ]
    assert unnamed == []
