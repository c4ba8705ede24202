"""Feed files in, batched pushes out: the ingest run shared by the CLI and the flows.

A run discovers feed files under a source folder, skips those already
ingested with the same content, pushes each remaining file in batches, and
records every file (path, checksum, outcome) in the lake's ``files`` table so
the next scheduled run knows what it has seen.
"""

from __future__ import annotations

import dataclasses
import gc
import gzip
import hashlib
import io
import json
import logging
import sys
import time
import uuid
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa

from . import settings
from .catalog import Catalog
from .errors import CatalogLakeError, LakeError, PushError
from .lake import LAKE_ERRORS
from .parse import (
    ParsedPush,
    check_items,
    combine,
    decode_payload,
    parse_push,
    product_items,
)
from .push import Checked, PushRequest, ShippedCheck, check_group
from .schemas import FILES, RUNS
from .summary import (
    DRY_RUN_KEY,
    FAILED_ITEMS_KEY,
    SKIP_UNCHANGED,
    WARNING_ITEMS_KEY,
    failure_codes,
    run_summary,
    warned_count,
    warning_codes,
)

_log = logging.getLogger(__name__)

#: File endings a feed may have; each may also end in .gz.
FEED_SUFFIXES = (".json", ".jsonl", ".ndjson")
DEFAULT_PATTERN = "**/*"
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


@dataclass(frozen=True)
class FeedFile:
    """One feed file found under a source folder."""

    source: str  # the source folder, resolved
    path: str  # relative to the source, with forward slashes
    checksum: str  # sha256 of the file's bytes
    size: int
    #: How many times the lake already ingested this path with these bytes: a
    #: forced re-ingest is a new delivery, a resumed run the same one.
    delivery: int = 0
    #: Object-store settings for a remote source; never shown or recorded.
    storage_options: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def batch_key(self, batch_size: int, number: int) -> str:
        """The idempotency key of one batch of this delivery of this file.

        Bound to the file's place (source and path), its bytes and its
        delivery, so a copy of an old file under a new name is a new delivery
        and is pushed (issue 16: day 3 re-sending day 1's prices must win over
        day 2's), while a run resumed after a kill finds the batches that
        already landed under the same keys and does not push them again.
        """
        place = hashlib.sha256(f"{self.source}\0{self.path}".encode()).hexdigest()[:16]
        return f"file:{place}:{self.checksum}:{self.delivery}:{batch_size}:{number}"

    @property
    def absolute(self) -> Path:
        """Where the file is on disk (a local source)."""
        return Path(self.source) / self.path

    def open(self) -> BinaryIO:
        """The file's bytes as a stream, from a folder or an object store."""
        if not is_remote(self.source):
            return self.absolute.open("rb")
        store, root = object_store(self.source, self.storage_options)
        return store.open_input_stream(f"{root}/{self.path}")  # type: ignore[return-value]


def is_remote(source: str | Path) -> bool:
    """Whether a feed source is an object-store URI (``s3://bucket/prefix``)."""
    return "://" in str(source) and not str(source).startswith("file://")


def object_store(uri: str, storage_options: dict[str, str] | None = None):
    """A pyarrow filesystem and the path in it for an object-store URI.

    The standard ``AWS_*`` variables configure it, as they do the lake;
    ``storage_options`` (the CLI's ``--storage-option``) take precedence.
    """
    import pyarrow.fs as pafs

    options = {k.upper(): v for k, v in (storage_options or {}).items()}
    if not uri.startswith("s3://") or not options:
        try:
            return pafs.FileSystem.from_uri(uri)
        except (pa.ArrowInvalid, OSError) as exc:
            raise CatalogLakeError(f"cannot open the feed source {uri}: {exc}") from None
    endpoint = options.get("AWS_ENDPOINT_URL") or options.get("AWS_ENDPOINT")
    store = pafs.S3FileSystem(
        access_key=options.get("AWS_ACCESS_KEY_ID"),
        secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
        session_token=options.get("AWS_SESSION_TOKEN"),
        region=options.get("AWS_REGION") or options.get("AWS_DEFAULT_REGION"),
        endpoint_override=endpoint.split("://", 1)[-1] if endpoint else None,
        scheme=endpoint.split("://", 1)[0] if endpoint and "://" in endpoint else "https",
    )
    return store, uri.removeprefix("s3://").rstrip("/")


@dataclass
class FileResult:
    """What happened to one file: its pushes, or why it failed."""

    feed: FeedFile
    status: str  # ingested | invalid | error
    responses: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    #: Items of batches an earlier, interrupted run had already stored: their
    #: responses are the stored ones, and nothing was written again.
    already_stored: int = 0

    @property
    def items(self) -> int:
        """Items received from this file."""
        return sum(int(r["catalog_push_received_product_count"]) for r in self.responses)


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


#: Why a file was skipped, as the run reports it.
SKIP_FAILED = "failed before and unchanged (fix it, or use --force)"
SKIP_FOLDER = "a folder, not a file"
SKIP_SPECIAL = "not a regular file (a FIFO, socket or device)"


def discover(
    source: str | Path,
    pattern: str = DEFAULT_PATTERN,
    storage_options: dict[str, str] | None = None,
) -> tuple[list[FeedFile], list[FileResult], dict[str, str]]:
    """Feed files under ``source`` matching ``pattern``, the matches refused, and those passed over.

    A match whose real location is outside the source folder (through ``..``
    in the pattern or a symlink) is refused, never read. A match that is not a
    regular file (a folder named ``x.json``, a FIFO) is passed over with its
    reason: reading a FIFO would block the run. An object-store prefix
    (``s3://bucket/feeds``) is listed as a folder is (``_discover_remote``).
    """
    if is_remote(source):
        return _discover_remote(str(source), pattern, storage_options), [], {}
    root = Path(source).expanduser().resolve()
    if root.is_file():
        candidates, root = [root], root.parent
    elif root.is_dir():
        if Path(pattern).is_absolute():
            raise CatalogLakeError(f"pattern {pattern!r} must be relative to the source folder")
        candidates = sorted(root.glob(pattern))
    else:
        raise CatalogLakeError(f"source {str(source)!r} is not a file or folder")
    found, refused, passed_over = [], [], {}
    for candidate in candidates:
        if not _is_feed(candidate.name):
            continue
        relative = (
            candidate.relative_to(root).as_posix()
            if candidate.is_relative_to(root)
            else str(candidate)
        )
        real = candidate.resolve()
        if not real.is_relative_to(root):
            outside = FeedFile(str(root), relative, "", 0)
            refused.append(
                FileResult(outside, "invalid", error="resolves outside the source folder")
            )
            continue
        if not real.is_file():
            passed_over[relative] = SKIP_FOLDER if real.is_dir() else SKIP_SPECIAL
            continue
        found.append(FeedFile(str(root), relative, _sha256(real), real.stat().st_size))
    return found, refused, passed_over


def _discover_remote(
    uri: str, pattern: str, storage_options: dict[str, str] | None
) -> list[FeedFile]:
    """Feed files under an object-store prefix, tracked by path and checksum as local ones are."""
    import fnmatch

    import pyarrow.fs as pafs

    store, root = object_store(uri, storage_options)
    try:
        listed = store.get_file_info(pafs.FileSelector(root, recursive=True))
    except (OSError, pa.ArrowException) as exc:
        raise CatalogLakeError(f"cannot list the feed source {uri}: {exc}") from None
    wanted = pattern.removeprefix("**/")
    found = []
    for info in sorted(listed, key=lambda i: i.path):
        relative = info.path.removeprefix(root).lstrip("/")
        if info.type != pafs.FileType.File or not _is_feed(info.base_name):
            continue
        if pattern not in ("**/*", "*", "**") and not (
            fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(relative, wanted)
        ):
            continue
        with store.open_input_stream(info.path) as handle:
            checksum = hashlib.file_digest(handle, "sha256").hexdigest()  # type: ignore[arg-type]
        found.append(
            FeedFile(uri.rstrip("/"), relative, checksum, info.size or 0, 0, storage_options)
        )
    return found


def _sha256(path: Path) -> str:
    """A file's SHA-256, read in blocks: a feed file is never held whole just to be hashed."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _is_feed(name: str) -> bool:
    name = name.lower().removesuffix(".gz")
    return name.endswith(FEED_SUFFIXES)


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


def read_items(feed: FeedFile) -> list[dict[str, Any]]:
    """All items of a feed file, parsed with the push's own JSON rules.

    A product-object file (``{"items": [...]}``) and JSON Lines (one item per
    line) are both accepted, gzipped or not. Anything unreadable raises
    ``PushError`` naming the file's problem, and nothing of the file is pushed.
    """
    return _read_feed(feed)[0]


def _read_feed(feed: FeedFile) -> tuple[list[dict[str, Any]], set[str]]:
    """The file's items, and what its decoder noted (``parse.decode_payload``)."""
    with feed.open() as handle:
        data = read_bounded(handle, gzipped=feed.path.lower().endswith(".gz"))
    return feed_items(data, feed.path, bounded=False)


def read_bounded(handle: BinaryIO, *, gzipped: bool) -> bytes:
    """A feed's bytes, decompressed as a stream and refused once past ``MAX_PAYLOAD_BYTES``.

    A 14 MB gzip that expands to 3 GiB is stopped after 256 MiB of output,
    never held whole (issue 16). ``gzipped`` is the file's name; standard
    input is recognized by gzip's magic bytes instead (``read_push``).

    Raises:
        PushError: too large (``payload_too_large``) or not a readable gzip stream.
    """
    limit = settings.MAX_PAYLOAD_BYTES
    try:
        if gzipped:
            with gzip.GzipFile(fileobj=handle, mode="rb") as stream:
                data = stream.read(limit + 1)
        else:
            data = handle.read(limit + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise PushError("invalid_json", f"not a readable gzip file: {exc}") from None
    if len(data) > limit:
        what = "decompresses to" if gzipped else "holds"
        raise PushError(
            "payload_too_large",
            f"the feed {what} more than {limit:,} bytes of JSON; split it into smaller files",
        )
    return data


def feed_items(
    data: bytes, name: str, *, bounded: bool = True
) -> tuple[list[dict[str, Any]], set[str]]:
    """Items of a feed's bytes: JSON Lines for ``.jsonl``/``.ndjson`` names, else a product object.

    ``bounded=False`` (a file pushed in batches) lifts the items-per-push
    limit. An empty feed is refused as an empty push would be.
    """
    notes: set[str] = set()
    name = name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson")):
        items = list(_json_lines(data, notes))
        check_items(items, bounded=bounded)
        return items, notes
    return product_items(decode_payload(data, notes), "a .json feed", bounded=bounded), notes


def read_push(path: str | Path, stdin: BinaryIO | None = None) -> ParsedPush:
    """One feed file (or ``-``, standard input) as one push, read as ``ingest`` reads it.

    ``.json``, ``.jsonl``/``.ndjson`` and ``.gz`` of either; standard input
    is a product object unless its first value is an item (JSON Lines), and
    gzipped when it starts with gzip's magic bytes.
    """
    if str(path) == "-":
        handle = stdin if stdin is not None else sys.stdin.buffer
        data = read_bounded(handle, gzipped=False)
        if data.startswith(b"\x1f\x8b"):  # gzip's magic bytes
            data = read_bounded(io.BytesIO(data), gzipped=True)
        name = "-.json" if _looks_like_product_object(data) else "-.jsonl"
    else:
        with Path(path).open("rb") as handle:
            data = read_bounded(handle, gzipped=str(path).lower().endswith(".gz"))
        name = str(path)
    items, notes = feed_items(data, name)
    return parse_push({"items": items}, decoded=True, repeats="repeated" in notes)


def _looks_like_product_object(data: bytes) -> bool:
    """Whether standard input holds one product object (a JSON object with ``items``).

    Anything else, a single item on one line included, is read as JSON Lines.
    """
    try:
        value = decode_payload(data)
    except PushError:
        return False  # several values (JSON Lines), or broken: the JSON Lines reader says which
    return isinstance(value, dict) and "items" in value


def _json_lines(data: bytes, notes: set[str] | None = None) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = decode_payload(line, notes)
        except PushError as exc:
            raise PushError(exc.reason, f"line {number}: {exc.detail}") from None
        if not isinstance(item, dict):
            raise PushError("invalid_payload", f"line {number}: an item must be a JSON object")
        yield item


def batches(items: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """Consecutive slices of at most ``size`` items (bounded by the push limit)."""
    size = max(1, min(size, settings.MAX_ITEMS_PER_PUSH))
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _file_pushes(feed: FeedFile, batch_size: int, strict: bool = False) -> list[PushRequest]:
    """A file's batches, parsed, as pushes; PushError or OSError if the file is unusable.

    Every batch is parsed before any is pushed, so a file whose batch 7 is
    broken stores nothing rather than its first six batches.
    """
    requests = []
    with collector_paused():
        items, notes = _read_feed(feed)
        repeats = "repeated" in notes
        for number, batch in enumerate(batches(items, batch_size)):
            # The key makes a retried file skip the batches that already landed.
            key = feed.batch_key(batch_size, number)
            parsed = parse_push({"items": batch}, decoded=True, repeats=repeats)
            requests.append(PushRequest(parsed, feed.path, key, strict))
    return requests


@contextmanager
def collector_paused(*, collect: bool = False) -> Iterator[None]:
    """Python's cyclic garbage collector paused, for work that builds many acyclic objects.

    Decoding a feed creates tens of thousands of dicts and lists, none in a
    cycle, and the collector kept walking them: a quarter of the parse time
    on 40 files of 1,000 items, and a full collection over a whole group's
    items once it was enabled again between reading and writing. With
    ``collect``, the young generation is collected when the pause ends, so
    cycles made meanwhile (by pandas or pyarrow) do not pile up from group to
    group: by then the group's items are freed and few young objects remain.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
            if collect:
                gc.collect(0)


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
) -> list[FileResult]:
    """Push feed files in batches; never raises for a bad file, it reports it.

    Each batch of ``batch_size`` items is its own push (request id,
    response, ``pushes`` row). Batches of consecutive files are written
    together in groups of about ``group_items`` items (``Catalog.push_many``):
    a Delta commit costs about the same for ten items as for ten thousand,
    and feeds often come as many small files. Files are read one at a time
    and each group is written before the next is read, so memory follows
    ``group_items``, not the feed.

    With Dask (``workers`` > 0 for a ``LocalCluster`` of that many one-thread
    workers, ``dask_address`` for a running scheduler, or a ``client``
    already connected), the workers parse, validate and type groups
    (``check_files``) while this process, the one committer, writes them in
    feed order (``_ingest_on_dask``); groups are then cut by file size,
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
    """
    writer = _GroupWriter(catalog, flow_run_id, progress, detail_items, strict, dry_run)
    chunks = []
    if (workers > 0 or dask_address or client is not None) and len(files) > 1:
        chunks = file_groups(files, max_bytes=max(1, group_items) * ITEM_BYTES)
    if len(chunks) > 1:
        with dask_client(workers, dask_address, client) as dask:
            _ingest_on_dask(writer, chunks, batch_size, dask)
    else:
        queue = deque(files)
        while queue:
            # The collector waits until the group is written and its items freed.
            with collector_paused(collect=True):
                writer.write(writer.read_group(queue, batch_size, group_items))
    writer.checkpoint()
    return writer.results


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

    def invalid(self, feed: FeedFile, error: Exception | str) -> None:
        self.results.append(FileResult(feed, "invalid", error=str(error)))
        self.progress("file", file=feed.path, status="invalid", items=0, bytes=feed.size)

    def ingested(self, feed: FeedFile) -> FileResult:
        result = FileResult(feed, "ingested")
        self.results.append(result)
        return result

    def read(self, feed: FeedFile, batch_size: int) -> tuple[FileResult, list[PushRequest]] | None:
        """A file's pushes, parsed here; None (and the file reported) if it is unusable."""
        try:
            requests = _file_pushes(feed, batch_size, self.strict)
        except (PushError, OSError) as exc:
            self.invalid(feed, exc)
            return None
        self.progress("read", file=feed.path, bytes=feed.size)
        return self.ingested(feed), requests

    def read_group(
        self, queue: deque[FeedFile], batch_size: int, group_items: int
    ) -> list[tuple[FileResult, list[PushRequest]]]:
        """The next files of ``queue``, read until they hold ``group_items`` items or run out."""
        group = []
        pending = 0
        while queue and pending < group_items:
            entry = self.read(queue.popleft(), batch_size)
            if entry is not None:
                group.append(entry)
                pending += sum(len(r.payload.item_json) for r in entry[1])
        return group

    def write(
        self, group: list[tuple[FileResult, list[PushRequest]]], checked: Checked | None = None
    ) -> None:
        """Push a group's requests with one ``push_many``."""
        if not group:
            return
        requests = [request for _, file_requests in group for request in file_requests]
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
            if _disk_full(exc):
                # A full disk does not clear up mid-run: stop at once, in one line, rather
                # than fail every remaining group. Interrupted pushes are repaired and the
                # files not recorded are read again by the next run.
                raise LakeError(
                    f"the lake's disk is full ({self.catalog.lake.uri}): the pushes that "
                    "landed are kept; free some space and run the same command again"
                ) from None
            for result, _ in group:
                result.status, result.error = "error", str(exc)
        else:
            self.wrote = not self.dry_run
            position = 0
            for result, file_requests in group:
                end = position + len(file_requests)
                for response, again in zip(
                    responses[position:end], replayed[position:end], strict=True
                ):
                    received = int(response["catalog_push_received_product_count"])
                    if again:
                        result.already_stored += received
                    if received <= self.detail_left:
                        self.detail_left -= received
                    else:
                        self.detail_left, response = 0, brief(response)
                    result.responses.append(response)
                position += len(file_requests)
        flags = iter(replayed if len(replayed) == len(requests) else [False] * len(requests))
        for result, file_requests in group:
            for request, again in zip(file_requests, flags, strict=False):
                items = len(request.payload.item_json)
                self.progress("batch", file=result.feed.path, items=items, already_stored=again)
            self.progress(
                "file",
                file=result.feed.path,
                status=result.status,
                items=result.items,
                already_stored=result.already_stored,
                bytes=result.feed.size,
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


@dataclass
class CheckedFiles:
    """What ``check_files`` made of some feed files, ready for ``Catalog.push_many``."""

    pushes: list[int | str]  # per file: its number of pushes, or why it is invalid
    requests: list[PushRequest]  # payloads are ``ParsedPush.received_only()``
    checked: ShippedCheck | None


def check_files(files: list[FeedFile], batch_size: int, strict: bool = False) -> CheckedFiles:
    """Read, parse, validate and type some feed files: a group's work that needs no lake.

    Runs on a Dask worker (``ingest_files``); what it returns is what the
    committer needs, without the decoded items, its rows in Arrow.
    """
    pushes: list[int | str] = []
    requests: list[PushRequest] = []
    with collector_paused(collect=True):
        for feed in files:
            try:
                file_requests = _file_pushes(feed, batch_size, strict)
            except (PushError, OSError) as exc:
                pushes.append(str(exc))
                continue
            pushes.append(len(file_requests))
            requests += file_requests
        checked = None
        if requests:
            parsed = combine([request.payload for request in requests])
            sizes = [len(request.payload.item_json) for request in requests]
            groups = pd.Series(np.repeat(np.arange(len(requests)), sizes))
            checked = ShippedCheck.of(check_group(parsed, groups, strict))
    received = [
        PushRequest(r.payload.received_only(), r.source, r.idempotency_key, strict)
        for r in requests
    ]
    return CheckedFiles(pushes, received, checked)


@contextmanager
def dask_client(workers: int = 0, address: str | None = None, client: Any = None):
    """A Dask client for one run: the one given, one to ``address``, or a ``LocalCluster``.

    The local cluster has ``workers`` processes of one thread each (the
    work is Python and Arrow, bound by the GIL) and is closed with the run.
    Workers only parse, validate and type; they never open the lake.
    """
    if client is not None:
        yield client
        return
    from distributed import Client, LocalCluster

    if address:
        with Client(address) as connected:
            yield connected
        return
    with (
        LocalCluster(
            n_workers=max(1, workers),
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as local,
    ):
        yield local


def _ingest_on_dask(
    writer: _GroupWriter, chunks: list[list[FeedFile]], batch_size: int, client: Any
) -> None:
    """Check groups on the Dask workers and write them here, in feed order.

    Groups are written in feed order (a later file's update must win), so
    results are taken in submission order. Two groups per worker are in
    flight at a time: no worker idles while this process writes, and
    results never pile up faster than they are written. A group whose
    worker failed is read, checked and written here instead.
    """
    ahead = 2 * max(1, len(client.scheduler_info().get("workers", {})))
    upcoming = iter(chunks)
    in_flight: deque[tuple[list[FeedFile], Any]] = deque()

    def submit() -> None:
        while len(in_flight) < ahead and (chunk := next(upcoming, None)) is not None:
            in_flight.append(
                (chunk, client.submit(check_files, chunk, batch_size, writer.strict, pure=False))
            )

    submit()
    while in_flight:
        chunk, future = in_flight.popleft()
        try:
            outcome = future.result()
        except Exception:  # noqa: BLE001 - a lost worker costs speed, not the group
            outcome = None
        finally:
            future.release()
        submit()
        with collector_paused(collect=True):
            if outcome is None:
                _write_in_process(writer, chunk, batch_size)
            else:
                _write_checked(writer, chunk, outcome)


def _write_checked(writer: _GroupWriter, chunk: list[FeedFile], outcome: CheckedFiles) -> None:
    """Write a group checked by ``check_files`` on a worker."""
    group, position = [], 0
    for feed, pushes in zip(chunk, outcome.pushes, strict=True):
        if isinstance(pushes, str):
            writer.invalid(feed, pushes)
            continue
        requests = outcome.requests[position : position + pushes]
        group.append((writer.ingested(feed), requests))
        position += pushes
    writer.write(group, outcome.checked.unpacked() if outcome.checked is not None else None)


def _write_in_process(writer: _GroupWriter, chunk: list[FeedFile], batch_size: int) -> None:
    """One group read, checked and written in this process (the workers' fallback)."""
    entries = [writer.read(feed, batch_size) for feed in chunk]
    writer.write([entry for entry in entries if entry is not None])


def brief(response: dict[str, Any]) -> dict[str, Any]:
    """A push response with counts but without its per-item lists.

    ``failure_codes``, ``warning_codes`` and ``warned`` keep what the run
    summary's totals and top codes need.
    """
    return {
        **response,
        "items": [],
        FAILED_ITEMS_KEY: [],
        WARNING_ITEMS_KEY: [],
        "failure_codes": dict(failure_codes(response)),
        "warning_codes": dict(warning_codes(response)),
        "warned": warned_count(response),
        "detail": "omitted from the run summary; the pushes table has the full response",
    }


def file_groups(files: list[FeedFile], max_bytes: int) -> list[list[FeedFile]]:
    """Consecutive files in groups of at most ``max_bytes`` (one big file is its own group).

    Worker processes check one group at a time (``ingest_files(workers=...)``).
    """
    groups: list[list[FeedFile]] = []
    size = 0
    for feed in files:
        if not groups or size + feed.size > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(feed)
        size += feed.size
    return groups


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
        "request_ids": [[x["catalog_push_request_id"] for x in r.responses] for r in results],
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
    """
    started, started_at = time.perf_counter(), catalog.clock()
    repaired = []
    if not dry_run:
        catalog.lake.ensure()
        # A push interrupted earlier (a killed run) is finished before new work.
        repaired = [r["catalog_push_request_id"] for r in catalog.repair()]
    if repaired:
        progress("repaired", pushes=len(repaired))
    plan_ = plan(catalog, source, pattern, force)
    progress(
        "plan",
        files=len(plan_.to_ingest),
        skipped=len(plan_.skipped),
        reasons=plan_.skipped_counts(),
        bytes=sum(f.size for f in plan_.to_ingest),
    )
    results = list(plan_.refused)
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
    )
    if not dry_run:
        _recorded(lambda: record_files(catalog, plan_, results, flow_run_id), "the files it read")
    summary = run_summary(
        plan_.run_id,
        results,
        plan_.skipped,
        duration_s=time.perf_counter() - started,
        flow_run_id=flow_run_id,
        skipped_reasons=plan_.reasons,
    )
    summary["repaired"] = repaired
    if dry_run:
        summary[DRY_RUN_KEY] = True
        return summary
    _recorded(
        lambda: record_run(catalog, "ingest", plan_.run_id, started_at, summary, flow_run_id),
        "its summary",
    )
    return summary


def _recorded(write: Callable[[], None], what: str) -> None:
    """Record the end of a run; a failure (a full disk) is one line, and nothing is lost.

    The pushes that landed are in the lake under their batches' keys, so
    running the same command again, once the lake can be written, skips them
    (``already_stored``) and records the run.
    """
    try:
        write()
    except LAKE_ERRORS as exc:  # a full disk (ENOSPC), a read-only lake, ...
        raise LakeError(
            f"the run stored its pushes but could not record {what}: "
            f"{_first_line(exc)}; run the same command again once the lake can be written"
        ) from None


def _disk_full(exc: BaseException) -> bool:
    """Whether a lake write failed for want of space (ENOSPC, however deltalake words it)."""
    text = str(exc)
    return "No space left on device" in text or "os error 28" in text


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def runs(catalog: Catalog, kind: str | None = None) -> pd.DataFrame:
    """Past runs with their summaries, newest first."""
    frame = catalog.lake.read("runs").to_pandas()
    if kind:
        frame = frame[frame["kind"] == kind]
    return frame.sort_values("started_at", ascending=False, ignore_index=True)
