"""A group of pushes, committed in the write order, correct beside any number of writers.

``commit_group`` is the one carrier of the write order (docs/design.md,
"Write order" and "Writers"): whichever path made a group's files, rows
derived in this process (``run``) or files a Dask worker wrote
(``workers.Chain``), its tables are committed here, one after another:

1. ``raw``: the journal; once it commits, the pushes can be replayed whole;
2. ``rejects`` and ``warnings``: appends, which a replay skips when present;
3. ``items``: fenced at the key index that gave the ids;
4. ``records``: fenced at the records fence read before the ids;
5. ``pushes``: the commit marker, fenced: a request id or idempotency key is
   stored once, and a request id in ``raw`` without its row here is an
   interrupted push, which ``Catalog.repair`` finishes.

A commit that loses a race to another writer reads what the winner
committed: when it left our files right, the same files are committed again
at the new fence (``_committed``); when it did not, a group made here does
its part again (its ids given again, its records folded into their blocks),
and a group written elsewhere ends, for ``Catalog.repair`` to finish from its
``raw`` rows. Every fence a commit leaves is counted here (``next_fence``).
``dry_run`` computes the very same answers and writes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import sellers, settings
from .claims import conflict, earlier_pushes, idempotent, stored
from .errors import FenceMoved
from .keys import Keys
from .lake import LAKE_ERRORS, Lake, next_fence, races
from .lake.files import Staged
from .lake.log import Since, concerns, keys_added
from .parse import ParsedPush, combine
from .push import (
    Checked,
    Push,
    check_group,
    failures,
    plan_responses,
    raw_rows,
    reject_rows,
    warned,
    warning_rows,
    write_failed,
)
from .records import Batch, Synonyms, derive_records
from .schemas import ITEMS, PUSHES, RECORDS
from .sellers import DEFAULT_SELLER
from .summary import DRY_RUN_KEY, response_text

#: The tables a group commits, in order; the first three are its journal.
WRITE_ORDER = ("raw", "rejects", "warnings", "items", "records", "pushes")
JOURNAL = WRITE_ORDER[:3]
#: The storage's logger, where retries are logged and the benchmark counts them.
_log = logging.getLogger("catalog_lake.lake")


class Catalog(Protocol):
    """What the modules under the facade need of it (``catalog.Catalog``).

    They take the facade by this protocol, never by importing ``catalog``:
    the facade imports them, so importing it back would close a circle
    (issue 44).
    """

    lake: Lake
    keys: Keys
    synonyms: Synonyms
    clock: Callable[[], datetime]

    def derive(self, parsed: ParsedPush, **options: Any) -> Any:
        """Validate items and derive their rows and records, writing nothing."""

    def snapshot_keys(self) -> pa.Table | None:
        """The keys a new process would load; None without a snapshot."""

    def save_key_index(self) -> None:
        """Save the lake's key snapshot as of now."""


@dataclass
class Part:
    """One fenced table's share of a group: its files, and what a lost race is judged by.

    ``keys`` and ``blocks`` are the client ids and id blocks the files hold:
    a winner that stored none of those keys and rewrote none of those blocks
    left the files right. ``rows`` are the records themselves where this
    process derived them (a lost race folds them into their blocks); None
    for files written elsewhere.
    """

    staged: Staged
    keys: pa.Array  # the items' keys (``sellers.keys``)
    blocks: set[int]
    rows: pa.Table | None = None
    #: Items: the service ids of items the lake held newer (their records are not written).
    kept_ids: pa.Array = field(default_factory=lambda: pa.array([], pa.int64()))
    #: Items: the items with their ids, where this process derived them.
    batch: Batch | None = None


class GroupWrite(Protocol):
    """A group of pushes ready to commit, however its files were made (``commit_group``)."""

    pushes: list[Push]
    sizes: np.ndarray
    metadata: dict[str, str]
    #: Whether a lost race that concerns the group's files is done again here
    #: (rows derived in this process), or ends the group (files written elsewhere).
    redo: bool
    #: Set once the group's ``raw`` rows are committed: from then on ``repair`` can finish it.
    journaled: bool

    def journal(self, name: str) -> pa.Table | Staged | None:
        """``raw``, ``rejects`` or ``warnings``: rows or files to add, None for nothing."""

    def items(self) -> Part:
        """The items with their ids, written at the key index's fence (again after a redo)."""

    def records(self, items: Part, version: int | None) -> Part | None:
        """The records of the items written (read at ``version``), None when there are none."""

    def answers(self, items: Part) -> list[dict[str, Any]]:
        """Each push's response (in brief where the texts hold it whole)."""

    def texts(self, answers: list[dict[str, Any]]) -> list[str]:
        """Each push's whole response as the ``pushes`` table stores it (``response_text``)."""


@dataclass(frozen=True)
class Committed:
    """What a group's commits left: its responses, and the records table's version and fence."""

    responses: list[dict[str, Any]]
    records_at: tuple[int | None, int]


def commit_group(
    catalog: Catalog, group: GroupWrite, fence: int, records_at: tuple[int | None, int]
) -> Committed:
    """Commit a group's tables in the write order; its responses, and the records fence after.

    ``fence`` is the pushes table's fence when the group's keys were checked
    (``earlier_pushes``); ``records_at`` the records table's version and fence
    read before the group's ids were given.

    Raises:
        FenceMoved: a group written elsewhere lost a race that concerns it.
        LakeError, OSError, DeltaError: the lake could not be written.
    """
    lake, metadata = catalog.lake, group.metadata
    for name in JOURNAL:
        part = group.journal(name)
        if isinstance(part, pa.Table):
            lake.append(name, part, metadata)
        elif part is not None:
            lake.commit_files(name, part, metadata)
        group.journaled = True
    items = _commit_items(catalog, group)
    records_at = _commit_records(catalog, group, items, records_at)
    answers = group.answers(items)
    texts = group.texts(answers)
    responses = _store_pushes(catalog, group.pushes, answers, texts, group.sizes, fence, metadata)
    return Committed(responses, records_at)


def _commit_items(catalog: Catalog, group: GroupWrite) -> Part:
    """Commit the group's items at the key index's fence; give the ids again where it can.

    The files are written first; a commit by anyone else since the index was
    read fails ours (``FenceMoved``), and what it committed is read from the
    log (``Keys.absorb``): when it stored none of our keys and touched none of
    our blocks, the same files are committed again at the new fence.
    Otherwise the index is read again, and a group made here gives its ids
    again; one written elsewhere ends.
    """
    lake, keys = catalog.lake, catalog.keys
    for attempt in races() if group.redo else races(attempts=1):
        with attempt:
            items = group.items()
            try:
                moved = partial(_absorbed, keys, items.keys, items.blocks)
                at = _committed(
                    lake,
                    "items",
                    items.staged,
                    group.metadata,
                    keys.fence,
                    keys.version,
                    moved,
                    claim=keys.claim,
                )
            except BaseException:
                keys.forget()  # read the index again: it is stale or partly written
                raise
            if at is not None:
                keys.landed(items.batch, next_fence(at))
            return items
    raise AssertionError("unreachable: the last lost race is raised")


def _commit_records(
    catalog: Catalog, group: GroupWrite, items: Part, at: tuple[int | None, int]
) -> tuple[int | None, int]:
    """Commit the group's records at the fence read before its ids; fold them if that lost.

    A record of a new item is appended unread, so a commit since the fence
    was read that stored a record of one of its items, or rewrote one of its
    blocks (a delete, another writer's update), concerns it: records derived
    here are read and folded into their blocks (``upsert_fenced``); files
    written elsewhere end the group. Any other race costs the same files
    committed again. Returns the records table's version and fence after.
    """
    lake = catalog.lake
    version, fence = at
    records = group.records(items, version)
    if records is None:
        return at
    apart = partial(_apart, lake, records.keys, records.blocks)
    try:
        committed = _committed(
            lake, "records", records.staged, group.metadata, fence, version, apart
        )
    except FenceMoved:
        if records.rows is None:
            raise
        lake.upsert_fenced(
            "records", records.rows, group.metadata, admit=lambda rows: live_records(lake, rows)
        )
        return lake.fence("records")
    if committed is None:
        return at
    return lake.version("records", refresh=False), next_fence(committed)


def _committed(
    lake: Lake, name: str, staged: Staged, metadata, fence: int, read_at, moved, claim=None
) -> int | None:
    """Commit written files at ``fence``; after a lost race, again while ``moved`` allows.

    ``moved`` is told what was committed since ``read_at`` and the fence it
    left, and says whether our files still hold (``Keys.absorb``, ``_apart``).
    Returns the fence the files were committed at, None when there were none.
    """
    for _ in range(settings.RECOMMITS):
        try:
            if not lake.commit_files(name, staged, metadata, fence=fence, claim=claim):
                return None
            return fence
        except FenceMoved:
            version, current = lake.fence(name)  # before the log: the log is at least as new
            since = lake.since(name, read_at if read_at is not None else -1)
            if version is None or since.version < version or not moved(since, current):
                raise  # a log read short of the fence's version proves nothing: redo
            _log.info("%s: a lost race left our files right; committed again at %d", name, current)
            fence, read_at, staged.read_version = current, since.version, since.version
    raise FenceMoved(f"{name!r}: {settings.RECOMMITS} commits in a row lost to other writers")


def _absorbed(keys: Keys, new: pa.Array, ours: set[int], since: Since, fence: int) -> bool:
    return keys.absorb(since, fence, new, ours)


def _apart(lake: Lake, keys: Any, ours: set[int], since: Since, fence: int) -> bool:
    return not concerns(since, keys_added(*lake.filesystem("records"), since), keys, ours)


def live_records(lake: Lake, rows: pa.Table) -> pa.Table:
    """The records of ``rows`` whose item is still the one they were derived from.

    A record is written for the item row of the push that last wrote it
    (``received_at`` equals the item's ``updated_at``), never for a
    tombstone: a delete or a newer push that committed its items after the
    record was derived wins (docs/design.md, "Deletes").
    """
    if rows.num_rows == 0:
        return rows
    items = lake.read_blocks("items", rows["id_block"], ["object_id", "updated_at", "deleted_at"])
    pairs = (
        rows.select(["object_id"])
        .append_column("_row", pa.array(np.arange(rows.num_rows), pa.int64()))
        .join(items, "object_id", join_type="inner")
    )
    stamps = rows["received_at"].take(pairs["_row"])
    current = pc.and_(
        pc.equal(pairs["updated_at"], stamps), pc.is_null(pairs["deleted_at"])
    ).fill_null(False)
    return rows.take(np.sort(pairs["_row"].filter(current).to_numpy()))


def _store_pushes(
    catalog: Catalog,
    pushes: list[Push],
    answers: list[dict[str, Any]],
    texts: list[str],
    sizes: np.ndarray,
    fence: int,
    metadata: dict[str, str],
) -> list[dict[str, Any]]:
    """Commit the group's pushes rows, fenced: each request id and key is stored once.

    When another writer committed pushes after our keys were checked,
    the commit fails and what it stored is looked at (``_claimed``): a
    push it stored under one of our keys, or one of our own request ids
    (a repair racing the push it repairs), answers for ours, and ours is
    not stored again.
    """
    finished_at = catalog.clock()
    duration_ms = (time.perf_counter() - pushes[0].started) * 1000.0
    rows = [
        {
            "request_id": push.request_id,
            "received_at": push.received_at,
            "finished_at": finished_at,
            "duration_ms": duration_ms,
            "received": int(sizes[number]),
            "success": int(response["catalog_push_success_product_count"]),
            "failed": int(response["catalog_push_failed_product_count"]),
            "source": push.source,
            "flow_run_id": push.flow_run_id,
            "idempotency_key": push.idempotency_key,
            "payload_sha256": push.digest,
            "response_json": text,
            "seller": push.seller,
        }
        for number, (push, response, text) in enumerate(zip(pushes, answers, texts, strict=True))
    ]
    unclaimed = list(range(len(pushes)))
    for attempt in races():
        with attempt:
            try:
                table = pa.Table.from_pylist([rows[n] for n in unclaimed], schema=PUSHES)
                catalog.lake.append("pushes", table, metadata, fence=fence)
                return answers
            except FenceMoved:
                _, fence = catalog.lake.fence("pushes")
                unclaimed = _claimed(catalog, pushes, unclaimed, answers)
                if not unclaimed:
                    return answers
                raise
    raise AssertionError("unreachable: the last lost race is raised")


def _claimed(
    catalog: Catalog, pushes: list[Push], unclaimed: list[int], answers: list[dict[str, Any]]
) -> list[int]:
    """The pushes of ``unclaimed`` still to store; the others take the stored answer."""
    landed = stored(
        catalog.lake,
        keys=[k for n in unclaimed if (k := pushes[n].idempotency_key) is not None],
        request_ids=[pushes[n].request_id for n in unclaimed],
    )
    left = []
    for number in unclaimed:
        push = pushes[number]
        found = landed.get(f"request:{push.request_id}")
        if found is None and push.claim is not None:
            found = landed.get(f"key:{push.claim}")
            if found is not None and found.digest != push.digest:
                raise conflict(push.idempotency_key, after_write=True)
        if found is None:
            left.append(number)
        else:
            answers[number] = found.response
    return left


# --- a group made here: rows derived in this process --------------------------------------


def run(
    catalog: Catalog,
    pushes: list[Push],
    checked: Checked | None = None,
    replayed: list[bool] | None = None,
) -> list[dict[str, Any]]:
    """Run pushes (or the replay of one): skip those whose key is stored, write the rest."""
    first = pushes[0]
    try:
        catalog.lake.ensure(again=False)  # a push creates the lake it writes
        fence, earlier = earlier_pushes(catalog.lake, pushes)
    except LAKE_ERRORS as exc:
        catalog.lake.unsure()
        raise write_failed(exc, first.request_id, raw_written=first.replay) from exc
    responses, todo, first_with_key = idempotent(pushes, earlier)
    if checked is not None and len(todo) != len(pushes):
        # Checked ahead for all of them, but some had landed (a resumed ingest):
        # which item of the group wins changes, so the rest is checked again.
        checked = None
        for number in todo:
            if pushes[number].parsed.cells is None:
                pushes[number] = pushes[number].reparsed()
    written = _write(catalog, [pushes[n] for n in todo], fence, checked) if todo else []
    for number, response in zip(todo, written, strict=True):
        responses[number] = response
    for number, push in enumerate(pushes):  # a key repeated within the group
        if responses[number] is None:
            responses[number] = responses[first_with_key[push.claim or ""]]
    if replayed is not None:
        done = set(todo)
        replayed[:] = [number not in done for number in range(len(pushes))]
    return [r for r in responses if r is not None]


def dry_run(catalog: Catalog, pushes: list[Push], checked: Checked | None) -> list[dict[str, Any]]:
    """What the pushes would answer, computed as a push computes it, with nothing written.

    Idempotency keys are honoured as a push honours them: a stored key
    answers with its push's response (or is refused for other content).
    """
    exists = catalog.lake.exists()
    earlier = earlier_pushes(catalog.lake, pushes)[1] if exists else {}
    responses, todo, first_with_key = idempotent(pushes, earlier)
    if checked is not None and len(todo) != len(pushes):
        checked = None  # checked for all of them (on a worker): the rest is checked again
    group = [pushes[n] for n in todo]
    if checked is None:  # a payload checked on a worker travelled without its cells
        group = [p.reparsed() if p.parsed.cells is None else p for p in group]
    if group:
        parsed, sizes, request_ids, received_at = group_rows(group)
        if checked is None:
            checked = check_group(parsed, request_ids, _strict_rows(group, sizes))
        if exists:
            items = identified(
                catalog.keys, checked, request_ids, received_at, seller=group[0].seller
            )
            # A dry run gives no new ids: an item new to the lake answers with null.
            items = items.with_columns(
                object_id=pc.if_else(
                    items["known"], items["object_id"], pa.scalar(None, pa.int64())
                )
            )
        else:
            kept = checked.client_ids[checked.keep]
            items = Batch(
                {
                    "client_item_id": pa.array(kept.to_numpy(dtype=object), pa.string()),
                    "object_id": pa.nulls(len(kept), pa.int64()),
                },
                len(kept),
            )
        answers = plan_responses(
            group, checked, items, failures(group, checked), warned(group, checked)
        )
        for number, answer in zip(todo, answers, strict=True):
            responses[number] = {**answer, DRY_RUN_KEY: True}
    for number, push in enumerate(pushes):
        if responses[number] is None:
            responses[number] = responses[first_with_key[push.claim or ""]]
    return [r for r in responses if r is not None]


def identified(
    keys: Keys,
    checked: Checked,
    request_ids: pd.Series,
    received_at: pd.Series,
    hold: bool = False,
    seller: str = DEFAULT_SELLER,
    held: bool = False,
) -> Batch:
    """The kept items of a checked group of ``seller``'s, with their ids (``Keys.assign``)."""
    client_ids, keep = checked.client_ids, checked.keep
    passed = checked.checked.passed
    # An item new to the lake was first seen by the first push that sent
    # it, and takes its id in that order, as if the pushes came one by one.
    first = pd.DataFrame(
        {"at": received_at.array, "position": np.arange(len(passed))},
        index=passed.index,
    )[passed]
    first = first.groupby(client_ids[passed].to_numpy()).transform("min")[keep[passed]]
    return keys.assign(
        checked.typed, request_ids[keep], received_at[keep], first, hold, seller, held
    )


def _write(
    catalog: Catalog, pushes: list[Push], fence: int, checked: Checked | None = None
) -> list[dict[str, Any]]:
    """Validate, derive and commit a group of pushes (``commit_group``); their responses.

    The group is derived as one batch and shares each table's commit; on
    a lake failure ``PushError`` names the first push's request id and
    says whether ``repair`` can finish the group.
    """
    first = pushes[0]
    parsed, sizes, request_ids, received_at = group_rows(pushes)
    try:
        if checked is None:
            checked = check_group(parsed, request_ids, _strict_rows(pushes, sizes))
    except LAKE_ERRORS as exc:
        catalog.lake.unsure()
        raise write_failed(
            exc, first.request_id, raw_written=first.replay, pushes=len(pushes)
        ) from exc
    group = _Rows(catalog, pushes, sizes, parsed, request_ids, received_at, checked)
    try:
        # Read before the ids are settled: see ``Lake.upsert_fenced``.
        records_at = catalog.lake.fence("records")
        return commit_group(catalog, group, fence, records_at).responses
    except (*LAKE_ERRORS, pa.ArrowException) as exc:
        catalog.lake.unsure()
        raise write_failed(
            exc, first.request_id, raw_written=group.journaled, pushes=len(pushes)
        ) from exc


class _Rows:
    """A group derived in this process: rows for the journal, items and records written here."""

    redo = True

    def __init__(
        self,
        catalog: Catalog,
        pushes: list[Push],
        sizes: np.ndarray,
        parsed: ParsedPush,
        request_ids: pd.Series,
        received_at: pd.Series,
        checked: Checked,
    ) -> None:
        self.catalog, self.pushes, self.sizes, self.checked = catalog, pushes, sizes, checked
        self.parsed, self.request_ids, self.received_at = parsed, request_ids, received_at
        first = pushes[0]
        self.metadata = {"catalog_lake.request_id": first.request_id}
        if len(pushes) > 1:
            self.metadata["catalog_lake.pushes"] = str(len(pushes))
        self.journaled = first.replay  # a replay's raw rows are the ones it replays
        self.seller = first.seller  # a group is one seller's (``Catalog.push_many``)
        self.failed = failures(pushes, checked)
        self.warned = warned(pushes, checked)

    def journal(self, name: str) -> pa.Table | None:
        """The group's rows of a journal table; a replay skips what landed before."""
        lake, first = self.catalog.lake, self.pushes[0]
        if name == "raw":
            if first.replay:
                return None
            passed = self.checked.checked.passed.to_numpy(dtype=bool)
            return raw_rows(
                self.pushes,
                self.parsed,
                self.request_ids,
                self.received_at,
                passed,
                self.checked.client_ids,
            )
        by_push, rows = (
            (self.failed, reject_rows) if name == "rejects" else (self.warned, warning_rows)
        )
        if not any(by_push) or (first.replay and lake.has(name, "request_id", first.request_id)):
            return None
        return rows(self.pushes, by_push)

    def items(self) -> Part:
        """The items with ids from the key index (new ones held), written as files."""
        lake, keys = self.catalog.lake, self.catalog.keys
        items = identified(
            keys, self.checked, self.request_ids, self.received_at, hold=True, seller=self.seller
        )
        if not len(items):
            return Part(Staged(), pa.array([], pa.string()), set(), batch=items)
        known = items["known"].to_numpy(zero_copy_only=False)
        rows = items.table(ITEMS)
        at = lake.version("items", refresh=False)  # as the index's fence was just read
        staged, counts = lake.staged_upsert("items", rows, known, at)
        blocks = set(rows["id_block"].to_pylist())
        item_keys = sellers.keys(rows["client_item_id"], self.seller)
        return Part(staged, item_keys, blocks, kept_ids=counts["kept_ids"], batch=items)

    def records(self, items: Part, version: int | None) -> Part | None:
        """The items' records (an item the lake holds newer keeps its own), written as files.

        A record's block is read at ``version``, the version read with the
        records fence before the ids: a commit since moves the fence.
        """
        batch = items.batch
        if batch is None or not len(batch):
            return None
        won = pc.invert(pc.is_in(batch["object_id"], items.kept_ids.cast(pa.int64())))
        known = batch["known"].filter(won).to_numpy(zero_copy_only=False)
        rows = derive_records(batch, None, self.catalog.synonyms).table(RECORDS).filter(won)
        staged, _ = self.catalog.lake.staged_upsert("records", rows, known, version)
        blocks = set(rows["id_block"].to_pylist())
        return Part(staged, sellers.keys(rows["client_item_id"], self.seller), blocks, rows=rows)

    def answers(self, items: Part) -> list[dict[str, Any]]:
        """Each push's response."""
        batch = items.batch if items.batch is not None else Batch({}, 0)
        return plan_responses(self.pushes, self.checked, batch, self.failed, self.warned)

    def texts(self, answers: list[dict[str, Any]]) -> list[str]:
        """Each response as stored."""
        return [response_text(a) for a in answers]


def group_rows(pushes: list[Push]) -> tuple[ParsedPush, np.ndarray, pd.Series, pd.Series]:
    """A group of pushes as one batch: the items, each push's size, each item's push and time."""
    parsed = combine([p.parsed for p in pushes])
    sizes = np.array([len(p.parsed.item_json) for p in pushes], dtype="int64")
    request_ids = pd.Series(np.repeat([p.request_id for p in pushes], sizes), dtype=object)
    received_at = pd.Series(
        np.repeat(
            pd.DatetimeIndex([pd.Timestamp(p.received_at) for p in pushes]).tz_convert("UTC"),
            sizes,
        )
    ).astype("datetime64[us, UTC]")
    return parsed, sizes, request_ids, received_at


def _strict_rows(pushes: list[Push], sizes: np.ndarray) -> np.ndarray:
    return np.repeat([p.strict for p in pushes], sizes).astype(bool)


__all__ = [
    "JOURNAL",
    "WRITE_ORDER",
    "Catalog",
    "Committed",
    "GroupWrite",
    "Part",
    "commit_group",
    "dry_run",
    "group_rows",
    "identified",
    "live_records",
    "run",
]
