"""An ingest's files as groups of pushes: read, checked and written in feed order.

Feed files are read one at a time into batched pushes (``GroupWriter.pushes``),
and consecutive pushes are written together, a group of about
``group_items`` items sharing one commit per table. In this process a group
is read, the next checked and the one before committed at once
(``_pipeline``); with Dask, workers check and write each group's files and
this process commits them in feed order (``workers.Chain``). Either way every
file's result is kept, in feed order, for the run's summary (``feeds``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

from .catalog import Catalog
from .errors import LakeError, PushError, first_line
from .lake import LAKE_ERRORS
from .push import Checked, PushRequest, check_requests
from .sellers import DEFAULT_SELLER
from .sources import (
    PARSE_ITEMS,
    FeedFile,
    FileBatches,
    FileResult,
    collector_paused,
    file_batches,
    file_groups,
    parse_together,
    read_deletions,
)
from .staged import CheckedFiles, as_read
from .summary import brief, carried, is_brief
from .validate import cell_schemas
from .workers import Chain, Done, checked_in_order, dask_client

_log = logging.getLogger(__name__)


#: Feed bytes per item assumed when groups are cut before parsing (workers).
ITEM_BYTES = 1_400

Progress = Callable[..., None]


def quiet(event: str, **info: Any) -> None:
    """The default progress callback: say nothing."""


def push_files(
    writer: GroupWriter,
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
            chain = Chain(writer.catalog, dask, writer.strict, writer.flow_run_id, writer.seller)
            for done in chain.run(chunks, batch_size):
                _settle(writer, done, batch_size)
    else:
        pushes = writer.pushes(deque(files), batch_size, min(group_items, PARSE_ITEMS))
        _pipeline(writer, pushes, group_items)


def _settle(writer: GroupWriter, done: Done, batch_size: int) -> None:
    """Take a group the workers wrote (``workers.Chain``), or write it here when they could not."""
    if done.again or done.fallback is not None:
        with collector_paused(collect=True):
            if done.fallback is not None:
                _write_checked(writer, done.chunk, done.fallback)
            else:
                _write_in_process(writer, done.chunk, batch_size)
        return
    group, position = [], 0
    for feed, pushes in zip(as_read(done.chunk, done.outline), done.outline.pushes, strict=True):
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
        texts = done.written.texts if done.written is not None else None
        writer.took(group, done.responses, [False] * len(done.responses), texts)
    writer.report(group, sizes, [])  # nothing replayed: a replay is written in process


def _pipeline(writer: GroupWriter, pushes: Iterator[Entry], group_items: int) -> None:
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


class GroupWriter:
    """Writes groups of file pushes and keeps the results of the run's files in order."""

    def __init__(
        self,
        catalog: Catalog,
        flow_run_id,
        progress: Progress,
        detail_items: int,
        strict: bool = False,
        dry_run: bool = False,
        seller: str = DEFAULT_SELLER,
    ):
        self.catalog = catalog
        self.seller = seller  # every push of the run is this seller's
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
        """A file that could not be read as a feed: its result says why."""
        self.results.append(FileResult(feed, "invalid", error=str(error)))
        self.progress("file", file=feed.path, status="invalid", items=0, bytes=feed.size)

    def ingested(self, feed: FeedFile) -> FileResult:
        """A file read as a feed: its result, filled in as its groups are written."""
        result = FileResult(feed, "ingested")
        self.results.append(result)
        return result

    def read(self, feed: FeedFile, batch_size: int) -> tuple[FileResult, FileBatches] | None:
        """A file read and checked whole; None (and the file reported) if it is unusable."""
        try:
            batches = file_batches(feed, batch_size, self.strict)
        except (PushError, OSError) as exc:
            self.invalid(feed.hashed_if_readable(), exc)  # recorded with its checksum
            return None
        self.progress("read", file=feed.path, bytes=feed.size)
        return self.ingested(batches.feed), batches

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
                self.progress(
                    "file",
                    file=result.feed.path,
                    status=result.status,
                    items=result.items,
                    already_stored=result.already_stored,
                    bytes=result.feed.size,
                )

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
        requests = [
            dataclasses.replace(request, seller=self.seller)
            for entry in group
            for request in entry.requests
        ]
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

    def took(
        self,
        group: list[Entry],
        responses: list[dict],
        replayed: list[bool],
        texts: list[str] | None = None,
    ) -> None:
        """A group's responses, kept in its files' results (in full for the first items).

        A response a worker sent in brief is decoded from its stored text
        (``texts``, one per response) where it is kept in full or its client
        ids are wanted (``staged.Written``).
        """
        self.wrote = not self.dry_run
        position = 0
        for entry in group:
            result = entry.result
            end = position + len(entry.requests)
            for number, (response, again) in enumerate(
                zip(responses[position:end], replayed[position:end], strict=True), position
            ):
                received = int(response["catalog_push_received_product_count"])
                if (
                    texts is not None
                    and is_brief(response)
                    and (self.seen is not None or received <= self.detail_left)
                ):
                    response = json.loads(texts[number])
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
            feed = feed.hashed()
            ids = read_deletions(feed)
        except (PushError, OSError) as exc:
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
                        seller=self.seller,
                    )
                )
        except (PushError, *LAKE_ERRORS) as exc:
            result.status, result.error = "error", first_line(exc)
        else:
            self.wrote = self.wrote or not self.dry_run
        self.progress(
            "file",
            file=feed.path,
            status=result.status,
            items=len(ids),
            already_stored=0,
            bytes=feed.size,
        )

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


def _write_checked(writer: GroupWriter, chunk: list[FeedFile], outcome: CheckedFiles) -> None:
    """Write a group checked by ``check_files`` on a worker."""
    group, position = [], 0
    for feed, pushes in zip(as_read(chunk, outcome), outcome.pushes, strict=True):
        if isinstance(pushes, str):
            writer.invalid(feed, pushes)
            continue
        requests = outcome.requests[position : position + pushes]
        group.append(Entry(writer.ingested(feed), requests, True, len(requests)))
        position += pushes
    writer.write(group, outcome.checked.unpacked() if outcome.checked is not None else None)


def _write_in_process(writer: GroupWriter, chunk: list[FeedFile], batch_size: int) -> None:
    """One group read, checked and written in this process (the workers' fallback)."""
    entries = [writer.read_all(feed, batch_size) for feed in chunk]
    writer.write([entry for entry in entries if entry is not None])


def _disk_full(exc: BaseException) -> bool:
    """Whether a lake write failed for want of space (ENOSPC, however deltalake words it)."""
    text = str(exc)
    return "No space left on device" in text or "os error 28" in text
