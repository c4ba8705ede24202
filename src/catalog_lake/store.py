"""A push's writes, in the documented order, and correct beside any number of writers.

``push`` plans what a group of pushes stores and answers; this module carries
the plan out against the lake (docs/design.md, "Write order" and "Writers"):
it answers a push whose idempotency key is stored from the ``pushes`` table,
then commits ``raw``, ``rejects`` and ``warnings``, ``items`` (ids allocated at
the items table's fence), ``records``, and last the fenced ``pushes`` rows.
``dry_run`` computes the very same answers and writes nothing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import settings
from .commitlog import concerns, keys_added
from .errors import FenceMoved, PushError
from .keys import Keys
from .lake import LAKE_ERRORS, Lake, races
from .literals import quote
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
from .summary import DRY_RUN_KEY

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


def earlier_pushes(lake: Lake, pushes: list[Push]) -> tuple[int, dict[str, Earlier]]:
    """The pushes table's fence, and the pushes already stored under these pushes' keys.

    The keys live in the ``pushes`` table, written last by every push, so
    a key is only "used" once its push completed. The fence is read
    first: a push under one of these keys that lands after this read
    makes our pushes commit fail, and it is looked at then
    (``_claimed``).
    """
    _, fence = lake.fence("pushes")
    keys = sorted({p.idempotency_key for p in pushes if p.idempotency_key is not None})
    return fence, stored(lake, keys=keys)


def stored(
    lake: Lake,
    *,
    keys: list[str] = (),
    request_ids: list[str] = (),  # type: ignore[assignment]
) -> dict[str, Earlier]:
    """Stored pushes by idempotency key and by request id (the first stored of each)."""
    clauses = []
    if keys:
        clauses.append(f"idempotency_key IN ({', '.join(quote(k) for k in keys)})")
    if request_ids:
        clauses.append(f"request_id IN ({', '.join(quote(r) for r in request_ids)})")
    if not clauses:
        return {}
    found = lake.read(
        "pushes",
        "SELECT request_id, idempotency_key, payload_sha256, response_json "
        f'FROM "pushes" WHERE {" OR ".join(clauses)} ORDER BY received_at',
    ).to_pylist()
    by_key: dict[str, Earlier] = {}
    for row in found:
        earlier = Earlier(row["request_id"], row["payload_sha256"], row["response_json"])
        by_key.setdefault(f"request:{row['request_id']}", earlier)
        if row["idempotency_key"] is not None:
            by_key.setdefault(f"key:{row['idempotency_key']}", earlier)
    return by_key


def identified(
    keys: Keys,
    checked: Checked,
    request_ids: pd.Series,
    received_at: pd.Series,
    hold: bool = False,
) -> Batch:
    """The kept items of a checked group with their service ids (``hold``: to be written)."""
    client_ids, keep = checked.client_ids, checked.keep
    passed = checked.checked.passed
    # An item new to the lake was first seen by the first push that sent
    # it, and takes its id in that order, as if the pushes came one by one.
    first = pd.DataFrame(
        {"at": received_at.array, "position": np.arange(len(passed))},
        index=passed.index,
    )[passed]
    first = first.groupby(client_ids[passed].to_numpy()).transform("min")[keep[passed]]
    return keys.assign(checked.typed, request_ids[keep], received_at[keep], first, hold)


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
    responses, todo, first_with_key = _idempotent(pushes, earlier)
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
            responses[number] = responses[first_with_key[push.idempotency_key or ""]]
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
    responses, todo, first_with_key = _idempotent(pushes, earlier)
    if checked is not None and len(todo) != len(pushes):
        checked = None  # checked for all of them (on a worker): the rest is checked again
    group = [pushes[n] for n in todo]
    if checked is None:  # a payload checked on a worker travelled without its cells
        group = [p.reparsed() if p.parsed.cells is None else p for p in group]
    if group:
        parsed, sizes, request_ids, received_at = _group(group)
        if checked is None:
            checked = check_group(parsed, request_ids, _strict_rows(group, sizes))
        if exists:
            items = identified(catalog.keys, checked, request_ids, received_at)
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
            responses[number] = responses[first_with_key[push.idempotency_key or ""]]
    return [r for r in responses if r is not None]


def _write(
    catalog: Catalog, pushes: list[Push], fence: int, checked: Checked | None = None
) -> list[dict[str, Any]]:
    """Validate, derive and store a group of pushes; their responses, in order.

    The group is derived as one batch and shares each table's commit; on
    a lake failure ``PushError`` names the first push's request id and
    says whether ``repair`` can finish the group. ``fence`` is the
    pushes table's fence when the group's keys were checked.
    """
    first = pushes[0]
    replay = first.replay
    parsed, sizes, request_ids, received_at = _group(pushes)
    try:
        if checked is None:
            checked = check_group(parsed, request_ids, _strict_rows(pushes, sizes))
    except LAKE_ERRORS as exc:
        catalog.lake.unsure()
        raise write_failed(exc, first.request_id, raw_written=replay, pushes=len(pushes)) from exc
    client_ids = checked.client_ids
    passed = checked.checked.passed.to_numpy(dtype=bool)
    metadata = {"catalog_lake.request_id": first.request_id}
    if len(pushes) > 1:
        metadata["catalog_lake.pushes"] = str(len(pushes))

    # Write order, chosen so that a crash between any two commits can be
    # finished by replaying the raw table (``Catalog.repair``), and so that
    # any number of writers stay correct (docs/design.md, "Writers"):
    #   1. raw     - the journal: once it commits, the pushes can be replayed whole.
    #   2. rejects, warnings - appends; a replay skips each when the request id
    #                is present.
    #   3. items   - upsert that assigns ids, fenced: a writer that another beat
    #                allocates again. Idempotent, and never rolls a newer row
    #                back (updated_at guard), so a replay is harmless.
    #   4. records - upsert derived from the same rows; same guarantees.
    #   5. pushes  - the commit marker, fenced: a request id or idempotency key
    #                is stored once. A request id in raw without a row here is
    #                an interrupted push, and repair finishes it.
    # A group of pushes shares each commit, so it is all-or-nothing per table.
    raw_written = replay
    try:
        if not replay:
            raw = raw_rows(pushes, parsed, request_ids, received_at, passed, client_ids)
            catalog.lake.append("raw", raw, metadata)
            raw_written = True
        failed_by_push = failures(pushes, checked)
        if any(failed_by_push) and not (
            replay and catalog.lake.has("rejects", "request_id", first.request_id)
        ):
            catalog.lake.append("rejects", reject_rows(pushes, failed_by_push), metadata)
        warned_by_push = warned(pushes, checked)
        if any(warned_by_push) and not (
            replay and catalog.lake.has("warnings", "request_id", first.request_id)
        ):
            catalog.lake.append("warnings", warning_rows(pushes, warned_by_push), metadata)
        # Read before the ids are settled: see ``Lake.upsert_fenced``.
        records_at = catalog.lake.fence("records")
        items, older = _store_items(catalog, checked, request_ids, received_at, metadata)
        if len(items):
            # An item the lake holds newer (a later push, or a delete) keeps its record.
            won = pc.invert(pc.is_in(items["client_item_id"], pa.array(older, pa.string())))
            known = items["known"].filter(won).to_numpy(zero_copy_only=False)
            records = derive_records(items, None, catalog.synonyms).table(RECORDS).filter(won)
            _store_records(catalog, records, known, records_at, metadata)
        answers = plan_responses(pushes, checked, items, failed_by_push, warned_by_push)
        return _store_pushes(catalog, pushes, answers, sizes, fence, metadata)
    except (*LAKE_ERRORS, pa.ArrowException) as exc:
        catalog.lake.unsure()
        raise write_failed(
            exc, first.request_id, raw_written=raw_written, pushes=len(pushes)
        ) from exc


def _store_items(
    catalog: Catalog, checked: Checked, request_ids: pd.Series, received_at: pd.Series, metadata
) -> Batch:
    """Give the group's items their ids and commit them, fenced; again if another writer won.

    The ids come from the key index at the items table's fence number, new
    ones from the lake's id counter. The files are written first; a commit
    by anyone else since the index was read fails ours (``FenceMoved``),
    and what it committed is read from the log (``Keys.absorb``): when it
    stored none of our keys and touched none of the blocks we rewrite, the
    same files are committed at the new fence. Otherwise the index is read
    again, and the ids given again.
    """
    lake, keys = catalog.lake, catalog.keys
    for attempt in races():
        with attempt:
            items = identified(keys, checked, request_ids, received_at, hold=True)
            if not len(items):
                return items, []
            known = items["known"].to_numpy(zero_copy_only=False)
            try:
                rows = items.table(ITEMS)
                at = lake.version("items", refresh=False)  # as the index's fence was just read
                staged, counts = lake.staged_upsert("items", rows, known, at)
                ours = set(rows["id_block"].to_pylist())
                _committed(lake, "items", staged, metadata, keys.fence, keys.version,
                           partial(_absorbed, keys, rows["client_item_id"], ours),
                           keys.claim)  # fmt: skip
            except BaseException:
                keys.forget()  # read the index again: it is stale or partly written
                raise
            keys.remember(items)
            return items, counts["kept_ids"].to_pylist()
    raise AssertionError("unreachable: the last lost race is raised")


def _store_records(
    catalog: Catalog, records: pa.Table, known: Any, at: tuple[int | None, int], metadata
) -> None:
    """Commit a group's records at the fence read before its ids; fold them if that lost.

    A record of a new item is appended unread, so a commit since the fence
    was read that stored a record of one of its items, or rewrote one of its
    blocks (a delete, another writer's update), makes it read and fold the
    blocks (``upsert_fenced``); any other costs the same files committed again.
    """
    lake = catalog.lake
    version, fence = at
    staged, _ = lake.staged_upsert("records", records, known, version)  # read with the fence
    ours = set(records["id_block"].to_pylist())
    apart = partial(_apart, lake, records["client_item_id"], ours)
    try:
        _committed(lake, "records", staged, metadata, fence, version, apart)
    except FenceMoved:
        lake.upsert_fenced("records", records, metadata,
                           admit=lambda rows: live_records(lake, rows))  # fmt: skip


def _committed(
    lake: Lake, name: str, staged, metadata, fence: int, read_at, moved, claim=None
) -> None:
    """Commit written files at ``fence``; after a lost race, again while ``moved`` allows.

    ``moved`` is told what was committed since ``read_at`` and the fence it
    left, and says whether our files still hold (``Keys.absorb``, ``_apart``).
    """
    for _ in range(settings.RECOMMITS):
        try:
            lake.commit_files(name, staged, metadata, fence, claim)
            return
        except FenceMoved:
            version, current = lake.fence(name)  # before the log: the log is at least as new
            since = lake.since(name, read_at if read_at is not None else -1)
            if version is None or since.version < version or not moved(since, current):
                raise  # a log read short of the fence's version proves nothing: redo
            _log.info("%s: a lost race left our files right; committed again at %d", name, current)
            fence, read_at, staged.read_version = current, since.version, since.version
    raise FenceMoved(f"{name!r}: {settings.RECOMMITS} commits in a row lost to other writers")


def _absorbed(keys: Keys, new: pa.Array, ours: set[int], since: Any, fence: int) -> bool:
    return keys.absorb(since, fence, new, ours)


def _apart(lake: Lake, keys: Any, ours: set[int], since: Any, fence: int) -> bool:
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
    items = lake.read_blocks(
        "items", rows["id_block"], ["client_item_id", "updated_at", "deleted_at"]
    )
    pairs = (
        rows.select(["client_item_id"])
        .append_column("_row", pa.array(np.arange(rows.num_rows), pa.int64()))
        .join(items, "client_item_id", join_type="inner")
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
            "response_json": json.dumps(response, ensure_ascii=False),
        }
        for number, (push, response) in enumerate(zip(pushes, answers, strict=True))
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
        if found is None and push.idempotency_key is not None:
            found = landed.get(f"key:{push.idempotency_key}")
            if found is not None and found.digest != push.digest:
                raise _conflict(push.idempotency_key, after_write=True)
        if found is None:
            left.append(number)
        else:
            answers[number] = found.response
    return left


@dataclass(frozen=True)
class Earlier:
    """A stored push: its request id, payload digest and response (as JSON text)."""

    request_id: str
    digest: str
    response_json: str

    @property
    def response(self) -> dict[str, Any]:
        """The response it answered, which a retry under its key answers again."""
        return json.loads(self.response_json)


def _group(pushes: list[Push]) -> tuple[ParsedPush, np.ndarray, pd.Series, pd.Series]:
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


def _idempotent(
    pushes: list[Push], earlier: dict[str, Earlier]
) -> tuple[list[dict[str, Any] | None], list[int], dict[str, int]]:
    """Which pushes to carry out, and the stored answers of those whose key was used.

    Returns the responses known so far (a stored push under the same key
    and payload answers for one), the numbers of the pushes to carry out,
    and, per key, the first push of the group that uses it (a key repeated
    within the group takes that push's answer).

    Raises:
        PushError: a key was used, here or before, with a different payload.
    """
    responses: list[dict[str, Any] | None] = [None] * len(pushes)
    todo: list[int] = []
    first_with_key: dict[str, int] = {}
    for number, push in enumerate(pushes):
        key = push.idempotency_key
        if key is None:
            todo.append(number)
            continue
        stored = earlier.get(f"key:{key}")
        digest = stored.digest if stored is not None else None
        if key in first_with_key:
            digest = pushes[first_with_key[key]].digest
        if digest is not None and digest != push.digest:
            raise _conflict(key)
        if stored is not None:
            responses[number] = stored.response
        elif key not in first_with_key:
            first_with_key[key] = number
            todo.append(number)
    return responses, todo, first_with_key


def _conflict(key: str, *, after_write: bool = False) -> PushError:
    if after_write:
        return PushError(
            "idempotency_conflict",
            f"idempotency_key {key!r} was stored by another push with a different payload "
            "while this one was being written; this push's raw, rejects and item rows were "
            "written but it is not recorded as a push. Use a new key for new content",
        )
    return PushError(
        "idempotency_conflict",
        f"idempotency_key {key!r} was already used for a different payload (or for the "
        "same items judged with another strict setting); use a new key for new content",
    )
