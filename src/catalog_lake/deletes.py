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
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import settings
from .blocks import removed, tombstoned
from .claims import stored
from .clean import identifier_ok
from .errors import ErrorCode, PushError, UsageError
from .lake import LAKE_ERRORS, races, reads
from .literals import quote, sql_timestamp
from .push import check_key, write_failed
from .schemas import PUSHES, RAW, REJECTS
from .sources import place_of
from .store import Catalog

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
) -> dict[str, Any]:
    """Delete items by ``client_item_id``; the answer says what happened to each id.

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
    if idempotency_key is not None:
        check_key(idempotency_key)
        earlier = stored(catalog.lake, keys=[idempotency_key]).get(f"key:{idempotency_key}")
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
    object_ids = _service_ids(catalog, texts)
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
        outcome = _outcomes_now(catalog, acted)
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
                ),
                metadata,
            )
            raw_written = True
        if errors and not (replay and catalog.lake.has("rejects", "request_id", request_id)):
            catalog.lake.append(
                "rejects", _reject_rows(ids, texts, errors, request_id, received_at), metadata
            )
        outcome: dict[str, str] = {}
        if acted:
            blocks = pa.array([object_ids[t] // settings.ID_BLOCK_SIZE for t in acted], pa.int64())
            unique = sorted(set(acted))

            def mark(rows: pa.Table) -> tuple[pa.Table, np.ndarray]:
                return tombstoned(rows, unique, received_at, request_id)

            statuses = catalog.lake.fold_blocks("items", blocks, mark, metadata)
            outcome = dict(zip(unique, statuses.tolist(), strict=True))
            catalog.keys.forget()  # the items fence moved: the next push reads it again
            gone = [t for t in unique if outcome[t] == "deleted"]
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
        )
    except (*LAKE_ERRORS, pa.ArrowException) as exc:
        catalog.lake.unsure()
        raise write_failed(exc, request_id, raw_written=raw_written) from exc


def _service_ids(catalog: Catalog, texts: list[str | None]) -> dict[str, int]:
    """The service id of each of ``texts`` the lake stored (deleted or not), from the key index."""
    index = catalog.keys.index().table
    wanted = pa.table({"client_item_id": pa.array(sorted({t for t in texts if t}), pa.string())})
    found = index.select(["client_item_id", "object_id"]).join(
        wanted, "client_item_id", join_type="inner"
    )
    names, ids = found["client_item_id"].to_pylist(), found["object_id"].to_pylist()
    return dict(zip(names, ids, strict=True))


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


def _outcomes_now(catalog: Catalog, acted: list[str]) -> dict[str, str]:
    """What a delete now would do to each id (a dry run): deleted, or already so."""
    if not acted:
        return {}
    rows = reads.lookup(
        catalog.lake,
        "items",
        "client_item_id",
        sorted(set(acted)),
        ["client_item_id", "deleted_at"],
    )
    gone = pc.is_valid(rows["deleted_at"]).to_pylist()
    names = rows["client_item_id"].to_pylist()
    return {n: "already_deleted" if g else "deleted" for n, g in zip(names, gone, strict=True)}


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
        },
        schema=RAW,
    )


def _reject_rows(
    ids: list[Any],
    texts: list[str | None],
    errors: dict[int, dict[str, Any]],
    request_id: str,
    received_at: datetime,
) -> pa.Table:
    rows = [
        {
            "request_id": request_id,
            "index": i,
            "client_item_id": texts[i],
            "codes": [errors[i]["code"]],
            "errors": [{**errors[i], "value": json.dumps(errors[i]["value"], ensure_ascii=False)}],
            "rejected_at": received_at,
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
        "response_json": json.dumps(response, ensure_ascii=False),
        "operation": "delete",
    }
    for attempt in races():
        with attempt:
            _, fence = catalog.lake.fence("pushes")
            landed = stored(
                catalog.lake,
                keys=[idempotency_key] if idempotency_key else [],
                request_ids=[request_id],
            )
            earlier = landed.get(f"request:{request_id}") or (
                landed.get(f"key:{idempotency_key}") if idempotency_key else None
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
    }


# --- full-catalog refresh ---------------------------------------------------------

#: The largest share of its scope a refresh deletes unless told otherwise: a feed
#: that lost a fifth of the catalog overnight is more likely truncated than true.
DEFAULT_MAX_DELETE_SHARE = 0.2
#: Ids a refresh's report lists one by one; the rest are counted.
LISTED_IDS = 10_000
SCOPES = ("source", "all")


#: How ``ingest`` (the CLI's and the flows') names each of ``Refresh``'s fields.
REFRESH_PARAMETERS = {
    "scope": "refresh_scope",
    "category": "refresh_category",
    "max_share": "max_delete_share",
    "allow_mass_delete": "allow_mass_delete",
    "max_daily_share": "max_delete_share_per_day",
}


@dataclass(frozen=True)
class Refresh:
    """A full-catalog refresh: which stored items it may delete, and how many at most.

    ``scope="source"`` (the default): the items whose last push came from a
    file of the ingested source (folder or prefix), so one seller's feed
    folder never deletes another's. ``"all"``: every item of the lake.
    ``category`` narrows either to one ``lake_category``.

    ``max_share`` bounds one run; runs add up (five runs that each drop 19%
    delete 66 of 100 items). ``max_daily_share``, when set, also bounds what
    refreshes of the same source deleted in the last 24 hours together with
    this run, as a share of the scope they had (issue 42).
    """

    scope: str = "source"
    category: str | None = None
    max_share: float = DEFAULT_MAX_DELETE_SHARE
    allow_mass_delete: bool = False
    max_daily_share: float | None = None

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise UsageError(f"scope takes {' or '.join(SCOPES)}; got {self.scope!r}", "scope")
        if not 0 <= self.max_share <= 1:
            raise UsageError(f"max_share is a share from 0 to 1; got {self.max_share}", "max_share")
        if self.max_daily_share is not None and not 0 <= self.max_daily_share <= 1:
            raise UsageError(
                f"max_daily_share is a share from 0 to 1; got {self.max_daily_share}",
                "max_daily_share",
            )


#: A refusal is read in a flow's summary and in a terminal: it names the flow's parameter
#: and the CLI's flag, since the library cannot know which of the two will read it.
_MASS_DELETE_SHARE = "max_delete_share (--max-delete-share)"
_DAILY_DELETE_SHARE = "max_delete_share_per_day (--max-delete-share-per-day)"


def refresh(
    catalog: Catalog,
    how: Refresh,
    *,
    source: str,
    run_id: str,
    failed_files: list[str],
    seen: set[str],
    unchanged: list[tuple[str, str]],
    paths: list[str] = (),  # type: ignore[assignment]
    dry_run: bool = False,
    flow_run_id: str | None = None,
) -> dict[str, Any]:
    """Delete the items of the refresh's scope that the run did not carry, if it is safe.

    ``seen`` are the ids the run's pushes carried, ``unchanged`` the (path,
    checksum) of the source's files skipped as already ingested (their items
    are part of the catalog too), ``failed_files`` the files that failed or
    were not read, ``paths`` every file of the source this run found. A run
    with a failed file, or that would delete more than ``how.max_share`` of
    its scope without ``how.allow_mass_delete``, deletes nothing and says why.
    """
    report: dict[str, Any] = {
        "scope": how.scope + (f", lake_category = {how.category}" if how.category else ""),
        "source": source,
        "max_delete_share": how.max_share,
    }
    if failed_files:
        shown = ", ".join(failed_files[:3]) + (" ..." if len(failed_files) > 3 else "")
        return report | _stopped(
            f"{len(failed_files)} file(s) of the run failed or were not read ({shown}); a "
            "refresh deletes only after every file was stored, so nothing was deleted"
        )
    if not catalog.lake.exists():
        return report | {
            "status": "nothing_to_delete",
            "in_scope": 0,
            "to_delete": 0,
            "deleted": 0,
            "ids": [],
        }
    carried = set(seen) | _carried_before(catalog, source, unchanged)
    in_scope = _scope(catalog, how, source, paths)
    gone = sorted(set(in_scope) - carried)
    report |= {"in_scope": len(in_scope), "to_delete": len(gone), "ids": gone[:LISTED_IDS]}
    share = len(gone) / len(in_scope) if in_scope else 0.0
    if gone and share > how.max_share and not how.allow_mass_delete:
        return report | _stopped(
            f"the refresh would delete {len(gone):,} of the {len(in_scope):,} items in its scope "
            f"({share:.0%}), more than the {how.max_share:.0%} allowed; nothing was deleted. "
            "A truncated feed looks like this; if the catalog really shrank, run again with "
            f"allow_mass_delete (--allow-mass-delete), or raise {_MASS_DELETE_SHARE}"
        )
    if gone and how.max_daily_share is not None and not how.allow_mass_delete:
        earlier = _deleted_by_refreshes(catalog, source, catalog.clock() - timedelta(hours=24))
        daily = (earlier + len(gone)) / (len(in_scope) + earlier)
        report["deleted_last_24h"] = earlier
        if daily > how.max_daily_share:
            return report | _stopped(
                f"with the {earlier:,} items that refreshes of this source deleted in the last "
                f"24 hours, the refresh would delete {earlier + len(gone):,} of "
                f"{len(in_scope) + earlier:,} in a day ({daily:.0%}), more than the "
                f"{how.max_daily_share:.0%} allowed per day; nothing was deleted. If the catalog "
                "really shrank, run again with allow_mass_delete (--allow-mass-delete), or "
                f"raise {_DAILY_DELETE_SHARE}"
            )
    if not gone:
        return report | {"status": "nothing_to_delete", "deleted": 0}
    if dry_run:
        return report | {"status": "dry_run", "deleted": 0}
    responses = [
        delete(
            catalog,
            gone[start : start + DELETE_BATCH],
            idempotency_key=f"refresh:{run_id}:{number}",
            source=f"refresh:{source}",
            flow_run_id=flow_run_id,
        )
        for number, start in enumerate(range(0, len(gone), DELETE_BATCH))
    ]
    deleted = sum(1 for r in responses for entry in r["items"] if entry["status"] == "deleted")
    return report | {
        "status": "deleted",
        "deleted": deleted,
        "request_ids": [r[REQUEST_KEY] for r in responses],
    }


def _deleted_by_refreshes(catalog: Catalog, source: str, since: datetime) -> int:
    """Items that refreshes of ``source`` deleted since ``since`` (their delete responses)."""
    rows = catalog.lake.read(
        "pushes",
        f"SELECT response_json FROM \"pushes\" WHERE operation = 'delete' AND source = "
        f"{quote(f'refresh:{source}')} AND received_at >= {sql_timestamp(since)}",
    )["response_json"].to_pylist()
    return sum(
        entry.get("status") == "deleted" for text in rows for entry in json.loads(text)["items"]
    )


def _stopped(reason: str) -> dict[str, Any]:
    return {"status": "stopped", "reason": reason, "deleted": 0}


def _scope(catalog: Catalog, how: Refresh, source: str, paths: list[str]) -> list[str]:
    """The live items a refresh of ``source`` may delete."""
    where = ["deleted_at IS NULL"]
    if how.category is not None:
        where.append(f"lake_category = {quote(how.category)}")
    items = catalog.lake.read(
        "items", f'SELECT client_item_id, request_id FROM "items" WHERE {" AND ".join(where)}'
    )
    if how.scope == "all":
        return items["client_item_id"].to_pylist()
    files = catalog.lake.read(
        "files", f'SELECT path, request_ids FROM "files" WHERE source = {quote(source)}'
    )
    recorded = pc.list_flatten(files["request_ids"]).cast(pa.string()).to_pylist()
    # A push of a run killed before it recorded its files, finished by `repair`, is known
    # by its batch key, which names the file's place: its items are in scope too.
    places = {place_of(source, p) for p in [*files["path"].to_pylist(), *paths]}
    keyed = catalog.lake.read(
        "pushes", 'SELECT request_id, idempotency_key FROM "pushes"'
    ).to_pylist()
    batches = [
        r["request_id"]
        for r in keyed
        if (r["idempotency_key"] or "").startswith("file:")
        and r["idempotency_key"].split(":")[1] in places
    ]
    # A run that lost the race for a batch's key to a run beside it (two refreshes of one
    # folder at once) had already written the batch's items under its own request id, which
    # no pushes row names: raw keeps that id's key, so its items stay in scope (issue 42).
    known = {*recorded, *(r["request_id"] for r in keyed)}
    orphans = sorted(set(items["request_id"].cast(pa.string()).to_pylist()) - known)
    batches += _raw_batches(catalog, orphans, places)
    from_source = pa.array(sorted({*recorded, *batches}), pa.string())
    mine = pc.is_in(items["request_id"].cast(pa.string()), from_source)
    return items["client_item_id"].filter(mine).to_pylist()


def _raw_batches(catalog: Catalog, request_ids: list[str], places: set[str]) -> list[str]:
    """Those of ``request_ids`` whose raw rows carry a batch key of one of ``places``."""
    found: list[str] = []
    for start in range(0, len(request_ids), 500):
        listed = ", ".join(quote(r) for r in request_ids[start : start + 500])
        rows = catalog.lake.read(
            "raw",
            f'SELECT DISTINCT request_id, idempotency_key FROM "raw" WHERE request_id IN '
            f"({listed}) AND idempotency_key LIKE 'file:%'",
        ).to_pylist()
        found += [r["request_id"] for r in rows if r["idempotency_key"].split(":")[1] in places]
    return found


def _carried_before(catalog: Catalog, source: str, unchanged: list[tuple[str, str]]) -> set[str]:
    """The ids of the source's files this run skipped as already ingested and unchanged."""
    if not unchanged:
        return set()
    files = catalog.lake.read(
        "files",
        f'SELECT path, checksum, request_ids FROM "files" WHERE source = {quote(source)} '
        "AND status = 'ingested'",
    ).to_pylist()
    wanted = set(unchanged)
    request_ids = sorted(
        {r for row in files if (row["path"], row["checksum"]) in wanted for r in row["request_ids"]}
    )
    carried: set[str] = set()
    for start in range(0, len(request_ids), 500):
        listed = ", ".join(quote(r) for r in request_ids[start : start + 500])
        rows = catalog.lake.read(
            "raw",
            f'SELECT DISTINCT client_item_id FROM "raw" WHERE request_id IN ({listed}) '
            "AND operation IS NULL AND client_item_id IS NOT NULL",
        )
        carried.update(rows["client_item_id"].cast(pa.string()).to_pylist())
    return carried
