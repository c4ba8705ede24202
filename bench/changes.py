"""``python -m bench.changes``: the change feed of a small push, against a full export.

A lake of ``--items`` records is built from the synthetic feed (``bench.synth``).
Then, ``--rounds`` times each, a push of ``--push`` items lands and its changes
are exported (``Catalog.changes`` + ``write_changes``, JSON Lines):

- ``new``: items the lake never had (they land in the newest id block);
- ``updates``: new prices for items 50 ids apart (a 1,000-item push touches 25
  id blocks of 2,048 ids);
- ``scattered``: new prices for items drawn from the whole lake (a 1,000-item
  push into a million records touches most of its 489 blocks);
- ``unchanged``: the same items again (a change feed of nothing).

The baseline, in the same run: a full export of the lake (``Catalog.export``),
which is what a search index would need without a change feed. Reported as p50
and p95 seconds and as ratios to the baseline, with the load average; appended
to ``bench/results.md`` with ``--record``.
"""

from __future__ import annotations

import io
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from . import synth
from .memory import emit

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def changes(
    items: Annotated[int, typer.Option(help="Records in the lake.")] = 1_000_000,
    push: Annotated[int, typer.Option(help="Items per push.")] = 1_000,
    rounds: Annotated[int, typer.Option(help="Pushes timed per scenario.")] = 9,
    record: Annotated[Path | None, typer.Option(help="Append the report to this file.")] = None,
) -> None:
    """Time the changes of ``push``-item pushes into an ``items``-record lake."""
    from catalog_lake.catalog import Catalog
    from catalog_lake.changes import write_changes

    rng = random.Random(27)
    with tempfile.TemporaryDirectory(prefix="catalog-lake-changes-") as folder:
        lake = synth.lake(folder, items)
        catalog = Catalog(lake)
        catalog.lake.checkpoint()
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())

        def full() -> float:
            started = time.perf_counter()
            catalog.export("jsonl", io.StringIO())
            return time.perf_counter() - started

        baseline = [full() for _ in range(3)]
        timings: dict[str, list[float]] = {"new": [], "updates": [], "scattered": [],
                                           "unchanged": []}  # fmt: skip
        counted: dict[str, int] = {}
        fresh = items
        for number in range(rounds):
            for scenario in timings:
                if scenario == "new":
                    batch = list(synth.items(push, start=fresh, dirty_fraction=0.0))
                    fresh += push
                else:
                    start = rng.randrange(0, max(1, items - push * 50))
                    numbers = range(start, start + push * 50, 50)  # spread over many blocks
                    if scenario == "scattered":  # anywhere in the lake: every block, at 1M
                        numbers = sorted(rng.sample(range(items), min(push, items)))
                    version = number + 1 if scenario != "unchanged" else number
                    batch = [
                        synth.item(n, random.Random(n), version=version, dirty_fraction=0.0)
                        for n in numbers
                    ]
                if scenario == "unchanged":
                    catalog.push({"items": batch})  # the same items once, then again
                before = catalog.lake.version("records")
                catalog.push({"items": batch})
                started = time.perf_counter()
                found = catalog.changes(before)
                write_changes(found, "jsonl", io.StringIO())
                timings[scenario].append(time.perf_counter() - started)
                counted[scenario] = len(found)
        base = statistics.median(baseline)
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        lines = [
            f"## Changes of a {push:,}-item push ({when} UTC)",
            "",
            f"{items:,} records; {rounds} pushes per scenario; load average {load}",
            "",
            "| export | changes | p50 s | p95 s | p50 ratio |",
            "|---|---:|---:|---:|---:|",
            f"| full export, JSON Lines (baseline, median of 3) | {items:,} | {base:.2f} | "
            f"{max(baseline):.2f} | 1.00x |",
            *(
                f"| changes after a push: {scenario} | {counted[scenario]:,} | "
                f"{statistics.median(t):.3f} | {synth.p95(t):.3f} | "
                f"{statistics.median(t) / base:.3f}x |"
                for scenario, t in timings.items()
            ),
            "",
        ]
    emit("\n".join(lines), record)


if __name__ == "__main__":
    app()
