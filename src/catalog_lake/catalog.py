"""The ``Catalog`` facade: the one code path behind the library, CLI and flows."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import sellers, settings, store
from .errors import CatalogLakeError, LakeError, PushError, UsageError
from .keys import Keys
from .lake import Lake, reads
from .literals import quote
from .parse import ParsedPush, parse_push, payload_from_raw
from .push import (
    Checked,
    Derived,
    Push,
    PushRequest,
    check_group,
    check_key,
    strict_of,
    unfinished,
)
from .records import Synonyms, derive_records
from .sellers import DEFAULT_SELLER, seller_name, sql_filter, with_seller

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
        self._keys: Keys | None = None
        self._search: Any = None  # the search index, opened by the first search

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
        seller: str | None = None,
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
            seller: whose items these are (``sellers``; None: the default
                seller). Items are keyed by seller and ``client_item_id``:
                another seller's ``SKU-1`` is another item, with its own id,
                and an idempotency key is the seller's own.

        Returns:
            The SPEC 2.7 push response plus ``catalog_push_failed_items`` and
            ``catalog_push_warning_items``.

        Raises:
            PushError: the payload as a whole is unusable or the lake cannot be
                written. Nothing of the push is stored unless it says otherwise.
            UsageError: ``seller`` is not a seller's name.
        """
        request = PushRequest(
            product_object,
            source=source,
            idempotency_key=idempotency_key,
            strict=strict,
            seller=seller_name(seller),
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

        Each request is its ``seller``'s; consecutive requests of one seller
        are written together, and a group never mixes sellers.

        Returns:
            One response per request, in order.

        Raises:
            PushError: one payload is unusable (nothing is written; the message
                names it), or the lake cannot be written.
        """
        started = time.perf_counter()
        pushes = []
        for request in requests:
            seller_name(request.seller)  # before anything is parsed or written
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
                    seller=request.seller,
                )
            )
        runs = _by_seller(pushes)
        if len(runs) > 1 and checked is not None:
            raise UsageError("a group checked ahead is one seller's; push_many got several")
        if dry_run:
            if replayed is not None:
                replayed[:] = [False] * len(pushes)  # nothing is written, nothing replayed
            return [r for run in runs for r in store.dry_run(self, run, checked)]
        responses, flags = [], []
        for run in runs:
            ran: list[bool] = []
            responses += store.run(self, run, checked, ran)
            flags += ran
        if replayed is not None:
            replayed[:] = flags
        return responses

    def delete(
        self,
        client_item_ids: Any,
        *,
        idempotency_key: str | None = None,
        dry_run: bool = False,
        source: str | None = None,
        flow_run_id: str | None = None,
        seller: str | None = None,
    ) -> dict[str, Any]:
        """Delete ``seller``'s items by ``client_item_id``: records leave, ids stay reserved.

        Answers in the push response's style (docs/lifecycle.md, "Lifecycle"): a request
        id, counts as numeric text, and one entry per id with its ``status``
        (``deleted``, ``already_deleted``, ``superseded`` by a newer push, or
        ``refused`` with a ``code``). Refusals are per id, never an exception;
        deleting twice is harmless. An idempotency key works as for a push,
        and ``dry_run`` answers without writing. A later push of the same id
        brings the item back with the same service id. Only ``seller``'s items
        (None: the default seller's) are ever deleted.

        Raises:
            CatalogLakeError: ``client_item_ids`` is not a list of ids.
            NoLakeError: there is no lake here.
            LakeError: ``seller`` has no items in this lake.
            PushError: a reused idempotency key, or the lake cannot be written.
        """
        from .deletes import delete

        seller = seller_name(seller)
        if seller != DEFAULT_SELLER and not self.has_seller(seller):
            self.lake.require()  # no lake at all: say that first
            raise LakeError(f"seller {seller!r} has no items in this lake; nothing was deleted")
        return delete(
            self,
            client_item_ids,
            idempotency_key=idempotency_key,
            dry_run=dry_run,
            source=source,
            flow_run_id=flow_run_id,
            seller=seller,
        )

    def has_seller(self, seller: str) -> bool:
        """Whether the lake holds any item of ``seller`` (the default seller: any item)."""
        if self.lake.version("items") is None:
            return False
        if seller == DEFAULT_SELLER:
            return (
                self.lake.read(
                    "items", f'SELECT 1 FROM "items" WHERE {sql_filter(seller)} LIMIT 1'
                ).num_rows
                > 0
            )
        return self.lake.has("items", "seller", seller)

    def derive(
        self,
        parsed: ParsedPush,
        *,
        request_ids: pd.Series,
        received_at: pd.Series,
        price_time: datetime | None = None,
        checked: Checked | None = None,
        strict: bool | np.ndarray = True,
        seller: str = DEFAULT_SELLER,
        hold: bool = False,
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
        ``hold``: the caller stores the items (a backfill), so an item new to
        the lake takes an id held from the lake's counter, never a stand-in
        that another writer could be given too (``Keys.assign``).
        """
        if checked is None:
            checked = check_group(parsed, request_ids, strict)
        items = store.identified(
            self.keys, checked, request_ids, received_at, seller=seller, held=hold
        )
        records = derive_records(items, price_time, self.synonyms)
        return Derived(checked.checked, checked.client_ids, items, records)

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
            'max(idempotency_key) AS idempotency_key, max(seller) AS seller FROM "raw" '
            "GROUP BY request_id ORDER BY received_at, request_id",
        )
        pushes = self.lake.read(
            "pushes", 'SELECT request_id, idempotency_key, seller FROM "pushes"'
        )
        # A key is claimed as its seller's (``Push.claim``).
        claimed = sellers.keys(pushes["idempotency_key"], pushes["seller"])
        return unfinished(
            raw["request_id"].to_pylist(),
            sellers.keys(raw["idempotency_key"], raw["seller"]).to_pylist(),
            set(pushes["request_id"].to_pylist()),
            {k for k in claimed.to_pylist() if k is not None},
        )

    def repair(self, *, metrics: bool = True) -> list[dict[str, Any]]:
        """Finish every interrupted push by replaying it from the raw table, and metrics runs.

        A metrics run killed between its two commits is finished too: records
        take the likes and sales their items hold (``metrics.resync_records``),
        reported as one ``{"repaired": "metrics", ...}`` entry after the pushes.
        That compares two whole columns of both tables; ``metrics=False`` (an
        ingest finishing what a killed run left) skips it. An id counter behind
        a stored id is moved past it (``Keys.catch_up``), reported as
        ``{"repaired": "id_counter", "counter": "<id>"}``.

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
            if rows["operation"][0].as_py() == "delete":  # an interrupted delete (issue 27)
                from .deletes import delete, replay_of

                ids, identity = replay_of(rows)
                responses.append(
                    delete(
                        self,
                        ids,
                        idempotency_key=identity["idempotency_key"],
                        source=identity["source"],
                        flow_run_id=identity["flow_run_id"],
                        replay=identity,
                        seller=identity["seller"],
                    )
                )
                continue
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
                seller=first.get("seller") or DEFAULT_SELLER,
            )
            responses.append(store.run(self, [replay])[0])
        moved = self.keys.catch_up()
        if moved is not None:
            responses.append({"repaired": "id_counter", "counter": str(moved)})
        from .metrics import resync_records

        if metrics and self.lake.version("records") is not None:
            resynced = resync_records(self)
            if resynced:
                # A metrics run killed between its items and records commits (issue 26).
                responses.append(
                    {
                        "repaired": "metrics",
                        "records_resynced": len(resynced),
                        "examples": resynced[:10],
                    }
                )
        return responses

    # --- reading ------------------------------------------------------------------

    def records(self, *, seller: str | None = None) -> pd.DataFrame:
        """Current flat search records, one per item, by service id (``seller``'s alone)."""
        return _by_id(_pandas(_of(self.lake.read("records"), seller)), "object_id")

    def items(self, *, seller: str | None = None) -> pd.DataFrame:
        """Current validated items with every field typed, by service id (``seller``'s alone).

        A deleted item is here too, as its tombstone: ``deleted_at`` and
        ``deleted_by`` are set, and it has no record.
        """
        return _by_id(_pandas(_of(self.lake.read("items"), seller)), "object_id")

    def query_records(
        self,
        where: str | None = None,
        columns: list[str] | None = None,
        limit: int | None = None,
        as_of: int | str | None = None,
        *,
        seller: str | None = None,
    ) -> pd.DataFrame:
        """Records matching a SQL expression, by service id; read-only.

        Args:
            where: one SQL condition over record columns (docs/cli.md, "Command reference"),
                e.g. ``"on_sale AND price < 500"``, ``"array_contains(tags, 'veg')"``
                or ``"updated_at >= '2026-11-25'"``.
            columns: the columns to return (all by default).
            limit: at most this many rows.
            as_of: a table version number or an ISO timestamp (time travel).
            seller: one seller's records alone (None: every seller's).
        """
        table = reads.select(
            self.lake,
            "records",
            columns=columns,
            where=where,
            order_by="object_id",
            limit=limit,
            as_of=as_of,
            seller=None if seller is None else seller_name(seller),
        )
        return _pandas(table)

    def export(
        self,
        fmt: str,
        output: Any,
        as_of: int | str | None = None,
        *,
        max_record_bytes: int | None = None,
        seller: str | None = None,
    ) -> Any:
        """Write every current record (``seller``'s alone) to ``output`` in ``fmt``.

        ``fmt`` is one of ``exports.EXPORT_FORMATS``: plain JSON Lines, or an
        engine's import format (docs/search.md, "Search engines"). ``as_of`` exports
        the records as they were at a version or time. Returns the
        ``exports.Exported`` report: records written, and those trimmed to fit
        ``max_record_bytes`` (else the engine's own budget) or left out.
        """
        from .exports import require_format, write_export

        require_format(fmt)  # before reading the lake
        seller = None if seller is None else seller_name(seller)
        table = reads.select(self.lake, "records", order_by="object_id", as_of=as_of, seller=seller)
        return write_export(table, fmt, output, max_record_bytes=max_record_bytes)

    def changes(
        self, since: int | str, until: int | str | None = None, *, seller: str | None = None
    ) -> Any:
        """The records upserted and deleted after ``since`` up to ``until`` (``changes.Changes``).

        One operation per object, the last state in the range winning; a
        record whose content is the same at both ends is no change.
        ``since`` and ``until`` are records versions or ISO times, as ``--as-of``.
        ``seller``: that seller's records alone.
        """
        from .changes import changes

        return changes(self.lake, since, until, None if seller is None else seller_name(seller))

    def search(
        self,
        query: str = "",
        *,
        filters: dict[str, Any] | list[dict[str, Any]] | None = None,
        facets: list[str] | tuple[str, ...] = (),
        page: int = 0,
        hits_per_page: int = 20,
        distinct: bool = True,
        seller: str | None = None,
    ) -> dict[str, Any]:
        """Search the records: hits, ``nb_hits``, facet counts, the time taken.

        As docs/search.md describes it (docs/search.md, "Search"). The embedded
        index (``search.SearchIndex``) first catches up with the lake's changes,
        so every write is visible to the next search.
        ``filters`` is a dict of conditions, all required (``{"on_sale": True,
        "price": (200, 900), "categories": ["Fashion", "Ethnic"]}``, a list value
        meaning any of), or a list of such dicts, any of which may hold.
        ``seller`` keeps one seller's records alone, inside the index (a filter
        every dict of ``filters`` carries too).
        """
        from .search import SearchIndex

        if seller is not None:
            filters = with_seller(filters, seller_name(seller))

        if self._search is None or self._search.lake is not self.lake:
            self.lake.require()  # no lake: say so, and make no index folder for it
            self._search = SearchIndex(self.lake)
        return self._search.search(
            query,
            filters=filters,
            facets=facets,
            page=page,
            hits_per_page=hits_per_page,
            distinct=distinct,
        )

    def sync(
        self,
        target: str,
        fmt: str = "jsonl",
        *,
        full: bool = False,
        max_record_bytes: int | None = None,
        apply: str | None = None,
        seller: str | None = None,
    ) -> dict[str, Any]:
        """Export the changes since ``target``'s cursor there and advance it (``changes.sync``).

        ``apply``, a search engine index's URL, loads the files there first (``loaders``).
        ``seller``: a target of one seller's records alone (its manifest says so).
        """
        from .changes import sync

        return sync(
            self,
            target,
            fmt,
            full=full,
            max_record_bytes=max_record_bytes,
            apply=apply,
            seller=None if seller is None else seller_name(seller),
        )

    def history(self, limit: int = 20) -> pd.DataFrame:
        """Table versions, newest first: table, version, time, operation, metrics."""
        rows = []
        names = (
            "raw",
            "items",
            "records",
            "rejects",
            "warnings",
            "pushes",
            "files",
            "runs",
            "cursors",
        )
        for name in names:
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

    def rejects(self, *, seller: str | None = None) -> pd.DataFrame:
        """Every rejected item with its request id, index and errors.

        Each error's ``value`` is the value as it was sent (the table keeps it
        as JSON text, since a value can be of any JSON type).
        """
        rows = _of(self._answered(self.lake.read("rejects")), seller)
        return _listed(rows, "errors", "rejected_at")

    def warnings(self, *, seller: str | None = None) -> pd.DataFrame:
        """Every item stored with warnings: request id, index, each value dropped or repaired.

        Each warning's ``value`` is the value as it was sent; ``action`` says
        what was done (``dropped``, or ``repaired`` to ``repaired_to``).
        """
        rows = _of(self._answered(self.lake.read("warnings")), seller)
        return _listed(rows, "warnings", "warned_at")

    def _answered(self, rows: pa.Table) -> pa.Table:
        """The rows of pushes that answered: not those a push left when it lost a race.

        Writers that share an idempotency key all write their rejects and
        warnings before one of them claims the key; the losers then answer
        with the winner's response (issue 26: after three concurrent ingests
        of one folder, ``rejects`` showed 368 refused items where the pushes
        had refused 172). A push still to be repaired shows once it is.
        """
        if rows.num_rows == 0:
            return rows
        answered = self.lake.read("pushes", 'SELECT request_id FROM "pushes"')["request_id"]
        return rows.filter(
            pc.is_in(rows["request_id"], answered.combine_chunks().cast(pa.string()))
        )

    def pushes(self, *, seller: str | None = None) -> pd.DataFrame:
        """One row per push or delete request (``operation``) with its counts and timing."""
        rows = _of(self.lake.read("pushes"), seller)
        return _pandas(rows).sort_values("received_at", ignore_index=True)

    def raw(self) -> pd.DataFrame:
        """Every received item exactly as sent, passed or failed."""
        return _pandas(self.lake.read("raw")).sort_values(
            ["received_at", "index"], ignore_index=True
        )


def _by_seller(pushes: list[Push]) -> list[list[Push]]:
    """Consecutive pushes of one seller, in order: a group never mixes sellers."""
    runs: list[list[Push]] = []
    for push in pushes:
        if runs and runs[-1][0].seller == push.seller:
            runs[-1].append(push)
        else:
            runs.append([push])
    return runs


def _of(table: pa.Table, seller: str | None) -> pa.Table:
    """The rows of ``seller`` (checked; the default seller's include rows with none), or all.

    Every row read carries its seller: a row written before sellers, none,
    reads as the default seller's.
    """
    table = table.set_column(
        table.schema.get_field_index("seller"), "seller", sellers.of_rows(table)
    )
    if seller is None:
        return table
    return table.filter(pc.equal(table["seller"], seller_name(seller)))


def _listed(table: pa.Table, column: str, stamp: str) -> pd.DataFrame:
    """Rejects or warnings in the order they came, each entry's value as it was sent."""
    frame = _pandas(table).sort_values([stamp, "index"], ignore_index=True)
    frame[column] = frame[column].map(
        lambda entries: [{**e, "value": _sent(e["value"])} for e in entries]
    )
    return frame


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
