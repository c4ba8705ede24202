"""Groups written by Dask workers and committed, in feed order, by the one coordinator (issue 45).

A worker checks a group of feed files (``workers.check_files``) and keeps
the result; the coordinator receives its ``Outline`` (each push's size,
source, key and digest, and the kept items' client ids: about 30 bytes an
item), gives the group its service ids from the key index (``Keys.reserve``:
an Arrow hash join, no rows), and sends them back with request ids and
times. The same worker then derives the records and writes every table's
Parquet files straight to the lake's storage (``write_group``), and hands
back what the commits need: file descriptions, each push's response, and
counts. The coordinator commits them in the documented write order with
the fences of today (docs/design.md, "Writers"): ``raw``, ``rejects``,
``warnings``, ``items`` fenced at the key index, ``records`` fenced, and
last the fenced ``pushes`` rows.

Groups are a chain: a group's ids are given before the group before it
commits (the index holds them, ``reserve``), so its items commit is fenced
at the fence that commit leaves. A group holding items the lake already
has rewrites their id blocks: its worker reads them at the version the
commits before it left, so the chain is drained first. When a commit of
the chain fails (another writer won a fence, a worker was lost for good),
the chain breaks: the index is forgotten, every group planned on it is
planned again, and the failed group is finished as a crash would be, by
``Catalog.repair`` from its committed ``raw`` rows, or is written in this
process from its files when nothing of it was committed. Ids a broken
chain held and never committed are not handed out again: gaps.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .datafiles import Staged
from .errors import FenceMoved, PushError
from .keys import with_ids
from .lake import LAKE_ERRORS, Lake
from .push import Push, failures, plan_responses, raw_rows, reject_rows, warned, warning_rows
from .records import Synonyms, derive_records
from .schemas import ITEMS, RECORDS
from .sources import FeedFile
from .store import Catalog, _committed, _group, _store_pushes, earlier_pushes
from .workers import CheckedFiles, check_files

#: The tables a group writes before its ``pushes`` rows, in the write order.
JOURNAL = ("raw", "rejects", "warnings")


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


@dataclass
class Written:
    """A group's files and answers, as a worker hands them back (``write_group``)."""

    tables: dict[str, Staged]
    answers: list[dict[str, Any]]

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
        return Outline(files.pushes, requests, pa.array([], pa.string()), np.zeros(0, "int64"))
    checked = files.checked
    keep = checked.keep.to_numpy(zero_copy_only=False)
    client_ids = checked.client_ids.filter(checked.keep)
    return Outline(files.pushes, requests, client_ids, _first_sent(files, keep))


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

    What ``store._write`` would commit, written as data files and not
    committed: ``raw``, ``rejects``, ``warnings``, and ``items`` and
    ``records``, appended when every id is new, else folded into their id
    blocks as read at ``plan.versions``. Nothing here commits.
    """
    checked = files.checked.unpacked()
    pushes = [
        Push(
            r.payload, rid, at, 0.0, r.source, plan.flow_run_id, r.idempotency_key, strict=r.strict
        )  # fmt: skip
        for r, rid, at in zip(files.requests, plan.request_ids, plan.received_at, strict=True)
    ]
    parsed, _, request_ids, received_at = _group(pushes)
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
    items = with_ids(checked.typed, plan.object_id, ~plan.known,
                     received_at.iloc[first].reset_index(drop=True),
                     received_at[keep].reset_index(drop=True),
                     request_ids[keep].reset_index(drop=True))  # fmt: skip
    if len(items):
        rows = items.table(ITEMS)
        older = put("items", rows, plan.known)
        won = pc.invert(pc.is_in(items["client_item_id"], older))
        records = derive_records(items, None, plan.synonyms).table(RECORDS).filter(won)
        put("records", records, plan.known[won.to_numpy(zero_copy_only=False)])
    return Written(tables, plan_responses(pushes, checked, items, failed, warned_))


@dataclass
class Group:
    """A group on its way: its files, the worker's check, and once planned, its writes."""

    chunk: list[FeedFile]
    checked: Any  # the future of ``check_files``, held on its worker
    outline: Any  # the future of ``outline``, then the Outline
    pushes: list[Push] = field(default_factory=list)
    written: Any = None  # the future of ``write_group``
    epoch: int = -1


@dataclass
class Done:
    """A group's outcome, in feed order: its responses, or what the caller must write itself."""

    chunk: list[FeedFile]
    outline: Outline | None
    responses: list[dict[str, Any]] | None = None  # written here; one per push
    error: str | None = None  # the lake refused the group: every file of it failed
    fallback: CheckedFiles | None = None  # write it in process, as checked
    again: bool = False  # write it in process from its files (the worker was lost)
    written: Written | None = None  # what its worker handed back (the benchmark weighs it)


class Chain:
    """The coordinator's side: groups planned, written on workers and committed in order."""

    def __init__(self, catalog: Catalog, client: Any, strict: bool, flow_run_id: str | None):
        self.catalog, self.client = catalog, client
        self.strict, self.flow_run_id = strict, flow_run_id
        self.epoch = 0
        self.records_fence = 0
        self.pending: deque[Group] = deque()
        self.ahead = 2 * max(1, len(client.scheduler_info().get("workers", {})))

    def run(self, chunks: list[list[FeedFile]], batch_size: int) -> Iterator[Done]:
        """Every group's outcome, in feed order; at most ``ahead`` groups checked ahead."""
        self.catalog.lake.ensure(again=False)
        upcoming = iter(chunks)
        checks: deque[Group] = deque()

        def submit() -> None:
            while (
                len(checks) + len(self.pending) < 2 * self.ahead
                and (chunk := next(upcoming, None)) is not None
            ):
                future = self.client.submit(check_files, chunk, batch_size, self.strict, pure=False)
                checks.append(Group(chunk, future, self.client.submit(outline, future, pure=False)))

        submit()
        while checks or self.pending:
            if checks and len(self.pending) < self.ahead:
                group = checks.popleft()
                submit()
                yield from self._plan(group)
                continue
            yield self._commit(self.pending.popleft())
            submit()

    def _plan(self, group: Group) -> Iterator[Done]:
        """Take a group's outline, give it ids and send it to be written; or settle it here."""
        if any(g.epoch != self.epoch for g in self.pending):
            yield from self._drain()  # planned on a forgotten index: each is planned again
        try:
            group.outline = group.outline.result()
        except Exception:  # noqa: BLE001 - a lost worker costs speed, not the group
            yield from self._drain()
            yield Done(group.chunk, None, again=True)
            return
        if not group.outline.requests:  # every file was unusable
            yield from self._drain()
            yield Done(group.chunk, group.outline)
            return
        group.pushes = self._pushes(group.outline)
        try:
            yield from self._send(group)
        except (FenceMoved, *LAKE_ERRORS):  # another writer moved the items fence
            self._break()
            yield from self._drain()
            yield from self._send(group)
        self.pending.append(group)

    def _send(self, group: Group) -> Iterator[Done]:
        """Give the group its ids and send them to its worker, to write its files.

        A group with items the lake holds rewrites their blocks, so the
        groups before it are committed first (a drain that breaks the chain
        gives the ids again).
        """
        lake, keys = self.catalog.lake, self.catalog.keys
        while True:
            epoch = self.epoch
            if not any(g.epoch == epoch for g in self.pending):  # the chain starts here
                _, self.records_fence = lake.fence("records")  # read before the ids
            object_id, known = keys.reserve(group.outline.client_ids, group.outline.first)
            versions = None
            if known.any():
                yield from self._drain()
                if self.epoch != epoch:
                    continue
                versions = {name: lake.version(name) for name in ("items", "records")}
            plan = Plan(lake.uri, lake.storage_options,
                        [p.request_id for p in group.pushes],
                        [p.received_at for p in group.pushes], self.flow_run_id,
                        object_id, known, self.catalog.synonyms, versions)  # fmt: skip
            group.written = self.client.submit(write_group, group.checked, plan, pure=False)
            group.epoch = epoch
            return

    def _drain(self) -> Iterator[Done]:
        while self.pending:
            yield self._commit(self.pending.popleft())

    def _break(self) -> None:
        """The chain's ids cannot all land: forget the index; planned groups are planned again."""
        self.catalog.keys.forget()
        self.epoch += 1

    def _pushes(self, found: Outline) -> list[Push]:
        """The group's pushes as ``Catalog.push_many`` makes them: ids, times, in order."""
        started, pushes = time.perf_counter(), []
        for request in found.requests:
            received_at = self.catalog.clock()
            if pushes and received_at <= pushes[-1].received_at:
                received_at = pushes[-1].received_at + timedelta(microseconds=1)
            pushes.append(
                Push(
                    None,
                    str(uuid.uuid4()),
                    received_at,
                    started,
                    request.source,
                    self.flow_run_id,
                    request.idempotency_key,
                    strict=request.strict,
                    content=request.digest,
                )  # fmt: skip
            )
        return pushes

    def _commit(self, group: Group) -> Done:
        """Commit a written group in the write order; on a failure, finish it as a crash is."""
        catalog, found = self.catalog, group.outline
        if group.epoch != self.epoch:  # planned on an index that was forgotten
            self._cancel(group.written)
            try:
                list(self._send(group))  # only stale groups are pending: nothing to drain
            except (FenceMoved, *LAKE_ERRORS) as exc:
                self._break()
                return Done(group.chunk, found, error=str(exc))
        try:
            written: Written = group.written.result()
        except Exception:  # noqa: BLE001 - lost for good: its files are read again here
            self._break()
            return Done(group.chunk, found, again=True)
        finally:
            self._cancel(group.written)
        try:
            fence, earlier = earlier_pushes(catalog.lake, group.pushes)
        except LAKE_ERRORS as exc:
            self._break()
            return Done(group.chunk, found, error=str(exc), written=written)
        if earlier:  # a resumed run: some batches landed before; the in-process path knows
            self._break()
            return Done(group.chunk, found, fallback=group.checked.result(), written=written)
        first = group.pushes[0].request_id
        metadata = {"catalog_lake.request_id": first}
        if len(group.pushes) > 1:
            metadata["catalog_lake.pushes"] = str(len(group.pushes))
        lake, raw_written = catalog.lake, False
        try:
            for name in JOURNAL:
                lake.commit_files(name, written.table(name), metadata)
                raw_written = True
            if _landed(lake, "items", written.table("items"), metadata, catalog.keys.fence):
                catalog.keys.landed()
            if _landed(lake, "records", written.table("records"), metadata, self.records_fence):
                self.records_fence += 1
            sizes = np.array([r.size for r in found.requests], dtype="int64")
            answers = written.answers
            responses = _store_pushes(catalog, group.pushes, answers, sizes, fence, metadata)
        except (FenceMoved, *LAKE_ERRORS, pa.ArrowException, PushError) as exc:
            self._break()
            if not raw_written:
                return Done(group.chunk, found, error=str(exc), written=written)
            return self._repaired(group, written)
        group.checked.release()
        return Done(group.chunk, found, responses=responses, written=written)

    def _repaired(self, group: Group, written: Written) -> Done:
        """A group whose ``raw`` rows landed and whose commits did not all: repaired from them."""
        try:
            repaired = self.catalog.repair(metrics=False)
        except (PushError, *LAKE_ERRORS) as exc:
            return Done(group.chunk, group.outline, error=str(exc), written=written)
        by_id = {r.get("catalog_push_request_id"): r for r in repaired}
        responses = [by_id.get(p.request_id) for p in group.pushes]
        if any(r is None for r in responses):
            error = "the group was not finished by repair: run catalog-lake repair"
            return Done(group.chunk, group.outline, error=error, written=written)
        group.checked.release()
        return Done(group.chunk, group.outline, responses=responses, written=written)

    @staticmethod
    def _cancel(future: Any) -> None:
        if future is not None:
            future.release()


def _landed(lake: Lake, name: str, staged: Staged, metadata, fence: int) -> bool:
    """Commit a group's files of one table at the chain's fence; False when it wrote none.

    A block rewrite is read at a version; commits since that moved no fence
    and no file (id reservations, the chain's own among them) leave it right,
    and it is committed again. Any other lost race breaks the chain (``FenceMoved``).
    """
    if not staged.removes:  # an append: only a moved fence fails it, and that breaks the chain
        return lake.commit_files(name, staged, metadata, fence)

    def quiet(since: Any, current: int) -> bool:
        return current == fence and not since.added and not since.removed

    _committed(lake, name, staged, metadata, fence, staged.read_version, quiet)
    return True
