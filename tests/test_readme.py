"""The README's Python examples run as written against a lake made from data/feeds."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from catalog_lake import Catalog

#: Prices, windows and ages follow the clock: `make test` runs these a year ahead too.
pytestmark = pytest.mark.clock

ROOT = Path(__file__).parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
# The library overview first, then reading the tables from pandas, DuckDB and Polars.
LIBRARY, *EXAMPLES = BLOCKS


@pytest.fixture
def lake_here(tmp_path, monkeypatch):
    import shutil

    catalog = Catalog(tmp_path / "lake")
    for feed in sorted((ROOT / "data" / "feeds").glob("*.json")):
        catalog.push(feed.read_bytes())
    shutil.copytree(ROOT / "data", tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    return catalog


def test_readme_has_library_pandas_duckdb_and_polars_examples():
    assert "catalog.push(product_object)" in LIBRARY
    assert len(EXAMPLES) == 3
    assert "Catalog(" in EXAMPLES[0]
    assert "import duckdb" in EXAMPLES[1]
    assert "import polars" in EXAMPLES[2]


def test_the_readme_library_overview_runs_as_written_on_any_date(lake_here):
    namespace: dict = {}
    exec(compile(LIBRARY, "README library overview", "exec"), namespace)
    assert namespace["response"]["catalog_push_failed_product_count"] == "0"
    assert len(namespace["summary"]["files"]["ingested"]) == 7
    assert [len(r["items"]) for r in namespace["responses"]] == [2, 2]


def test_the_query_records_docstring_examples_run(lake_here):
    examples = re.findall(r'``"(.+?)"``', Catalog.query_records.__doc__)
    assert len(examples) == 3
    for where in examples:
        lake_here.query_records(where=where)


@pytest.mark.parametrize("index", range(3))
def test_readme_example_runs(lake_here, index, capsys):
    namespace: dict = {}
    exec(compile(EXAMPLES[index], f"README example {index}", "exec"), namespace)
    if index == 0:
        assert namespace["on_sale"]["client_item_id"].iloc[0] == "FASH-TEE-BLK-M"
        assert len(namespace["items"]) == 14
    if index == 1:
        out = capsys.readouterr().out
        assert "in-stock" in out
        assert "BEAU-LIP-RED" in out and "Red" in out  # a string attribute read from the map
    if index == 2:
        names = set(namespace["cheap_veg"]["product_name"].to_list())
        assert names == {"Paneer Tikka", "Aashirvaad Whole Wheat Atta 5 kg", "Toor Dal 1 kg"}


# --- the README's shell sessions, run as written ------------------------------------

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
VARYING = [
    (UUID, "<uuid>"),
    (re.compile(r"\(\d[\d,]* items/s\)"), "(<n> items/s)"),  # progress lines
    (re.compile(r"\| [\d.]+ \| (?:[\d.]+|-) \|$", re.M), "| <seconds> | <rate> |"),  # summary row
    (re.compile(r'"duration_s": [\d.]+'), '"duration_s": <seconds>'),
    (re.compile(r"\(\d+(?:\.\d+)? ms\)"), "(<n> ms)"),  # a search's time
]


def _normalized(text: str) -> str:
    for pattern, replacement in VARYING:
        text = pattern.sub(replacement, text)
    return text


#: The documents whose console sessions run as written: the README and every page of docs/.
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _sessions() -> list[list[tuple[str, str]]]:
    """Console blocks made only of catalog-lake commands: [(command, expected output)]."""
    sessions = []
    blocks = [b for doc in DOCUMENTS for b in re.findall(r"```console\n(.*?)```", doc.read_text(),
                                                          re.S)]  # fmt: skip
    for block in blocks:
        steps: list[tuple[str, list[str]]] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
        if steps and all(command.startswith("catalog-lake ") for command, _ in steps):
            sessions.append([(command, "\n".join(lines)) for command, lines in steps])
    return sessions


def _matches(expected: str, actual: str) -> bool:
    """``actual`` is ``expected``, where a line ``...`` stands for any lines."""
    if expected == "...":
        return True
    parts = [re.escape(part) for part in _normalized(expected).split("\n...\n")]
    pattern = r"(?:.*\n)*?".join(
        p if i == len(parts) - 1 else p + r"\n" for i, p in enumerate(parts)
    )
    if expected.endswith("\n..."):
        pattern = pattern.removesuffix(re.escape("\n...")) + r"(?:\n.*)*"
    return re.fullmatch(pattern, _normalized(actual).rstrip("\n")) is not None


def test_the_readme_has_shell_sessions_to_check():
    assert len(_sessions()) >= 1
    assert sum(len(session) for session in _sessions()) >= 6


def test_the_readme_stays_a_readme():
    """Reference belongs in docs/ (issue 44): the README is a quick start, sessions, links."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 400


def test_every_command_and_option_is_documented():
    """As sqlite-utils' test_docs: a command or option missing from the docs fails here."""
    import typer.main

    from catalog_lake.cli import app

    text = "\n".join(doc.read_text() for doc in DOCUMENTS)
    group = typer.main.get_command(app)
    assert len(group.commands) >= 17
    missing = [o for p in group.params for o in p.opts if o.startswith("--") and o not in text]
    for name, command in group.commands.items():
        if f"`{name}" not in text:
            missing.append(name)
        missing += [f"{name} {option}" for param in command.params for option in param.opts
                    if option.startswith("--") and option not in text]  # fmt: skip
    assert missing == []


@pytest.mark.parametrize("number", range(len(_sessions())))
def test_readme_shell_session_prints_what_it_shows(tmp_path, number):
    import os
    import shlex
    import shutil
    import subprocess
    import sys

    shutil.copytree(ROOT / "data", tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if k != "CATALOG_LAKE_URI"}
    binary = str(Path(sys.executable).parent / "catalog-lake")
    for command, expected in _sessions()[number]:
        arguments = shlex.split(command)
        done = subprocess.run(
            [binary, *arguments[1:]],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
        # The sessions run in /home/me/shop, as the README shows where a path is printed.
        shown = done.stdout.replace(str(tmp_path), "/home/me/shop")
        assert _matches(expected, shown), f"$ {command}\n{shown}"


# --- the code's pointers into the documents lead somewhere ------------------------------

POINTER = re.compile(r'\((README|docs/[\w-]+\.md)((?:,?\s+(?:and\s+)?"[^"]+")+)\)')


def _pointers() -> list[tuple[str, str, str]]:
    found = []
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "flows").glob("*.py")]:
        for document, names in POINTER.findall(path.read_text()):
            for name in re.findall(r'"([^"]+)"', names):
                name = " ".join(name.split())  # a docstring may break it across lines
                found.append((path.relative_to(ROOT).as_posix(), document, name))
    return found


def test_every_section_the_code_points_to_is_a_heading_of_that_document():
    pointers = _pointers()
    assert len(pointers) > 10
    for source, document, name in pointers:
        file = ROOT / ("README.md" if document == "README" else document)
        headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
        assert any(h == name or h.startswith(f"{name} (") for h in headings), (
            f"{source} points to {document}, {name!r}: no such heading"
        )


# --- docs/service.md's session, against a real server -------------------------------------


def _service_session() -> list[tuple[str, str]]:
    """docs/service.md's first console block: [(command, expected output)]."""
    text = (ROOT / "docs" / "service.md").read_text()
    block = re.search(r"```console\n(.*?)```", text, re.S).group(1)
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return [(command, "\n".join(lines)) for command, lines in steps]


def test_the_service_pages_session_answers_what_it_shows(tmp_path):
    """Each step in bash, as a user types it: the key in $KEY, the server in the background."""
    import os
    import shutil
    import subprocess
    import sys
    import urllib.request

    from tests.servers import _free_ports, _stop

    shutil.copytree(ROOT / "data", tmp_path / "data")
    (port,) = _free_ports(1)
    env = {k: v for k, v in os.environ.items() if k != "CATALOG_LAKE_URI"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    server = None
    try:
        for command, expected in _service_session():
            command = command.replace("8080", str(port))
            if command.startswith("KEY=$("):
                inner = command.removeprefix("KEY=$(").removesuffix(")")
                made = subprocess.run(["bash", "-c", inner], cwd=tmp_path, env=env,
                                      capture_output=True, text=True, timeout=120)  # fmt: skip
                assert made.returncode == 0, made.stderr
                env["KEY"] = made.stdout.strip()
                assert _matches(expected, made.stderr), f"$ {command}\n{made.stderr}"
            elif command.endswith(" &"):
                server = subprocess.Popen(["bash", "-c", f"exec {command.removesuffix(' &')}"],
                                          cwd=tmp_path, env=env, stderr=subprocess.PIPE,
                                          text=True)  # fmt: skip
                shown = server.stderr.readline()
                shown = shown.replace(f":{port}", ":8080")
                assert _matches(expected, shown), shown
                for _ in range(300):
                    try:
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)  # noqa: S310
                        break
                    except OSError:
                        time.sleep(0.1)
            else:
                done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, timeout=120)  # fmt: skip
                shown = done.stdout.replace(f":{port}", ":8080")
                assert _matches(expected, shown), f"$ {command}\n{shown}"
    finally:
        if server is not None:
            _stop(server, grace=15)
            server.stderr.close()
