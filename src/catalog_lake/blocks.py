"""Id blocks as Arrow sees them: which blocks rows fall in, their files, the fold.

A push rewrites only the id blocks its items fall in (``Lake.upsert``):
the blocks are read, the incoming rows are folded in here, and the
result is written back in one commit. Keeping the fold apart from the
writes lets it be tested on plain tables (``tests/test_layout.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from . import sellers

#: Columns an upsert never changes on a row that already exists.
KEPT_ON_UPDATE = frozenset({"object_id", "id_block", "first_seen_at", "likes", "sales"})
#: Columns a push that brings a deleted item back takes from the push, not the tombstone.
RESTARTED_ON_RETURN = ("likes", "sales")
#: The column a stored row's replacement is judged by: when the push (or delete) that
#: wrote it was received. A row replaces a stored one only if it is at least as new, so
#: a replayed older push never rolls an item back nor brings a deleted one back.
GUARD = {"items": "updated_at", "records": "received_at"}
#: A column that keeps its stored value when a replacement changes nothing else: a
#: record's ``updated_at`` says when its content last changed (issue 27), so an
#: unchanged re-push neither moves it nor shows in the change feed.
CONTENT_TIME = {"records": "updated_at"}


def guard_times(table: pa.Table, name: str) -> pa.ChunkedArray:
    """Each row's ``GUARD`` time.

    A record written before ``received_at`` existed has its ``updated_at``,
    which was that time then.
    """
    if GUARD.get(name) == "received_at":
        return pc.coalesce(table["received_at"], table["updated_at"])
    return table["updated_at"]


def content_columns(schema: pa.Schema, name: str) -> list[str]:
    """The columns that make a row's content: not its times, its partition, nor its seller.

    An object id is one seller's for good, so its seller is who it is, not what
    it holds: a row written before sellers (none) and the same row written
    since (``default``) hold the same content.
    """
    skip = {"id_block", "seller", GUARD.get(name), CONTENT_TIME.get(name)}
    return [c for c in schema.names if c not in skip]


def _same(columns: list[str], suffix: str) -> pl.Expr:
    """Whether each ``column`` equals its ``column + suffix`` copy (a null equals a null)."""
    return pl.all_horizontal([pl.col(c).eq_missing(pl.col(c + suffix)) for c in columns])


def same_rows(left: pa.Table, right: pa.Table, columns: list[str]) -> np.ndarray:
    """Row by row, whether two equally long tables hold equal ``columns`` (nulls equal nulls)."""
    if left.num_rows == 0:
        return np.zeros(0, dtype=bool)
    both = pl.from_arrow(left.select(columns)).hstack(
        pl.from_arrow(right.select(columns)).rename(lambda c: c + "__old")
    )
    return both.select(_same(columns, "__old")).to_series().to_numpy()


def changed_rows(new: Any, old: Any, key: str, columns: list[str]) -> np.ndarray:
    """Which rows of ``new`` are not in ``old`` (by ``key``) or differ from it in ``columns``.

    Both are Arrow tables or Polars frames holding ``key`` and ``columns``,
    each ``key`` at most once in ``old``. The change feed compares hundreds
    of thousands of rows of which a few changed, so each side is first
    reduced to a 64-bit digest of its content (``_digest``) and only the key
    and digest are joined; rows whose digests differ are then compared value
    by value, so a digest never makes a change of nothing (a -0.0 for a
    0.0, a wider type). Rows with equal digests are taken as unchanged: two
    different contents share one with a chance of one in 2^64.
    """
    fresh = new if isinstance(new, pl.DataFrame) else pl.from_arrow(new)
    stored = old if isinstance(old, pl.DataFrame) else pl.from_arrow(old)
    if fresh.height == 0:
        return np.zeros(0, dtype=bool)
    digests = fresh.select(key, _digest(columns).alias("__digest")).join(
        stored.select(key, _digest(columns).alias("__stored")),
        on=key,
        how="left",
        maintain_order="left",
    )
    maybe = digests.select(pl.col("__digest").ne_missing(pl.col("__stored"))).to_series()
    changed = maybe.to_numpy().copy()
    candidates = np.flatnonzero(changed)
    if len(candidates) == 0:
        return changed
    picked = fresh[candidates].select(key, *columns)
    earlier = stored.join(picked.select(key), on=key, how="semi").select(key, *columns)
    joined = picked.join(
        earlier.rename({c: c + "__old" for c in columns}).with_columns(
            pl.lit(True).alias("__there")
        ),
        on=key,
        how="left",
        maintain_order="left",
    )
    there = pl.col("__there").fill_null(False)
    changed[candidates] = joined.select(~(there & _same(columns, "__old"))).to_series().to_numpy()
    return changed


def _digest(columns: list[str]) -> pl.Expr:
    """A row's content as one number: each column hashed with a seed of its own, xor-ed.

    Per column rather than ``pl.struct(...).hash()``, which gives a null in
    one field and a value in the next the same hash as the reverse. Stable
    within one process, which is all a comparison needs.
    """
    hashes = [pl.col(c).hash(seed=position + 1) for position, c in enumerate(columns)]
    digest = hashes[0]
    for more in hashes[1:]:
        digest = digest.xor(more)
    return digest


def blocks_predicate(blocks: Any) -> str:
    """The literal partition filter naming the id blocks of some rows."""
    listed = sorted(pc.unique(pa.array(blocks) if isinstance(blocks, list) else blocks).to_pylist())
    return f"id_block IN ({', '.join(map(str, listed))})"


def with_columns(stored: pa.Table, data: pa.Table, columns: list[str]) -> tuple[pa.Table, int]:
    """``stored`` with ``columns`` taken from ``data`` where its ``object_id`` matches.

    Rows keep their order; a null in ``data`` keeps the stored value. The
    service id, not the ``client_item_id``: two sellers' items may share one
    (``sellers``), and one block.
    """
    position = pa.array(np.arange(stored.num_rows), pa.int64())
    keys = stored.select(["object_id"]).append_column("_row", position)
    new = data.select(["object_id", *columns]).rename_columns(
        ["object_id", *(f"_new_{c}" for c in columns)]
    )
    joined = keys.join(new, "object_id", join_type="inner")
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


def upserted(
    stored: pa.Table, data: pa.Table, name: str = "items"
) -> tuple[pa.Table, dict[str, Any]]:
    """``stored`` with ``data`` folded in by ``object_id``, and what happened to the rows.

    A stored row is replaced when the incoming one is at least as new
    (``GUARD``; a null on either side never replaces, as in SQL), and
    the replacement keeps the stored ``KEPT_ON_UPDATE`` values, and its
    ``CONTENT_TIME`` when nothing else changed; older incoming rows are
    dropped (their ids are the result's ``kept_ids``); rows not stored yet
    are added. Rows are matched by service id: one item's rows share it, and two
    sellers' items sharing a ``client_item_id`` never do (``sellers``).
    """
    stored_keys = pa.table({"k": stored["object_id"], "_s": pa.array(np.arange(stored.num_rows))})
    data_keys = pa.table({"k": data["object_id"], "_d": pa.array(np.arange(data.num_rows))})
    pairs = data_keys.join(stored_keys, "k", join_type="inner")
    s_rows = pairs["_s"].to_numpy()
    d_rows = pairs["_d"].to_numpy()
    newer = pc.greater_equal(
        guard_times(data, name).take(d_rows), guard_times(stored, name).take(s_rows)
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
    if "deleted_at" in kept.column_names and kept.num_rows:
        # A push that brings a deleted item back starts its metrics afresh, as its record
        # is new: the metrics feed gives them again (the tombstone kept the old ones).
        back = pc.is_valid(kept["deleted_at"])
        for column in RESTARTED_ON_RETURN:
            position = updated.schema.get_field_index(column)
            fresh_values = pc.if_else(back, incoming[column], kept[column])
            updated = updated.set_column(position, updated.schema.field(column), fresh_values)
    timed = CONTENT_TIME.get(name)
    if timed is not None and updated.num_rows:
        same = same_rows(updated, kept, content_columns(data.schema, name))
        position = updated.schema.get_field_index(timed)
        times = pc.if_else(pa.array(same), kept[timed], updated[timed])
        updated = updated.set_column(position, updated.schema.field(timed), times)
    combined = pa.concat_tables([*_runs(stored, keep), data.filter(fresh), updated])
    counts = {
        "inserted": int(fresh.sum()),
        "updated": len(replacing),
        "kept": int(len(d_rows) - len(replacing)),
        "kept_ids": data["object_id"].take(d_rows[~newer]),
    }
    return combined, counts


def _matches(stored: pa.Table, ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``stored`` and in ``ids`` of the items stored (``ids``: their keys)."""
    stored_keys = pa.table(
        {"k": sellers.row_keys(stored), "_s": pa.array(np.arange(stored.num_rows))}
    )
    wanted = pa.table({"k": pa.array(ids, pa.string()), "_d": pa.array(np.arange(len(ids)))})
    pairs = wanted.join(stored_keys, "k", join_type="inner")
    return pairs["_s"].to_numpy(), pairs["_d"].to_numpy()


def tombstoned(
    stored: pa.Table, ids: list[str], at: Any, request_id: str
) -> tuple[pa.Table, np.ndarray]:
    """Items with ``ids`` marked deleted at ``at`` by ``request_id``, and what each became.

    An item is deleted when the delete is at least as new as the push that
    last wrote it (``GUARD``), as a push replaces one; it keeps its row, so
    its service id stays reserved. Each id's outcome, in the order of
    ``ids``: ``deleted`` (now, or by this same request before: a replay),
    ``already_deleted``, ``superseded`` (a later push brought it back) or
    ``not_found``.
    """
    s_rows, d_rows = _matches(stored, ids)
    outcome = np.full(len(ids), "not_found", dtype=object)
    if not len(s_rows):
        return stored, outcome
    when = pa.scalar(at, stored.schema.field("updated_at").type)

    def flags(values: Any) -> np.ndarray:
        return values.fill_null(False).to_numpy(zero_copy_only=False)

    by_me = flags(pc.equal(stored["deleted_by"].take(s_rows), request_id))
    newer = flags(pc.greater(stored["updated_at"].take(s_rows), when))
    live = flags(pc.is_null(stored["deleted_at"].take(s_rows)))
    outcome[d_rows] = np.select(
        [by_me, newer, ~live], ["deleted", "superseded", "already_deleted"], "deleted"
    )
    hit = np.zeros(stored.num_rows, dtype=bool)
    hit[s_rows[~by_me & ~newer & live]] = True
    mask = pa.array(hit)
    out = stored
    for column, value in (
        ("deleted_at", when),
        ("updated_at", when),
        ("deleted_by", pa.scalar(request_id, pa.string())),
    ):
        index = out.schema.get_field_index(column)
        field = out.schema.field(column)
        out = out.set_column(index, field, pc.if_else(mask, value, out[column]))
    return out, outcome


def removed(stored: pa.Table, ids: list[str], at: Any) -> tuple[pa.Table, int]:
    """Records without those of ``ids`` written before ``at``; how many went.

    A record a push wrote after the delete (``GUARD``) stays: that push
    brought the item back.
    """
    s_rows, _ = _matches(stored, ids)
    when = pa.scalar(at, stored.schema.field("updated_at").type)
    older = pc.less_equal(guard_times(stored, "records").take(s_rows), when).fill_null(False)
    gone = s_rows[older.to_numpy(zero_copy_only=False)]
    keep = np.ones(stored.num_rows, dtype=bool)
    keep[gone] = False
    return pa.concat_tables([stored.slice(0, 0), *_runs(stored, keep)]), len(gone)


def _runs(table: pa.Table, keep: np.ndarray) -> list[pa.Table]:
    """The rows where ``keep`` is true, as zero-copy slices of their runs.

    An upsert replaces a few rows of blocks holding thousands: slicing
    around them copies nothing, where ``filter`` copies every kept row of
    every column (a third of a small push's rewrite time).
    """
    edges = np.flatnonzero(np.diff(np.concatenate([[0], keep.astype(np.int8), [0]])))
    return [table.slice(start, stop - start) for start, stop in edges.reshape(-1, 2)]


def blocks_dataset(paths: list[str], root: str | None, added: Any = ()) -> ds.Dataset:
    """Data files of a table, with ``added`` columns where older files lack them.

    With a ``root``, the table is ``id_block``-partitioned and the block is read
    from the folder names (the partition column is not in the files). A column
    added to a table after some of its files were written (``ADDED_COLUMNS``)
    reads as nulls from those files, as Delta readers show it.
    """
    partitioning = (
        ds.partitioning(pa.schema([("id_block", pa.int64())]), flavor="hive") if root else None
    )
    dataset = ds.dataset(
        paths, format="parquet", partitioning=partitioning, partition_base_dir=root
    )
    missing = [f for f in added if f.name not in dataset.schema.names]
    if not missing:
        return dataset
    return ds.dataset(
        paths,
        schema=pa.schema([*dataset.schema, *missing]),
        format="parquet",
        partitioning=partitioning,
        partition_base_dir=root,
    )


def file_path(root: str, path: str) -> str:
    """A data file's local path from its add action (relative to the table, or absolute)."""
    if path.startswith("file://"):
        return path.removeprefix("file://")
    return path if path.startswith("/") else f"{root}/{path}"
