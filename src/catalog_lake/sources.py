"""Where feeds come from and how they are read: files under a folder or an S3 prefix.

``discover`` lists the feed files of a source with their SHA-256 (what a run
uses to skip a file it has seen); ``read_items`` and ``read_push`` read one as
a push reads its payload, with the same JSON rules and limits: a product
object (``{"items": [...]}``) or JSON Lines, gzipped or not, and
``file_batches`` cuts a file into parsed batches, the pushes an ingest
sends. Nothing here opens the lake; ``feeds`` runs ingests over what this
finds.
"""

from __future__ import annotations

import gc
import gzip
import hashlib
import io
import os
import stat
import sys
import zlib
from collections import deque
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import pyarrow as pa

from . import settings
from .errors import CatalogLakeError, PushError
from .parse import (
    ParsedPush,
    as_bytes,
    check_items,
    decode_payload,
    fits,
    parse_push,
    parse_split,
    parse_texts,
    product_items,
)
from .push import PushRequest
from .split import refuse_pushes_as_lines, split_items

#: File endings a feed may have; each may also end in .gz.
FEED_SUFFIXES = (".json", ".jsonl", ".ndjson")
DEFAULT_PATTERN = "**/*"


@dataclass(frozen=True)
class FeedFile:
    """One feed file found under a source folder."""

    source: str  # the source folder, resolved
    path: str  # relative to the source, with forward slashes
    checksum: str  # sha256 of the file's bytes; empty until read when new (``hashed``)
    size: int
    #: How many times the lake already ingested this path with these bytes: a
    #: forced re-ingest is a new delivery, a resumed run the same one.
    delivery: int = 0
    #: Object-store settings for a remote source; never shown or recorded.
    storage_options: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def batch_key(self, batch_size: int, number: int, *, strict: bool = False) -> str:
        """The idempotency key of one batch of this delivery of this file.

        Bound to the file's place (source and path), its bytes and its
        delivery, so a copy of an old file under a new name is a new delivery
        and is pushed (issue 16: day 3 re-sending day 1's prices must win over
        day 2's), while a run resumed after a kill finds the batches that
        already landed under the same keys and does not push them again.
        A strict run's batches have keys of their own: the same file judged
        strictly is another push, not a retry of the lenient one.
        """
        place = place_of(self.source, self.path)
        key = f"file:{place}:{self.checksum}:{self.delivery}:{batch_size}:{number}"
        return key + ":strict" if strict else key

    def hashed(self) -> FeedFile:
        """This file with its checksum, hashed now where ``discover`` left that to its reader.

        A path the lake has no row of needs no checksum to be planned, only to
        be keyed and recorded, so the process that reads the file hashes it
        (a Dask worker, when the run has them): a run's coordinator never reads
        a new file's bytes, which cost it 0.14 s per 100,000 items.
        ``file_batches`` hashes the bytes it read, so a new file is read once,
        from a folder or a bucket; this reads it again where those are not the
        file's own bytes (gzipped), for a file refused, and for a deletions file.
        """
        if self.checksum:
            return self
        with self.open() as handle:
            checksum = hashlib.file_digest(handle, "sha256").hexdigest()  # type: ignore[arg-type]
        return replace(self, checksum=checksum)

    def hashed_if_readable(self) -> FeedFile:
        """``hashed``, or this file as it is when it cannot be read (its result says why)."""
        try:
            return self.hashed()
        except OSError:
            return self

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


def place_of(source: str, path: str) -> str:
    """A feed file's place (its source and path) as its batches' idempotency keys spell it."""
    return hashlib.sha256(f"{source}\0{path}".encode()).hexdigest()[:16]


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

    #: A deletions file's delete responses (issue 27); its ``responses`` stay empty.
    deletions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def items(self) -> int:
        """Items received from this file."""
        return sum(int(r["catalog_push_received_product_count"]) for r in self.responses)

    @property
    def request_ids(self) -> list[str]:
        """The request ids of the file's pushes, or of its deletes."""
        return [r["catalog_push_request_id"] for r in self.responses] + [
            r["catalog_delete_request_id"] for r in self.deletions
        ]


#: Why a file of the source was passed over, as the run reports it.
SKIP_FOLDER = "a folder, not a file"
SKIP_SPECIAL = "not a regular file (a FIFO, socket or device)"
SKIP_DANGLING = "a symbolic link whose target does not exist"
SKIP_NOT_FEED = "not a feed file (.json, .jsonl, .ndjson, or .gz of one)"
#: Why a skipped path is no feed at all: a source of only these has nothing to ingest.
NOT_FEEDS = (SKIP_FOLDER, SKIP_SPECIAL, SKIP_DANGLING, SKIP_NOT_FEED)


def discover(
    source: str | Path,
    pattern: str = DEFAULT_PATTERN,
    storage_options: dict[str, str] | None = None,
    hashed: Collection[str] | None = None,
) -> tuple[list[FeedFile], list[FileResult], dict[str, str]]:
    """Feed files under ``source`` matching ``pattern``, the matches refused, and those passed over.

    ``hashed`` names the paths to hash now (``runs.plan``: those the lake
    has a row of, whose bytes decide whether they are read); the others are
    hashed by their reader (``FeedFile.hashed``). None hashes every file.

    A match whose real location is outside the source folder (through ``..``
    in the pattern or a symlink) is refused, never read. A match that is not a
    regular file (a folder named ``x.json``, a FIFO) is passed over with its
    reason: reading a FIFO would block the run. An object-store prefix
    (``s3://bucket/feeds``) is listed as a folder is (``_discover_remote``).
    """
    if is_remote(source):
        found, passed_over = _discover_remote(str(source), pattern, storage_options, hashed)
        return found, [], passed_over
    root = Path(source).expanduser().resolve()
    if root.is_file():
        candidates, root = [root], root.parent
    elif root.is_dir():
        if Path(pattern).is_absolute():
            raise CatalogLakeError(f"pattern {pattern!r} must be relative to the source folder")
        candidates = sorted(root.glob(pattern))
    else:
        raise CatalogLakeError(f"source {str(source)!r} is not a file or folder")
    found: list[tuple[str, Path]] = []
    refused, passed_over = [], {}
    for candidate in candidates:
        relative = (
            candidate.relative_to(root).as_posix()
            if candidate.is_relative_to(root)
            else str(candidate)
        )
        if not _is_feed(candidate.name):
            # A folder the pattern walks through is no file to report; anything else
            # (data.csv, feed.json.bak) is counted among the skipped, with its reason.
            if not candidate.is_dir():
                passed_over[relative] = SKIP_NOT_FEED
            continue
        if candidate.is_symlink() and not candidate.exists():
            passed_over[relative] = SKIP_DANGLING
            continue
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
        found.append((relative, real))
    # hashlib lets go of the GIL while it hashes: the files are hashed side by side.
    now = [hashed is None or relative in hashed for relative, _ in found]
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as hashing:
        digests = iter(hashing.map(_sha256, [r for (_, r), n in zip(found, now, strict=True) if n]))
    checksums = [next(digests) if n else "" for n in now]
    files = [
        FeedFile(str(root), relative, checksum, real.stat().st_size)
        for (relative, real), checksum in zip(found, checksums, strict=True)
    ]
    return files, refused, passed_over


def _discover_remote(
    uri: str, pattern: str, storage_options: dict[str, str] | None, hashed: Collection[str] | None
) -> tuple[list[FeedFile], dict[str, str]]:
    """Feed files under an object-store prefix, tracked by path and checksum as local ones are."""
    import fnmatch

    import pyarrow.fs as pafs

    store, root = object_store(uri, storage_options)
    try:
        listed = store.get_file_info(pafs.FileSelector(root, recursive=True))
    except (OSError, pa.ArrowException) as exc:
        raise CatalogLakeError(f"cannot list the feed source {uri}: {exc}") from None
    wanted = pattern.removeprefix("**/")
    found, passed_over = [], {}
    for info in sorted(listed, key=lambda i: i.path):
        relative = info.path.removeprefix(root).lstrip("/")
        if info.type != pafs.FileType.File:
            continue
        if pattern not in ("**/*", "*", "**") and not (
            fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(relative, wanted)
        ):
            continue
        if not _is_feed(info.base_name):
            passed_over[relative] = SKIP_NOT_FEED
            continue
        feed = FeedFile(uri.rstrip("/"), relative, "", info.size or 0, 0, storage_options)
        found.append(feed.hashed() if hashed is None or relative in hashed else feed)
    return found, passed_over


def _sha256(path: Path) -> str:
    """A file's SHA-256, read in blocks: a feed file is never held whole just to be hashed."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _is_feed(name: str) -> bool:
    name = name.lower().removesuffix(".gz")
    return name.endswith(FEED_SUFFIXES)


#: A feed file of deletions (issue 27): JSON Lines of ``{"client_item_id": "..."}``,
#: applied in feed order, after the files before it and before the files after it.
DELETE_SUFFIXES = (".delete.jsonl", ".delete.ndjson")


def is_deletions(path: str) -> bool:
    """Whether a feed file (by name) lists deletions rather than items."""
    return path.lower().removesuffix(".gz").endswith(DELETE_SUFFIXES)


def read_deletions(feed: FeedFile) -> list[Any]:
    """The ``client_item_id`` of each line of a deletions file, in order.

    A line without one gives None, which the delete refuses for that line
    alone; a file that is not JSON Lines of objects raises ``PushError``.
    """
    return [item.get("client_item_id") for item in read_items(feed)]


def read_items(feed: FeedFile) -> list[dict[str, Any]]:
    """All items of a feed file, parsed with the push's own JSON rules.

    A product-object file (``{"items": [...]}``) and JSON Lines (one item per
    line) are both accepted, gzipped or not. Anything unreadable raises
    ``PushError`` naming the file's problem, and nothing of the file is pushed.
    """
    return read_feed(feed)[0]


def read_feed(feed: FeedFile) -> tuple[list[dict[str, Any]], set[str]]:
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
        refuse_pushes_as_lines(data)
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
        with open(path, "rb", opener=_regular_file) as handle:
            data = read_bounded(handle, gzipped=str(path).lower().endswith(".gz"))
        name = str(path)
    items, notes = feed_items(data, name)
    return parse_push({"items": items}, decoded=True, repeats="repeated" in notes)


def _regular_file(path: str, flags: int) -> int:
    """``open``'s opener for a feed: a FIFO, socket or device is refused, never waited on.

    The file is opened without blocking and checked on its descriptor, so no
    other file can take its place between the check and the read.
    """
    descriptor = os.open(path, flags | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        kind = "a folder" if os.path.isdir(path) else SKIP_SPECIAL
        raise PushError("invalid_payload", f"{kind}; push reads regular files (or - for stdin)")
    os.set_blocking(descriptor, True)
    return descriptor


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


#: Items parsed at once, at most (whole batches, several small files together): the gate's
#: columnar read pays per call, its memory per item (``parse.parse_split``). Its forty-odd
#: Polars calls a part wait longer for a core while two other stages run (``groups._pipeline``):
#: 10,000 took 6% off an ingest of 100,000 items against 5,000, and 20,000 went past 1.2 GB.
PARSE_ITEMS = 10_000


@dataclass
class FileBatches:
    """A feed file checked whole, then parsed a group's worth of batches at a time.

    Memory then follows the group being written, not the file (issue 26: a
    104 MB JSON Lines file of a million tiny items peaked at 3.45 GB when all
    its items were decoded and parsed before the first push). The whole file
    is still checked before any batch is pushed, so a broken file stores
    nothing. The items are kept as their exact JSON texts (``texts``), or,
    for a ``.json`` file msgspec cannot split even with NaN masked (a lone
    surrogate, a huge integer, a repeated top-level key), as the decoded
    items (``items``, the way every file was read before).
    """

    feed: FeedFile
    batch_size: int
    strict: bool = False
    texts: list[bytes | msgspec.Raw] | None = None
    items: list[dict[str, Any]] | None = None
    #: Whether an object of ``items`` may repeat a key (the decoder noted one).
    repeats: bool = True
    #: Batches parsed ahead, in order, or the refusal of the batch where the file stops.
    parsed_ahead: deque[ParsedPush | PushError] = field(default_factory=deque)
    #: Items parsed at once (whole batches; ``feeds`` sets it from the ingest's group).
    read_together: int = PARSE_ITEMS

    @property
    def total(self) -> int:
        """Items in the file."""
        return len(self.texts if self.texts is not None else self.items or [])

    @property
    def batches(self) -> int:
        """Pushes the file is cut into."""
        return -(-self.total // self.batch_size)

    def pushes(self, parsed_so_far: Callable[[int, int], None] | None = None):
        """The file's pushes, parsed a group's worth at a time as they are asked for.

        Texts are parsed ``read_together`` items at a time (whole batches), then
        cut into pushes: the gate's columnar read costs per call (``parse_split``).
        Each part's texts are freed once parsed.
        """
        together = max(1, self.read_together // self.batch_size)
        parsed_ahead = self.parsed_ahead
        for number, start in enumerate(range(0, self.total, self.batch_size)):
            end = min(start + self.batch_size, self.total)
            # The key makes a retried file skip the batches that already landed.
            key = self.feed.batch_key(self.batch_size, number, strict=self.strict)
            with collector_paused():
                if self.texts is not None:
                    if not parsed_ahead:
                        parsed_ahead.extend(self._read_together(start, together))
                    parsed = parsed_ahead.popleft()
                    if isinstance(parsed, PushError):
                        raise parsed
                else:
                    assert self.items is not None
                    batch = self.items[start:end]
                    self.items[start:end] = [{}] * (end - start)
                    parsed = parse_push({"items": batch}, decoded=True, repeats=self.repeats)
            if parsed_so_far is not None:
                parsed_so_far(end, self.total)
            yield PushRequest(parsed, self.feed.path, key, self.strict)

    def _read_together(self, start: int, batches: int) -> list[ParsedPush | PushError]:
        """Up to ``batches`` batches from ``start``, parsed at once, or each refusal in its place.

        A batch that is refused (a payload over the limit; an item our decoder
        cannot take though msgspec could) is parsed alone, so the batches before
        it are pushed as they were when each batch was parsed on its own.
        """
        assert self.texts is not None
        end = min(start + batches * self.batch_size, self.total)
        raw = as_bytes(self.texts[start:end])
        self.texts[start:end] = [b""] * (end - start)  # freed; the count stays
        if fits(raw, self.batch_size):
            try:
                together = parse_split(raw)
            except PushError:
                pass  # found again below, in its batch
            else:
                return _batches(together, 0, len(raw), self.batch_size)
        found: list[ParsedPush | PushError] = []
        for c in range(0, len(raw), self.batch_size):
            try:
                found.append(parse_texts(raw[c : c + self.batch_size]))
            except PushError as exc:
                found.append(exc)
                break  # the file stops at its first refused batch
        return found


def parse_together(
    files: list[FileBatches], items: int, *, hold_last: bool = False
) -> list[FileBatches]:
    """Parse the batches of small files together, about ``items`` items at a time.

    Each file's batches land in its ``parsed_ahead``. A feed of many files of
    a thousand items would otherwise cost the gate one columnar read per
    file, at 2.5 times the time per item of a read of twenty thousand
    (``parse.parse_split``). Files of more than ``items`` items are parsed
    ``items`` at a time on their own (``FileBatches.pushes``).

    ``hold_last``: when the files fill more than one part, the last part is
    not parsed but returned, to open the caller's next part with the files
    read after it (rather than a file that overflowed a part being parsed alone).
    """
    parts: list[list[FileBatches]] = [[]]
    count = 0
    for one in files:
        if parts[-1] and count + one.total > items:
            parts.append([])
            count = 0
        parts[-1].append(one)
        count += one.total
    held = parts.pop() if hold_last and len(parts) > 1 else []
    for part in parts:
        _parse_part(part, items)
    return held


def _parse_part(files: list[FileBatches], items: int) -> None:
    """``parse_together`` for files of about ``items`` items in all, in one call.

    A file with a batch over the payload limit, or a part that holds an item
    the exact path refuses as a push, is left to parse alone, so its refusal
    is the one it always got.
    """
    chosen, raws = [], []
    for one in files:
        if one.texts is None or one.parsed_ahead or one.total > items:
            continue
        raw = as_bytes(one.texts)
        if fits(raw, one.batch_size):
            chosen.append(one)
            raws.append(raw)
    if len(chosen) < 2:
        return
    try:
        together = parse_split([text for raw in raws for text in raw])
    except PushError:
        return
    offset = 0
    for one, raw in zip(chosen, raws, strict=True):
        one.parsed_ahead.extend(_batches(together, offset, len(raw), one.batch_size))
        one.texts[:] = [b""] * len(raw)  # freed; the count stays
        offset += len(raw)


def _batches(parsed: ParsedPush, offset: int, count: int, batch_size: int) -> list[ParsedPush]:
    """The ``count`` items of ``parsed`` from ``offset``, cut into pushes of ``batch_size``."""
    return [
        parsed.sliced(offset + start, offset + min(start + batch_size, count))
        for start in range(0, count, batch_size)
    ]


def file_batches(feed: FeedFile, batch_size: int, strict: bool = False) -> FileBatches:
    """A file read and checked whole (``FileBatches``); PushError if it is unusable.

    Its ``feed`` has its checksum: a new file is hashed from the bytes read.

    Items are split out by msgspec without building a Python object each
    (``split_items``). A ``.json`` file it cannot split (NaN, a lone
    surrogate, a repeated top-level key, or a broken file, which then gets
    its exact error) is decoded whole, as before.
    """
    batch_size = max(1, min(batch_size, settings.MAX_ITEMS_PER_PUSH))
    gzipped = feed.path.lower().endswith(".gz")
    with feed.open() as handle:
        data = read_bounded(handle, gzipped=gzipped)
    if not feed.checksum:  # new (``discover``): hashed from the bytes just read, read once
        sha = None if gzipped else hashlib.sha256(data).hexdigest()
        feed = replace(feed, checksum=sha) if sha else feed.hashed()  # .gz: its own bytes
    texts = split_items(data, feed.path)
    if texts is not None:
        return FileBatches(feed, batch_size, strict, texts=texts)
    with collector_paused():
        items, notes = feed_items(data, feed.path, bounded=False)
    return FileBatches(feed, batch_size, strict, items=items, repeats="repeated" in notes)
