"""``python -m bench.memory``: peak memory of one large feed file, in both shapes (issue 26).

An ingest parses and writes a file a group at a time (``sources.FileBatches``),
so its peak should follow ``group_items`` and the file's bytes, not its items.
Each run is a fresh process: one JSON Lines file and one product-object
``.json`` of the same tiny items, each ingested by catalog-lake and read by
DuckDB (the baseline, in the same run). Reported as MB and as a ratio to the
baseline, with the load average; appended to ``bench/results.md`` with
``--record``.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def _tiny(number: int) -> str:
    return json.dumps(
        {
            "client_item_id": f"tiny-{number:08d}",
            "name": "t",
            "pricing_info": {"mrp": "10.00", "sale_price": "9.00"},
        }
    )


def write_feeds(folder: Path, items: int) -> dict[str, Path]:
    """The same tiny items as JSON Lines and as one product object."""
    lines, whole = folder / "tiny.jsonl", folder / "tiny.json"
    with lines.open("w") as jsonl, whole.open("w") as product:
        product.write('{"items":[')
        for number in range(items):
            text = _tiny(number)
            jsonl.write(text + "\n")
            product.write(("," if number else "") + text)
        product.write("]}")
    return {"jsonl": lines, "json": whole}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _ingest(path: str, lake: str, group_items: int) -> dict[str, float]:
    from catalog_lake.catalog import Catalog
    from catalog_lake.feeds import ingest

    started = time.perf_counter()
    summary = ingest(Catalog(lake), path, group_items=group_items)
    return {
        "seconds": time.perf_counter() - started,
        "received": summary["totals"]["received"],
        "rss_mb": _peak_mb(),
    }


def _baseline(path: str, shape: str) -> dict[str, float]:
    import duckdb

    started = time.perf_counter()
    reader = "read_ndjson_auto" if shape == "jsonl" else "read_json_auto"
    unnest = "" if shape == "jsonl" else "SELECT unnest(items, recursive := true) FROM "
    sql = f"{unnest}{reader}('{path}', maximum_object_size=536870912)"
    rows = duckdb.connect().sql(f"SELECT count(*) FROM ({sql})").fetchall()[0][0]
    return {"seconds": time.perf_counter() - started, "received": rows, "rss_mb": _peak_mb()}


def _fresh(function, *args) -> dict[str, float]:
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


@app.command()
def memory(
    items: Annotated[int, typer.Option(help="Tiny items in each file.")] = 1_000_000,
    group_items: Annotated[int, typer.Option(help="Items written per commit.")] = 20_000,
    record: Annotated[Path | None, typer.Option(help="Append the report to this file.")] = None,
) -> None:
    """Peak memory of ingesting one large file of each shape, against DuckDB reading it."""
    with tempfile.TemporaryDirectory(prefix="catalog-lake-memory-") as folder:
        feeds = write_feeds(Path(folder), items)
        lines = [
            f"## Memory of one large file ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)",
            "",
            f"{items:,} tiny items per file, group_items {group_items:,}; "
            f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
            "",
            "| file | MB | DuckDB peak MB | catalog-lake peak MB | ratio | seconds (ours) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for shape, path in feeds.items():
            base = _fresh(_baseline, str(path), shape)
            ours = _fresh(_ingest, str(path), f"{folder}/lake-{shape}", group_items)
            size = path.stat().st_size / 1e6
            lines.append(
                f"| {path.name} | {size:,.0f} | {base['rss_mb']:,.0f} | {ours['rss_mb']:,.0f} | "
                f"{ours['rss_mb'] / base['rss_mb']:.2f}x | {ours['seconds']:.1f} |"
            )
        lines += ["", f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", ""]
    emit("\n".join(lines), record)


def emit(text: str, record: Path | None) -> None:
    """Print a report, and append it to ``record`` (``bench/results.md``) when given."""
    print(text)
    if record is not None:
        with record.open("a") as out:
            out.write("\n" + text)


if __name__ == "__main__":
    app()
