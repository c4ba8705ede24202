"""A run's bookkeeping: which files to read, and what the lake keeps of each run.

``plan`` decides from the ``files`` table which feed files a run reads;
``record_files`` and ``record_run`` write the ``files`` and ``runs`` rows
that let the next scheduled run skip what it has seen and let an analyst
look back (``runs``).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa

from .literals import quote
from .schemas import FILES, RUNS
from .sellers import DEFAULT_SELLER, sql_filter
from .sources import DEFAULT_PATTERN, FeedFile, FileResult, discover, is_remote
from .store import Catalog
from .summary import SKIP_FAILED, SKIP_UNCHANGED

#: A ``files`` row for a path whose items a full refresh deleted because the file was gone.
REMOVED = "removed"


@dataclass
class Plan:
    """The files of a run: those to ingest and those skipped as already seen."""

    run_id: str
    source: str
    to_ingest: list[FeedFile]
    skipped: list[FeedFile]
    refused: list[FileResult]
    #: Why each skipped file (by path) was left alone.
    reasons: dict[str, str] = field(default_factory=dict)
    #: Paths under the source whose items the lake holds now (their latest row: ingested).
    held: frozenset[str] = frozenset()
    #: The latest ``seen_at`` of the source's rows: the next rows are recorded after it.
    last_seen: datetime | None = None
    #: Whose items the run's files hold: a source is read afresh for each seller.
    seller: str = DEFAULT_SELLER

    def skipped_counts(self) -> dict[str, int]:
        """How many files were skipped for each reason."""
        return dict(Counter(self.reasons.get(f.path, SKIP_UNCHANGED) for f in self.skipped))

    def absent(self) -> list[str]:
        """Paths whose items the lake holds that this run did not find (a removed file)."""
        found = {f.path for f in (*self.to_ingest, *self.skipped)}
        return sorted(self.held - found)


@dataclass(frozen=True)
class Known:
    """What the lake's ``files`` table says of a source's paths.

    ``latest`` is each path's last row, as (checksum, status): what the lake
    took from that path last. ``deliveries`` counts the times each (path,
    checksum) was ingested, which numbers the next delivery's batch keys.
    """

    latest: dict[str, tuple[str, str]]
    deliveries: dict[tuple[str, str], int]
    last_seen: datetime | None = None

    def unchanged(self, feed: FeedFile) -> str | None:
        """Why ``feed`` needs no reading (``SKIP_UNCHANGED`` or ``SKIP_FAILED``), or None.

        Only when the last thing the lake took from its path is these very
        bytes: a file reverted to older bytes differs from the newer ones the
        lake holds, and a file put back after a full refresh deleted its items
        was last recorded ``removed`` (issue 41). Either is read again.
        """
        checksum, status = self.latest.get(feed.path, ("", ""))
        if not feed.checksum or checksum != feed.checksum:  # new: not hashed, never skipped
            return None
        return {"ingested": SKIP_UNCHANGED, "invalid": SKIP_FAILED}.get(status)


def plan(
    catalog: Catalog,
    source: str | Path,
    pattern: str = DEFAULT_PATTERN,
    force: bool = False,
    seller: str = DEFAULT_SELLER,
) -> Plan:
    """Discover feeds and decide which to ingest.

    A file is skipped when the lake's last row for its path has the same
    checksum and says ``ingested``, or ``invalid`` (a parse failure that would
    only repeat): then what the lake holds from it is what it says now. One
    dictionary look-up per file, and no file is parsed to decide. Files that
    failed on a lake error, changed, went back to older bytes or came back after
    a refresh deleted their items are read.
    """
    if is_remote(source):
        root = str(source).rstrip("/")
    else:
        root = str(Path(source).expanduser().resolve())
        if Path(root).is_file():
            root = str(Path(root).parent)
    known = known_files(catalog, root, seller)
    # Only a path the lake took before is hashed now: its bytes decide whether it is
    # read. A new one is hashed by whoever reads it (``FeedFile.hashed``).
    feeds, refused, passed_over = discover(
        source,
        pattern,
        catalog.lake.storage_options if is_remote(source) else None,
        hashed=known.latest.keys(),
    )
    to_ingest, skipped, reasons = [], [], {}
    for feed in feeds:
        reason = None if force else known.unchanged(feed)
        if reason is not None:
            skipped.append(feed)
            reasons[feed.path] = reason
        else:
            times = known.deliveries.get((feed.path, feed.checksum), 0)
            to_ingest.append(dataclasses.replace(feed, delivery=times))
    for path, reason in passed_over.items():
        skipped.append(FeedFile(root, path, "", 0))
        reasons[path] = reason
    held = frozenset(p for p, (_, status) in known.latest.items() if status == "ingested")
    return Plan(
        str(uuid.uuid4()),
        root,
        to_ingest,
        skipped,
        refused,
        reasons,
        held,
        known.last_seen,
        seller,
    )


def known_files(catalog: Catalog, root: str, seller: str = DEFAULT_SELLER) -> Known:
    """The ``files`` table's view of ``root``'s paths for ``seller`` (``Known``), columnar."""
    if not catalog.lake.exists():  # a dry run before the first ingest
        return Known({}, {})
    rows = catalog.lake.read(
        "files",
        f'SELECT path, checksum, status, seen_at FROM "files" WHERE source = {quote(root)} '
        f"AND {sql_filter(seller)}",
    ).to_pandas()
    # A source's rows are recorded at increasing times (``_append_files``), so the last
    # row of a path is the one with the latest time.
    latest = rows.sort_values("seen_at", kind="stable").drop_duplicates("path", keep="last")
    ingested = rows[rows["status"] == "ingested"].groupby(["path", "checksum"]).size()
    last = zip(latest["checksum"], latest["status"], strict=True)
    return Known(
        dict(zip(latest["path"], last, strict=True)),
        {key: int(times) for key, times in ingested.items()},
        rows["seen_at"].max().to_pydatetime() if len(rows) else None,
    )


def record_files(
    catalog: Catalog, plan_: Plan, results: list[FileResult], flow_run_id: str | None
) -> None:
    """Write one ``files`` row per file handled, so the next run can skip it."""
    if not results:
        return
    _append_files(
        catalog,
        plan_,
        flow_run_id,
        plan_.last_seen,
        {
            "path": [r.feed.path for r in results],
            "checksum": [r.feed.checksum for r in results],
            "size": [r.feed.size for r in results],
            "status": [r.status for r in results],
            "error": [r.error for r in results],
            "items": [r.items for r in results],
            "request_ids": [r.request_ids for r in results],
        },
    )


def record_removed(
    catalog: Catalog, plan_: Plan, paths: list[str], flow_run_id: str | None
) -> None:
    """Mark ``paths`` ``removed``: a full refresh deleted their items, the files being gone.

    The lake then holds nothing from them, so the same bytes put back are
    read again (``Known.unchanged``) rather than skipped as seen.
    """
    if not paths:
        return
    known = known_files(catalog, plan_.source, plan_.seller)
    _append_files(
        catalog,
        plan_,
        flow_run_id,
        known.last_seen,
        {
            "path": paths,
            "checksum": [known.latest.get(p, ("", ""))[0] for p in paths],
            "size": [0] * len(paths),
            "status": [REMOVED] * len(paths),
            "error": [None] * len(paths),
            "items": [0] * len(paths),
            "request_ids": [[] for _ in paths],
        },
    )


def _append_files(
    catalog: Catalog,
    plan_: Plan,
    flow_run_id: str | None,
    after: datetime | None,
    columns: dict[str, list],
) -> None:
    """Append a source's ``files`` rows, timed after its latest row (``after``).

    Which row of a path is the last decides whether its file is read again
    (``Known.unchanged``): a clock that stands still (a test's) or steps back
    (a corrected system clock) must not make an older row look newer.
    """
    rows = len(columns["path"])
    now = catalog.clock()
    if after is not None and now <= after:
        now = after + timedelta(microseconds=1)
    table = pa.table(
        {
            "source": [plan_.source] * rows,
            **columns,
            "run_id": [plan_.run_id] * rows,
            "flow_run_id": [flow_run_id] * rows,
            "seen_at": [now] * rows,
            "seller": [plan_.seller] * rows,
        },
        schema=FILES,
    )
    catalog.lake.ensure()
    catalog.lake.append("files", table, {"catalog_lake.run_id": plan_.run_id})


def record_run(
    catalog: Catalog, kind: str, run_id: str, started_at, summary: dict, flow_run_id: str | None
) -> None:
    """Keep a run's summary in the ``runs`` table (one row per run)."""
    row = {
        "run_id": [run_id],
        "kind": [kind],
        "started_at": [started_at],
        "finished_at": [catalog.clock()],
        "flow_run_id": [flow_run_id],
        "summary_json": [json.dumps(summary, ensure_ascii=False, default=str)],
    }
    catalog.lake.ensure()
    catalog.lake.append("runs", pa.table(row, schema=RUNS), {"catalog_lake.run_id": run_id})


def runs(catalog: Catalog, kind: str | None = None) -> pd.DataFrame:
    """Past runs with their summaries, newest first."""
    frame = catalog.lake.read("runs").to_pandas()
    if kind:
        frame = frame[frame["kind"] == kind]
    return frame.sort_values("started_at", ascending=False, ignore_index=True)
