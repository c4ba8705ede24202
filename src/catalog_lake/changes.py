"""What changed in the records between two versions, and its way to search engines (issue 27).

``changes`` answers with one operation per object: the records upserted and
the objects deleted between two versions of the ``records`` table, netted so
that the last state in the range wins and an object whose content is the
same at both ends is no change at all.

Mechanism (docs/design.md, "The change feed"): a record lives in the Parquet
files of its id block, and a write replaces whole files, never parts of
them. So the blocks whose files differ between the two versions' snapshots
hold every change, and no other block can: those blocks are read at both
versions and compared by ``object_id`` and content. The cost follows the
blocks a range touched, not the lake. It needs no table feature, so it works
on lakes written before it, and on any store; it needs the old version's
files, which ``maintain`` keeps while a ``sync`` cursor needs them.

``sync`` exports each new range to a target folder or ``s3://`` prefix
(``targets``) and keeps its cursor in the lake's ``cursors`` table.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl
import pyarrow as pa

from .blocks import changed_rows
from .errors import CatalogLakeError, LakeError, UsageError, first_line
from .exports import EXPORTED, Exported, require_format, write_export
from .lake import STORE_ERRORS, Lake, reads
from .lake.layout import conform
from .literals import quote
from .schemas import CURSORS, RECORDS
from .sellers import DEFAULT_SELLER
from .settings import resolved_lake_uri
from .targets import Target

#: Formats whose engine takes deletions in a request of their own: ``changes``
#: writes their ids apart (``deletes``), as a JSON array.
SEPARATE_DELETES = ("meilisearch", "typesense")


@dataclass(frozen=True)
class Changes:
    """The records' changes in ``(since, until]``: upserts (whole records) and deleted ids."""

    since: int
    until: int
    upserts: pa.Table  # EXPORTED columns, by object_id
    deletes: pa.Array  # object_id (int64), ascending
    blocks_read: int = 0

    def __len__(self) -> int:
        return self.upserts.num_rows + len(self.deletes)


def changes(
    lake: Lake, since: int | str, until: int | str | None = None, seller: str | None = None
) -> Changes:
    """The records upserted and deleted after version (or time) ``since`` up to ``until``.

    ``since`` and ``until`` take what ``--as-of`` takes: a records version, a
    date or a date-time (the version in force then). ``until`` defaults to the
    latest version. ``seller``: that seller's records alone, upserts and
    deletes (an item's seller never changes).

    Raises:
        LakeError: a version the table never had, a range that ends before it
            starts, or an old version whose files are gone (vacuumed): the
            message offers a full export instead.
    """
    latest = lake.version("records")
    if latest is None:
        lake.require()
        raise LakeError("the lake has no records table yet; push or ingest a feed first")
    start = reads.version_as_of(lake, "records", since, "since")
    end = latest if until is None else reads.version_as_of(lake, "records", until, "until")
    if end < start:
        raise UsageError(
            f"until (version {end}) is before since (version {start})", "until", "since"
        )
    empty = pa.array([], pa.int64())
    if end == start:
        return Changes(start, end, RECORDS.empty_table().select(EXPORTED), empty)
    try:
        before_version = reads.at_version(lake, "records", start)
        after_version = reads.at_version(lake, "records", end)
        before_files = before_version.files_by_block()
        after_files = after_version.files_by_block()
    except (*STORE_ERRORS, CatalogLakeError) as exc:
        raise _behind(start, exc) from None
    touched = sorted(
        {b for p, b in after_files.items() if before_files.get(p) != b}
        | {b for p, b in before_files.items() if after_files.get(p) != b}
    )
    if not touched:
        return Changes(start, end, RECORDS.empty_table().select(EXPORTED), empty)
    try:
        before = _rows(before_version, touched)
        after = _rows(after_version, touched)
    except (*STORE_ERRORS, pl.exceptions.PolarsError) as exc:
        raise _behind(start, exc) from None
    if seller is not None:
        before = before.filter(pl.col("seller") == seller)
        after = after.filter(pl.col("seller") == seller)
    content = [c for c in EXPORTED if c != "object_id"]
    upserts = after.filter(changed_rows(after, before, "object_id", content)).sort("object_id")
    gone = before.join(after, on="object_id", how="anti").select("object_id").sort("object_id")
    return Changes(
        start,
        end,
        conform(upserts.to_arrow(), RECORDS, EXPORTED),
        gone.to_series().to_arrow().cast(pa.int64()),
        len(touched),
    )


def _rows(version: reads.Version, blocks: list[int]) -> pl.DataFrame:
    """The records of some id blocks of a version, their exported columns in today's types.

    Cast in the scan, not through Arrow: the blocks of a scattered change can
    be most of the lake, and only the upserts leave Polars (``conform``).
    """
    frame = version.scan_blocks(blocks)
    stored = frame.collect_schema()
    return (
        frame.select(
            pl.col(c).cast(dtype) if c in stored else pl.lit(None, dtype).alias(c)
            for c, dtype in _EXPORTED_TYPES.items()
        )
        .with_columns(pl.col("seller").fill_null(DEFAULT_SELLER))  # none: the default seller's
        .collect()
    )


#: The exported columns' Polars types (``RECORDS``), which both snapshots are read as.
_EXPORTED_TYPES = pl.from_arrow(RECORDS.empty_table().select(EXPORTED)).schema


def _behind(version: int, exc: BaseException) -> LakeError:
    return LakeError(
        f"the lake no longer holds records version {version} ({first_line(exc)}): its files "
        "were vacuumed, or its log cleaned up. Export the whole catalog instead "
        "(catalog-lake export, or sync --full)"
    )


def write_changes(
    found: Changes,
    fmt: str,
    output: Any,
    deletes: Any = None,
    *,
    max_record_bytes: int | None = None,
) -> Exported:
    """Write ``found`` in ``fmt``: upserts in the import format of ``write_export``, then deletes.

    - ``jsonl``: ``{"op": "delete", "object_id": "17"}`` lines after the upserts;
    - ``algolia``: ``batch`` bodies of ``deleteObject`` requests with ``objectID``;
    - ``elasticsearch``, ``opensearch``: ``{"delete": {"_id": "17"}}`` actions;
    - ``meilisearch``, ``typesense``: their engines take deletions in a request of
      their own, so the ids go to ``deletes`` as one JSON array (``[]`` when none).

    The upserts are held to ``max_record_bytes`` as ``write_export`` holds
    them; its report is returned. A record left out, over its budget even
    trimmed, is deleted like the records deleted in the range
    (``_with_too_large``).

    Raises:
        CatalogLakeError: an unknown format, or deletions for a format that takes
            them apart with nowhere to write them.
    """
    require_format(fmt)
    if fmt in SEPARATE_DELETES and deletes is None and len(found.deletes):
        raise UsageError(
            f"{fmt} takes deletions in a request of its own; give deletes a file to write them to",
            "deletes",
        )
    report = write_export(found.upserts, fmt, output, max_record_bytes=max_record_bytes)
    gone = _with_too_large(found.deletes, report)
    if fmt in SEPARATE_DELETES:
        if deletes is None and len(gone):
            raise UsageError(
                f"{len(report.too_large):,} record(s) over max_record_bytes must be deleted from "
                f"the engine, and {fmt} takes deletions in a request of its own; give deletes a "
                "file to write them to",
                "deletes",
            )
        if deletes is not None:
            text = _id_array(gone)
            deletes.write(text if _is_text(deletes) else text.encode())
        return report
    ids = pl.Series("key", gone).cast(pl.String)
    if not len(ids):
        return report
    key = pl.col("key")
    if fmt == "jsonl":
        lines = pl.concat_str([pl.lit('{"op":"delete","object_id":"'), key, pl.lit('"}')])
    elif fmt == "algolia":
        request = pl.concat_str(
            [pl.lit('{"action":"deleteObject","body":{"objectID":"'), key, pl.lit('"}}')]
        )
        frame = ids.to_frame().select(
            request.alias("request"), (pl.int_range(pl.len()) // 1000).alias("body")
        )
        bodies = frame.group_by("body", maintain_order=True).agg(pl.col("request").str.join(","))
        bodies.select(pl.concat_str([pl.lit('{"requests":['), "request", pl.lit("]}")])).write_csv(
            output, include_header=False, quote_style="never"
        )
        return report
    else:  # elasticsearch, opensearch
        lines = pl.concat_str([pl.lit('{"delete":{"_id":"'), key, pl.lit('"}}')])
    ids.to_frame().select(lines).write_csv(output, include_header=False, quote_style="never")
    return report


def _with_too_large(deletes: pa.Array, report: Exported) -> pa.Array:
    """The deleted ids and those of records left out for their size, ascending.

    A record over its budget is not in the file, so the engine would keep its
    older version for good (issue 50: a price cut never reaching Algolia): it
    is deleted there instead, and the report names it.
    """
    ids = deletes.cast(pa.int64())
    if report.too_large:
        left_out = pa.array(report.too_large, pa.string()).cast(pa.int64())
        ids = pa.concat_arrays([ids, left_out]).unique().sort()
    return ids


def _id_array(deletes: pa.Array) -> str:
    """Deleted ids as Meilisearch's and Typesense's deletions take them: a JSON array of text."""
    return "[" + ",".join(f'"{i}"' for i in deletes.cast(pa.int64()).to_pylist()) + "]\n"


def _is_text(stream: Any) -> bool:
    return isinstance(stream, io.TextIOBase)


# --- sync ---------------------------------------------------------------------------

#: File name endings of a sync's export files, per format.
_SUFFIX = {
    "jsonl": "jsonl",
    "algolia": "algolia.ndjson",
    "meilisearch": "meilisearch.ndjson",
    "typesense": "typesense.jsonl",
    "elasticsearch": "bulk.ndjson",
    "opensearch": "bulk.ndjson",
}


def cursor(lake: Lake, target: str) -> dict[str, Any] | None:
    """A target's cursor: the latest row the ``cursors`` table holds for it, or None."""
    if lake.version("cursors") is None:
        return None
    rows = lake.read(
        "cursors",
        f'SELECT * FROM "cursors" WHERE target = {quote(target)} '
        "ORDER BY synced_at DESC, version DESC LIMIT 1",
    ).to_pylist()
    return rows[0] if rows else None


def cursors(lake: Lake) -> list[dict[str, Any]]:
    """Every target's cursor (its latest row)."""
    if lake.version("cursors") is None:
        return []
    rows = lake.read("cursors", 'SELECT * FROM "cursors" ORDER BY synced_at, version').to_pylist()
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        latest[row["target"]] = row
    return list(latest.values())


def sync(
    catalog: Any,
    target: str,
    fmt: str = "jsonl",
    *,
    full: bool = False,
    now: datetime | None = None,
    max_record_bytes: int | None = None,
    apply: str | None = None,
    seller: str | None = None,
) -> dict[str, Any]:
    """Export what changed since ``target``'s cursor to a new file there, then advance it.

    The first sync of a target (or ``full``) writes every record; each later one
    the changes since the cursor, one file per range named by its versions, the
    newest first, so that files sort in the order they apply
    (``00000000000000000015-since-00000000000000000012.jsonl``). A crash between the
    file and the cursor writes the same range again under the same name: the
    engines' upserts and deletes are idempotent, so loading it twice is harmless.

    Meilisearch and Typesense take documents and deletions in requests of their
    own: a range without upserts writes no documents file, one without deletes
    no deletions file (an engine refuses an empty payload), and the answer says
    ``null`` for the file not written. The upserts are held to
    ``max_record_bytes`` (``exports.write_export``); the answer counts those
    trimmed and left out.

    ``apply``, an engine index's URL, sends the files there (``loaders.apply``)
    before the cursor moves: a load that fails is sent again by the next sync.

    A target follows one lake (``targets.Target.claim``): its manifest names
    the lake, and another lake's sync is refused. A target without a manifest
    (new, emptied, or written before manifests) starts with every record. The
    cursor is kept under the target's resolved place, so a relative target
    means the same folder wherever the cursor was written. ``seller`` makes a
    target of that seller's records alone; its manifest says so, and a sync
    of another seller (or of every seller) into it is refused.

    Raises:
        UsageError: an empty or unknown target, or one that follows another lake.
        LakeError: the cursor's version is gone (vacuumed); the message offers
            ``full``. Or ``seller`` has no item in the lake.
    """
    require_format(fmt)
    place = Target.of(target)
    index = None
    if apply is not None:
        from .loaders import check

        index = check(fmt, apply)  # before anything is written
    lake = catalog.lake
    lake.require()
    if seller is not None and not catalog.has_seller(seller):
        raise LakeError(
            f"seller {seller!r} has no items in this lake; no target was bound to it, "
            "nothing was written"
        )
    lake.ensure()
    latest = lake.version("records") or 0
    manifest, new = place.claim(
        resolved_lake_uri(lake.uri),
        lake.identity() or "",
        fmt,
        now or catalog.clock(),
        full=full,
        seller=seller,
    )
    previous = None if full or new else cursor(lake, place.key)
    if previous is not None and previous["version"] >= latest:
        return {
            "target": place.key,
            "format": fmt,
            "from_version": previous["version"],
            "to_version": latest,
            "upserts": 0,
            "deletes": 0,
            "file": None,
            "lake_id": manifest["lake_id"],
        }
    if previous is None:
        upserts = reads.select(lake, "records", order_by="object_id", as_of=latest, seller=seller)
        found = Changes(-1, latest, upserts.select(EXPORTED), pa.array([], pa.int64()))
        name = f"{latest:020d}-full.{_SUFFIX[fmt]}"
    else:
        found = changes(lake, previous["version"], latest, seller)
        name = f"{latest:020d}-since-{previous['version']:020d}.{_SUFFIX[fmt]}"
    path, deletes_path, exported, deletes = _write_range(place, name, found, fmt, max_record_bytes)
    fitted = exported.summary()
    applied = None
    if index is not None and (path or deletes_path):
        from .loaders import load

        applied = load(index, path, deletes_path, place.read)
    row = {
        "target": place.key,
        "format": fmt,
        "version": latest,
        "synced_at": now or catalog.clock(),
        "file": path or deletes_path,
        "upserts": found.upserts.num_rows - len(exported.too_large),
        "deletes": deletes,
    }
    lake.append(
        "cursors", pa.Table.from_pylist([row], schema=CURSORS), {"catalog_lake.operation": "sync"}
    )
    return {
        "target": place.key,
        "format": fmt,
        "from_version": None if previous is None else previous["version"],
        "to_version": latest,
        "upserts": row["upserts"],
        "deletes": row["deletes"],
        "file": path,
        **({"deletes_file": deletes_path} if fmt in SEPARATE_DELETES else {}),
        "trimmed": fitted["trimmed"],
        "too_large": fitted["too_large"],
        **({"too_large_ids": fitted["too_large_ids"]} if fitted["too_large"] else {}),
        **{k: v for k, v in fitted.items() if k.startswith("long_filter_values")},
        **({"applied": applied} if apply is not None else {}),
        "lake_id": manifest["lake_id"],
    }


def _write_range(
    place: Target, name: str, found: Changes, fmt: str, max_record_bytes: int | None
) -> tuple[str | None, str | None, Exported, int]:
    """Write a range's file(s) in the target: documents, and deletions where apart; the count.

    Meilisearch and Typesense take documents and deletions in requests of their
    own, and an engine refuses an empty payload (issue 43): a file only for
    what the range holds. Deletions come last, since records left out for their
    size are deleted too (``write_changes``). Returns the documents' file and
    the deletions' (None where not written), the export's report, and how
    many objects the range deletes from the engine.
    """
    path = place.join(name)
    exported = Exported()
    side = io.StringIO() if fmt in SEPARATE_DELETES else None

    def write(out: Any) -> None:
        nonlocal exported
        exported = write_changes(found, fmt, out, side, max_record_bytes=max_record_bytes)

    if found.upserts.num_rows or fmt not in SEPARATE_DELETES:
        place.write(path, write)
    else:
        write(io.StringIO())  # no documents: only the deletions, into ``side``
    deletes = len(_with_too_large(found.deletes, exported))
    if side is None:
        return path, None, exported, deletes
    documents = path if found.upserts.num_rows > len(exported.too_large) else None
    if documents is None and found.upserts.num_rows:
        place.remove(path)  # every record was over its budget: nothing for the engine
    deletes_path = None
    if deletes:
        deletes_path = place.join(name + ".deletes.json")
        text = side.getvalue()
        place.write(deletes_path, lambda out: out.write(text))
    return documents, deletes_path, exported, deletes


def needed_version(lake: Lake) -> int | None:
    """The oldest records version a sync cursor still needs (``maintain`` keeps its files)."""
    found = [c["version"] for c in cursors(lake)]
    return min(found) if found else None


__all__ = ["Changes", "changes", "cursor", "cursors", "needed_version", "sync", "write_changes"]
