"""``python -m bench.export``: a full export of the records, against Polars doing the same.

The lake is built from the synthetic feed (``bench.synth``), then every record
is written as JSON Lines twice, in the same run: by ``Catalog.export`` (the
``jsonl`` format, and Elasticsearch's ``_bulk``), and by the baseline, Polars
reading the Delta table and writing it with ``write_ndjson``. Reported as
seconds and as a ratio to the baseline, with the load average; appended to
``bench/results.md`` with ``--record``.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from . import synth
from .memory import emit

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def _baseline(lake: str, out: Path) -> float:
    import polars as pl

    started = time.perf_counter()
    pl.read_delta(f"{lake}/records").drop("id_block").write_ndjson(out)
    return time.perf_counter() - started


def _ours(lake: str, out: Path, fmt: str) -> float:
    from catalog_lake.catalog import Catalog

    started = time.perf_counter()
    with out.open("w", encoding="utf-8") as handle:
        Catalog(lake).export(fmt, handle)
    return time.perf_counter() - started


@app.command()
def export(
    items: Annotated[int, typer.Option(help="Records in the lake.")] = 1_000_000,
    record: Annotated[Path | None, typer.Option(help="Append the report to this file.")] = None,
) -> None:
    """Time a full export of ``items`` records against Polars writing the same JSON Lines."""
    from catalog_lake.catalog import Catalog
    from catalog_lake.feeds import ingest

    with tempfile.TemporaryDirectory(prefix="catalog-lake-export-") as folder:
        feed, lake = Path(folder) / "feed", f"{folder}/lake"
        synth.write_feed(feed, items, dirty_fraction=0.0)
        ingest(Catalog(lake), feed, group_items=50_000)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        base = _baseline(lake, Path(folder) / "base.jsonl")
        rows = {
            fmt: _ours(lake, Path(folder) / f"{fmt}.jsonl", fmt)
            for fmt in ("jsonl", "elasticsearch")
        }
        size = (Path(folder) / "jsonl.jsonl").stat().st_size / 1e6
        lines = [
            f"## Full export of the records ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)",
            "",
            f"{items:,} records, {size:,.0f} MB of JSON Lines; load average {load}",
            "",
            "| writer | seconds | ratio |",
            "|---|---:|---:|",
            f"| Polars `read_delta` + `write_ndjson` (baseline) | {base:.2f} | 1.00x |",
            *(
                f"| `catalog-lake export --format {fmt}` | {s:.2f} | {s / base:.2f}x |"
                for fmt, s in rows.items()
            ),
            "",
        ]
    emit("\n".join(lines), record)


if __name__ == "__main__":
    app()
