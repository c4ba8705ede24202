"""``catalog-lake``: the command line, a thin door onto ``Catalog``.

Every command takes ``--lake`` (or ``$CATALOG_LAKE_URI``), writes results to
stdout and problems to stderr as one line, and never shows a traceback for
an error it understands.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from . import settings
from .catalog import Catalog
from .errors import CatalogLakeError

app = typer.Typer(
    name="catalog-lake",
    help="Push product feeds into a Delta lake of flat search records, and read them back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)


def say_error(message: str) -> None:
    """One plain line on stderr: no wrapping, no markup, easy to grep."""
    print(f"catalog-lake: error: {message}", file=sys.stderr)


LakeOption = Annotated[
    str | None,
    typer.Option(
        "--lake",
        envvar=settings.LAKE_ENV,
        help=f"Lake folder or URI [default: ${settings.LAKE_ENV}, else ./lake].",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print one error line and return the exit to raise."""
    say_error(message)
    return typer.Exit(code)


def _catalog(lake: str | None) -> Catalog:
    try:
        return Catalog(lake)
    except CatalogLakeError as exc:
        raise fail(str(exc)) from None


def _print_json(data: Any) -> None:
    out.print_json(json.dumps(data, ensure_ascii=False, default=str)) if out.is_terminal else print(
        json.dumps(data, ensure_ascii=False, default=str, indent=2)
    )


@app.command()
def push(
    files: Annotated[
        list[Path], typer.Argument(help='Product-object JSON files ({"items": [...]}).')
    ],
    lake: LakeOption = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 3 when any item of any push failed.")
    ] = False,
) -> None:
    """Push each file as one push and print its push response as JSON."""
    catalog = _catalog(lake)
    whole_failures = 0
    item_failures = 0
    for path in files:
        try:
            payload = path.read_bytes()
        except OSError as exc:
            say_error(f"{path}: {exc.strerror}")
            whole_failures += 1
            continue
        try:
            response = catalog.push(payload, source=str(path))
        except CatalogLakeError as exc:
            say_error(f"{path}: {exc}")
            whole_failures += 1
            continue
        item_failures += int(response["catalog_push_failed_product_count"])
        _print_json(response)
    if whole_failures:
        raise typer.Exit(1)
    if strict and item_failures:
        raise typer.Exit(3)


def _show(frame: pd.DataFrame, as_json: bool, title: str) -> None:
    if as_json:
        for row in frame.to_dict(orient="records"):
            print(
                json.dumps({k: _plain(v) for k, v in row.items()}, ensure_ascii=False, default=str)
            )
        return
    table = Table(title=title, show_lines=False)
    for column in frame.columns:
        table.add_column(str(column), overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    out.print(table)


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return value


def _cell(value: Any) -> str:
    value = _plain(value)
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def _columns(frame: pd.DataFrame, columns: str | None) -> pd.DataFrame:
    if not columns:
        return frame
    wanted = [c.strip() for c in columns.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in frame.columns]
    if unknown:
        raise fail(f"unknown column(s) {', '.join(unknown)}; known: {', '.join(frame.columns)}", 2)
    return frame[wanted]


@app.command()
def records(
    lake: LakeOption = None,
    columns: Annotated[str | None, typer.Option(help="Comma-separated columns to show.")] = None,
    limit: Annotated[int, typer.Option(min=0, help="At most this many records.")] = 20,
    as_json: JsonOption = False,
) -> None:
    """Show the current flat search records, by service id."""
    try:
        frame = _catalog(lake).records()
    except CatalogLakeError as exc:
        raise fail(str(exc)) from None
    _show(_columns(frame, columns).head(limit), as_json, f"records ({len(frame)} in the lake)")


@app.command()
def rejects(
    lake: LakeOption = None,
    request_id: Annotated[str | None, typer.Option(help="Only this push.")] = None,
    code: Annotated[
        str | None, typer.Option(help="Only items failing with this error code.")
    ] = None,
    limit: Annotated[int, typer.Option(min=0)] = 50,
    as_json: JsonOption = False,
) -> None:
    """Show rejected items with their error codes and messages."""
    frame = _catalog(lake).rejects()
    if request_id:
        frame = frame[frame["request_id"] == request_id]
    if code:
        frame = frame[frame["codes"].map(lambda codes: code in list(codes))]
    if as_json:
        _show(frame.head(limit), True, "")
        return
    view = pd.DataFrame(
        {
            "request_id": frame["request_id"],
            "index": frame["index"],
            "client_item_id": frame["client_item_id"],
            "errors": frame["errors"].map(
                lambda errors: "; ".join(f"{e['code']}: {e['message']}" for e in errors)
            ),
        }
    )
    _show(view.head(limit), False, f"rejects ({len(frame)})")


@app.command()
def history(
    lake: LakeOption = None,
    limit: Annotated[int, typer.Option(min=0)] = 20,
    as_json: JsonOption = False,
) -> None:
    """Show the latest pushes with their counts, newest first."""
    frame = _catalog(lake).pushes()
    columns = [
        "request_id",
        "received_at",
        "received",
        "success",
        "failed",
        "duration_ms",
        "source",
    ]
    view = frame[columns].sort_values("received_at", ascending=False).head(limit)
    _show(view, as_json, f"pushes ({len(frame)})")


@app.command()
def repair(lake: LakeOption = None) -> None:
    """Finish pushes that were interrupted between table commits, from the raw table."""
    try:
        responses = _catalog(lake).repair()
    except CatalogLakeError as exc:
        raise fail(str(exc)) from None
    if not responses:
        print("nothing to repair")
    for response in responses:
        _print_json(response)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        print("catalog-lake: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
