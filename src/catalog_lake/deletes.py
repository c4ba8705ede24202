"""Products leave: deletes, and the full-catalog refresh that ends in one (issue 27).

A delete is a request like a push: a request id, a ``raw`` journal, per-id
refusals in ``rejects``, its writes, and last a fenced ``pushes`` row
(``operation = "delete"``) that answers a retry under its idempotency key.
Its writes, in order, so that ``repair`` finishes an interrupted one from
``raw`` (docs/design.md, "Deletes"):

1. ``raw``     - one row per id sent (``operation = "delete"``), the journal;
2. ``rejects`` - ids refused (not text, blank, too long, never stored);
3. ``items``   - a tombstone: ``deleted_at``, ``deleted_by`` and ``updated_at``
   set on the item's row, which stays (its service id stays reserved);
4. ``records`` - the record removed, so search stops showing it;
5. ``pushes``  - the commit marker, fenced as a push's.

Steps 3 and 4 follow the replay guard (``blocks.GUARD``): a delete acts on
an item only if it is at least as new as the push that last wrote it, and a
push after it brings the item back, with the same service id.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import sellers, settings
from .blocks import removed, tombstoned
from .claims import stored
from .clean import identifier_ok
from .errors import ErrorCode, PushError, UsageError
from .lake import LAKE_ERRORS, races, reads
from .push import check_key, write_failed
from .schemas import PUSHES, RAW, REJECTS
from .sellers import DEFAULT_SELLER
from .store import Catalog
from .summary import response_text

#: The keys of a delete's answer, in the push response's style (SPEC 2.7).
REQUEST_KEY = "catalog_delete_request_id"
RECEIVED_KEY = "catalog_delete_received_count"
SUCCESS_KEY = "catalog_delete_success_count"
FAILED_KEY = "catalog_delete_failed_count"
DELETE_FAILED_ITEMS_KEY = "catalog_delete_failed_items"
DELETE_DRY_RUN_KEY = "catalog_delete_dry_run"
#: Ids per delete request when a deletions file or a refresh deletes many.
DELETE_BATCH = 10_000
#: What happened to one id: each but ``refused`` counts as a success (deleting twice
#: is harmless; ``superseded``: a push newer than the delete keeps the item).
OUTCOMES = ("deleted", "already_deleted", "superseded", "refused")


def delete(
    catalog: Catalog,
    client_item_ids: Any,
    *,
    idempotency_key: str | None = None,
    dry_run: bool = False,
    source: str | None = None,
    flow_run_id: str | None = None,
    replay: dict[str, Any] | None = None,
    seller: str = DEFAULT_SELLER,
) -> dict[str, Any]:
    """Delete ``seller``'s items by ``client_item_id``; the answer says what happened to each.

    Another seller's items are never touched: an id only that seller stored is
    ``unknown_item`` here.

    Refusals are per id, never an exception: an id that is not text, blank,
    too long, holds invisible characters, or that the lake never stored
    (``unknown_item``). ``replay`` is what ``repair`` finishes from ``raw``:
    the request's id, time, identity and per-id verdicts.

    Raises:
        CatalogLakeError: ``client_item_ids`` is not a list of ids, or too many.
        NoLakeError: there is no lake to delete from (a dry run answers every id
            ``unknown_item`` instead, as an ingest's dry run needs).
        PushError: the idempotency key was used for other content, or the lake
            cannot be written (the message says whether ``repair`` finishes it).
    """
    ids = _listed(client_item_ids)
    if dry_run and not catalog.lake.exists():  # a dry run before the first ingest
        texts, errors = _judged(ids)
        for position in range(len(ids)):
            errors.setdefault(position, _error(ErrorCode.UNKNOWN_ITEM, ids[position]))
        answer = _answer(str(uuid.uuid4()), ids, texts, errors, {}, {})
        return {**answer, DELETE_DRY_RUN_KEY: True}
    catalog.lake.require()
    digest = _digest(ids)
    claim = sellers.keys([idempotency_key], seller)[0].as_py() if idempotency_key else None
    if idempotency_key is not None:
        check_key(idempotency_key)
        earlier = stored(catalog.lake, keys=[idempotency_key]).get(f"key:{claim}")
        if earlier is not None and replay is None:
            if earlier.digest != digest:
                raise PushError(
                    "idempotency_conflict",
                    f"idempotency_key {idempotency_key!r} was already used for another "
                    "request; use a new key for new content",
                )
            return earlier.response
    started = time.perf_counter()
    request_id = replay["request_id"] if replay else str(uuid.uuid4())
    received_at = replay["received_at"] if replay else catalog.clock()
    texts, errors = _judged(ids)
    key_of = _keys(texts, seller)
    object_ids = _service_ids(catalog, texts, key_of)
    if replay is not None:  # the verdicts the request had: they are its raw rows
        known = np.asarray(replay["passed"], dtype=bool)
        refused = {i for i in range(len(ids)) if not known[i]}
    else:
        refused = set(errors)
    for position, text in enumerate(texts):
        if position not in errors and (text not in object_ids or position in refused):
            errors[position] = _error(ErrorCode.UNKNOWN_ITEM, ids[position])
            refused.add(position)
    acted = [t for i, t in enumerate(texts) if i not in refused]
    if dry_run:
        outcome = _outcomes_now(catalog, acted, key_of)
        return {
            **_answer(request_id, ids, texts, errors, object_ids, outcome),
            DELETE_DRY_RUN_KEY: True,
        }
    metadata = {"catalog_lake.request_id": request_id, "catalog_lake.operation": "delete"}
    raw_written = replay is not None
    try:
        if replay is None:
            catalog.lake.append(
                "raw",
                _raw_rows(
                    ids,
                    texts,
                    refused,
                    request_id,
                    received_at,
                    source,
                    flow_run_id,
                    idempotency_key,
                    seller,
                ),
                metadata,
            )
            raw_written = True
        if errors and not (replay and catalog.lake.has("rejects", "request_id", request_id)):
            rows = _reject_rows(ids, texts, errors, request_id, received_at, seller)
            catalog.lake.append("rejects", rows, metadata)
        outcome: dict[str, str] = {}
        if acted:
            blocks = pa.array([object_ids[t] // settings.ID_BLOCK_SIZE for t in acted], pa.int64())
            unique = sorted(set(acted))
            unique_keys = [key_of[t] for t in unique]

            def mark(rows: pa.Table) -> tuple[pa.Table, np.ndarray]:
                return tombstoned(rows, unique_keys, received_at, request_id)

            statuses = catalog.lake.fold_blocks("items", blocks, mark, metadata)
            outcome = dict(zip(unique, statuses.tolist(), strict=True))
            catalog.keys.forget()  # the items fence moved: the next push reads it again
            gone = [key_of[t] for t in unique if outcome[t] == "deleted"]
            if gone:  # always committed: the records fence moves (``Lake.upsert_fenced``)
                catalog.lake.fold_blocks(
                    "records", blocks, lambda rows: removed(rows, gone, received_at), metadata
                )
        response = _answer(request_id, ids, texts, errors, object_ids, outcome)
        return _store_row(
            catalog,
            response,
            request_id,
            received_at,
            started,
            digest,
            source,
            flow_run_id,
            idempotency_key,
            len(ids),
            metadata,
            seller,
        )
    except (*LAKE_ERRORS, pa.ArrowException) as exc:
        catalog.lake.unsure()
        raise write_failed(exc, request_id, raw_written=raw_written) from exc


def _keys(texts: list[str | None], seller: str) -> dict[str, str]:
    """Each id's key in the lake, as ``seller``'s item (``sellers.keys``)."""
    given = sorted({t for t in texts if t})
    return dict(zip(given, sellers.keys(given, seller).to_pylist(), strict=True))


def _service_ids(catalog: Catalog, texts: list[str | None], key_of: dict[str, str]) -> dict:
    """The service id of each of ``texts`` the lake stored (deleted or not), from the key index."""
    index = catalog.keys.index().table
    by_key = {key: text for text, key in key_of.items()}
    wanted = pa.table({"client_item_id": pa.array(sorted(by_key), pa.string())})
    found = index.select(["client_item_id", "object_id"]).join(
        wanted, "client_item_id", join_type="inner"
    )
    keys, ids = found["client_item_id"].to_pylist(), found["object_id"].to_pylist()
    return {by_key[k]: i for k, i in zip(keys, ids, strict=True)}


def _listed(client_item_ids: Any) -> list[Any]:
    """The ids as a list; a string alone would be read as its characters."""
    if isinstance(client_item_ids, (str, bytes)) or not hasattr(client_item_ids, "__iter__"):
        raise UsageError(
            "client_item_ids must be a list of ids, e.g. catalog.delete(['sku-1', 'sku-2'])",
            "client_item_ids",
        )
    ids = list(client_item_ids)
    if len(ids) > settings.MAX_ITEMS_PER_PUSH:
        raise UsageError(
            f"a delete takes at most {settings.MAX_ITEMS_PER_PUSH:,} ids; got {len(ids):,} "
            "(split them, or let a full refresh of the feed delete them)",
            "client_item_ids",
        )
    return ids


def _digest(ids: list[Any]) -> str:
    """What an idempotency key is bound to: the ids as sent, as a delete."""
    text = json.dumps(ids, ensure_ascii=False, default=str)
    return hashlib.sha256(f"delete:{text}".encode()).hexdigest()


def _judged(ids: list[Any]) -> tuple[list[str | None], dict[int, dict[str, Any]]]:
    """Each id as text (an integer is its digits, as in a push), and the refusals by position."""
    texts: list[str | None] = []
    errors: dict[int, dict[str, Any]] = {}
    for position, value in enumerate(ids):
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            texts.append(None)
            errors[position] = _error(ErrorCode.INVALID_TYPE, value)
            continue
        text = str(value).strip()
        texts.append(text)
        if not text:
            errors[position] = _error(ErrorCode.MISSING_REQUIRED_FIELD, value)
        elif len(text) > settings.MAX_ID_CHARS:
            errors[position] = _error(ErrorCode.TEXT_TOO_LONG, len(text))
    checked = [i for i, t in enumerate(texts) if t and i not in errors]
    if checked:
        ok = identifier_ok(pa.array([texts[i] for i in checked], pa.string()))
        for i, good in zip(checked, ok, strict=True):
            if not good:
                errors[i] = _error(ErrorCode.INVALID_IDENTIFIER, ids[i])
    return texts, errors


_MESSAGES = {
    ErrorCode.INVALID_TYPE: "client_item_id must be text (or a whole number)",
    ErrorCode.MISSING_REQUIRED_FIELD: "client_item_id is blank",
    ErrorCode.TEXT_TOO_LONG: f"client_item_id is longer than {settings.MAX_ID_CHARS} characters",
    ErrorCode.INVALID_IDENTIFIER: "client_item_id holds a control or invisible character",
    ErrorCode.UNKNOWN_ITEM: "the lake never stored this client_item_id; nothing to delete",
}


def _error(code: ErrorCode, value: Any) -> dict[str, Any]:
    shown = value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
    return {
        "field": "client_item_id",
        "code": str(code),
        "message": _MESSAGES[code],
        "value": shown,
    }


def _outcomes_now(catalog: Catalog, acted: list[str], key_of: dict[str, str]) -> dict[str, str]:
    """What a delete now would do to each id (a dry run): deleted, or already so."""
    if not acted:
        return {}
    by_key = {key_of[t]: t for t in acted}
    rows = reads.lookup_items(catalog.lake, "items", sorted(by_key), ["deleted_at"])
    gone = pc.is_valid(rows["deleted_at"]).to_pylist()
    keys = rows["key"].to_pylist()
    return {
        by_key[k]: "already_deleted" if g else "deleted" for k, g in zip(keys, gone, strict=True)
    }


def _answer(
    request_id: str,
    ids: list[Any],
    texts: list[str | None],
    errors: dict[int, dict[str, Any]],
    object_ids: dict[str, int],
    outcome: dict[str, str],
) -> dict[str, Any]:
    """The delete's answer: counts as numeric text, one entry per id sent, the refusals."""
    entries = []
    for position, text in enumerate(texts):
        refused = position in errors
        entries.append(
            {
                "client_item_id": text if text is not None else None,
                "object_id": None if refused else str(object_ids[text]),
                "status": "refused" if refused else outcome.get(text, "deleted"),
            }
            | ({"code": errors[position]["code"]} if refused else {})
        )
    failed = [
        {"index": i, "client_item_id": texts[i], "errors": [errors[i]]} for i in sorted(errors)
    ]
    return {
        REQUEST_KEY: request_id,
        RECEIVED_KEY: str(len(ids)),
        SUCCESS_KEY: str(len(ids) - len(errors)),
        FAILED_KEY: str(len(errors)),
        "items": entries,
        DELETE_FAILED_ITEMS_KEY: failed,
    }


def _raw_rows(
    ids: list[Any],
    texts: list[str | None],
    refused: set[int],
    request_id: str,
    received_at: datetime,
    source: str | None,
    flow_run_id: str | None,
    idempotency_key: str | None,
    seller: str,
) -> pa.Table:
    """The journal: one raw row per id sent, as sent, so ``repair`` can finish the delete."""
    n = len(ids)
    received = pa.array([received_at] * n, RAW.field("received_at").type)
    return pa.table(
        {
            "request_id": [request_id] * n,
            "index": pa.array(range(n), pa.int32()),
            "received_at": received,
            "client_item_id": pa.array(texts, pa.string()),
            "passed": [i not in refused for i in range(n)],
            "item_json": [
                json.dumps({"client_item_id": v}, ensure_ascii=False, default=repr) for v in ids
            ],
            "received_date": received.cast(pa.date32()),
            "source": [source] * n,
            "flow_run_id": [flow_run_id] * n,
            "idempotency_key": [idempotency_key] * n,
            "strict": [False] * n,
            "operation": ["delete"] * n,
            "seller": [seller] * n,
        },
        schema=RAW,
    )


def _reject_rows(
    ids: list[Any],
    texts: list[str | None],
    errors: dict[int, dict[str, Any]],
    request_id: str,
    received_at: datetime,
    seller: str,
) -> pa.Table:
    rows = [
        {
            "request_id": request_id,
            "index": i,
            "client_item_id": texts[i],
            "codes": [errors[i]["code"]],
            "errors": [{**errors[i], "value": json.dumps(errors[i]["value"], ensure_ascii=False)}],
            "rejected_at": received_at,
            "seller": seller,
        }
        for i in sorted(errors)
    ]
    return pa.Table.from_pylist(rows, schema=REJECTS)


def _store_row(
    catalog: Catalog,
    response: dict[str, Any],
    request_id: str,
    received_at: datetime,
    started: float,
    digest: str,
    source: str | None,
    flow_run_id: str | None,
    idempotency_key: str | None,
    received: int,
    metadata: dict[str, str],
    seller: str,
) -> dict[str, Any]:
    """Commit the delete's ``pushes`` row, fenced: a request id and a key are stored once.

    After a lost race, a row stored meanwhile under this request id (a
    repair racing the delete it repairs) or this key answers instead.
    """
    row = {
        "request_id": request_id,
        "received_at": received_at,
        "finished_at": catalog.clock(),
        "duration_ms": (time.perf_counter() - started) * 1000.0,
        "received": received,
        "success": int(response[SUCCESS_KEY]),
        "failed": int(response[FAILED_KEY]),
        "source": source,
        "flow_run_id": flow_run_id,
        "idempotency_key": idempotency_key,
        "payload_sha256": digest,
        "response_json": response_text(response),
        "operation": "delete",
        "seller": seller,
    }
    claim = sellers.keys([idempotency_key], seller)[0].as_py() if idempotency_key else None
    for attempt in races():
        with attempt:
            _, fence = catalog.lake.fence("pushes")
            landed = stored(
                catalog.lake,
                keys=[idempotency_key] if idempotency_key else [],
                request_ids=[request_id],
            )
            earlier = landed.get(f"request:{request_id}") or (
                landed.get(f"key:{claim}") if claim else None
            )
            if earlier is not None:
                return earlier.response
            # A lost race raises ``FenceMoved``: the next attempt looks at what landed.
            catalog.lake.append(
                "pushes", pa.Table.from_pylist([row], schema=PUSHES), metadata, fence=fence
            )
            return response
    raise AssertionError("unreachable: the last lost race is raised")


def replay_of(rows: pa.Table) -> tuple[list[Any], dict[str, Any]]:
    """The ids and identity of an interrupted delete, from its ``raw`` rows (in order)."""
    first = rows.slice(0, 1).to_pylist()[0]
    ids = [json.loads(text)["client_item_id"] for text in rows["item_json"].to_pylist()]
    return ids, {
        "request_id": first["request_id"],
        "received_at": first["received_at"],
        "passed": rows["passed"].to_pylist(),
        "source": first.get("source"),
        "flow_run_id": first.get("flow_run_id"),
        "idempotency_key": first.get("idempotency_key"),
        "seller": first.get("seller") or DEFAULT_SELLER,
    }
