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
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from .catalog import Catalog
from .deletes import Refresh
from .deletes import refresh as refresh_catalog
from .errors import LakeError, PushError, first_line
from .lake import LAKE_ERRORS
from .push import Checked, PushRequest, check_requests
from .runs import Plan, plan, record_files, record_removed, record_run
from .sources import (
    DEFAULT_PATTERN,
    NOT_FEEDS,
    PARSE_ITEMS,
    FeedFile,
    FileBatches,
    FileResult,
    collector_paused,
    file_batches,
    file_groups,
    is_deletions,
    parse_together,
    read_deletions,
)
from .staged import Chain, Done
from .summary import DRY_RUN_KEY, SKIP_UNCHANGED, brief, carried, run_summary
from .validate import cell_schemas
from .workers import CheckedFiles, checked_in_order, dask_client

_log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 1_000
#: Items of consecutive batches written together (one commit per table).
DEFAULT_GROUP_ITEMS = 20_000
#: Stored and failed items a run lists one by one; after that only counts.
DETAIL_ITEMS = 10_000
#: Feed bytes per item assumed when groups are cut before parsing (workers).
ITEM_BYTES = 1_400

Progress = Callable[..., None]


def _quiet(event: str, **info: Any) -> None:
    """The default progress callback: say nothing."""


def ingest_files(
    catalog: Catalog,
    files: list[FeedFile],
    batch_size: int = DEFAULT_BATCH_SIZE,
    flow_run_id: str | None = None,
    progress: Progress = _quiet,
    group_items: int = DEFAULT_GROUP_ITEMS,
    detail_items: int = DETAIL_ITEMS,
    workers: int = 0,
    dask_address: str | None = None,
    client: Any = None,
    strict: bool = False,
    dry_run: bool = False,
    seen: set[str] | None = None,
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
    already connected), the workers parse, validate and type groups
    (``workers.check_files``) while this process, the one committer, writes them in
    feed order (``workers.checked_in_order``); groups are then cut by file size,
    about ``group_items`` items of ``ITEM_BYTES`` each. The result is the
    same as in process; a group a worker could not finish is redone here.

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
    writer = _GroupWriter(catalog, flow_run_id, progress, detail_items, strict, dry_run)
    writer.seen = seen
    for kind, segment in _segments(files):
        if kind == "delete":
            writer.delete(segment[0])
        else:
            _push_files(writer, segment, batch_size, group_items, workers, dask_address, client)
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


def _push_files(
    writer: _GroupWriter,
    files: list[FeedFile],
    batch_size: int,
    group_items: int,
    workers: int,
    dask_address: str | None,
    client: Any,
) -> None:
    """Push item files in groups, checked on Dask workers when there are some."""
    chunks = []
    if (workers > 0 or dask_address or client is not None) and len(files) > 1:
        chunks = file_groups(files, max_bytes=max(1, group_items) * ITEM_BYTES)
    if len(chunks) > 1:
        with dask_client(workers, dask_address, client) as dask:
            if writer.dry_run:  # nothing is written: workers check, this process answers
                for chunk, outcome in checked_in_order(chunks, batch_size, writer.strict, dask):
                    with collector_paused(collect=True):
                        if outcome is None:  # the worker failed: this process does its work
                            _write_in_process(writer, chunk, batch_size)
                        else:
                            _write_checked(writer, chunk, outcome)
                return
            chain = Chain(writer.catalog, dask, writer.strict, writer.flow_run_id)
            for done in chain.run(chunks, batch_size):
                _settle(writer, done, batch_size)
    else:
        pushes = writer.pushes(deque(files), batch_size, min(group_items, PARSE_ITEMS))
        _pipeline(writer, pushes, group_items)


def _settle(writer: _GroupWriter, done: Done, batch_size: int) -> None:
    """Take a group the workers wrote (``staged.Chain``), or write it here when they could not."""
    if done.again or done.fallback is not None:
        with collector_paused(collect=True):
            if done.fallback is not None:
                _write_checked(writer, done.chunk, done.fallback)
            else:
                _write_in_process(writer, done.chunk, batch_size)
        return
    group, position = [], 0
    for feed, pushes in zip(done.chunk, done.outline.pushes, strict=True):
        if isinstance(pushes, str):
            writer.invalid(feed, pushes)
            continue
        requests = done.outline.requests[position : position + pushes]
        group.append(Entry(writer.ingested(feed), requests, True, len(requests)))
        position += pushes
    if not group:
        return
    sizes = [request.size for request in done.outline.requests]
    if done.error is not None:
        writer.failed(group, done.error)
    else:
        writer.took(group, done.responses, [False] * len(done.responses))
    writer.report(group, sizes, [])  # nothing replayed: a replay is written in process


def _pipeline(writer: _GroupWriter, pushes: Iterator[Entry], group_items: int) -> None:
    """Groups read, checked and committed in three threads, each group a stage behind the last.

    Group n + 2 is read and parsed, n + 1 checked (``push.check_requests``)
    and n committed at once. All three spend much of their time in Polars,
    Arrow and delta-rs, which release the GIL, and a commit mostly waits on
    delta-rs: with two stages, the check waited for it (issue 29). Groups are
    committed one at a time, in feed order, as before; a group's cells are
    freed once it is checked.

    What the threads share, and who writes it:

    - ``writer.results``: only the reading thread appends (``read``, ``invalid``:
      a file's result is made when it is read, so the list is in feed order).
      The committing thread fills in the results it is handed (status, ids,
      counts), each of a file the reading thread has finished with. A deletions
      file's result is appended by ``delete``, which runs between pipelines,
      never beside one.
    - ``writer.progress``: called from the reading thread (``read``,
      ``parsed``) and the committing thread (``file``, ``stored``). The
      callbacks the CLI and the flows pass only count, under their own lock
      (``terminal.IngestProgress``) or in one ``logging`` call per event.
    - ``writer.detail_left``, ``wrote``, ``seen``: the committing thread alone.
    - The garbage collector's switch is the process's: this thread pauses it
      while a group is checked, and the reading thread while it parses
      (``collector_paused``). Whichever pause ends first turns it back on while
      the other still runs, which costs that one time, never a wrong result.
    """
    with (
        ThreadPoolExecutor(1, thread_name_prefix="catalog-lake-read") as reader,
        ThreadPoolExecutor(1, thread_name_prefix="catalog-lake-commit") as committer,
    ):
        pending = reader.submit(writer.read_group, pushes, group_items)
        cell_schemas()  # pandera is imported while the first group is read, not before
        committing: Future[None] | None = None
        while True:
            # The collector waits until the group is checked and its cells freed.
            with collector_paused(collect=True):
                group = pending.result()
                if not group:
                    break
                pending = reader.submit(writer.read_group, pushes, group_items)
                group, checked = writer.check(group)
                if committing is not None:
                    committing.result()  # a full disk stops the run here
                committing = committer.submit(writer.write, group, checked)
        if committing is not None:
            committing.result()


class Entry(NamedTuple):
    """Pushes of one file in a group: its result, the pushes, whether they end the file."""

    result: FileResult
    requests: list[PushRequest]
    last: bool
    batches: int  # the file's pushes in all


class _GroupWriter:
    """Writes groups of file pushes and keeps the results of the run's files in order."""

    def __init__(
        self,
        catalog: Catalog,
        flow_run_id,
        progress: Progress,
        detail_items: int,
        strict: bool = False,
        dry_run: bool = False,
    ):
        self.catalog = catalog
        self.flow_run_id = flow_run_id
        self.progress = progress
        self.detail_left = detail_items
        self.strict = strict
        self.dry_run = dry_run
        self.results: list[FileResult] = []
        self.wrote = False
        #: Every client_item_id the run's pushes carried, when a full refresh needs them.
        self.seen: set[str] | None = None

    def invalid(self, feed: FeedFile, error: Exception | str) -> None:
        self.results.append(FileResult(feed, "invalid", error=str(error)))
        self.progress("file", file=feed.path, status="invalid", items=0, bytes=feed.size)

    def ingested(self, feed: FeedFile) -> FileResult:
        result = FileResult(feed, "ingested")
        self.results.append(result)
        return result

    def read(self, feed: FeedFile, batch_size: int) -> tuple[FileResult, FileBatches] | None:
        """A file read and checked whole; None (and the file reported) if it is unusable."""
        try:
            batches = file_batches(feed, batch_size, self.strict)
        except (PushError, OSError) as exc:
            self.invalid(feed, exc)
            return None
        self.progress("read", file=feed.path, bytes=feed.size)
        return self.ingested(feed), batches

    def read_all(self, feed: FeedFile, batch_size: int) -> Entry | None:
        """A file's pushes, all parsed, as one entry of a group (the workers' fallback)."""
        entry = self.read(feed, batch_size)
        if entry is None:
            return None
        result, batches = entry
        return Entry(result, list(batches.pushes(self._parsed(result.feed))), True, batches.batches)

    def _parsed(self, feed: FeedFile) -> Callable[[int, int], None]:
        def parsed(done: int, total: int) -> None:
            self.progress("parsed", file=feed.path, items=done, total=total, bytes=feed.size)

        return parsed

    def pushes(self, queue: deque[FeedFile], batch_size: int, parse_items: int) -> Iterator[Entry]:
        """Every push of the queue's files in order, parsed ``parse_items`` items at a time.

        Small files are read until they hold that many items, and parsed
        together (``sources.parse_together``); a larger file is parsed that
        many items at a time. Memory follows the group, never the file.
        """
        carried: list[tuple[FileResult, FileBatches]] = []
        while queue or carried:
            ahead, carried = carried, []
            items = sum(batches.total for _, batches in ahead)
            while queue and items < parse_items:
                entry = self.read(queue.popleft(), batch_size)
                if entry is not None:
                    entry[1].read_together = max(parse_items, batch_size)
                    ahead.append(entry)
                    items += entry[1].total
            with collector_paused():
                # The file that took the part past ``parse_items`` opens the next part
                # rather than being parsed alone (files of 997 items: 5 in a part, not 5 + 1).
                held = parse_together(
                    [batches for _, batches in ahead], parse_items, hold_last=bool(queue)
                )
            if held:
                ahead, carried = ahead[: -len(held)], ahead[-len(held) :]
            yield from self._pushes_of(ahead)

    def _pushes_of(self, files: list[tuple[FileResult, FileBatches]]) -> Iterator[Entry]:
        for result, batches in files:
            done = 0
            try:
                for request in batches.pushes(self._parsed(result.feed)):
                    done += 1
                    yield Entry(result, [request], done == batches.batches, batches.batches)
            except PushError as exc:
                # The file was checked whole, so only an item our decoder cannot take and
                # msgspec could (nesting near the recursion limit) gets here: the batches
                # before it are stored, the rest of the file is not, and the file says so.
                result.status = "error"
                result.error = f"batch {done + 1} of {batches.batches}: {exc}"
                self.progress("file", file=result.feed.path, status=result.status,
                              items=result.items, already_stored=result.already_stored,
                              bytes=result.feed.size)  # fmt: skip

    def read_group(self, pushes: Iterator[Entry], group_items: int) -> list[Entry]:
        """The next pushes, until they hold ``group_items`` items or run out.

        Small files share a group; a large file's batches run over several
        groups, so memory follows ``group_items``, never the file (issue 26).
        """
        group: list[Entry] = []
        pending = 0
        for entry in pushes:
            if group and group[-1].result is entry.result:
                group[-1] = group[-1]._replace(
                    requests=group[-1].requests + entry.requests, last=entry.last
                )
            else:
                group.append(entry)
            pending += len(entry.requests[0].payload.item_json)
            if pending >= group_items:
                break
        return group

    def check(self, group: list[Entry]) -> tuple[list[Entry], Checked]:
        """The group with its check made ahead (``push.check_requests``), for ``write``.

        Every push of the group was parsed by the reader, so the check raises
        for none of them: a bad item is a refusal in the check's results.
        """
        light, checked = check_requests([request for entry in group for request in entry.requests])
        entries, position = [], 0
        for entry in group:
            end = position + len(entry.requests)
            entries.append(entry._replace(requests=light[position:end]))
            position = end
        return entries, checked

    def write(self, group: list[Entry], checked: Checked | None = None) -> None:
        """Push a group's requests with one ``push_many``."""
        if not group:
            return
        requests = [request for entry in group for request in entry.requests]
        replayed: list[bool] = []
        try:
            responses = self.catalog.push_many(
                requests,
                flow_run_id=self.flow_run_id,
                checked=checked,
                replayed=replayed,
                dry_run=self.dry_run,
            )
        except PushError as exc:
            self.failed(group, exc)
        else:
            self.took(group, responses, replayed)
        self.report(group, [len(r.payload.item_json) for r in requests], replayed)

    def failed(self, group: list[Entry], error: Exception | str) -> None:
        """The lake refused a group: every file of it failed, and says why."""
        if _disk_full(error):
            # A full disk does not clear up mid-run: stop at once, in one line, rather
            # than fail every remaining group. Interrupted pushes are repaired and the
            # files not recorded are read again by the next run.
            raise LakeError(
                f"the lake's disk is full ({self.catalog.lake.uri}): the pushes that "
                "landed are kept; free some space and run the same command again"
            ) from None
        for entry in group:
            entry.result.status, entry.result.error = "error", str(error)

    def took(self, group: list[Entry], responses: list[dict], replayed: list[bool]) -> None:
        """A group's responses, kept in its files' results (in full for the first items)."""
        self.wrote = not self.dry_run
        position = 0
        for entry in group:
            result = entry.result
            end = position + len(entry.requests)
            for response, again in zip(
                responses[position:end], replayed[position:end], strict=True
            ):
                received = int(response["catalog_push_received_product_count"])
                if self.seen is not None:
                    self.seen.update(carried(response))
                if again:
                    result.already_stored += received
                if received <= self.detail_left:
                    self.detail_left -= received
                else:
                    self.detail_left, response = 0, brief(response)
                result.responses.append(response)
            position = end

    def report(self, group: list[Entry], sizes: list[int], replayed: list[bool]) -> None:
        """Progress of a group written: a ``batch`` event per push, a ``file`` event per file."""
        flags = iter(replayed if len(replayed) == len(sizes) else [False] * len(sizes))
        items = iter(sizes)
        for entry in group:
            result = entry.result
            for _, again, size in zip(entry.requests, flags, items, strict=False):
                self.progress(
                    "batch",
                    file=result.feed.path,
                    items=size,
                    already_stored=again,
                    bytes=result.feed.size,
                    batches=entry.batches,
                )
            if entry.last:
                self.progress(
                    "file",
                    file=result.feed.path,
                    status=result.status,
                    items=result.items,
                    already_stored=result.already_stored,
                    bytes=result.feed.size,
                )

    def delete(self, feed: FeedFile) -> None:
        """Apply a deletions file as one delete (in batches of the delete's limit)."""
        from .deletes import DELETE_BATCH

        try:
            ids = read_deletions(feed)
        except PushError as exc:
            self.invalid(feed, exc)
            return
        result = FileResult(feed, "ingested")
        self.results.append(result)
        try:
            for number, start in enumerate(range(0, len(ids), DELETE_BATCH)):
                result.deletions.append(
                    self.catalog.delete(
                        ids[start : start + DELETE_BATCH],
                        idempotency_key=f"{feed.batch_key(DELETE_BATCH, number)}:delete",
                        source=feed.path,
                        flow_run_id=self.flow_run_id,
                        dry_run=self.dry_run,
                    )
                )
        except (PushError, *LAKE_ERRORS) as exc:
            result.status, result.error = "error", first_line(exc)
        else:
            self.wrote = self.wrote or not self.dry_run
        self.progress("file", file=feed.path, status=result.status, items=len(ids),
                      already_stored=0, bytes=feed.size)  # fmt: skip

    def checkpoint(self) -> None:
        """After a run that wrote anything, checkpoint the tables it wrote (``Lake.checkpoint``).

        The next push, and every reader, then replays a few small commits
        instead of the run's large ones. Best effort: a table without a
        fresh checkpoint is only slower to open, so a failure is logged.
        """
        if not self.wrote:
            return
        lake = self.catalog.lake
        try:
            lake.checkpoint(("raw", "rejects", "items", "records", "pushes"))
            # The next process's first push then reads few key files (``save_key_index``).
            self.catalog.save_key_index()
        except LakeError as exc:
            _log.warning("%s", exc)


def _write_checked(writer: _GroupWriter, chunk: list[FeedFile], outcome: CheckedFiles) -> None:
    """Write a group checked by ``check_files`` on a worker."""
    group, position = [], 0
    for feed, pushes in zip(chunk, outcome.pushes, strict=True):
        if isinstance(pushes, str):
            writer.invalid(feed, pushes)
            continue
        requests = outcome.requests[position : position + pushes]
        group.append(Entry(writer.ingested(feed), requests, True, len(requests)))
        position += pushes
    writer.write(group, outcome.checked.unpacked() if outcome.checked is not None else None)


def _write_in_process(writer: _GroupWriter, chunk: list[FeedFile], batch_size: int) -> None:
    """One group read, checked and written in this process (the workers' fallback)."""
    entries = [writer.read_all(feed, batch_size) for feed in chunk]
    writer.write([entry for entry in entries if entry is not None])


def ingest(
    catalog: Catalog,
    source: str | Path,
    pattern: str = DEFAULT_PATTERN,
    batch_size: int = DEFAULT_BATCH_SIZE,
    force: bool = False,
    flow_run_id: str | None = None,
    progress: Progress = _quiet,
    group_items: int = DEFAULT_GROUP_ITEMS,
    detail_items: int = DETAIL_ITEMS,
    workers: int = 0,
    dask_address: str | None = None,
    client: Any = None,
    strict: bool = False,
    dry_run: bool = False,
    refresh: Refresh | None = None,
) -> dict[str, Any]:
    """Ingest every new or changed feed file under ``source``; return the run summary.

    The one ingest behind the CLI and the flows. ``batch_size`` is the items
    per push, ``group_items`` the items of consecutive pushes written with
    one commit per table, ``detail_items`` the items the summary lists one
    by one. ``workers`` starts a Dask ``LocalCluster`` of that many workers
    for the run, ``dask_address`` uses a running scheduler, and ``client``
    an open Dask client (a flow's ``DaskTaskRunner``): its workers check
    groups while this process writes them (``ingest_files``).

    ``strict`` refuses items for warnings too. ``dry_run`` answers what the
    run would, writing nothing: no lake is created, nothing is repaired,
    and the files are not recorded, so a real run afterwards reads them all.

    ``refresh`` makes the run a full-catalog refresh: once every file is
    stored, the items of its scope that the run did not carry are deleted
    (``deletes.refresh``), and ``summary["refresh"]`` says which, or why none.
    """
    started, started_at = time.perf_counter(), catalog.clock()
    # The source is looked at before the lake is touched: a mistyped source
    # stops the run in one line and creates nothing.
    plan_ = plan(catalog, source, pattern, force)
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
    if not feeds:
        summary["note"] = (
            f"0 files: nothing under {plan_.source} matches {pattern!r}"
            if not found
            else f"0 feed files under {plan_.source}"
        ) + ("" if writes or dry_run else "; no lake was created")
    if refresh is not None:
        summary["refresh"] = _refreshed(catalog, refresh, plan_, results, seen or set(),
                                        dry_run, flow_run_id)  # fmt: skip
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
    """A full refresh's deletes after the run's files (``deletes.refresh``)."""
    unread = [f.path for f in plan_.skipped if plan_.reasons.get(f.path, SKIP_UNCHANGED)
              != SKIP_UNCHANGED]  # fmt: skip
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


def _disk_full(exc: BaseException) -> bool:
    """Whether a lake write failed for want of space (ENOSPC, however deltalake words it)."""
    text = str(exc)
    return "No space left on device" in text or "os error 28" in text
