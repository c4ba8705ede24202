"""Nightly upkeep: re-price records whose discount window opened or closed, compact, vacuum.

Vacuum keeps files for ``retention_hours`` (7 days by default, Delta's own
default) so that a reader or writer that started before the vacuum never
loses a file it still needs.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pyarrow as pa

from .blocks import changed_rows, content_columns
from .lake import reads
from .literals import sql_timestamp
from .records import Batch, derive_records, unpack_attributes
from .schemas import ITEMS, RECORDS, TABLES
from .store import Catalog, live_records

DEFAULT_RETENTION_HOURS = 7 * 24


def last_maintenance(catalog: Catalog) -> datetime | None:
    """When the last maintain run started, from the runs table."""
    runs = catalog.lake.read(
        "runs", "SELECT max(started_at) AS t FROM \"runs\" WHERE kind = 'maintain'"
    )
    value = runs["t"][0].as_py() if runs.num_rows else None
    return value


def reprice(catalog: Catalog, since: datetime | None, now: datetime) -> int:
    """Re-derive records whose discount window opened or closed in (since, now]."""
    since_sql = sql_timestamp(since) if since is not None else "TIMESTAMP '1970-01-01T00:00:00Z'"
    now_sql = sql_timestamp(now)
    crossed = (
        f"((discount_start_date > {since_sql} AND discount_start_date <= {now_sql}) OR "
        f"(discount_end_date > {since_sql} AND discount_end_date <= {now_sql}))"
    )
    rows = catalog.lake.read(
        "items",
        f'SELECT * FROM "items" WHERE discounted_price IS NOT NULL AND deleted_at IS NULL '
        f"AND {crossed}",
    )
    if rows.num_rows == 0:
        return 0
    rows = rows.cast(ITEMS)
    items = Batch.of_table(rows)
    derived = derive_records(
        items.with_columns(**unpack_attributes(rows["attributes"])), now, catalog.synonyms
    ).table(RECORDS)
    changed = changed_records(catalog, derived)
    if changed.num_rows:
        catalog.lake.upsert_fenced(
            "records",
            changed,
            {"catalog_lake.operation": "reprice"},
            admit=lambda rows: live_records(catalog.lake, rows),  # a delete meanwhile wins
        )
    return changed.num_rows


def changed_records(catalog: Catalog, derived: pa.Table) -> pa.Table:
    """The rows of ``derived`` whose content differs from the stored record (or is new).

    A window that opened or closed does not always change a price (the record
    was written after the change, or the discounted price equals the sale
    price), and a record that did not change is neither rewritten nor counted.
    """
    ids = derived["client_item_id"].to_pylist()
    # Not its times; id_block follows object_id (and is a partition column, not in the files).
    content = content_columns(RECORDS, "records")
    stored = reads.lookup(catalog.lake, "records", "client_item_id", ids, content)
    compared = [c for c in content if c != "client_item_id"]
    return derived.filter(changed_rows(derived, stored, "client_item_id", compared))


def kept_versions(catalog: Catalog) -> list[int]:
    """The records versions whose files a ``sync`` cursor still needs: vacuum keeps them.

    A cursor at version v reads v's snapshot; vacuum keeps those files by
    version (deltalake's ``keep_versions``), not by age. An age would compare
    Delta's commit stamps with some other clock, and the catalog's clock is
    not Delta's (issue 50: a test clock a month ahead of the commits, or a
    calendar that moved on, kept too little).
    """
    from .changes import cursors

    return sorted({c["version"] for c in cursors(catalog.lake)})


def maintain(
    catalog: Catalog,
    *,
    retention_hours: int = DEFAULT_RETENTION_HOURS,
    compact: bool = True,
    vacuum: bool = True,
) -> dict[str, Any]:
    """Re-price, compact and vacuum every table; return what was done."""
    catalog.lake.require()
    started, started_at = time.perf_counter(), catalog.clock()
    catalog.lake.ensure()
    since = last_maintenance(catalog)
    repriced = reprice(catalog, since, started_at)
    report: dict[str, Any] = {
        "since": since.isoformat() if since else None,
        "repriced": repriced,
        "retention_hours": retention_hours,
        "tables": {},
    }
    kept = kept_versions(catalog)
    if kept:
        report["records_kept_versions"] = kept  # a sync cursor still reads their files
    for name in TABLES:
        done = catalog.lake.tidy(
            name,
            compact=compact,
            vacuum=vacuum,
            retention_hours=retention_hours,
            keep_versions=kept if name == "records" else (),
        )
        # A compaction is one large commit: checkpoint it so no one replays it.
        if catalog.lake.checkpoint([name]):
            done["checkpointed"] = True
        if name == "items" and done.get("files_added"):
            catalog.save_key_index()  # compaction rewrote every block's files
        if done:
            report["tables"][name] = done
    report["duration_s"] = round(time.perf_counter() - started, 3)
    from .runs import record_run

    record_run(catalog, "maintain", f"maintain-{started_at.isoformat()}", started_at, report, None)
    return report
