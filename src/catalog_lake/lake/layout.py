"""The tables' declared layout against what a lake holds: which lakes this version can write.

``lake.py`` alone speaks Delta: it reads a stored table's schema and metadata
and asks here whether to write it, upgrade it (``ADDED_COLUMNS``,
``RETYPED_COLUMNS``) or refuse it, before anything is written (issue 26). Reads
are given the declared schema back (``conform``), whatever engine read them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from .. import settings
from ..errors import LakeError
from ..schemas import ADDED_COLUMNS, PARTITIONS, RETYPED_COLUMNS, STATS_COLUMNS, TABLES


def added_fields(name: str) -> list[pa.Field]:
    """The fields added to a table after its first release (``ADDED_COLUMNS``)."""
    return [TABLES[name].field(c) for c in ADDED_COLUMNS.get(name, ())]


def description(name: str) -> str | None:
    """The table description, which records the block size for id-block tables.

    Merges find a known item in the block ``object_id // ID_BLOCK_SIZE``; a
    lake written with another block size would be searched in the wrong
    partitions and get duplicates, so the size is kept with the table
    (Delta refuses unknown configuration keys; the description is free text).
    """
    if PARTITIONS.get(name) != ["id_block"]:
        return None
    return f"catalog-lake {name}: id_block = object_id // {settings.ID_BLOCK_SIZE}"


def configuration(name: str) -> dict[str, str] | None:
    """The table's Delta configuration: which columns carry statistics (``STATS_COLUMNS``)."""
    columns = STATS_COLUMNS.get(name)
    return {"delta.dataSkippingStatsColumns": ",".join(columns)} if columns else None


def retyped(name: str, stored: pa.Schema, schema: pa.Schema) -> list[str]:
    """The columns an earlier version typed otherwise, still stored so (``RETYPED_COLUMNS``)."""
    return [
        c
        for c in RETYPED_COLUMNS.get(name, {})
        if c in stored.names and not same_type(stored.field(c).type, schema.field(c).type)
    ]


def require_writable(folder: Path) -> None:
    """Refuse, before any write, a lake folder this process cannot write (issue 26).

    A read-only lake (a read-only mount, a snapshot, another user's folder)
    otherwise failed mid-run, with a panic line from the store's runtime
    before the error, and an ingest told the user it had stored its pushes.
    ``access`` answers for a read-only file system even to root.
    """
    writable = os.W_OK | os.X_OK
    denied = (
        [str(folder)]
        if not os.access(folder, writable)
        else [str(p) for p in folder.iterdir() if p.is_dir() and not os.access(p, writable)]
    )
    if denied:
        shown = ", ".join(denied[:3]) + (f" and {len(denied) - 3} more" if len(denied) > 3 else "")
        raise LakeError(
            f"the lake at {folder} is read-only here ({shown} cannot be written); nothing was "
            "written. Reads (records, check, history) work; to write, make the folder writable "
            "or point --lake at another lake"
        )


def require_not_newer(name: str, stored: pa.Schema, schema: pa.Schema, uri: str) -> None:
    """Refuse a table that a newer version wrote (a column this one does not know, or retyped).

    Checked for every table before anything is written (issue 26): a push into
    such a lake used to store its ``raw`` rows, then fail on ``items``, and
    send the user to ``repair``, which failed the same way.
    """
    unknown = [c for c in stored.names if c not in schema.names]
    retyped = [
        c
        for c in stored.names
        if c in schema.names
        and c not in RETYPED_COLUMNS.get(name, {})
        and not same_type(stored.field(c).type, schema.field(c).type)
    ]
    if unknown or retyped:
        what = "; ".join(
            part
            for part in (
                f"columns this version does not know: {', '.join(unknown)}" if unknown else "",
                f"columns of another type: {', '.join(retyped)}" if retyped else "",
            )
            if part
        )
        raise LakeError(
            f"table {name!r} in {uri} was written by a newer catalog-lake ({what}); nothing was "
            f"written. Upgrade this installation (pip install -U catalog-lake; this is "
            f"{_version()}) or point --lake at another lake"
        )


def _version() -> str:
    """This installation's version, read from its metadata as the CLI reads it.

    Importing the package's ``__init__`` from here would pull it below the
    modules it imports (issue 44).
    """
    from importlib.metadata import version

    return version("catalog-lake")


def require_compatible(
    name: str,
    stored: pa.Schema,
    schema: pa.Schema,
    partitions: list[str],
    stored_description: str | None,
    uri: str,
) -> None:
    """Refuse a table written with another layout rather than fail mid-push.

    ``stored``, ``partitions`` and ``stored_description`` are the table's own, as
    ``lake.py`` read them from its Delta metadata.
    """
    missing = [f.name for f in schema if f.name not in stored.names]
    if missing or list(partitions) != PARTITIONS.get(name, []):
        raise LakeError(
            f"table {name!r} in {uri} has an older layout (missing {', '.join(missing) or 'none'}; "
            f"partitioned by {list(partitions)}) that this version cannot write; use a new lake "
            "(--lake or CATALOG_LAKE_URI) and re-ingest the feeds, or push the old raw "
            "table's item_json into it"
        )
    if description(name) is not None and stored_description != description(name):
        raise LakeError(
            f"table {name!r} in {uri} was written with another id_block size "
            f"({stored_description!r}; this version uses object_id // "
            f"{settings.ID_BLOCK_SIZE}); use a new lake (--lake or CATALOG_LAKE_URI) and "
            "re-ingest the feeds, or push the old raw table's item_json into it"
        )


def same_type(stored: pa.DataType, declared: pa.DataType) -> bool:
    """Whether a stored column holds the declared type (any string layout is a string)."""

    def text(kind: pa.DataType) -> bool:
        return (
            pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_string_view(kind)
        )

    return stored.equals(declared) or (text(stored) and text(declared))


def plain_strings(result: pa.Table) -> pa.Table:
    """A query's result with plain strings and at least one chunk per column.

    DataFusion answers with ``string_view`` columns, and with no chunks at all
    when nothing matched (an empty table); pandas cannot join such columns
    ("cannot construct ChunkedArray from empty vector"), so readers always
    get plain strings in one chunk, empty or not.
    """
    fields = [
        pa.field(f.name, pa.string(), f.nullable) if pa.types.is_string_view(f.type) else f
        for f in result.schema
    ]
    return result.cast(pa.schema(fields)).combine_chunks()


def conform(result: pa.Table, schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    """``result`` cast to the declared schema (or its ``columns``).

    DataFusion may hand back string views or large types; callers get the
    declared schema so pandas sees the same dtypes whatever engine read it.
    """
    fields = [schema.field(c) for c in columns] if columns else list(schema)
    arrays = [result[f.name].cast(f.type) for f in fields]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def stored_schema(table: Any) -> pa.Schema:
    """A stored Delta table's schema, as Arrow."""
    return pa.schema(table.schema().to_arrow())
