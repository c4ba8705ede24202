"""The ``Catalog`` facade: the one code path behind the library, CLI and flows."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from . import settings
from .errors import CatalogLakeError, FenceMoved, PushError
from .keys import Keys
from .lake import LAKE_ERRORS, Lake, quote, races
from .parse import ParsedPush, combine, parse_push, payload_from_raw
from .push import (
    Checked,
    Derived,
    Push,
    PushRequest,
    check_group,
    check_key,
    failures,
    plan_responses,
    raw_rows,
    reject_rows,
    strict_of,
    unfinished,
    warned,
    warning_rows,
    write_failed,
)
from .records import Batch, Synonyms, derive_records
from .schemas import ITEMS, PUSHES, RECORDS
from .summary import DRY_RUN_KEY

Clock = Callable[[], datetime]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Catalog:
    """A catalog lake: push product objects in, read flat records out.

    Args:
        lake: a folder or URI holding the tables; defaults to ``$CATALOG_LAKE_URI``,
            else ``./lake``.
        synonyms: a synonym list file; defaults to ``$CATALOG_LAKE_SYNONYMS``, else the
            list shipped in the package.
        storage_options: passed to deltalake for object stores; never logged.
        clock: the time source, for the price rule and timestamps (tests pin it).
    """

    def __init__(
        self,
        lake: str | Path | None = None,
        *,
        synonyms: str | Path | None = None,
        storage_options: dict[str, str] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.lake = Lake(lake if lake is not None else settings.default_lake_uri(), storage_options)
        self.synonyms = Synonyms.load(synonyms)
        self.clock = clock or _utcnow
        self._ensured = False
        self._keys: Keys | None = None

    def __repr__(self) -> str:
        return f"Catalog({self.lake.uri!r})"

    @property
    def keys(self) -> Keys:
        """The lake's key index (``keys.Keys``), the one owner of service ids."""
        if self._keys is None or self._keys.lake is not self.lake:
            self._keys = Keys(self.lake)  # a new lake object (tests swap in a failing one)
        return self._keys

    # --- the push -------------------------------------------------------------

    def push(
        self,
        product_object: Any,
        *,
        source: str | None = None,
        flow_run_id: str | None = None,
        idempotency_key: str | None = None,
        strict: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Upload new products or update existing ones (SPEC 4.1).

        Args:
            product_object: ``{"items": [...]}`` as a dict, JSON text or bytes.
            source: where the payload came from (a file path), kept in ``pushes``.
            flow_run_id: the Prefect flow run that pushed, kept in ``pushes``.
            idempotency_key: makes a retry safe. A key already in the ``pushes``
                table with the same payload returns that push's response and
                writes nothing; with a different payload it is refused.
            strict: refuse an item for a warning too (a value that would be
                dropped or repaired), for callers who want all or nothing per item.
            dry_run: answer exactly what this push would, and write nothing.
                An item new to the lake has no service id yet: it is mapped to
                null, and the answer carries ``"catalog_push_dry_run": true``.

        Returns:
            The SPEC 2.7 push response plus ``catalog_push_failed_items`` and
            ``catalog_push_warning_items``.

        Raises:
            PushError: the payload as a whole is unusable or the lake cannot be
                written. Nothing of the push is stored unless it says otherwise.
        """
        request = PushRequest(
            product_object, source=source, idempotency_key=idempotency_key, strict=strict
        )
        return self.push_many([request], flow_run_id=flow_run_id, dry_run=dry_run)[0]

    def push_many(
        self,
        requests: list[PushRequest],
        *,
        flow_run_id: str | None = None,
        checked: Checked | None = None,
        replayed: list[bool] | None = None,
        dry_run: bool = False,
    ) -> list[dict[str, Any]]:
        """Several pushes written together: one commit per table for all of them.

        Each push keeps everything a single push has (its request id, response,
        rejects and ``pushes`` row) and the result is the same as pushing them
        one after another in order: duplicates are judged within a push, and a
        later push's version of an item wins over an earlier one's. What is
        shared is the cost: a Delta commit and an id lookup cost about the
        same for 10 items as for 10,000, so feeds of many small files are
        written in groups (``feeds.ingest_files``).

        ``checked`` is ``check_group`` of exactly these requests' items, made
        ahead (``feeds`` does it on Dask workers); the requests' payloads
        are then ``ParsedPush`` objects that need only ``item_json`` and
        ``errors``.

        ``replayed``, when given, is filled with one flag per request: whether
        its response is that of an earlier push under the same idempotency
        key, so that nothing was written for it (a resumed ingest counts
        those batches as already stored, not as ingested again).

        ``dry_run`` answers as ``push(dry_run=True)`` does, for each request.

        Returns:
            One response per request, in order.

        Raises:
            PushError: one payload is unusable (nothing is written; the message
                names it), or the lake cannot be written.
        """
        started = time.perf_counter()
        pushes = []
        for number, request in enumerate(requests):
            received_at = self.clock()
            if pushes and received_at <= pushes[-1].received_at:
                # Replays follow received_at: a group's pushes must not tie.
                received_at = pushes[-1].received_at + timedelta(microseconds=1)
            if request.idempotency_key is not None:
                check_key(request.idempotency_key)
            parsed = request.payload
            if not isinstance(parsed, ParsedPush):
                try:
                    parsed = parse_push(parsed)
                except PushError as exc:
                    if len(requests) == 1:
                        raise
                    raise PushError(exc.reason, f"push {number}: {exc.detail}") from None
            pushes.append(
                Push(
                    parsed,
                    str(uuid.uuid4()),
                    received_at,
                    started,
                    request.source,
                    flow_run_id,
                    request.idempotency_key,
                    strict=request.strict,
                )
            )
        if dry_run:
            if replayed is not None:
                replayed[:] = [False] * len(pushes)  # nothing is written, nothing replayed
            return self._dry_run(pushes, checked) if pushes else []
        return self._ingest(pushes, checked, replayed) if pushes else []

    def _earlier_pushes(self, pushes: list[Push]) -> tuple[int, dict[str, Earlier]]:
        """The pushes table's fence, and the pushes already stored under these pushes' keys.

        The keys live in the ``pushes`` table, written last by every push, so
        a key is only "used" once its push completed. The fence is read
        first: a push under one of these keys that lands after this read
        makes our pushes commit fail, and it is looked at then
        (``_claimed``).
        """
        _, fence = self.lake.fence("pushes")
        keys = sorted({p.idempotency_key for p in pushes if p.idempotency_key is not None})
        return fence, self._stored(keys=keys)

    def _stored(
        self,
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
        found = self.lake.read(
            "pushes",
            "SELECT request_id, idempotency_key, payload_sha256, response_json "
            f'FROM "pushes" WHERE {" OR ".join(clauses)} ORDER BY received_at',
        ).to_pylist()
        stored: dict[str, Earlier] = {}
        for row in found:
            earlier = Earlier(row["request_id"], row["payload_sha256"], row["response_json"])
            stored.setdefault(f"request:{row['request_id']}", earlier)
            if row["idempotency_key"] is not None:
                stored.setdefault(f"key:{row['idempotency_key']}", earlier)
        return stored

    def derive(
        self,
        parsed: ParsedPush,
        *,
        request_ids: pd.Series,
        received_at: pd.Series,
        price_time: datetime | None = None,
        checked: Checked | None = None,
        strict: bool | np.ndarray = True,
    ) -> Derived:
        """Validate items and derive their typed rows and records, writing nothing.

        ``request_ids`` and ``received_at`` give each item's push, so several
        pushes can be derived at once (groups of pushes, backfills):
        duplicates are judged within a push, and across pushes the last valid
        occurrence wins, as it would have when the pushes were made one after
        another. The price rule is applied at ``price_time``, or at each
        item's own ``received_at`` when it is None (what a push does).
        ``checked`` is ``check_group`` of these pushes, when already computed.
        ``strict`` is each item's push's strictness (``push.strict_of``).
        """
        if checked is None:
            checked = check_group(parsed, request_ids, strict)
        items = self._identified(checked, request_ids, received_at)
        records = derive_records(items, price_time, self.synonyms)
        return Derived(checked.checked, checked.client_ids, items, records)

    def _identified(
        self, checked: Checked, request_ids: pd.Series, received_at: pd.Series
    ) -> Batch:
        """The kept items of a checked group with their service ids."""
        client_ids, keep = checked.client_ids, checked.keep
        passed = checked.checked.passed
        # An item new to the lake was first seen by the first push that sent
        # it, and takes its id in that order, as if the pushes came one by one.
        first = pd.DataFrame(
            {"at": received_at.array, "position": np.arange(len(passed))},
            index=passed.index,
        )[passed]
        first = first.groupby(client_ids[passed].to_numpy()).transform("min")[keep[passed]]
        return self.keys.assign(checked.typed, request_ids[keep], received_at[keep], first)

    def _ingest(
        self,
        pushes: list[Push],
        checked: Checked | None = None,
        replayed: list[bool] | None = None,
    ) -> list[dict[str, Any]]:
        """Run pushes (or the replay of one): skip those whose key is stored, write the rest."""
        first = pushes[0]
        try:
            if not self._ensured:  # a push creates the lake it writes
                self.lake.ensure()
                self._ensured = True
            fence, earlier = self._earlier_pushes(pushes)
        except LAKE_ERRORS as exc:
            self._ensured = False
            raise write_failed(exc, first.request_id, raw_written=first.replay) from exc
        responses, todo, first_with_key = _idempotent(pushes, earlier)
        if checked is not None and len(todo) != len(pushes):
            # Checked ahead for all of them, but some had landed (a resumed ingest):
            # which item of the group wins changes, so the rest is checked again.
            checked = None
            for number in todo:
                if pushes[number].parsed.cells is None:
                    pushes[number] = pushes[number].reparsed()
        written = self._write([pushes[n] for n in todo], fence, checked) if todo else []
        for number, response in zip(todo, written, strict=True):
            responses[number] = response
        for number, push in enumerate(pushes):  # a key repeated within the group
            if responses[number] is None:
                responses[number] = responses[first_with_key[push.idempotency_key or ""]]
        if replayed is not None:
            done = set(todo)
            replayed[:] = [number not in done for number in range(len(pushes))]
        return [r for r in responses if r is not None]

    def _dry_run(self, pushes: list[Push], checked: Checked | None) -> list[dict[str, Any]]:
        """What the pushes would answer, computed as a push computes it, with nothing written.

        Idempotency keys are honoured as a push honours them: a stored key
        answers with its push's response (or is refused for other content).
        """
        exists = self.lake.exists()
        earlier = self._earlier_pushes(pushes)[1] if exists else {}
        responses, todo, first_with_key = _idempotent(pushes, earlier)
        if len(todo) != len(pushes):
            checked = None
        group = [pushes[n] for n in todo]
        if group:
            parsed, sizes, request_ids, received_at = _group(group)
            if checked is None:
                checked = check_group(parsed, request_ids, _strict_rows(group, sizes))
            if exists:
                items = self._identified(checked, request_ids, received_at)
                known = items.frame["known"].to_numpy(dtype=bool)
                ids = pd.Series(np.where(known, items.frame["object_id"].astype(object), None))
            else:
                kept = checked.client_ids[checked.keep]
                items = Batch(pd.DataFrame({"client_item_id": kept.to_numpy()}), {})
                ids = pd.Series([None] * len(kept), dtype=object)
            items = Batch(items.frame.assign(object_id=ids.astype(object)), items.lists)
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
        self, pushes: list[Push], fence: int, checked: Checked | None = None
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
            self._ensured = False
            raise write_failed(
                exc, first.request_id, raw_written=replay, pushes=len(pushes)
            ) from exc
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
                self.lake.append("raw", raw, metadata)
                raw_written = True
            failed_by_push = failures(pushes, checked)
            if any(failed_by_push) and not (
                replay and self.lake.has("rejects", "request_id", first.request_id)
            ):
                self.lake.append("rejects", reject_rows(pushes, failed_by_push), metadata)
            warned_by_push = warned(pushes, checked)
            if any(warned_by_push) and not (
                replay and self.lake.has("warnings", "request_id", first.request_id)
            ):
                self.lake.append("warnings", warning_rows(pushes, warned_by_push), metadata)
            items = self._store_items(checked, request_ids, received_at, metadata)
            if len(items):
                known = items.frame["known"].to_numpy(dtype=bool)
                records = derive_records(items, None, self.synonyms)
                self.lake.upsert_fenced("records", records.table(RECORDS), metadata, known)
            answers = plan_responses(pushes, checked, items, failed_by_push, warned_by_push)
            return self._store_pushes(pushes, answers, sizes, fence, metadata)
        except (*LAKE_ERRORS, pa.ArrowException) as exc:
            self._ensured = False
            raise write_failed(
                exc, first.request_id, raw_written=raw_written, pushes=len(pushes)
            ) from exc

    def _store_items(
        self, checked: Checked, request_ids: pd.Series, received_at: pd.Series, metadata
    ) -> Batch:
        """Give the group's items their ids and commit them, fenced; again if another writer won.

        The ids come from the key index at the items table's fence number;
        a commit by anyone else since then fails ours (``FenceMoved``), and
        the index is read again and the ids allocated again.
        """
        for attempt in races():
            with attempt:
                items = self._identified(checked, request_ids, received_at)
                if not len(items):
                    return items
                try:
                    self.lake.upsert(
                        "items",
                        items.table(ITEMS),
                        metadata,
                        known=items.frame["known"].to_numpy(dtype=bool),
                        fence=self.keys.fence,
                    )
                except BaseException:
                    self.keys.forget()  # read the index again: it is stale or partly written
                    raise
                self.keys.remember(items)
                return items
        raise AssertionError("unreachable: the last lost race is raised")

    def _store_pushes(
        self,
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
        finished_at = self.clock()
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
                    self.lake.append("pushes", table, metadata, fence=fence)
                    return answers
                except FenceMoved:
                    _, fence = self.lake.fence("pushes")
                    unclaimed = self._claimed(pushes, unclaimed, answers)
                    if not unclaimed:
                        return answers
                    raise
        raise AssertionError("unreachable: the last lost race is raised")

    def _claimed(
        self, pushes: list[Push], unclaimed: list[int], answers: list[dict[str, Any]]
    ) -> list[int]:
        """The pushes of ``unclaimed`` still to store; the others take the stored answer."""
        stored = self._stored(
            keys=[k for n in unclaimed if (k := pushes[n].idempotency_key) is not None],
            request_ids=[pushes[n].request_id for n in unclaimed],
        )
        left = []
        for number in unclaimed:
            push = pushes[number]
            found = stored.get(f"request:{push.request_id}")
            if found is None and push.idempotency_key is not None:
                found = stored.get(f"key:{push.idempotency_key}")
                if found is not None and found.digest != push.digest:
                    raise _conflict(push.idempotency_key, after_write=True)
            if found is None:
                left.append(number)
            else:
                answers[number] = found.response
        return left

    def snapshot_keys(self) -> pa.Table | None:
        """The keys a new process would load (snapshot plus changed blocks); None without one."""
        return self.keys.snapshot()

    def save_key_index(self) -> None:
        """Save the lake's key snapshot as of now (``keys.Keys.save``)."""
        self.keys.save()

    # --- repair -----------------------------------------------------------------

    def interrupted(self) -> list[str]:
        """Request ids that reached the raw table but never got a pushes row.

        In the order they were received, which is the order a replay must
        follow (a group of pushes interrupted together replays push by push).
        """
        raw = self.lake.read(
            "raw",
            "SELECT request_id, min(received_at) AS received_at, "
            'max(idempotency_key) AS idempotency_key FROM "raw" '
            "GROUP BY request_id ORDER BY received_at, request_id",
        )
        pushes = self.lake.read("pushes", 'SELECT request_id, idempotency_key FROM "pushes"')
        return unfinished(
            raw["request_id"].to_pylist(),
            raw["idempotency_key"].to_pylist(),
            set(pushes["request_id"].to_pylist()),
            {k for k in pushes["idempotency_key"].to_pylist() if k is not None},
        )

    def repair(self) -> list[dict[str, Any]]:
        """Finish every interrupted push by replaying it from the raw table.

        Safe to run any number of times, alone, after a crash, or beside
        other writers: each step of a push is idempotent under replay (see
        the write order in ``_write``), and a push that finishes while it is
        replayed is stored once (the pushes commit is fenced).
        """
        self.lake.require()
        responses = []
        pending = self.interrupted()
        for request_id in pending:
            sql = f'SELECT * FROM "raw" WHERE request_id = {quote(request_id)} ORDER BY "index"'
            rows = self.lake.read("raw", sql)
            parsed = parse_push(payload_from_raw(rows["item_json"].to_pylist()))
            first = rows.slice(0, 1).to_pylist()[0]
            # The push keeps its identity: a later ingest then finds its key and
            # does not push those items again (issue 16). Rows written before
            # raw carried the identity have none, and are finished as "repair".
            replay = Push(
                parsed,
                request_id,
                first["received_at"],
                time.perf_counter(),
                first.get("source") or "repair",
                first.get("flow_run_id"),
                first.get("idempotency_key"),
                replay=True,
                strict=bool(strict_of([first.get("strict")])[0]),
            )
            responses.append(self._ingest([replay])[0])
        return responses

    # --- reading ------------------------------------------------------------------

    def records(self) -> pd.DataFrame:
        """Current flat search records, one per client_item_id, by service id."""
        return _by_id(_pandas(self.lake.read("records")), "object_id")

    def items(self) -> pd.DataFrame:
        """Current validated items with every field typed, by service id."""
        return _by_id(_pandas(self.lake.read("items")), "object_id")

    def query_records(
        self,
        where: str | None = None,
        columns: list[str] | None = None,
        limit: int | None = None,
        as_of: int | str | None = None,
    ) -> pd.DataFrame:
        """Records matching a SQL expression, by service id; read-only.

        Args:
            where: a SQL boolean expression over record columns, e.g.
                ``"on_sale AND price < 500"`` or ``"array_has(tags, 'veg')"``.
            columns: the columns to return (all by default).
            limit: at most this many rows.
            as_of: a table version number or an ISO timestamp (time travel).
        """
        table = self.lake.select(
            "records",
            columns=columns,
            where=where,
            order_by="object_id",
            limit=limit,
            as_of=as_of,
        )
        return _pandas(table)

    def history(self, limit: int = 20) -> pd.DataFrame:
        """Table versions, newest first: table, version, time, operation, metrics."""
        rows = []
        for name in ("raw", "items", "records", "rejects", "warnings", "pushes", "files", "runs"):
            for commit in self.lake.history(name, limit):
                rows.append(
                    {
                        "table": name,
                        "version": commit.get("version"),
                        "timestamp": pd.Timestamp(commit.get("timestamp", 0), unit="ms", tz="UTC"),
                        "operation": commit.get("operation"),
                        "request_id": commit.get("catalog_lake.request_id"),
                        "metrics": commit.get("operationMetrics", {}),
                    }
                )
        frame = pd.DataFrame(
            rows, columns=["table", "version", "timestamp", "operation", "request_id", "metrics"]
        )
        return frame.sort_values(["timestamp", "table"], ascending=False, ignore_index=True)

    def rejects(self) -> pd.DataFrame:
        """Every rejected item with its request id, index and errors.

        Each error's ``value`` is the value as it was sent (the table keeps it
        as JSON text, since a value can be of any JSON type).
        """
        frame = _pandas(self.lake.read("rejects")).sort_values(
            ["rejected_at", "index"], ignore_index=True
        )
        frame["errors"] = frame["errors"].map(
            lambda errors: [{**e, "value": _sent(e["value"])} for e in errors]
        )
        return frame

    def warnings(self) -> pd.DataFrame:
        """Every item stored with warnings: request id, index, each value dropped or repaired.

        Each warning's ``value`` is the value as it was sent; ``action`` says
        what was done (``dropped``, or ``repaired`` to ``repaired_to``).
        """
        frame = _pandas(self.lake.read("warnings")).sort_values(
            ["warned_at", "index"], ignore_index=True
        )
        frame["warnings"] = frame["warnings"].map(
            lambda warnings: [{**w, "value": _sent(w["value"])} for w in warnings]
        )
        return frame

    def pushes(self) -> pd.DataFrame:
        """One row per push with its response counts and timing."""
        return _pandas(self.lake.read("pushes")).sort_values("received_at", ignore_index=True)

    def raw(self) -> pd.DataFrame:
        """Every received item exactly as sent, passed or failed."""
        return _pandas(self.lake.read("raw")).sort_values(
            ["received_at", "index"], ignore_index=True
        )


@dataclass(frozen=True)
class Earlier:
    """A stored push: its request id, payload digest and response (as JSON text)."""

    request_id: str
    digest: str
    response_json: str

    @property
    def response(self) -> dict[str, Any]:
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
        f"idempotency_key {key!r} was already used for a different payload; "
        "use a new key for new content",
    )


def _sent(value: str | None) -> Any:
    """A reject's value, stored as JSON text, as it was sent."""
    return None if value is None else json.loads(value)


def _pandas(table: pa.Table) -> pd.DataFrame:
    # Nullable integers stay integers (an item without qty is not 0.0 or NaN).
    def mapper(kind: pa.DataType):
        return pd.Int64Dtype() if pa.types.is_integer(kind) else None

    # A map (the items' string attributes) reads as a dict, not a list of pairs.
    return table.to_pandas(types_mapper=mapper, maps_as_pydicts="strict")


def _by_id(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    return frame.sort_values(column, key=lambda s: s.astype("int64"), ignore_index=True)


__all__ = ["Catalog", "CatalogLakeError", "PushError", "PushRequest"]
