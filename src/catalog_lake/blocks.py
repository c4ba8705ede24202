"""Id blocks as Arrow sees them: which blocks rows fall in, their files, the fold.

A push rewrites only the id blocks its items fall in (``Lake.upsert``):
the blocks are read, the incoming rows are folded in here, and the
result is written back in one commit. Keeping the fold apart from the
writes lets it be tested on plain tables (``tests/test_layout.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

#: Columns an upsert never changes on a row that already exists.
KEPT_ON_UPDATE = frozenset({"object_id", "id_block", "first_seen_at", "likes", "sales"})


def blocks_predicate(blocks: Any) -> str:
    """The literal partition filter naming the id blocks of some rows."""
    listed = sorted(pc.unique(pa.array(blocks) if isinstance(blocks, list) else blocks).to_pylist())
    return f"id_block IN ({', '.join(map(str, listed))})"


def with_columns(stored: pa.Table, data: pa.Table, columns: list[str]) -> tuple[pa.Table, int]:
    """``stored`` with ``columns`` taken from ``data`` where its client_item_id matches.

    Rows keep their order; a null in ``data`` keeps the stored value.
    """
    position = pa.array(np.arange(stored.num_rows), pa.int64())
    keys = stored.select(["client_item_id"]).append_column("_row", position)
    new = data.select(["client_item_id", *columns]).rename_columns(
        ["client_item_id", *(f"_new_{c}" for c in columns)]
    )
    joined = keys.join(new, "client_item_id", join_type="inner")
    rows = joined["_row"].to_numpy()
    where = np.full(stored.num_rows, -1, dtype="int64")
    where[rows] = np.arange(len(rows))
    taken = pa.array(where, pa.int64(), mask=where < 0)  # null: the row is not in data
    out = stored
    for column in columns:
        fresh = joined[f"_new_{column}"].take(taken)
        field = stored.schema.field(column)
        merged = pc.coalesce(fresh.cast(field.type), stored[column])
        out = out.set_column(out.schema.get_field_index(column), field, merged)
    return out, len(rows)


def upserted(stored: pa.Table, data: pa.Table) -> tuple[pa.Table, dict[str, int]]:
    """``stored`` with ``data`` folded in by ``client_item_id``, and what happened to the rows.

    A stored row is replaced when the incoming one is at least as new
    (``updated_at``; a null on either side never replaces, as in SQL), and
    the replacement keeps the stored ``KEPT_ON_UPDATE`` values; older
    incoming rows are dropped; rows not stored yet are added.
    """
    stored_keys = pa.table(
        {"k": stored["client_item_id"], "_s": pa.array(np.arange(stored.num_rows))}
    )
    data_keys = pa.table({"k": data["client_item_id"], "_d": pa.array(np.arange(data.num_rows))})
    pairs = data_keys.join(stored_keys, "k", join_type="inner")
    s_rows = pairs["_s"].to_numpy()
    d_rows = pairs["_d"].to_numpy()
    newer = pc.greater_equal(
        data["updated_at"].take(d_rows), stored["updated_at"].take(s_rows)
    ).fill_null(False)
    newer = newer.to_numpy(zero_copy_only=False)
    replaced, replacing = s_rows[newer], d_rows[newer]
    keep = np.ones(stored.num_rows, dtype=bool)
    keep[replaced] = False
    fresh = np.ones(data.num_rows, dtype=bool)
    fresh[d_rows] = False
    incoming, kept = data.take(replacing), stored.take(replaced)
    updated = pa.Table.from_arrays(
        [(kept if c in KEPT_ON_UPDATE else incoming)[c] for c in data.column_names],
        schema=data.schema,
    )
    combined = pa.concat_tables([*_runs(stored, keep), data.filter(fresh), updated])
    counts = {
        "inserted": int(fresh.sum()),
        "updated": len(replacing),
        "kept": int(len(d_rows) - len(replacing)),
    }
    return combined, counts


def _runs(table: pa.Table, keep: np.ndarray) -> list[pa.Table]:
    """The rows where ``keep`` is true, as zero-copy slices of their runs.

    An upsert replaces a few rows of blocks holding thousands: slicing
    around them copies nothing, where ``filter`` copies every kept row of
    every column (a third of a small push's rewrite time).
    """
    edges = np.flatnonzero(np.diff(np.concatenate([[0], keep.astype(np.int8), [0]])))
    return [table.slice(start, stop - start) for start, stop in edges.reshape(-1, 2)]


def blocks_dataset(paths: list[str], root: str) -> ds.Dataset:
    """Data files of an ``id_block``-partitioned table, with the block read from the folder names.

    The partition column is not in the files themselves.
    """
    return ds.dataset(
        paths,
        format="parquet",
        partitioning=ds.partitioning(pa.schema([("id_block", pa.int64())]), flavor="hive"),
        partition_base_dir=root,
    )


def file_path(root: str, path: str) -> str:
    """A data file's local path from its add action (relative to the table, or absolute)."""
    if path.startswith("file://"):
        return path.removeprefix("file://")
    return path if path.startswith("/") else f"{root}/{path}"
