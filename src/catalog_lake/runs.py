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
from pathlib import Path

import pandas as pd
import pyarrow as pa

from .catalog import Catalog
from .schemas import FILES, RUNS
from .sources import DEFAULT_PATTERN, FeedFile, FileResult, discover, is_remote
from .summary import SKIP_FAILED, SKIP_UNCHANGED


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

    def skipped_counts(self) -> dict[str, int]:
        """How many files were skipped for each reason."""
        return dict(Counter(self.reasons.get(f.path, SKIP_UNCHANGED) for f in self.skipped))


def plan(
    catalog: Catalog, source: str | Path, pattern: str = DEFAULT_PATTERN, force: bool = False
) -> Plan:
    """Discover feeds and decide which to ingest.

    A file is skipped when the lake already holds the same path with the
    same checksum as ``ingested`` or ``invalid`` (a parse failure that would
    only repeat). Files that failed on a lake error are tried again.
    """
    feeds, refused, passed_over = discover(
        source, pattern, catalog.lake.storage_options if is_remote(source) else None
    )
    if is_remote(source):
        root = str(source).rstrip("/")
    else:
        root = str(Path(source).expanduser().resolve())
        if Path(root).is_file():
            root = str(Path(root).parent)
    seen = _seen(catalog, root)
    to_ingest, skipped, reasons = [], [], {}
    for feed in feeds:
        times, failed = seen.get((feed.path, feed.checksum), (0, False))
        if not force and (times or failed):
            skipped.append(feed)
            reasons[feed.path] = SKIP_UNCHANGED if times else SKIP_FAILED
        else:
            to_ingest.append(dataclasses.replace(feed, delivery=times))
    for path, reason in passed_over.items():
        skipped.append(FeedFile(root, path, "", 0))
        reasons[path] = reason
    return Plan(str(uuid.uuid4()), root, to_ingest, skipped, refused, reasons)


def _seen(catalog: Catalog, root: str) -> dict[tuple[str, str], tuple[int, bool]]:
    """Per (path, checksum) under ``root``: times ingested, and whether it failed to parse."""
    if not catalog.lake.exists():  # a dry run before the first ingest
        return {}
    files = catalog.lake.read("files").to_pandas()
    files = files[files["source"] == root]
    seen: dict[tuple[str, str], tuple[int, bool]] = {}
    for (path, checksum), status in files.groupby(["path", "checksum"])["status"]:
        seen[(path, checksum)] = (
            int((status == "ingested").sum()),
            bool((status == "invalid").any()),
        )
    return seen


def record_files(
    catalog: Catalog, plan_: Plan, results: list[FileResult], flow_run_id: str | None
) -> None:
    """Write one ``files`` row per file handled, so the next run can skip it."""
    if not results:
        return
    now = catalog.clock()
    rows = {
        "source": [plan_.source] * len(results),
        "path": [r.feed.path for r in results],
        "checksum": [r.feed.checksum for r in results],
        "size": [r.feed.size for r in results],
        "status": [r.status for r in results],
        "error": [r.error for r in results],
        "items": [r.items for r in results],
        "request_ids": [r.request_ids for r in results],
        "run_id": [plan_.run_id] * len(results),
        "flow_run_id": [flow_run_id] * len(results),
        "seen_at": [now] * len(results),
    }
    catalog.lake.ensure()
    catalog.lake.append(
        "files", pa.table(rows, schema=FILES), {"catalog_lake.run_id": plan_.run_id}
    )


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
