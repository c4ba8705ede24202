"""A table's Parquet data files, written where the table lives and not yet committed.

A Dask worker writes its part of each table here (issue 45), and the one
committer adds the files to the Delta log with a fenced commit
(``Lake.commit_files``): only these small descriptions travel back to it,
never the rows. The files are written as ``Lake`` writes them through
deltalake: the declared Arrow schema with plain strings, the partition
columns in the folder names and not in the files, the table's codec, the
same columns plain or without statistics. A file that is never committed
(a worker's group redone, a killed coordinator) belongs to no version of
the table; readers never see it, and ``maintain``'s vacuum deletes it
once it is older than the retention.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..schemas import COMPRESSION, PARTITIONS, PLAIN_COLUMNS, STATS_COLUMNS, TABLES

#: Characters of a text column's bound kept in a file's statistics (delta-rs keeps 32).
TEXT_BOUND = 32


@dataclass(frozen=True)
class ParquetLayout:
    """How a table's Parquet files are written, by ``Lake`` and by workers alike."""

    codec: str
    level: int | None
    plain: frozenset[str]  # written without a dictionary (``schemas.PLAIN_COLUMNS``)
    statistics: frozenset[str]  # columns with Parquet statistics (``schemas.STATS_COLUMNS``)


@functools.cache
def parquet_layout(name: str) -> ParquetLayout:
    """Table ``name``'s codec, plain columns and columns with statistics (all, by default)."""
    codec, level = COMPRESSION.get(name, ("SNAPPY", None))
    stats = STATS_COLUMNS.get(name, TABLES[name].names)
    return ParquetLayout(codec, level, frozenset(PLAIN_COLUMNS.get(name, ())), frozenset(stats))


def is_local(uri: str) -> bool:
    """Whether a lake URI is a local folder (not an object store)."""
    return "://" not in uri or uri.startswith("file://")


@dataclass(frozen=True)
class DataFile:
    """One written data file as its Delta add action needs it: a few hundred bytes."""

    path: str  # relative to the table's folder, partition folders included
    size: int
    partition_values: dict[str, str | None]
    stats: str  # Delta's statistics JSON: numRecords, and min/max/nullCount where exact
    rows: int


@dataclass
class Staged:
    """A table's part of a group: files to add and, for a block rewrite, files to remove."""

    adds: list[DataFile] = field(default_factory=list)
    removes: list[DataFile] = field(default_factory=list)
    #: The table version the removed files were read at (a rewrite is fenced at it).
    read_version: int | None = None


def write_files(filesystem, root: str, name: str, rows: pa.Table) -> list[DataFile]:
    """Write ``rows`` of table ``name`` as data files under ``root``: one per partition.

    ``filesystem`` is a pyarrow filesystem in which ``root`` is the table's
    folder (``Lake.filesystem``). Rows are cast to the declared schema first,
    as every ``Lake`` write does.
    """
    if rows.num_rows == 0:
        return []
    rows = rows.cast(TABLES[name])
    partition = PARTITIONS.get(name, [])
    if not partition:
        return [_write_one(filesystem, root, name, rows, {})]
    (column,) = partition
    values = rows[column].combine_chunks()
    order = pc.sort_indices(values)
    rows, values = rows.take(order), values.take(order)
    distinct = pc.unique(values)
    files = []
    body = rows.drop_columns([column])
    ends = np.searchsorted(
        values.to_numpy(zero_copy_only=False), distinct.to_numpy(zero_copy_only=False), side="right"
    )
    start = 0
    for value, end in zip(distinct.to_pylist(), ends.tolist(), strict=True):
        text = _partition_text(value)
        files.append(
            _write_one(filesystem, root, name, body.slice(start, end - start), {column: text})
        )
        start = end
    return files


def _partition_text(value) -> str:
    """A partition value as Delta spells it in the log and the folder name."""
    if isinstance(value, date | datetime):
        return value.isoformat()
    return str(value)


def _write_one(
    filesystem, root: str, name: str, rows: pa.Table, partition: dict[str, str]
) -> DataFile:
    how = parquet_layout(name)
    folder = "/".join(f"{k}={v}" for k, v in partition.items())
    relative = f"{folder}/" if folder else ""
    relative += f"part-00000-{uuid.uuid4()}-c000.{how.codec.lower()}.parquet"
    if folder:
        filesystem.create_dir(joined(root, folder), recursive=True)
    with filesystem.open_output_stream(joined(root, relative)) as sink:
        pq.write_table(
            rows,
            sink,
            compression=how.codec.lower(),
            compression_level=how.level,
            use_dictionary=[c for c in rows.column_names if c not in how.plain],
            write_statistics=[c for c in rows.column_names if c in how.statistics],
            store_schema=False,
        )
        size = sink.tell()
    stats = STATS_COLUMNS.get(name)
    return DataFile(relative, size, dict(partition), _stats(rows, stats), rows.num_rows)


def joined(root: str, relative: str) -> str:
    """A path in the table's filesystem: under its folder, or the store's root itself."""
    return f"{root}/{relative}" if root else relative


def _stats(rows: pa.Table, columns: list[str] | None) -> str:
    """Delta statistics of a file: its row count, and bounds of its key columns.

    Bounds are given only for integer and text columns, whose values Delta's
    statistics hold exactly; a reader skips a file only on bounds it has, so
    a column without them is read rather than wrongly skipped. A text bound
    is kept to ``TEXT_BOUND`` characters, as delta-rs keeps it: a prefix is
    still a lower bound, and an upper bound that would need cutting is left
    out, so a long text is never copied into the log.
    """
    low: dict[str, object] = {}
    high: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for name in columns if columns is not None else rows.column_names:
        if name not in rows.column_names:
            continue
        column = rows[name]
        text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        if not (text or pa.types.is_integer(column.type)):
            continue
        nulls[name] = column.null_count
        if column.null_count == len(column):
            continue
        bounds = pc.min_max(column)
        smallest, largest = bounds["min"].as_py(), bounds["max"].as_py()
        low[name] = smallest[:TEXT_BOUND] if text else smallest
        if not text or len(largest) <= TEXT_BOUND:
            high[name] = largest
    return json.dumps(
        {"numRecords": rows.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls},
        ensure_ascii=False,
    )


def now_ms() -> int:
    """A file action's time stamp: milliseconds since the epoch."""
    return int(time.time() * 1000)


def partition_files(table: Any, column: str) -> dict[str, int]:
    """Every data file of a Delta table snapshot, with its value of partition ``column``."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return {}
    values = actions[f"partition.{column}"].cast(pa.int64()).to_pylist()
    return dict(zip(actions["path"].to_pylist(), values, strict=True))
