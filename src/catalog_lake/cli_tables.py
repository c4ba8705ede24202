"""The commands that list a table's rows: records, rejects, warnings and history.

Each shows a readable table in a terminal, and with ``--json`` one JSON
object per row (JSON Lines), so a long listing streams. ``cli.py`` adds them
to its ``app``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .cli_options import (
    LakeOption,
    RowsJson,
    SellerFilter,
    StorageOptions,
    open_catalog,
    read_seller,
)
from .errors import UsageError
from .terminal import (
    counted,
    done,
    listed,
    refused,
    show,
)

app = typer.Typer()

#: What ``records`` shows in a terminal without --columns: 25 columns do not fit one.
DEFAULT_COLUMNS = (
    "object_id",
    "client_item_id",
    "product_name",
    "price",
    "mrp",
    "on_sale",
    "inventory",
    "brand",
)


@app.command()
def records(
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    where: Annotated[
        str | None,
        typer.Option(help='SQL condition, e.g. "on_sale AND price < 500" (read-only).'),
    ] = None,
    columns: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated columns to show, or '*' for all (default: a readable set "
            "in a table, all of them with --json)."
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many records.")] = 20,
    as_of: Annotated[
        str | None,
        typer.Option("--as-of", metavar="WHEN", help="Table version number or ISO timestamp."),
    ] = None,
    seller: SellerFilter = None,
    as_json: RowsJson = False,
) -> None:
    """Show flat search records, by service id (a readable set; --columns '*' for all)."""
    if columns is None:
        wanted = None if as_json else list(DEFAULT_COLUMNS)
    elif columns.strip() == "*":
        wanted = None
    else:
        wanted = [c.strip() for c in columns.split(",") if c.strip()]
    catalog = open_catalog(lake, storage_option)
    frame = catalog.query_records(where, wanted, limit, as_of, seller=read_seller(catalog, seller))
    show(frame, as_json, f"records ({len(frame)} shown)")


@app.command()
def rejects(
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    request_id: Annotated[str | None, typer.Option(help="Only this push.")] = None,
    code: Annotated[
        str | None, typer.Option(help="Only items failing with this error code.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many rejected items.")] = 50,
    seller: SellerFilter = None,
    as_json: RowsJson = False,
) -> None:
    """Show rejected items with their error codes and messages."""
    catalog = open_catalog(lake, storage_option)
    frame = catalog.rejects(seller=read_seller(catalog, seller))
    listed(frame, request_id, code, limit, as_json, "errors", refused, "rejects")


@app.command()
def warnings(
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    request_id: Annotated[str | None, typer.Option(help="Only this push.")] = None,
    code: Annotated[str | None, typer.Option(help="Only items warned with this code.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many items.")] = 50,
    seller: SellerFilter = None,
    as_json: RowsJson = False,
) -> None:
    """Show items stored with warnings: each value dropped or repaired, as sent."""
    catalog = open_catalog(lake, storage_option)
    frame = catalog.warnings(seller=read_seller(catalog, seller))
    listed(frame, request_id, code, limit, as_json, "warnings", done, "items stored with warnings")


@app.command()
def history(
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    limit: Annotated[int, typer.Option(min=1, help="Rows of each kind to show.")] = 20,
    versions: Annotated[
        bool, typer.Option("--versions", help="Show table versions instead of pushes.")
    ] = False,
    seller: SellerFilter = None,
    as_json: RowsJson = False,
) -> None:
    """Show the latest pushes and deletes (or, with --versions, table versions), newest first."""
    if versions and seller is not None:
        raise UsageError("--seller lists one seller's pushes; table versions are every seller's")
    catalog = open_catalog(lake, storage_option)
    if versions:
        frame = catalog.history(limit)
        show(frame.drop(columns=["metrics"]) if not as_json else frame, as_json, "table versions")
        return
    frame = catalog.pushes(seller=read_seller(catalog, seller))
    frame = frame.assign(operation=frame["operation"].fillna("push"))
    columns = [
        "request_id",
        "operation",
        "seller",
        "received_at",
        "received",
        "success",
        "failed",
        "duration_ms",
        "source",
    ]
    view = frame[columns].sort_values("received_at", ascending=False).head(limit)
    view = view.assign(duration_ms=view["duration_ms"].round(1))
    show(view, as_json, f"pushes and deletes ({counted(len(view), len(frame))})")
