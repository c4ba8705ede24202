"""The lake's invariants, checked on the tables themselves (``catalog-lake check``).

1. Every received item is in ``raw``, and for its push in exactly one of the
   stored items or ``rejects``; received = success + failed. A ``warnings``
   row belongs to a stored item, once.
2. Each ``client_item_id`` has one row in ``items``, and one in ``records``
   unless it was deleted (issue 27: a deleted item has no record), and one
   service id for its whole life; no two ids are equal. The key snapshot a
   new process starts from agrees with ``items``.
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
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import clean
from .metrics import lagging_counts
from .push import unfinished
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


def check(catalog: Catalog, *, derive: bool = True) -> dict[str, Any]:
    """Verify the invariants; ``derive=False`` skips the (costlier) backfill comparison."""
    violations: list[dict[str, Any]] = []

    def violation(invariant: int, rule: str, examples: list[Any]) -> None:
        if examples:
            violations.append(
                {
                    "invariant": invariant,
                    "rule": rule,
                    "count": len(examples),
                    "examples": examples[:_MAX_EXAMPLES],
                }
            )

    raw = _frame(
        catalog,
        "raw",
        'SELECT request_id, "index", passed, client_item_id, idempotency_key FROM "raw"',
    )
    pushes = _frame(catalog, "pushes")
    rejects = _frame(catalog, "rejects", 'SELECT request_id, "index" FROM "rejects"')
    warned = _frame(catalog, "warnings", 'SELECT request_id, "index" FROM "warnings"')
    counts_sql = 'SELECT client_item_id, object_id, likes, sales FROM "{}"'
    items = _frame(
        catalog,
        "items",
        "SELECT client_item_id, object_id, likes, sales, deleted_at IS NOT NULL AS deleted "
        'FROM "items"',
    )
    records = _frame(catalog, "records", counts_sql.format("records"))

    done = set(pushes["request_id"])
    requests = raw.drop_duplicates("request_id")
    interrupted = unfinished(
        requests["request_id"].tolist(),
        [None if pd.isna(k) else k for k in requests["idempotency_key"]],
        done,
        set(pushes["idempotency_key"].dropna()),
    )
    violation(1, "a push reached raw but never finished; run `catalog-lake repair`", interrupted)

    keyed = pushes[pushes["idempotency_key"].notna()]
    twice = keyed[keyed.duplicated("idempotency_key", keep=False)]
    violation(
        1,
        "an idempotency key was applied by more than one push (a batch stored twice)",
        sorted(twice["idempotency_key"].unique().tolist()),
    )

    # 1. per push: raw rows, rejects and counts agree.
    raw_done = raw[raw["request_id"].isin(done)]
    counts = raw_done.groupby("request_id").agg(
        received=("index", "size"), success=("passed", "sum")
    )
    merged = pushes.set_index("request_id")[["received", "success", "failed"]].join(
        counts.add_suffix("_raw"), how="left"
    )
    wrong = merged[
        (merged["received"] != merged["received_raw"])
        | (merged["success"] != merged["success_raw"])
        | (merged["received"] != merged["success"] + merged["failed"])
    ]
    violation(
        1,
        "push counts disagree with its raw rows (received = success + failed)",
        wrong.index.tolist(),
    )
    failed_raw = raw_done[~raw_done["passed"]][["request_id", "index"]]
    rejected = rejects[rejects["request_id"].isin(done)]
    key = ["request_id", "index"]
    both = failed_raw.merge(rejected, on=key, how="outer", indicator=True)
    violation(
        1,
        "a failed raw item has no reject, or a reject has no failed raw item",
        both[both["_merge"] != "both"][key].to_dict(orient="records"),
    )
    duplicated_rejects = rejected[rejected.duplicated(key)]
    violation(
        1,
        "an item was rejected twice for one push",
        duplicated_rejects[key].to_dict(orient="records"),
    )
    warned = warned[warned["request_id"].isin(done)]
    stored_raw = raw_done[raw_done["passed"]][key]
    strays = warned.merge(stored_raw, on=key, how="left", indicator=True)
    violation(
        1,
        "a warning belongs to no stored item of its push, or an item was warned twice",
        strays[strays["_merge"] != "both"][key].to_dict(orient="records")
        + warned[warned.duplicated(key)][key].to_dict(orient="records"),
    )

    # 2. one row per client_item_id, unique ids, records agree with items.
    for name, frame in (("items", items), ("records", records)):
        repeated = frame[frame["client_item_id"].duplicated(keep=False)]["client_item_id"]
        violation(2, f"client_item_id with more than one row in {name}", sorted(set(repeated)))
    ids = items["object_id"]
    violation(
        2,
        "a service id is used by more than one client_item_id",
        sorted(set(ids[ids.duplicated()].tolist())),
    )
    joined = items.merge(
        records, on="client_item_id", how="outer", suffixes=("_items", "_records"), indicator=True
    )
    deleted = joined["deleted"].fillna(False).astype(bool)
    violation(
        2,
        "an item has no record or a record no item",
        joined[(joined["_merge"] == "right_only") | ((joined["_merge"] == "left_only") & ~deleted)][
            "client_item_id"
        ].tolist(),
    )
    violation(
        2,
        "a deleted item still has a record (search still shows it); run `catalog-lake repair`",
        joined[(joined["_merge"] == "both") & deleted]["client_item_id"].tolist(),
    )
    both_sides = joined[joined["_merge"] == "both"]
    mismatch = both_sides[
        both_sides["object_id_items"].astype("int64")
        != both_sides["object_id_records"].astype("int64")
    ]
    violation(2, "record and item disagree on the service id", mismatch["client_item_id"].tolist())
    lagging = both_sides[lagging_counts(both_sides, "_items", "_records")]
    violation(
        2,
        "record and item disagree on likes or sales (a metrics run was interrupted between "
        "its two commits); run `catalog-lake repair`",
        lagging["client_item_id"].tolist(),
    )
    snapshot = catalog.snapshot_keys()
    if snapshot is not None:
        stored = set(zip(items["client_item_id"], items["object_id"].astype("int64"), strict=True))
        loaded = set(
            zip(
                snapshot["client_item_id"].to_pylist(),
                snapshot["object_id"].to_pylist(),
                strict=True,
            )
        )
        violation(
            2,
            "the key snapshot disagrees with items (delete _catalog_lake.keys.arrow to rebuild it)",
            sorted({key for key, _ in stored ^ loaded}),
        )
    current = dict(
        zip(items["client_item_id"], items["object_id"].astype("int64").astype(str), strict=True)
    )
    changed, disagreeing = [], []
    rows = zip(
        pushes["request_id"],
        pushes["response_json"],
        pushes["received"],
        pushes["success"],
        pushes["failed"],
        strict=True,
    )
    for request_id, text, received, success, failed in rows:
        response = json.loads(text)
        # 4. the stored row agrees with the response it returned. A delete's response
        # (issue 27) lists every id sent; a push's, the items it stored.
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
                if current.get(client_id, service_id) != service_id:
                    changed.append(
                        {
                            "client_item_id": client_id,
                            "returned": service_id,
                            "now": current[client_id],
                            "request_id": request_id,
                        }
                    )
    violation(4, "pushes row disagrees with its response", disagreeing)
    violation(2, "a client_item_id's service id changed after it was returned", changed)

    # 5. nothing invalid stored.
    stored = catalog.lake.read(
        "items", 'SELECT client_item_id, images, attr_return_window, attr_time_to_ship FROM "items"'
    )
    ids = stored["client_item_id"].cast(pa.string())  # SQL reads may give string views
    images = pc.list_flatten(stored["images"]).cast(pa.string())
    owners = pc.take(ids, pc.list_parent_indices(stored["images"]))
    bad = ~clean.urls_ok(images) if len(images) else np.zeros(0, dtype=bool)
    violation(
        5, "a stored image is not an http(s) URL", sorted(set(owners.filter(bad).to_pylist()))
    )
    for column in ("attr_return_window", "attr_time_to_ship"):
        values = stored[column].combine_chunks().cast(pa.string())
        invalid = pc.and_(pc.is_valid(values), pc.is_null(clean.durations(values)[0]))
        violation(
            5,
            f"a stored {column.removeprefix('attr_')} is not an ISO 8601 duration",
            sorted(set(ids.filter(invalid).to_pylist())),
        )

    # 3. records equal a fresh derivation from raw.
    if derive and len(raw):
        from .backfill import backfill

        report = backfill(catalog, dry_run=True, examples=_MAX_EXAMPLES)
        stale = report["records_changed"] + report["records_new"]
        if stale:
            violations.append(
                {
                    "invariant": 3,
                    "rule": "records differ from what a backfill from raw would derive",
                    "count": stale,
                    "examples": report["examples"],
                }
            )
    return {
        "ok": not violations,
        "pushes": len(pushes),
        "raw_items": len(raw),
        "items": len(items),
        "records": len(records),
        "violations": violations,
    }
