"""Reads beyond a whole table: a user's filter, a version to read as of, scans of files.

``select`` serves ``Catalog.query_records`` and the CLI's ``records --where/--as-of``:
the filter is parsed alone, as one SQL expression, and applied by Polars to
a scan of the Delta table, so a user's text never becomes a query of its
own. ``scan``, ``lookup`` and ``blocks_scan`` read columns straight from a
local table's Parquet files, which the key index and the metrics need
without DataFusion's planning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa

from .. import sellers
from ..blocks import blocks_dataset, file_path
from ..errors import LakeError, UsageError, first_line
from ..schemas import ADDED_COLUMNS, PARTITIONS, TABLES
from .files import is_local, partition_files
from .layout import conform
from .tables import STORE_ERRORS, Lake


def select(
    lake: Lake,
    name: str,
    *,
    columns: list[str] | None = None,
    where: str | None = None,
    order_by: str | None = None,
    limit: int | None = None,
    as_of: int | str | None = None,
    seller: str | None = None,
    equals: dict[str, str] | None = None,
) -> pa.Table:
    """Rows of one table filtered by one SQL expression, optionally as they were.

    ``where`` is one expression from the allow-list of ``filters`` (columns,
    comparisons, literals; no subquery, no table function), compiled to a
    Polars filter: it is never pasted into a query, so ``1=1) UNION ALL
    (SELECT ...`` is an error in the user's own text, not a second query.
    ``as_of`` is a version number, an ISO date (midnight UTC) or an ISO
    date-time; a time before the table
    existed, or a version it never had, is refused with what it has.
    ``order_by`` names a column whose text sorts as a number (service ids).
    ``seller`` keeps one seller's rows; a row written before sellers reads
    as the default seller's. A column added after the version read
    (``ADDED_COLUMNS``) reads as nulls. ``equals`` keeps the rows whose
    columns hold exactly these values, given by a caller (the service's one
    item), never parsed as SQL.
    """
    _require_arguments(where, columns, limit, as_of)
    schema = TABLES[name]
    columns = columns or schema.names
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise UsageError(
            f"unknown column(s) {', '.join(unknown)}; known: {', '.join(schema.names)}", "columns"
        )
    if lake.delta(name) is None:
        lake.require()
        return schema.empty_table().select(columns)
    version = version_as_of(lake, name, as_of) if as_of is not None else None
    frame = pl.scan_delta(lake.path(name), version=version, storage_options=lake.storage_options)
    stored = frame.collect_schema()
    added = [c for c in ADDED_COLUMNS.get(name, ()) if c not in stored]
    if added:
        types = pl.from_arrow(schema.empty_table().select(added)).schema
        frame = frame.with_columns(pl.lit(None, types[c]).alias(c) for c in added)
    if "seller" in schema.names:  # a row written before sellers is the default seller's
        frame = frame.with_columns(pl.col("seller").fill_null(sellers.DEFAULT_SELLER))
    if seller is not None:
        frame = frame.filter(pl.col("seller") == seller)
    for column, value in (equals or {}).items():
        frame = frame.filter(pl.col(column) == pl.lit(value, pl.String))
    try:
        # Polars may refuse a filter as it is built, not only when it runs: both are one line.
        if where is not None and where.strip():
            frame = frame.filter(where_expression(where, schema))
        if order_by:
            frame = frame.sort(pl.col(order_by).cast(pl.Int64))
        if limit is not None:
            frame = frame.head(int(limit))
        result = frame.select(columns).collect().to_arrow()
    except pl.exceptions.ColumnNotFoundError as exc:
        missing = re.search(r'unable to find column "([^"]+)"', str(exc))
        column = missing.group(1) if missing else first_line(exc)
        raise UsageError(
            f"unknown column {column!r} in where {where!r}; known: {', '.join(schema.names)}",
            "where",
        ) from None
    except pl.exceptions.PolarsError as exc:
        raise UsageError(f"where {where!r} cannot be applied: {first_line(exc)}", "where") from None
    return conform(result, schema, columns)


def _require_arguments(where: Any, columns: Any, limit: Any, as_of: Any) -> None:
    """A caller's arguments of the types ``select`` reads, or a one-line ``UsageError``.

    The library is called from code as well as from the CLI: ``where=5`` must be
    refused for what it is, not fail inside a parser as an ``AttributeError``.
    """
    if where is not None and not isinstance(where, str):
        raise UsageError(f"where must be SQL text, not {type(where).__name__}", "where")
    if columns is not None and (
        isinstance(columns, str) or not all(isinstance(c, str) for c in columns)
    ):
        raise UsageError("columns must be a list of column names", "columns")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise UsageError(f"limit must be a whole number of rows, 0 or more; got {limit!r}", "limit")
    if as_of is not None and (isinstance(as_of, bool) or not isinstance(as_of, int | str)):
        raise UsageError(
            f"as_of must be a version number or an ISO date or date-time, not {as_of!r}", "as_of"
        )


#: What ``--as-of`` accepts besides a version number: an ISO 8601 date or date-time, in ASCII.
_AS_OF = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)?",
    re.ASCII,
)


def version_as_of(lake: Lake, name: str, as_of: int | str, parameter: str = "as_of") -> int:
    """Table ``name``'s version in force at ``as_of`` (a version, a date or a date-time).

    The grammar is an allow-list (ASCII digits, ISO 8601), so ``²``, ``NaT``,
    ``nan`` or ``-1`` are a usage error, never a year or a traceback. A time
    is compared with the commits' own time stamps: Delta's clock.

    Raises:
        LakeError: no such table, a version it never had, or a time before it.
    """
    table = lake.delta(name)
    if table is None:
        lake.require()
        raise LakeError(f"the lake has no {name} table yet; push or ingest a feed first")
    latest = table.version()
    text = str(as_of).strip()
    if re.fullmatch(r"[0-9]{1,18}", text, re.ASCII):
        if int(text) > latest:
            raise LakeError(f"{name} has versions 0 to {latest}; there is no version {text} yet")
        return int(text)
    when = None
    if len(text) <= 40 and _AS_OF.fullmatch(text):
        try:
            when = pd.Timestamp(text)
        except (ValueError, OverflowError):
            when = None
    if when is None or pd.isna(when):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise UsageError(
            f"{parameter} takes a version number, a date (2026-11-25) or a date-time "
            f"(2026-11-25T18:00:00Z); got {shown!r}",
            parameter,
        )
    when = when.tz_localize("UTC") if when.tzinfo is None else when.tz_convert("UTC")
    commits = sorted(
        (c["version"], pd.Timestamp(c["timestamp"], unit="ms", tz="UTC")) for c in table.history()
    )
    created = commits[0][1]
    if when < created:
        raise LakeError(
            f"the lake did not exist yet at {when.isoformat()}: its {name} table was "
            f"created at {created.isoformat()}"
        )
    return max(v for v, at in commits if at <= when)


@dataclass(frozen=True)
class Version:
    """One version of a table, opened once: its files by id block, and scans of some blocks."""

    table: Any  # the Delta table at that version: the storage room's own
    storage_options: dict[str, str] | None

    @property
    def number(self) -> int:
        """The version's number."""
        return self.table.version()

    def files_by_block(self) -> dict[str, int]:
        """Every data file of the version, with the id block it holds."""
        return partition_files(self.table, "id_block")

    def scan_blocks(self, blocks: list[int]) -> pl.LazyFrame:
        """The rows of some id blocks, as a lazy Polars scan of the version's files."""
        frame = pl.scan_delta(self.table, storage_options=self.storage_options)
        return frame.filter(pl.col("id_block").is_in(blocks))


def at_version(lake: Lake, name: str, version: int) -> Version:
    """Table ``name`` as it was at ``version`` (its log and files must still be there).

    Raises:
        LakeError: the table does not exist.
    """
    latest = lake.delta(name)
    if latest is None:
        raise LakeError(f"the lake has no {name} table yet; push or ingest a feed first")
    return Version(lake.snapshot(name, version, latest), lake.storage_options)


def where_expression(where: str, schema: pa.Schema):
    """``where`` compiled from the allow-list of ``filters``, or a one-line ``LakeError``.

    ``filters`` (and sqlglot, which parses the text) load on first use: an
    ingest reads no query string, and sqlglot's import is 40 ms of its start.
    """
    from ..filters import compile_where

    return compile_where(where, schema)


def scan(lake: Lake, name: str, columns: list[str]) -> pa.Table:
    """Some columns of every current row, read straight from the table's files.

    For a local lake, pyarrow reads the Parquet files the Delta log lists
    (``file_uris``): no SQL planning, and none of the exit-time aborts
    that delta-rs's own pyarrow filesystem can cause (issue 2184).
    Partition columns are not in the files, so they cannot be scanned.
    Object stores go through DataFusion.
    """
    table = lake.delta(name)
    if table is None:
        return TABLES[name].empty_table().select(columns)
    if set(columns) & set(PARTITIONS.get(name, [])):
        raise LakeError(f"partition columns of {name!r} cannot be scanned: {columns}")
    try:
        if is_local(lake.uri):
            paths = [u.removeprefix("file://") for u in table.file_uris()]
            if not paths:
                return TABLES[name].empty_table().select(columns)
            added = [TABLES[name].field(c) for c in ADDED_COLUMNS.get(name, ())]
            stored = blocks_dataset(paths, None, added).to_table(columns=columns)
        else:
            selected = ", ".join(f'"{c}"' for c in columns)
            stored = lake.read(name, f'SELECT {selected} FROM "{name}"')
    except (*STORE_ERRORS, pa.ArrowException) as exc:
        raise LakeError(f"cannot read {name!r} in {lake.uri}: {exc}") from exc
    return conform(stored, TABLES[name], columns)


def lookup_items(lake: Lake, name: str, keys: list[str], columns: list[str]) -> pa.Table:
    """The rows of items (or records) whose key is one of ``keys``, with a ``key`` column.

    An item's key is its ``client_item_id`` as its seller's (``sellers.keys``):
    two sellers' items that share a ``client_item_id`` are two rows. A hash
    join in Arrow, as ``lookup``.
    """
    if not keys:
        empty = TABLES[name].empty_table().select(columns)
        return empty.append_column("key", pa.array([], "string"))
    scanned = list(dict.fromkeys(["client_item_id", "seller", *columns]))
    stored = scan(lake, name, scanned)
    rows = pa.table(
        {"key": sellers.row_keys(stored), "_row": pa.array(range(stored.num_rows), pa.int64())}
    )
    found = rows.join(pa.table({"key": pa.array(keys, pa.string())}), "key", join_type="inner")
    return stored.take(found["_row"]).select(columns).append_column("key", found["key"])


def lookup(lake: Lake, name: str, key: str, values: list[str], columns: list[str]) -> pa.Table:
    """Rows whose ``key`` is one of ``values``, as a hash join in Arrow.

    20 ms for 20,000 keys against a 20,000-row table, where an SQL ``IN``
    list of the same keys took 420 ms in DataFusion. No filter is pushed
    into the dataset: random keys prune nothing on min/max statistics,
    and after a merge delta-rs writes string statistics as
    ``string_view``, which pyarrow refuses to filter on.
    """
    if not values:
        return TABLES[name].empty_table().select(columns)
    stored = scan(lake, name, columns)
    # Join key and row number only (Arrow's join cannot carry list columns), then take.
    rows = pa.table({key: stored[key], "_row": pa.array(range(stored.num_rows), pa.int64())})
    keys = pa.table({key: pa.array(values, TABLES[name].field(key).type)})
    return stored.take(rows.join(keys, key, join_type="inner")["_row"])


def blocks_scan(
    lake: Lake, name: str, columns: list[str], known: dict[str, int] | None = None
) -> BlocksScan:
    """``columns`` and ``id_block`` of the rows in blocks whose files changed since ``known``.

    ``known`` maps the table's files at some earlier version to their id
    blocks (``BlocksScan.files`` of an earlier scan, or of a saved
    ``keys.KeySnapshot``); None reads every block. Files are never changed in
    place, so a block whose files are the same holds the same rows, and
    a block that gained or lost a file is read whole. What the caller
    kept of the other blocks plus ``rows`` is then the whole table, at a
    cost that follows the changes rather than the table. Version, files
    and rows come from one snapshot of the table. Local lakes only.
    """
    table = lake.delta(name)
    if table is None:
        empty = TABLES[name].empty_table().select([*columns, "id_block"])
        return BlocksScan(None, {}, set(), empty)
    version = table.version()
    try:
        actions = pa.table(table.get_add_actions(flatten=True))
        files = dict(
            zip(
                actions["path"].to_pylist(),
                actions["partition.id_block"].to_pylist(),
                strict=True,
            )
        )
        if known is None:
            touched = set(files.values())
        else:
            touched = {b for p, b in files.items() if known.get(p) != b}
            touched |= {b for p, b in known.items() if files.get(p) != b}
        root = table.table_uri.removeprefix("file://").rstrip("/")
        paths = [file_path(root, p) for p, b in files.items() if b in touched]
        rows = TABLES[name].empty_table().select([*columns, "id_block"])
        if paths:
            added = [TABLES[name].field(c) for c in ADDED_COLUMNS.get(name, ())]
            found = blocks_dataset(paths, root, added).to_table(columns=[*columns, "id_block"])
            rows = conform(found, TABLES[name], [*columns, "id_block"])
    except (*STORE_ERRORS, KeyError, pa.ArrowException) as exc:
        raise LakeError(f"cannot read {name!r} in {lake.uri}: {exc}") from exc
    return BlocksScan(version, files, touched, rows, len(paths))


@dataclass(frozen=True)
class BlocksScan:
    """What ``blocks_scan`` read: the table's files, and the rows of the changed blocks."""

    version: int | None
    files: dict[str, int]  # every file of the table at ``version``, with its id block
    touched: set[int]  # the blocks whose rows are in ``rows``
    rows: pa.Table
    files_read: int = 0
