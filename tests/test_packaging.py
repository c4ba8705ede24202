"""A wheel built from the project works outside the checkout: the synonym list ships inside it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_a_wheel_runs_an_ingest_away_from_the_checkout(tmp_path):
    # A clean copy of the sources: a build folder left in the checkout must not leak in.
    source = tmp_path / "source"
    skipped = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__")

    def ignore(folder: str, names: list[str]) -> set[str]:
        # The default lake folder at the root, never the package's ``lake`` subpackage.
        return set(skipped(folder, names)) | ({"lake"} if Path(folder) == ROOT else set())

    shutil.copytree(ROOT, source, ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("catalog_lake-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "catalog_lake/synonyms.txt" in names
    assert not any(
        name.startswith(("bench/", "catalog_lake/bench", "catalog_lake/synth")) for name in names
    )

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    feed = elsewhere / "feed.json"
    feed.write_text((ROOT / "data" / "feeds" / "grocery.json").read_text())
    script = (
        "import catalog_lake, json\n"
        "from catalog_lake.feeds import ingest\n"
        "assert 'site' in catalog_lake.__file__, catalog_lake.__file__\n"
        "catalog = catalog_lake.Catalog('lake')\n"
        "summary = ingest(catalog, 'feed.json')\n"
        "print(json.dumps(catalog.records()['synonyms'].map(list).tolist()))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script],
        cwd=elsewhere,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    synonyms = json.loads(ran.stdout)
    assert any(synonyms), synonyms  # the packaged list was found and used


def test_the_command_line_starts_without_the_libraries_only_some_commands_need():
    """pandera (0.15-0.25 s to import) and sqlglot load when a push is checked or a
    filter read, not for ``catalog-lake --help``, ``search`` or ``status``."""
    code = "import sys, catalog_lake.cli; print(sorted({'pandera', 'sqlglot'} & set(sys.modules)))"
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == "[]"


def test_the_command_line_exits_without_collecting_what_the_libraries_made_at_import(tmp_path):
    """The interpreter's exit collections walk every object alive (0.2-0.3 s after an
    ingest); the console script freezes them before its command runs and once it is done,
    whether it succeeded or failed. The library never does: a long-lived caller keeps its collector."""
    code = (
        "import atexit, gc, sys\n"
        "from catalog_lake.cli import main\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
        "main()\n"
    )
    lake = str(tmp_path / "lake")
    for argv, code_expected in ((["--help"], 0), (["ingest", "/nowhere", "--lake", lake], 1)):
        ran = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=tmp_path
        )
        assert ran.returncode == code_expected, ran.stderr
        frozen = int(ran.stderr.rsplit("frozen ", 1)[1])
        assert frozen > 10_000  # pandas, Polars and pyarrow alone make that many
    # Frozen before the command runs as well: its collections walk what it made.
    during = (
        "import gc, sys\n"
        "from catalog_lake import cli\n"
        "cli.app = lambda: print('during', gc.get_freeze_count(), file=sys.stderr)\n"
        "cli.main()\n"
    )
    ran = subprocess.run([sys.executable, "-c", during], capture_output=True, text=True)
    assert int(ran.stderr.rsplit("during ", 1)[1]) > 10_000, ran.stderr
    library = "import gc, catalog_lake.catalog; print(gc.get_freeze_count())"
    kept = subprocess.run([sys.executable, "-c", library], capture_output=True, text=True)
    assert kept.stdout.strip() == "0"


def test_polars_keeps_freed_memory_for_the_next_group_unless_the_caller_chose():
    """Polars appends ``_RJEM_MALLOC_CONF`` to its own allocator settings (half a second
    before freed memory goes back); importing the package sets 3 s first, so
    it is the setting that counts, and a caller's own value is left as it is."""
    from catalog_lake.settings import POLARS_MALLOC_CONF

    code = "import os, catalog_lake, polars; print(os.environ['_RJEM_MALLOC_CONF'])"
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    ours = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert ours.stdout.strip().endswith("," + POLARS_MALLOC_CONF), ours.stderr
    theirs = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "_RJEM_MALLOC_CONF": "dirty_decay_ms:0"},
        capture_output=True,
        text=True,
    )
    assert theirs.stdout.strip().endswith(",dirty_decay_ms:0"), theirs.stderr
    assert POLARS_MALLOC_CONF not in theirs.stdout


def test_the_installed_package_alone_excludes_the_sqlalchemy_that_stops_the_scheduler():
    """Prefect 3.8.8's scheduler creates no run on SQLAlchemy 2.1 ("Can't evaluate bulk DML
    statement"). ``pip install catalog-lake`` without constraints.txt must not bring it:
    the package's own requirements exclude it, and allow the version constraints.txt pins."""
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement

    wanted = [Requirement(r) for r in requires("catalog-lake") or []]
    (sqlalchemy,) = [r for r in wanted if r.name.lower() == "sqlalchemy" and r.marker is None]
    for broken in ("2.1.0", "2.1.9", "2.2.0"):
        assert not sqlalchemy.specifier.contains(broken), broken
    pinned = next(
        line.split("==")[1].strip()
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.lower().startswith("sqlalchemy==")
    )
    assert sqlalchemy.specifier.contains(pinned)
    assert sqlalchemy.specifier.contains(version("sqlalchemy"))
