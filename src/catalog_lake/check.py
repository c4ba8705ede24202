"""The lake's invariants, checked on the tables themselves (``catalog-lake check``).

1. Every received item is in ``raw``, and for its push in exactly one of the
   stored items or ``rejects``; received = success + failed. A ``warnings``
   row belongs to a stored item, once.
2. Each ``client_item_id`` has one row in ``items``, and one in ``records``
   unless it was deleted (issue 27: a deleted item has no record), and one
   service id for its whole life; no two ids are equal, and none is above
   the id counter new ids come from. The key snapshot a new process starts
   from agrees with ``items``.
3. Records equal what a backfill from ``raw`` would derive.
4. The ``pushes`` table agrees with the responses that were returned.
5. Nothing invalid is stored: every image is an http(s) URL and every duration
   ISO 8601 (warnings drop or repair what is not, issue 19).

A push that reached ``raw`` but not ``pushes`` is reported as interrupted:
``catalog-lake repair`` finishes it. A push that lost the race for its
idempotency key to another push of the same content is not: that push
answers for it (docs/design.md, "Writers").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import clean, sellers
from .metrics import lagging_counts
from .push import unfinished
from .sellers import DEFAULT_SELLER
from .store import Catalog

_MAX_EXAMPLES = 5


def _frame(catalog: Catalog, name: str, sql: str | None = None) -> pd.DataFrame:
    """A table read for the checks, its text in Python strings.

    pandas' Arrow-backed strings cannot be joined when both sides are empty
    ("cannot construct ChunkedArray from empty vector"), and a lake whose
    tables are empty (an empty folder ingested, a run stopped before its first
    push) must check as ok, not crash.
    """
    strings = pd.StringDtype("python")
    return catalog.lake.read(name, sql).to_pandas(
        types_mapper=lambda kind: strings if pa.types.is_string(kind) else None
    )


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    """A frame whose ``client_item_id`` and ``idempotency_key`` are their seller's keys.

    Two sellers' items that share a ``client_item_id`` are two items
    (``sellers``), and so are their keys: shown as ``seller/client_item_id``.
    """
    frame = frame.copy()
    owner = pa.array(frame["seller"].astype(object), pa.string())
    for column in ("client_item_id", "idempotency_key"):
        if column in frame.columns:
            keys = sellers.keys(pa.array(frame[column].astype(object), pa.string()), owner)
            shown = pc.replace_substring(keys, sellers.SEPARATOR, "/").to_pylist()
            frame[column] = pd.Series(shown, index=frame.index, dtype=pd.StringDtype("python"))
    return frame


class Found(NamedTuple):
    """What one invariant found broken: the rule, and the rows or keys that break it."""

    invariant: int
    rule: str
    examples: list[Any]
    #: How many break it, where that is not ``len(examples)`` (a report's own count).
    count: int | None = None


@dataclass(frozen=True)
class Tables:
    """The tables the invariants read, each read once for all of them."""

    catalog: Catalog
    raw: pd.DataFrame
    pushes: pd.DataFrame
    rejects: pd.DataFrame
    warned: pd.DataFrame
    items: pd.DataFrame
    records: pd.DataFrame

    @classmethod
    def read(cls, catalog: Catalog) -> Tables:
        """Read what the checks need of each table, text as Python strings (``_frame``)."""
        raw_sql = (
            'SELECT request_id, "index", passed, client_item_id, idempotency_key, seller FROM "raw"'
        )
        items_sql = (
            "SELECT client_item_id, object_id, likes, sales, deleted_at IS NOT NULL AS deleted, "
            'seller FROM "items"'
        )
        records_sql = 'SELECT client_item_id, object_id, likes, sales, seller FROM "records"'
        return cls(
            catalog,
            raw=_keyed(_frame(catalog, "raw", raw_sql)),
            pushes=_keyed(_frame(catalog, "pushes")),
            rejects=_frame(catalog, "rejects", 'SELECT request_id, "index" FROM "rejects"'),
            warned=_frame(catalog, "warnings", 'SELECT request_id, "index" FROM "warnings"'),
            items=_keyed(_frame(catalog, "items", items_sql)),
            records=_keyed(_frame(catalog, "records", records_sql)),
        )

    @property
    def done(self) -> set[str]:
        """The pushes that finished: their row in ``pushes`` is the commit that ends them."""
        return set(self.pushes["request_id"])


def pushes_finished(t: Tables) -> Iterator[Found]:
    """1. Every push that reached ``raw`` finished, and no batch was stored twice."""
    requests = t.raw.drop_duplicates("request_id")
    interrupted = unfinished(
        requests["request_id"].tolist(),
        [None if pd.isna(k) else k for k in requests["idempotency_key"]],
        t.done,
        set(t.pushes["idempotency_key"].dropna()),
    )
    yield Found(1, "a push reached raw but never finished; run `catalog-lake repair`", interrupted)
    keyed = t.pushes[t.pushes["idempotency_key"].notna()]
    twice = keyed[keyed.duplicated("idempotency_key", keep=False)]
    yield Found(
        1,
        "an idempotency key was applied by more than one push (a batch stored twice)",
        sorted(twice["idempotency_key"].unique().tolist()),
    )


def items_accounted_for(t: Tables) -> Iterator[Found]:
    """1. Per push: raw rows, rejects, warnings and counts agree."""
    raw_done = t.raw[t.raw["request_id"].isin(t.done)]
    counts = raw_done.groupby("request_id").agg(
        received=("index", "size"), success=("passed", "sum")
    )
    merged = t.pushes.set_index("request_id")[["received", "success", "failed"]].join(
        counts.add_suffix("_raw"), how="left"
    )
    wrong = merged[
        (merged["received"] != merged["received_raw"])
        | (merged["success"] != merged["success_raw"])
        | (merged["received"] != merged["success"] + merged["failed"])
    ]
    yield Found(
        1,
        "push counts disagree with its raw rows (received = success + failed)",
        wrong.index.tolist(),
    )
    failed_raw = raw_done[~raw_done["passed"]][["request_id", "index"]]
    rejected = t.rejects[t.rejects["request_id"].isin(t.done)]
    key = ["request_id", "index"]
    both = failed_raw.merge(rejected, on=key, how="outer", indicator=True)
    yield Found(
        1,
        "a failed raw item has no reject, or a reject has no failed raw item",
        both[both["_merge"] != "both"][key].to_dict(orient="records"),
    )
    twice = rejected[rejected.duplicated(key)]
    yield Found(1, "an item was rejected twice for one push", twice[key].to_dict(orient="records"))
    warned = t.warned[t.warned["request_id"].isin(t.done)]
    stored_raw = raw_done[raw_done["passed"]][key]
    strays = warned.merge(stored_raw, on=key, how="left", indicator=True)
    yield Found(
        1,
        "a warning belongs to no stored item of its push, or an item was warned twice",
        strays[strays["_merge"] != "both"][key].to_dict(orient="records")
        + warned[warned.duplicated(key)][key].to_dict(orient="records"),
    )


def one_row_per_item(t: Tables) -> Iterator[Found]:
    """2. One row per client_item_id, unique ids, and records that agree with items."""
    for name, frame in (("items", t.items), ("records", t.records)):
        repeated = frame[frame["client_item_id"].duplicated(keep=False)]["client_item_id"]
        yield Found(2, f"client_item_id with more than one row in {name}", sorted(set(repeated)))
    ids = t.items["object_id"]
    yield Found(
        2,
        "a service id is used by more than one client_item_id",
        sorted(set(ids[ids.duplicated()].tolist())),
    )
    counter = t.catalog.lake.id_counter()  # 0: a lake from before the counter, never moved yet
    yield Found(
        2,
        "a service id above the lake's id counter (a writer could be given it again); "
        "run `catalog-lake repair`",
        sorted(ids[ids > counter].tolist()) if counter else [],
    )
    joined = t.items.merge(
        t.records,
        on="client_item_id",
        how="outer",
        suffixes=("_items", "_records"),
        indicator=True,
    )
    deleted = joined["deleted"].fillna(False).astype(bool)
    alone = (joined["_merge"] == "right_only") | ((joined["_merge"] == "left_only") & ~deleted)
    yield Found(
        2, "an item has no record or a record no item", joined[alone]["client_item_id"].tolist()
    )
    yield Found(
        2,
        "a deleted item still has a record (search still shows it); run `catalog-lake repair`",
        joined[(joined["_merge"] == "both") & deleted]["client_item_id"].tolist(),
    )
    both_sides = joined[joined["_merge"] == "both"]
    mismatch = both_sides[
        both_sides["object_id_items"].astype("int64")
        != both_sides["object_id_records"].astype("int64")
    ]
    yield Found(
        2, "record and item disagree on the service id", mismatch["client_item_id"].tolist()
    )
    lagging = both_sides[lagging_counts(both_sides, "_items", "_records")]
    yield Found(
        2,
        "record and item disagree on likes or sales (a metrics run was interrupted between "
        "its two commits); run `catalog-lake repair`",
        lagging["client_item_id"].tolist(),
    )


def key_snapshot_agrees(t: Tables) -> Iterator[Found]:
    """2. The key snapshot a new process starts from agrees with ``items``."""
    snapshot = t.catalog.snapshot_keys()
    if snapshot is None:
        return
    stored = set(zip(t.items["client_item_id"], t.items["object_id"].astype("int64"), strict=True))
    keys = pc.replace_substring(snapshot["client_item_id"], sellers.SEPARATOR, "/")
    loaded = set(zip(keys.to_pylist(), snapshot["object_id"].to_pylist(), strict=True))
    yield Found(
        2,
        "the key snapshot disagrees with items (delete _catalog_lake.keys.arrow to rebuild it)",
        sorted({key for key, _ in stored ^ loaded}),
    )


def responses_hold(t: Tables) -> Iterator[Found]:
    """4. Each ``pushes`` row agrees with its response; 2. a returned service id never changes.

    A delete's response (issue 27) lists every id sent; a push's, the items it stored.
    """
    service_ids = t.items["object_id"].astype("int64").astype(str)
    current = dict(zip(t.items["client_item_id"], service_ids, strict=True))
    changed, disagreeing = [], []
    columns = [
        t.pushes[c]
        for c in ("request_id", "response_json", "received", "success", "failed", "seller")
    ]
    for request_id, text, received, success, failed, seller in zip(*columns, strict=True):
        owner = seller if isinstance(seller, str) and seller != DEFAULT_SELLER else None
        response = json.loads(text)
        deleted = "catalog_delete_request_id" in response
        key = "catalog_delete_{}_count" if deleted else "catalog_push_{}_product_count"
        counts = tuple(response[key.format(n)] for n in ("received", "success", "failed"))
        listed = received if deleted else success
        if counts != (str(received), str(success), str(failed)) or int(listed) != len(
            response["items"]
        ):
            disagreeing.append(request_id)
        if deleted:
            continue
        for entry in response["items"]:
            for client_id, service_id in entry.items():
                key = f"{owner}/{client_id}" if owner else client_id
                if current.get(key, service_id) != service_id:
                    changed.append(
                        {
                            "client_item_id": key,
                            "returned": service_id,
                            "now": current[key],
                            "request_id": request_id,
                        }
                    )
    yield Found(4, "pushes row disagrees with its response", disagreeing)
    yield Found(2, "a client_item_id's service id changed after it was returned", changed)


def nothing_invalid_stored(t: Tables) -> Iterator[Found]:
    """5. Every stored image is an http(s) URL and every stored duration ISO 8601."""
    stored = t.catalog.lake.read(
        "items", 'SELECT client_item_id, images, attr_return_window, attr_time_to_ship FROM "items"'
    )
    ids = stored["client_item_id"].cast(pa.string())  # SQL reads may give string views
    images = pc.list_flatten(stored["images"]).cast(pa.string())
    owners = pc.take(ids, pc.list_parent_indices(stored["images"]))
    bad = ~clean.urls_ok(images) if len(images) else np.zeros(0, dtype=bool)
    yield Found(
        5, "a stored image is not an http(s) URL", sorted(set(owners.filter(bad).to_pylist()))
    )
    for column in ("attr_return_window", "attr_time_to_ship"):
        values = stored[column].combine_chunks().cast(pa.string())
        invalid = pc.and_(pc.is_valid(values), pc.is_null(clean.durations(values)[0]))
        yield Found(
            5,
            f"a stored {column.removeprefix('attr_')} is not an ISO 8601 duration",
            sorted(set(ids.filter(invalid).to_pylist())),
        )


def records_derive_from_raw(t: Tables) -> Iterator[Found]:
    """3. Records equal a fresh derivation from ``raw`` (a backfill's dry run: the costly one)."""
    if not len(t.raw):
        return
    from .backfill import backfill

    report = backfill(t.catalog, dry_run=True, examples=_MAX_EXAMPLES)
    stale = report["records_changed"] + report["records_new"]
    if stale:
        rule = "records differ from what a backfill from raw would derive"
        yield Found(3, rule, report["examples"], stale)


#: The invariants, each a function of the tables, in the order their findings are
#: listed; ``derive=False`` leaves out the last.
INVARIANTS: tuple[Callable[[Tables], Iterator[Found]], ...] = (
    pushes_finished,
    items_accounted_for,
    one_row_per_item,
    key_snapshot_agrees,
    responses_hold,
    nothing_invalid_stored,
    records_derive_from_raw,
)


def check(catalog: Catalog, *, derive: bool = True) -> dict[str, Any]:
    """Verify the invariants; ``derive=False`` skips the (costlier) backfill comparison."""
    tables = Tables.read(catalog)
    violations = [
        {
            "invariant": found.invariant,
            "rule": found.rule,
            "count": len(found.examples) if found.count is None else found.count,
            "examples": found.examples[:_MAX_EXAMPLES],
        }
        for invariant in (INVARIANTS if derive else INVARIANTS[:-1])
        for found in invariant(tables)
        if found.examples or found.count
    ]
    return {
        "ok": not violations,
        "pushes": len(tables.pushes),
        "raw_items": len(tables.raw),
        "items": len(tables.items),
        "records": len(tables.records),
        "violations": violations,
    }
