"""Feed files in, batched pushes out: the ingest run shared by the CLI and the flows.

A run discovers feed files under a source (``sources``), skips those already
ingested with the same content, pushes each remaining file in batches (checked
on Dask workers when it has them), and records every file (path, checksum,
outcome) in the lake's ``files`` table so the next scheduled run knows what it
has seen.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .catalog import Catalog
from .errors import LakeError, first_line
from .groups import GroupWriter, Progress, push_files, quiet
from .lake import LAKE_ERRORS
from .refresh import Refresh
from .refresh import refresh as refresh_catalog
from .runs import Plan, plan, record_files, record_removed, record_run
from .sellers import DEFAULT_SELLER, seller_name
from .sources import (
    DEFAULT_PATTERN,
    NOT_FEEDS,
    FeedFile,
    FileResult,
    is_deletions,
)
from .summary import DRY_RUN_KEY, SKIP_UNCHANGED, run_summary

_log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 1_000
#: Items of consecutive batches written together (one commit per table).
DEFAULT_GROUP_ITEMS = 20_000
#: Stored and failed items a run lists one by one; after that only counts.
DETAIL_ITEMS = 10_000


def ingest_files(
    catalog: Catalog,
    files: list[FeedFile],
    batch_size: int = DEFAULT_BATCH_SIZE,
    flow_run_id: str | None = None,
    progress: Progress = quiet,
    group_items: int = DEFAULT_GROUP_ITEMS,
    detail_items: int = DETAIL_ITEMS,
    workers: int = 0,
    dask_address: str | None = None,
    client: Any = None,
    strict: bool = False,
    dry_run: bool = False,
    seen: set[str] | None = None,
    seller: str = DEFAULT_SELLER,
) -> list[FileResult]:
    """Push feed files in batches; never raises for a bad file, it reports it.

    Each batch of ``batch_size`` items is its own push (request id,
    response, ``pushes`` row). Batches of consecutive files are written
    together in groups of about ``group_items`` items (``Catalog.push_many``):
    a Delta commit costs about the same for ten items as for ten thousand,
    and feeds often come as many small files. Files are read one at a time,
    and at most three groups are in hand at once (one read, one checked, one
    committed: ``_pipeline``), so memory follows ``group_items``, not the feed.

    With Dask (``workers`` > 0 for a ``LocalCluster`` of that many one-thread
    workers, ``dask_address`` for a running scheduler, or a ``client``
    already connected), the workers check each group and write its data
    files (``staged``), and this process, the one committer, gives the ids
    and commits the groups in feed order (``workers.Chain``; a dry run's
    groups are only checked there, ``workers.checked_in_order``). Groups are
    then cut by file size, about ``group_items`` items of ``ITEM_BYTES``
    each. The result is the same as in process; a group a worker could not
    finish is redone here.

    A lake failure marks every file of its group ``error`` (their batches are
    upserts under idempotency keys, so trying again stores each item once
    with the same id) and the run goes on with the next group.

    The results keep full push responses for the first ``detail_items``
    items and counts only after that (``brief``), so a run of millions of
    items does not hold millions of ids: the full responses are in the
    ``pushes`` table, every failure in ``rejects``.

    ``strict`` and ``dry_run`` are ``Catalog.push``'s, for every batch.

    A deletions file (``sources.DELETE_SUFFIXES``) is applied where it stands
    in feed order: after the files before it are written, before the files
    after it are read. ``seen``, when given, collects every ``client_item_id``
    the run's pushes carried (a full refresh deletes the others).
    """
    writer = GroupWriter(catalog, flow_run_id, progress, detail_items, strict, dry_run, seller)
    writer.seen = seen
    for kind, segment in _segments(files):
        if kind == "delete":
            writer.delete(segment[0])
        else:
            push_files(writer, segment, batch_size, group_items, workers, dask_address, client)
    writer.checkpoint()
    return writer.results


def _segments(files: list[FeedFile]) -> Iterator[tuple[str, list[FeedFile]]]:
    """The run's files in feed order: runs of item files, and each deletions file alone."""
    pending: list[FeedFile] = []
    for feed in files:
        if is_deletions(feed.path):
            if pending:
                yield "push", pending
                pending = []
            yield "delete", [feed]
        else:
            pending.append(feed)
    if pending:
        yield "push", pending


def ingest(
    catalog: Catalog,
    source: str | Path,
    pattern: str = DEFAULT_PATTERN,
    batch_size: int = DEFAULT_BATCH_SIZE,
    force: bool = False,
    flow_run_id: str | None = None,
    progress: Progress = quiet,
    group_items: int = DEFAULT_GROUP_ITEMS,
    detail_items: int = DETAIL_ITEMS,
    workers: int = 0,
    dask_address: str | None = None,
    client: Any = None,
    strict: bool = False,
    dry_run: bool = False,
    refresh: Refresh | None = None,
    seller: str | None = None,
) -> dict[str, Any]:
    """Ingest every new or changed feed file under ``source``; return the run summary.

    The one ingest behind the CLI and the flows. ``batch_size`` is the items
    per push, ``group_items`` the items of consecutive pushes written with
    one commit per table, ``detail_items`` the items the summary lists one
    by one. ``workers`` starts a Dask ``LocalCluster`` of that many workers
    for the run, ``dask_address`` uses a running scheduler, and ``client``
    an open Dask client (a flow's ``DaskTaskRunner``): its workers check and
    write groups while this process commits them (``ingest_files``).

    ``strict`` refuses items for warnings too. ``dry_run`` answers what the
    run would, writing nothing: no lake is created, nothing is repaired,
    and the files are not recorded, so a real run afterwards reads them all.

    ``refresh`` makes the run a full-catalog refresh: once every file is
    stored, the items of its scope that the run did not carry are deleted
    (``refresh.refresh``), and ``summary["refresh"]`` says which, or why none.

    ``seller`` names whose items the files hold (``sellers``; None: the
    default seller). A source is read afresh for each seller: its files are
    recorded per seller, and its refresh deletes that seller's items alone.
    """
    started, started_at = time.perf_counter(), catalog.clock()
    seller = seller_name(seller)
    # The source is looked at before the lake is touched: a mistyped source
    # stops the run in one line and creates nothing.
    plan_ = plan(catalog, source, pattern, force, seller)
    found = len(plan_.to_ingest) + len(plan_.skipped) + len(plan_.refused)
    # A source with no feed file (empty, or only other files) writes nothing where there
    # is no lake yet: no nine empty tables.
    feeds = found - sum(1 for f in plan_.skipped if plan_.reasons.get(f.path) in NOT_FEEDS)
    writes = not dry_run and (feeds > 0 or catalog.lake.exists())
    repaired = []
    if writes:
        catalog.lake.ensure()
        # A push interrupted earlier (a killed run) is finished before new work.
        repaired = [
            r.get("catalog_push_request_id") or r["catalog_delete_request_id"]
            for r in catalog.repair(metrics=False)
        ]
    if repaired:
        progress("repaired", pushes=len(repaired))
    progress(
        "plan",
        files=len(plan_.to_ingest),
        skipped=len(plan_.skipped),
        reasons=plan_.skipped_counts(),
        bytes=sum(f.size for f in plan_.to_ingest),
    )
    results = list(plan_.refused)
    seen: set[str] | None = set() if refresh is not None else None
    results += ingest_files(
        catalog,
        plan_.to_ingest,
        batch_size,
        flow_run_id,
        progress,
        group_items,
        detail_items,
        workers,
        dask_address,
        client,
        strict,
        dry_run,
        seen,
        seller,
    )
    if writes:
        _recorded(
            lambda: record_files(catalog, plan_, results, flow_run_id),
            "the files it read",
            sum(len(r.responses) for r in results),
        )
    summary = run_summary(
        plan_.run_id,
        results,
        plan_.skipped,
        duration_s=time.perf_counter() - started,
        flow_run_id=flow_run_id,
        skipped_reasons=plan_.reasons,
    )
    summary["repaired"] = repaired
    summary["seller"] = seller
    if not feeds:
        summary["note"] = (
            f"0 files: nothing under {plan_.source} matches {pattern!r}"
            if not found
            else f"0 feed files under {plan_.source}"
        ) + ("" if writes or dry_run else "; no lake was created")
    if refresh is not None:
        summary["refresh"] = _refreshed(
            catalog, refresh, plan_, results, seen or set(), dry_run, flow_run_id
        )
    if dry_run:
        summary[DRY_RUN_KEY] = True
    if not writes:
        return summary
    _recorded(
        lambda: record_run(catalog, "ingest", plan_.run_id, started_at, summary, flow_run_id),
        "its summary",
        sum(len(r.responses) for r in results),
    )
    return summary


def _refreshed(
    catalog: Catalog,
    how: Refresh,
    plan_: Plan,
    results: list[FileResult],
    seen: set[str],
    dry_run: bool,
    flow_run_id: str | None,
) -> dict[str, Any]:
    """A full refresh's deletes after the run's files (``refresh.refresh``)."""
    unread = [
        f.path for f in plan_.skipped if plan_.reasons.get(f.path, SKIP_UNCHANGED) != SKIP_UNCHANGED
    ]
    report = refresh_catalog(
        catalog,
        how,
        source=plan_.source,
        run_id=plan_.run_id,
        failed_files=[r.feed.path for r in results if r.status != "ingested"] + unread,
        seen=seen,
        unchanged=[(f.path, f.checksum) for f in plan_.skipped if f.path not in unread],
        paths=[f.path for f in (*plan_.to_ingest, *plan_.skipped)],
        dry_run=dry_run,
        flow_run_id=flow_run_id,
        seller=plan_.seller,
    )
    if report["status"] == "deleted":
        # The lake no longer holds the removed files' items: the same files put back
        # must be read again, not skipped as seen (issue 41).
        _recorded(
            lambda: record_removed(catalog, plan_, plan_.absent(), flow_run_id),
            "the files it found removed",
            sum(len(r.responses) for r in results),
        )
    return report


def _recorded(write: Callable[[], None], what: str, pushes: int) -> None:
    """Record the end of a run; a failure (a full disk) is one line, and nothing is lost.

    The pushes that landed (``pushes`` answered, stored now or before) are in
    the lake under their batches' keys, so running the same command again,
    once the lake can be written, skips them (``already_stored``) and records
    the run. The message says how many there were, never "stored" of none.
    """
    try:
        write()
    except LAKE_ERRORS as exc:  # a full disk (ENOSPC), a read-only lake, ...
        done = f"the run's {pushes:,} push(es) are in the lake" if pushes else "nothing was stored"
        raise LakeError(
            f"{done}, but it could not record {what}: "
            f"{first_line(exc)}; run the same command again once the lake can be written"
        ) from None
