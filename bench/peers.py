"""``python -m bench.peers``: catalog-lake's first ingest beside its peers, in one run (issue 29).

Issue 29 sets catalog-lake's speed against what a user would otherwise run on the
same feed, not against our own history. Each system loads the same synthetic
feed (``bench.synth``, 5% dirty items) into Delta tables in a fresh folder, in a
spawned process of its own (a new interpreter: imports and start-up count), and
is timed from the submit to the result (start-up and imports included), with the
process's peak RSS:

- **DuckDB** ``read_json`` -> Delta: the flat records in one SQL statement, no
  checks, one table (``bench.run.BASELINE_SQL``; it cannot read the file of items
  that repeat a key, so it leaves that file out). The baseline: every ratio is to it;
- **pandas** ``json_normalize`` -> Delta: the naive load. Each file is decoded
  with ``json``, the items flattened, and columns that Arrow cannot take as they
  are (a list where text is expected, mixed kinds) written as their text. No
  checks, one table;
- **catalog-lake** ``ingest``: every check, five tables, service ids. The
  console script's command as a user types it, so its start-up and exit
  count (before 2026-11-26 the row called the library's ``ingest``);
- **dlt** first load with ``write_disposition="merge"`` on ``client_item_id``
  to its filesystem destination as Delta tables: schema inference, a child table
  per list, no checks. A bench-only dependency (``pip install -e ".[bench]"``);
  without it the row says so.

Each row gives the process's wall time and its CPU time (user and system, every
thread: ``bench.run._in_child``). The wall time is what the user waits for; on a
shared machine it follows the other jobs, where the CPU time follows the work.

Each system runs ``rounds`` times, interleaved (DuckDB, pandas, catalog-lake,
dlt, then again), and the median is reported with the load average before and
after; ``--record`` appends the report to ``bench/results.md``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from . import synth
from .memory import emit
from .run import _baseline, _in_child, _peak_rss_mb, as_installed

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def _pandas_peer(feed: str, out: str) -> dict[str, Any]:
    """The naive load: ``json`` per file, ``pd.json_normalize``, one Delta table."""
    import pandas as pd
    import pyarrow as pa
    from deltalake import write_deltalake

    started = time.perf_counter()
    items = []
    for path in sorted(Path(feed).glob("*.json")):
        items += json.loads(path.read_text(encoding="utf-8"))["items"]
    frame = pd.json_normalize(items)
    columns = {}
    for name in frame.columns:
        try:
            columns[name] = pa.array(frame[name], from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed kinds: written as their text
            columns[name] = pa.array(
                [None if v is None or v != v else json.dumps(v) for v in frame[name]],
                pa.string(),
            )
    table = pa.table(columns)
    write_deltalake(out, table, mode="overwrite")
    return {"seconds": time.perf_counter() - started, "rows": table.num_rows,
            "rss_mb": _peak_rss_mb()}  # fmt: skip


def _dlt_peer(feed: str, out: str) -> dict[str, Any]:
    """The dlt peer: a first load, merged on ``client_item_id``, to Delta tables in a folder."""
    os.environ["RUNTIME__DLTHUB_TELEMETRY"] = "false"  # no network from a bench
    import dlt

    started = time.perf_counter()
    files = sorted(Path(feed).glob("*.json"))

    @dlt.resource(name="items", primary_key="client_item_id", table_format="delta",
                  write_disposition={"disposition": "merge", "strategy": "upsert"})  # fmt: skip
    def items():
        for path in files:
            yield json.loads(path.read_text(encoding="utf-8"))["items"]

    pipeline = dlt.pipeline(
        pipeline_name="peer",
        destination=dlt.destinations.filesystem(bucket_url=out),
        dataset_name="catalog",
        pipelines_dir=str(Path(out) / ".dlt"),
    )
    info = pipeline.run(items())
    if info.has_failed_jobs:
        raise RuntimeError(f"dlt failed: {info}")
    rows = pipeline.last_trace.last_normalize_info.row_counts.get("items", 0)
    return {"seconds": time.perf_counter() - started, "rows": rows, "rss_mb": _peak_rss_mb()}


def _catalog_lake(feed: str, out: str, src: str | None = None) -> dict[str, Any]:
    """``catalog-lake ingest`` as a user runs it: the console script, pushes of 1,000 items.

    Its ``main`` runs in this spawned process with the command line a user
    would type (``--json``, output kept for the row count), so what the
    console script does at start and at exit counts, as it does for a user.
    ``src``: another checkout's ``src`` folder, put first on the path (the
    before row of a before-and-after pair from one run).
    """
    import contextlib
    import io
    import sys

    if src is not None:
        sys.path.insert(0, src)
    from catalog_lake.cli import main

    if src is not None:
        assert Path(sys.modules["catalog_lake"].__file__ or "").is_relative_to(src)
    argv = ["catalog-lake", "ingest", feed, "--lake", out, "--batch-size", "1000",
            "--group-items", "20000", "--json"]  # fmt: skip
    printed, said = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said):
        sys.argv = argv
        try:
            main()
        except SystemExit as ended:  # 1 too: the bench's feed holds a file that is refused
            if ended.code not in (0, 1, None):
                why = f"catalog-lake ingest exited {ended.code}: {said.getvalue()}"
                raise RuntimeError(why) from None
    seconds = time.perf_counter() - started
    summary = json.loads(printed.getvalue())
    return {"seconds": seconds, "rows": summary["totals"]["success"], "rss_mb": _peak_rss_mb()}


PEERS = {
    "DuckDB read_json -> Delta (no checks, one table)": _baseline,
    "pandas json_normalize -> Delta (no checks, one table)": _pandas_peer,
    "catalog-lake ingest (checks, five tables, ids)": _catalog_lake,
    "dlt first load, merge (no checks, a table per list)": _dlt_peer,
}


def has_dlt() -> bool:
    """Whether the bench-only dlt peer can run here."""
    import importlib.util

    return importlib.util.find_spec("dlt") is not None


def run(
    items: int, rounds: int, folder: Path, before: Path | None = None
) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """Every peer ``rounds`` times over one feed, interleaved; the figures and the loads.

    ``before``: the ``src`` folder of another checkout, whose ingest runs as one
    more peer (a before-and-after pair from one run).
    """
    feed = folder / "feed"
    synth.write_feed(feed, items, dirty_fraction=0.05)
    as_installed(*([before] if before is not None else []))
    peers = {name: f for name, f in PEERS.items() if f is not _dlt_peer or has_dlt()}
    if before is not None:
        peers[f"catalog-lake ingest, before ({before})"] = functools.partial(
            _catalog_lake, src=str(before.resolve())
        )
    load_before = os.getloadavg()
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in peers}
    for number in range(rounds):
        for position, (name, function) in enumerate(peers.items()):
            out = folder / f"out-{number}-{position}"
            started = time.perf_counter()
            one = _in_child(function, str(feed), str(out))
            one["wall"] = time.perf_counter() - started  # the whole process, start-up included
            found[name].append(one)
            shutil.rmtree(out, ignore_errors=True)
    after = os.getloadavg()
    load = f"{load_before[0]:.2f} before, {after[0]:.2f} after (1-minute load average)"
    return found, load


@app.command()
def peers(
    items: Annotated[int, typer.Option(min=100, help="Items in the synthetic feed.")] = 100_000,
    rounds: Annotated[int, typer.Option(min=1, help="Runs of each system (median).")] = 3,
    before: Annotated[
        Path | None,
        typer.Option(help="The src folder of another checkout: its ingest runs too."),
    ] = None,
    record: Annotated[Path | None, typer.Option(help="Append the report to this file.")] = None,
) -> None:
    """Load one feed with DuckDB, pandas, catalog-lake and dlt; report medians against DuckDB."""
    with tempfile.TemporaryDirectory(prefix="catalog-lake-peers-") as folder:
        found, load = run(items, rounds, Path(folder), before)
    base = statistics.median(r["wall"] for r in next(iter(found.values())))
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    lines = [
        f"## First ingest beside its peers ({when} UTC)",
        "",
        f"{items:,} items (5% dirty), each system in a process of its own, median of "
        f"{rounds}; load {load}",
        "",
        "| system | wall s (median) | x DuckDB | CPU s (median) | rows written | peak RSS MB "
        "| runs s |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, runs in found.items():
        seconds = statistics.median(r["wall"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        each = ", ".join(f"{r['wall']:.2f}" for r in runs)
        lines.append(
            f"| {name} | {seconds:.2f} | {seconds / base:.2f} | {cpu:.2f} | {runs[0]['rows']:,} "
            f"| {max(r['rss_mb'] for r in runs):,.0f} | {each} |"
        )
    if not has_dlt():
        lines.append('| dlt | not installed (pip install -e ".[bench]") | | | | | |')
    lines.append("")
    emit("\n".join(lines), record)


if __name__ == "__main__":
    app()
