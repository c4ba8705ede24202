"""``python -m bench``: the benchmark, from the project root (``make bench``).

It lives outside the installed package: a deployment of catalog-lake does not
carry the generator, the baseline or DuckDB's import.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from .run import report, run

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


@app.command()
def bench(
    items: Annotated[
        int, typer.Option("--items", min=100, help="Items in the synthetic feed.")
    ] = 10_000,
    update_fraction: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of the re-ingest feed that updates.")
    ] = 0.5,
    dirty_fraction: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of items with one defect.")
    ] = 0.05,
    batch_size: Annotated[int, typer.Option(min=1, help="Items per push.")] = 1_000,
    group_items: Annotated[
        int, typer.Option(min=1, help="Items of consecutive pushes written in one commit.")
    ] = 20_000,
    small_pushes: Annotated[int, typer.Option(min=0, help="10-item pushes to time.")] = 20,
    workers: Annotated[
        int, typer.Option(min=0, help="Worker processes for the ingests (as in ingest).")
    ] = 0,
    reingest: Annotated[
        bool, typer.Option(help="Also time the re-ingest of an overlapping feed.")
    ] = True,
    repeat: Annotated[
        int,
        typer.Option(
            min=1, help="Run baselines and ingests this many times; report each median run."
        ),
    ] = 1,
    workdir: Annotated[Path | None, typer.Option(help="Keep feeds and lakes here.")] = None,
    record: Annotated[
        Path | None, typer.Option(help="Append the report to this file, e.g. bench/results.md.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Benchmark the full ingest against a DuckDB baseline run on the same files."""
    result = run(
        items,
        update_fraction=update_fraction,
        dirty_fraction=dirty_fraction,
        batch_size=batch_size,
        group_items=group_items,
        small_pushes=small_pushes,
        workers=workers,
        reingest=reingest,
        repeat=repeat,
        workdir=workdir,
        keep=workdir is not None,
        progress=lambda message: print(message, file=sys.stderr),
    )
    text = report(result)
    if record:
        with record.open("a", encoding="utf-8") as handle:
            handle.write("\n" + text)
    if as_json:
        print(json.dumps(result, default=str))
    else:
        print(text)


if __name__ == "__main__":
    app()
