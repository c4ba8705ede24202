"""The ``Catalog`` facade: the one code path behind the library, CLI and flows."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from deltalake.exceptions import DeltaError

from . import clean, settings
from .errors import CatalogLakeError, LakeError, PushError
from .lake import Lake, quote
from .parse import ParsedPush, parse_push, payload_from_raw
from .records import Batch, Synonyms, derive_records, typed_items
from .schemas import ITEMS, PUSHES, RAW, RECORDS, REJECTS
from .summary import push_response
from .validate import Validation, validate

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class _Push:
    """One push on its way through ``_ingest``: the payload and where it came from."""

    parsed: ParsedPush
    request_id: str
    received_at: datetime
    started: float
    source: str | None
    flow_run_id: str | None = None
    idempotency_key: str | None = None
    replay: bool = False

    @cached_property
    def digest(self) -> str:
        """SHA-256 of the items as received (what an idempotency key is bound to)."""
        return payload_digest(self.parsed)


@dataclass
class Derived:
    """What a batch of items becomes, before anything is written."""

    checked: Validation
    client_ids: pd.Series
    items: Batch
    records: Batch


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Catalog:
    """A catalog lake: push product objects in, read flat records out.

    Args:
        lake: a folder or URI holding the tables; defaults to ``$CATALOG_LAKE_URI``,
            else ``./lake``.
        synonyms: the synonym list; defaults to ``data/synonyms.txt``.
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
        #: Seconds spent per stage across this catalog's pushes (for ``bench``).
        self.timings: dict[str, float] = defaultdict(float)

    @contextmanager
    def _timed(self, stage: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings[stage] += time.perf_counter() - started

    def __repr__(self) -> str:
        return f"Catalog({self.lake.uri!r})"

    # --- the push -------------------------------------------------------------

    def push(
        self,
        product_object: Any,
        *,
        source: str | None = None,
        flow_run_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Upload new products or update existing ones (SPEC 4.1).

        Args:
            product_object: ``{"items": [...]}`` as a dict, JSON text or bytes.
            source: where the payload came from (a file path), kept in ``pushes``.
            flow_run_id: the Prefect flow run that pushed, kept in ``pushes``.
            idempotency_key: makes a retry safe. A key already in the ``pushes``
                table with the same payload returns that push's response and
                writes nothing; with a different payload it is refused.

        Returns:
            The SPEC 2.7 push response plus ``catalog_push_failed_items``.

        Raises:
            PushError: the payload as a whole is unusable or the lake cannot be
                written. Nothing of the push is stored unless it says otherwise.
        """
        started = time.perf_counter()
        received_at = self.clock()
        request_id = str(uuid.uuid4())
        with self._timed("parse"):
            parsed = parse_push(product_object)
        if idempotency_key is not None:
            _check_key(idempotency_key)
        return self._ingest(
            _Push(parsed, request_id, received_at, started, source, flow_run_id, idempotency_key)
        )

    def _earlier_push(self, key: str, digest: str) -> dict[str, Any] | None:
        """The response of the push made earlier under ``key``, if any.

        The keys live in the ``pushes`` table, written last by every push, so
        a key is only "used" once its push completed. Delta's app-transaction
        versions would need a number per key and are not enforced by
        deltalake anyway (we would check them ourselves just the same).
        """
        found = self.lake.read(
            "pushes",
            'SELECT payload_sha256, response_json FROM "pushes" '
            f"WHERE idempotency_key = {quote(key)} ORDER BY received_at LIMIT 1",
        )
        if found.num_rows == 0:
            return None
        if found["payload_sha256"][0].as_py() != digest:
            raise PushError(
                "idempotency_conflict",
                f"idempotency_key {key!r} was already used for a different payload; "
                "use a new key for new content",
            )
        return json.loads(found["response_json"][0].as_py())

    def derive(
        self,
        parsed: ParsedPush,
        *,
        request_ids: pd.Series,
        received_at: pd.Series,
        price_time: datetime,
    ) -> Derived:
        """Validate items and derive their typed rows and records, writing nothing.

        ``request_ids`` and ``received_at`` give each item's push, so several
        pushes can be derived at once (backfills): duplicates are judged
        within a push, and across pushes the last valid occurrence wins, as it
        would have when the pushes were made one after another.
        """
        with self._timed("validate"):
            checked = validate(parsed, groups=request_ids)
        client_ids = clean.text_of(checked.frame["client_item_id"])
        passed = checked.passed
        superseded = pd.Series(False, index=passed.index)
        superseded[passed] = client_ids[passed].duplicated(keep="last")
        keep = passed & ~superseded
        with self._timed("typed_items"):
            typed = typed_items(checked.frame[keep])
        with self._timed("ids"):
            items = self._with_ids(typed, request_ids[keep], received_at[keep])
        with self._timed("records"):
            records = derive_records(items, price_time, self.synonyms)
        return Derived(checked, client_ids, items, records)

    def _ingest(self, push: _Push) -> dict[str, Any]:
        """Run one push (or the replay of one) under the lake's writer lock."""
        with ExitStack() as stack:
            try:
                stack.enter_context(self.lake.writing())
            except LakeError as exc:
                raise _write_failed(exc, push.request_id, raw_written=push.replay) from exc
            if push.idempotency_key is not None:
                # Under the writer lock: two pushes with one key cannot both pass.
                try:
                    earlier = self._earlier_push(push.idempotency_key, push.digest)
                except (DeltaError, OSError, LakeError) as exc:
                    raise _write_failed(exc, push.request_id, raw_written=push.replay) from exc
                if earlier is not None:
                    return earlier
            return self._write(push)

    def _write(self, push: _Push) -> dict[str, Any]:
        parsed, request_id, received_at = push.parsed, push.request_id, push.received_at
        source, flow_run_id, replay = push.source, push.flow_run_id, push.replay
        idempotency_key, digest = push.idempotency_key, push.digest
        n = len(parsed.items)
        try:
            self.lake.ensure()
            derived = self.derive(
                parsed,
                request_ids=pd.Series([request_id] * n),
                received_at=pd.Series([pd.Timestamp(received_at)] * n),
                price_time=received_at,
            )
        except (DeltaError, OSError, LakeError) as exc:
            raise _write_failed(exc, request_id, raw_written=replay) from exc
        items, records, client_ids = derived.items, derived.records, derived.client_ids
        passed = derived.checked.passed
        stored = list(
            zip(
                items.frame["client_item_id"].tolist(),
                items.frame["object_id"].tolist(),
                strict=True,
            )
        )
        failed = [
            {"index": index, "client_item_id": _str_or_none(client_ids[index]), "errors": errs}
            for index, errs in derived.checked.errors.items()
        ]
        response = push_response(request_id, n, stored, failed)
        metadata = {"catalog_lake.request_id": request_id}

        # Write order, chosen so that a crash between any two commits can be
        # finished by replaying the raw table (``Catalog.repair``):
        #   1. raw     - the journal: once it commits, the push can be replayed whole.
        #   2. rejects - append; a replay skips it when the request id is present.
        #   3. items   - upsert that assigns ids; idempotent, and never rolls a newer
        #                row back (updated_at guard), so a replay is harmless.
        #   4. records - upsert derived from the same rows; same guarantees.
        #   5. pushes  - the commit marker: a request id in raw without a row here
        #                is an interrupted push, and repair finishes it.
        raw_written = replay
        try:
            if not replay:
                with self._timed("write_raw"):
                    raw = self._raw(parsed, request_id, received_at, passed, client_ids)
                    self.lake.append("raw", raw, metadata)
                raw_written = True
            if failed and not (replay and self.lake.has("rejects", "request_id", request_id)):
                with self._timed("write_rejects"):
                    self.lake.append(
                        "rejects", self._rejects(failed, request_id, received_at), metadata
                    )
            if len(items):
                known = items.frame["known"].to_numpy(dtype=bool)
                with self._timed("write_items"):
                    self.lake.upsert("items", items.table(ITEMS), metadata, known=known)
                with self._timed("write_records"):
                    self.lake.upsert("records", records.table(RECORDS), metadata, known=known)
            row = {
                "request_id": [request_id],
                "received_at": [received_at],
                "finished_at": [self.clock()],
                "duration_ms": [(time.perf_counter() - push.started) * 1000.0],
                "received": [n],
                "success": [len(stored)],
                "failed": [len(failed)],
                "source": [source],
                "flow_run_id": [flow_run_id],
                "idempotency_key": [idempotency_key],
                "payload_sha256": [digest],
                "response_json": [json.dumps(response, ensure_ascii=False)],
            }
            with self._timed("write_pushes"):
                self.lake.append("pushes", pa.table(row, schema=PUSHES), metadata)
        except (DeltaError, OSError, LakeError, pa.ArrowException) as exc:
            raise _write_failed(exc, request_id, raw_written=raw_written) from exc
        return response

    def _with_ids(self, items: Batch, request_ids: pd.Series, received_at: pd.Series) -> Batch:
        """Give every item its service id: the stored one, or the next free number.

        Ids come from the items table itself (its largest id), so an id is
        never handed to two client_item_ids.
        """
        frame = items.frame.copy()
        keys = frame["client_item_id"].astype(object)
        known = (
            self.lake.lookup(
                "items",
                "client_item_id",
                keys.tolist(),
                ["client_item_id", "object_id", "first_seen_at", "likes", "sales"],
            )
            .to_pandas()
            .set_index("client_item_id")
        )
        aligned = known.reindex(keys.to_numpy())  # keys are unique among kept items
        object_id = pd.Series(aligned["object_id"].to_numpy(), index=frame.index).astype("Int64")
        new = object_id.isna()
        first_free = self.lake.max_value("items", "object_id") + 1
        object_id[new] = np.arange(first_free, first_free + int(new.sum()), dtype="int64")
        received = pd.Series(
            pd.to_datetime(received_at.to_numpy(), utc=True), index=frame.index
        ).astype("datetime64[us, UTC]")
        first_seen = pd.Series(aligned["first_seen_at"].array, index=frame.index)
        frame["object_id"] = object_id.astype("int64")
        frame["known"] = ~new.to_numpy()
        frame["first_seen_at"] = first_seen.astype("datetime64[us, UTC]").fillna(received)
        for metric in ("likes", "sales"):
            values = pd.Series(aligned[metric].to_numpy(), index=frame.index)
            frame[metric] = values.astype("Int64").fillna(0)
        frame["updated_at"] = received
        frame["request_id"] = request_ids.to_numpy(dtype=object)
        return Batch(frame, items.lists)

    @staticmethod
    def _raw(
        parsed: ParsedPush,
        request_id: str,
        received_at: datetime,
        passed: pd.Series,
        client_ids: pd.Series,
    ) -> pa.Table:
        n = len(parsed.items)
        received = pd.Timestamp(received_at).tz_convert("UTC")
        return pa.table(
            {
                "request_id": pa.array([request_id] * n, pa.string()),
                "index": pa.array(np.arange(n, dtype="int32")),
                "received_at": pa.array([received] * n, RAW.field("received_at").type),
                "client_item_id": pa.array(
                    client_ids.astype(object), pa.string(), from_pandas=True
                ),
                "passed": pa.array(passed.to_numpy(dtype=bool)),
                "item_json": pa.array(parsed.item_json, pa.string()),
                "received_date": pa.array([received.date()] * n, pa.date32()),
            },
            schema=RAW,
        )

    @staticmethod
    def _rejects(failed: list[dict[str, Any]], request_id: str, received_at: datetime) -> pa.Table:
        n = len(failed)
        return pa.table(
            {
                "request_id": [request_id] * n,
                "index": [f["index"] for f in failed],
                "client_item_id": [f["client_item_id"] for f in failed],
                "codes": [list(dict.fromkeys(e["code"] for e in f["errors"])) for f in failed],
                "errors": [
                    [
                        {**e, "value": json.dumps(e["value"], ensure_ascii=False)}
                        for e in f["errors"]
                    ]
                    for f in failed
                ],
                "rejected_at": [received_at] * n,
            },
            schema=REJECTS,
        )

    # --- repair -----------------------------------------------------------------

    def interrupted(self) -> list[str]:
        """Request ids that reached the raw table but never got a pushes row."""
        raw = self.lake.read("raw", 'SELECT DISTINCT request_id FROM "raw"')
        done = set(self.lake.read("pushes")["request_id"].to_pylist())
        return sorted(r for r in raw["request_id"].to_pylist() if r not in done)

    def repair(self) -> list[dict[str, Any]]:
        """Finish every interrupted push by replaying it from the raw table.

        Safe to run any number of times, alone or after a crash: each step of
        a push is idempotent under replay (see the write order in ``_ingest``).
        """
        responses = []
        with self.lake.writing():
            pending = self.interrupted()
        for request_id in pending:
            sql = f'SELECT * FROM "raw" WHERE request_id = {quote(request_id)} ORDER BY "index"'
            rows = self.lake.read("raw", sql)
            parsed = parse_push(payload_from_raw(rows["item_json"].to_pylist()))
            received_at = rows["received_at"][0].as_py()
            responses.append(
                self._ingest(
                    _Push(
                        parsed, request_id, received_at, time.perf_counter(), "repair", replay=True
                    )
                )
            )
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
            order_by='CAST("object_id" AS BIGINT)',
            limit=limit,
            as_of=as_of,
        )
        return _pandas(table)

    def check(self, *, derive: bool = True) -> dict[str, Any]:
        """Verify the lake's invariants (see ``catalog_lake.check``); never writes."""
        from .check import check

        return check(self, derive=derive)

    def history(self, limit: int = 20) -> pd.DataFrame:
        """Table versions, newest first: table, version, time, operation, metrics."""
        rows = []
        for name in ("raw", "items", "records", "rejects", "pushes", "files", "runs"):
            for commit in self.lake.history(name, limit):
                rows.append(
                    {
                        "table": name,
                        "version": commit.get("version"),
                        "timestamp": pd.Timestamp(commit.get("timestamp", 0), unit="ms", tz="UTC"),
                        "operation": commit.get("operation"),
                        "request_id": commit.get("catalog_lake.request_id"),
                        "metrics": json.dumps(commit.get("operationMetrics", {}), default=str),
                    }
                )
        frame = pd.DataFrame(
            rows, columns=["table", "version", "timestamp", "operation", "request_id", "metrics"]
        )
        return frame.sort_values(["timestamp", "table"], ascending=False, ignore_index=True)

    def rejects(self) -> pd.DataFrame:
        """Every rejected item with its request id, index and errors."""
        return _pandas(self.lake.read("rejects")).sort_values(
            ["rejected_at", "index"], ignore_index=True
        )

    def pushes(self) -> pd.DataFrame:
        """One row per push with its response counts and timing."""
        return _pandas(self.lake.read("pushes")).sort_values("received_at", ignore_index=True)

    def raw(self) -> pd.DataFrame:
        """Every received item exactly as sent, passed or failed."""
        return _pandas(self.lake.read("raw")).sort_values(
            ["received_at", "index"], ignore_index=True
        )


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not key.strip() or len(key) > 256:
        raise PushError("invalid_idempotency_key", "idempotency_key must be 1 to 256 characters")


def payload_digest(parsed: ParsedPush) -> str:
    """SHA-256 of the items as received, the same for dict, text or bytes input."""
    digest = hashlib.sha256()
    for text in parsed.item_json:
        digest.update(text.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def _pandas(table: pa.Table) -> pd.DataFrame:
    # Nullable integers stay integers (an item without qty is not 0.0 or NaN).
    def mapper(kind: pa.DataType):
        return pd.Int64Dtype() if pa.types.is_integer(kind) else None

    return table.to_pandas(types_mapper=mapper)


def _by_id(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    return frame.sort_values(column, key=lambda s: s.astype("int64"), ignore_index=True)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _write_failed(exc: Exception, request_id: str, *, raw_written: bool) -> PushError:
    hint = (
        "; the items reached the raw table, so `catalog-lake repair` can finish the push"
        if raw_written
        else "; nothing of this push was stored"
    )
    return PushError(
        "lake_write_failed", f"cannot write the lake: {exc}{hint}", request_id=request_id
    )


__all__ = ["Catalog", "CatalogLakeError", "PushError"]
