"""What a Dask worker runs for a group of feed files: checked, outlined, written as files.

A worker checks a group of files (``check_files``: read, parsed, validated
and typed, no lake) and keeps the result; the coordinator (``workers.Chain``)
receives only its ``Outline``: each push's size, source, key and digest, and
the kept items' client ids, about 30 bytes an item. It gives the group its
service ids and sends them back with request ids and times (``Plan``); the
same worker then derives the records and writes every table's Parquet files
straight to the lake's storage (``write_group``), and hands back what the
commits need (``Written``): file descriptions, each push's response, and
counts. ``WrittenGroup`` is such a group as ``store.commit_group`` commits it,
in the write order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import settings
from .errors import PushError
from .keys import with_ids
from .lake import Lake
from .lake.files import Staged
from .push import (
    Push,
    PushRequest,
    ShippedCheck,
    check_requests,
    failures,
    plan_responses,
    raw_rows,
    reject_rows,
    warned,
    warning_rows,
)
from .records import Synonyms, derive_records
from .schemas import ITEMS, RECORDS
from .sellers import DEFAULT_SELLER
from .sources import (
    PARSE_ITEMS,
    FeedFile,
    FileBatches,
    collector_paused,
    file_batches,
    parse_together,
)
from .store import Part, group_rows
from .summary import brief, response_text


@dataclass
class CheckedFiles:
    """What ``check_files`` made of some feed files, ready for ``Catalog.push_many``."""

    pushes: list[int | str]  # per file: its number of pushes, or why it is invalid
    requests: list[PushRequest]  # payloads are ``ParsedPush.received_only()``
    checked: ShippedCheck | None
    checksums: list[str]  # per file: its bytes' sha256 as read here, "" if unreadable


def check_files(files: list[FeedFile], batch_size: int, strict: bool = False) -> CheckedFiles:
    """Read, parse, validate and type some feed files: a group's work that needs no lake.

    Runs on a Dask worker (``feeds.ingest_files``); what it returns is what the
    committer needs, without the decoded items, its rows in Arrow.
    """
    pushes: list[int | str] = []
    requests: list[PushRequest] = []
    checksums: list[str] = []
    with collector_paused(collect=True):
        read: list[FileBatches | str] = []
        for feed in files:
            try:  # a new file is hashed by its reader: here
                batches = file_batches(feed, batch_size, strict)
            except (PushError, OSError) as exc:
                read.append(str(exc))
                checksums.append(feed.hashed_if_readable().checksum)
            else:
                read.append(batches)
                checksums.append(batches.feed.checksum)
        # Small files are parsed together, as an ingest in one process parses them.
        parse_together([one for one in read if not isinstance(one, str)], PARSE_ITEMS)
        for one in read:
            if isinstance(one, str):  # unreadable: why
                pushes.append(one)
                continue
            try:
                file_requests = list(one.pushes())
            except PushError as exc:
                pushes.append(str(exc))
                continue
            pushes.append(len(file_requests))
            requests += file_requests
        checked = None
        if requests:
            requests, group = check_requests(requests)
            checked = ShippedCheck.of(group)
    return CheckedFiles(pushes, requests, checked, checksums)


def as_read(files: list[FeedFile], read: CheckedFiles | Outline) -> list[FeedFile]:
    """A group's files with the checksums their worker hashed (``FeedFile.hashed``)."""
    return [
        feed if feed.checksum else replace(feed, checksum=checksum)
        for feed, checksum in zip(files, read.checksums, strict=True)
    ]


@dataclass(frozen=True)
class RequestOutline:
    """One push of a group, as the coordinator needs it: never its items."""

    source: str | None
    idempotency_key: str | None
    strict: bool
    size: int
    digest: str  # the payload's content digest (``ParsedPush.digest``)


@dataclass
class Outline:
    """What a worker's check of a group tells the coordinator (``outline``)."""

    pushes: list[int | str]  # per file: its number of pushes, or why it is invalid
    requests: list[RequestOutline]
    client_ids: pa.Array  # the kept items' keys, in order
    first: np.ndarray  # per kept item: the group position where its key was first sent
    checksums: list[str]  # per file, as its worker hashed it (``CheckedFiles``)


@dataclass
class Plan:
    """What the coordinator decided for a group, sent to the worker that holds it."""

    uri: str
    storage_options: dict[str, str] | None
    request_ids: list[str]
    received_at: list[datetime]
    flow_run_id: str | None
    object_id: np.ndarray
    known: np.ndarray
    synonyms: Synonyms
    versions: dict[str, int] | None  # items and records, read at: a block rewrite's
    seller: str = DEFAULT_SELLER


@dataclass
class Written:
    """A group's files and answers, as a worker hands them back (``write_group``).

    Each push's response comes as the text the ``pushes`` table stores
    (``texts``) and as its ``brief`` (``answers``): the coordinator stores
    the texts as they are and decodes one only where the run's summary lists
    that push in full (``GroupWriter.took``). Full answers, pickled and then
    encoded again there, cost the coordinator 0.24 s of its 2.5 s per
    100,000 items (``py-spy --gil``), where its CPU bounds what workers give.
    """

    tables: dict[str, Staged]
    answers: list[dict[str, Any]]
    texts: list[str]

    def table(self, name: str) -> Staged:
        """A table's part: nothing to commit when the group wrote none of it."""
        return self.tables.get(name) or Staged()


def outline(files: CheckedFiles) -> Outline:
    """A worker's check of a group, told in what the coordinator needs to give ids (pure)."""
    requests = [
        RequestOutline(
            r.source, r.idempotency_key, r.strict, len(r.payload.item_json), r.payload.digest()
        )
        for r in files.requests
    ]
    if files.checked is None:
        empty = pa.array([], pa.string())
        return Outline(files.pushes, requests, empty, np.zeros(0, "int64"), files.checksums)
    checked = files.checked
    keep = checked.keep.to_numpy(zero_copy_only=False)
    client_ids = checked.client_ids.filter(checked.keep)
    return Outline(files.pushes, requests, client_ids, _first_sent(files, keep), files.checksums)


def _first_sent(files: CheckedFiles, keep: np.ndarray) -> np.ndarray:
    """Per kept item, the position of the first passed item of the group with its key.

    An item new to the lake takes its id in the order its key was first
    sent, as if the pushes came one by one (``store.identified``).
    """
    checked = files.checked
    passed = np.ones(checked.size, dtype=bool)
    passed[list(checked.errors)] = False
    positions = pd.Series(np.arange(checked.size))[passed]
    keys = checked.client_ids.to_numpy(zero_copy_only=False)[passed]
    return positions.groupby(keys).transform("min").to_numpy()[keep[passed]]


def write_group(files: CheckedFiles, plan: Plan) -> Written:
    """Derive a checked group's rows with its ids and write every table's files (a worker's).

    What ``store.run`` would commit, written as data files and not
    committed: ``raw``, ``rejects``, ``warnings``, and ``items`` and
    ``records``, appended when every id is new, else folded into their id
    blocks as read at ``plan.versions``. Nothing here commits.
    """
    checked = files.checked.unpacked()
    pushes = [
        Push(
            r.payload,
            rid,
            at,
            0.0,
            r.source,
            plan.flow_run_id,
            r.idempotency_key,
            strict=r.strict,
            seller=plan.seller,
        )
        for r, rid, at in zip(files.requests, plan.request_ids, plan.received_at, strict=True)
    ]
    parsed, _, request_ids, received_at = group_rows(pushes)
    passed = checked.checked.passed.to_numpy(dtype=bool)
    lake = Lake(plan.uri, plan.storage_options)
    tables: dict[str, Staged] = {}

    def put(name: str, rows: pa.Table, known: Any = None) -> pa.Array:
        """Write a table's rows, folded into their blocks as read; the ids kept as stored."""
        version = (plan.versions or {}).get(name)
        staged, counts = lake.staged_upsert(name, rows, known, version)
        if staged.adds or staged.removes:
            tables[name] = staged
        return counts["kept_ids"]

    put("raw", raw_rows(pushes, parsed, request_ids, received_at, passed, checked.client_ids))
    failed, warned_ = failures(pushes, checked), warned(pushes, checked)
    if any(failed):
        put("rejects", reject_rows(pushes, failed))
    if any(warned_):
        put("warnings", warning_rows(pushes, warned_))
    keep = checked.keep.to_numpy(dtype=bool)
    first = _first_sent(files, keep)
    items = with_ids(
        checked.typed,
        plan.object_id,
        ~plan.known,
        received_at.iloc[first].reset_index(drop=True),
        received_at[keep].reset_index(drop=True),
        request_ids[keep].reset_index(drop=True),
        plan.seller,
    )
    if len(items):
        rows = items.table(ITEMS)
        older = put("items", rows, plan.known)
        won = pc.invert(pc.is_in(items["object_id"], older))
        records = derive_records(items, None, plan.synonyms).table(RECORDS).filter(won)
        put("records", records, plan.known[won.to_numpy(zero_copy_only=False)])
    answers = plan_responses(pushes, checked, items, failed, warned_)
    return Written(tables, [brief(a) for a in answers], [response_text(a) for a in answers])


@dataclass
class WrittenGroup:
    """A group a worker wrote, as ``store.commit_group`` commits it: its files, never its rows.

    A lost race that concerns its files cannot be done again here (the rows
    are on the worker): it ends the group, which ``Catalog.repair`` finishes.
    """

    pushes: list[Push]
    sizes: np.ndarray
    metadata: dict[str, str]
    written: Written
    keys: pa.Array  # the kept items' keys (``sellers.keys``), as the ids were given
    object_id: np.ndarray  # their ids (``Keys.reserve``)
    redo: bool = False
    journaled: bool = False

    def journal(self, name: str) -> Staged:
        """The files of a journal table the worker wrote (none where it had no rows)."""
        return self.written.table(name)

    def items(self) -> Part:
        """The items' files, with the keys and id blocks they hold."""
        blocks = set((self.object_id // settings.ID_BLOCK_SIZE).tolist())
        return Part(self.written.table("items"), self.keys, blocks)

    def records(self, items: Part, version: int | None) -> Part | None:
        """The records' files: they hold at most the items' keys and blocks."""
        staged = self.written.table("records")
        if not staged.adds and not staged.removes:
            return None
        return Part(staged, items.keys, items.blocks)

    def answers(self, items: Part) -> list[dict[str, Any]]:
        """Each push's response, as the worker planned it, in brief (``Written``)."""
        return self.written.answers

    def texts(self, answers: list[dict[str, Any]]) -> list[str]:
        """Each push's whole response as stored, as the worker encoded it."""
        return self.written.texts


__all__ = [
    "CheckedFiles",
    "Outline",
    "Plan",
    "RequestOutline",
    "Written",
    "WrittenGroup",
    "as_read",
    "check_files",
    "outline",
    "write_group",
]
