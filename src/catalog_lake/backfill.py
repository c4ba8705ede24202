"""Re-derive items and records from the raw table with today's code.

After a change to the synonym list, a tag rule or a validation rule, a
backfill replays the raw items of a scope (everything, a time range, or some
request ids) through the same ``Catalog.derive`` a push uses. Pushes are
replayed in the order they were received, in chunks, and each item keeps
its service id and its ``updated_at``; the upsert's "not older" guard makes a
replay leave alone any item that a later push (outside the scope) replaced.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import sellers
from .lake import next_fence, races, reads
from .literals import quote, sql_timestamp
from .parse import parse_push, payload_from_raw
from .push import strict_of
from .schemas import ITEMS, RECORDS
from .sellers import DEFAULT_SELLER, seller_name, sql_filter
from .store import Catalog, live_records

#: Columns a dry run compares. A backfill keeps ``updated_at``, never touches
#: ``likes`` and ``sales`` (the metrics feed owns them), and ids never move. The
#: seller is in each record's key (a record before sellers has none: the default's).
COMPARED = [
    f.name
    for f in RECORDS
    if f.name not in ("updated_at", "received_at", "likes", "sales", "id_block", "seller")
]


def _scope_sql(
    since: datetime | None,
    until: datetime | None,
    request_ids: list[str] | None,
    seller: str | None = None,
) -> str:
    clauses = [] if seller is None else [sql_filter(seller)]
    if since is not None:
        clauses.append(f"received_at >= {sql_timestamp(since)}")
    if until is not None:
        clauses.append(f"received_at < {sql_timestamp(until)}")
    if request_ids:
        clauses.append(f"request_id IN ({', '.join(quote(r) for r in request_ids)})")
    clauses.append("operation IS NULL")  # pushes only: a delete's rows are not items
    return " AND ".join(clauses)


def backfill(
    catalog: Catalog,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    request_ids: list[str] | None = None,
    dry_run: bool = False,
    chunk_items: int = 20_000,
    examples: int = 5,
    seller: str | None = None,
) -> dict[str, Any]:
    """Replay raw items in scope; return what changed (or would change, with ``dry_run``).

    ``seller`` replays that seller's pushes alone (None: every seller's, each
    replayed as its own seller's). Examples name an item as ``seller/id``
    where its seller is not the default one.

    Returns:
        A report: pushes and items replayed, records new / changed / unchanged,
        items that today's rules reject, and a few examples of changes.
    """
    catalog.lake.require()
    if not dry_run:
        catalog.lake.ensure()  # a read-only or newer lake is refused before anything is written
    started = time.perf_counter()
    where = _scope_sql(since, until, request_ids, None if seller is None else seller_name(seller))
    pushes = catalog.lake.read(
        "raw",
        f"SELECT request_id, min(received_at) AS received_at, count(*) AS n, "
        f'max(seller) AS seller FROM "raw" '
        f"WHERE {where} GROUP BY request_id ORDER BY received_at, request_id",
    ).to_pandas()
    if request_ids:
        missing = sorted(set(request_ids) - set(pushes["request_id"]))
    else:
        missing = []
    report: dict[str, Any] = {
        "dry_run": dry_run,
        "pushes": len(pushes),
        "items_replayed": int(pushes["n"].sum()) if len(pushes) else 0,
        "records_new": 0,
        "records_changed": 0,
        "records_unchanged": 0,
        "items_rejected": 0,
        "unknown_request_ids": missing,
        "examples": [],
    }
    owners = pushes["seller"].fillna(DEFAULT_SELLER)
    if owners.nunique() > 1:  # a backfill of several sellers: each one's share
        counts = pushes.groupby(owners).agg(pushes=("n", "size"), items_replayed=("n", "sum"))
        report["by_seller"] = {
            name: {k: int(v) for k, v in row.items()} for name, row in counts.iterrows()
        }
    price_time = catalog.clock()
    before: list[pd.DataFrame] = []
    after: list[pd.DataFrame] = []
    for owner, chunk in _chunks(pushes, chunk_items):
        rows = catalog.lake.read(
            "raw",
            'SELECT * FROM "raw" '  # ``strict`` is missing from a lake not yet upgraded
            f"WHERE request_id IN ({', '.join(quote(r) for r in chunk)}) AND operation IS NULL "
            'ORDER BY received_at, request_id, "index"',
        ).to_pandas()
        parsed = parse_push(payload_from_raw(rows["item_json"].tolist()))
        for attempt in races():  # an item new to the lake takes an id: fenced
            with attempt:
                derived = catalog.derive(
                    parsed,
                    request_ids=rows["request_id"],
                    received_at=rows["received_at"],
                    price_time=price_time,
                    strict=strict_of(rows.get("strict", pd.Series([None] * len(rows))).tolist()),
                    seller=owner,
                    hold=not dry_run,
                )
                live = ~deleted_since(catalog, derived.items.table(ITEMS))
                records = derived.records.table(RECORDS).filter(live)
                if not dry_run and records.num_rows:
                    metadata = {"catalog_lake.operation": "backfill"}
                    keys = catalog.keys
                    try:
                        catalog.lake.upsert(
                            "items",
                            derived.items.table(ITEMS).filter(live),
                            metadata,
                            fence=keys.fence,
                            known=derived.items["known"].to_numpy(zero_copy_only=False)[live],
                        )
                    except BaseException:
                        keys.forget()
                        raise
                    keys.landed(derived.items, next_fence(keys.fence))
        report["items_rejected"] += len(derived.checked.errors)
        found = reads.lookup_items(
            catalog.lake, "records", sellers.row_keys(records).to_pylist(), COMPARED
        )
        before.append(_shown_keys(found.to_pandas()))
        after.append(
            _shown_keys(records.select(COMPARED).append_column("key", sellers.row_keys(records)))
        )
        if not dry_run and records.num_rows:
            catalog.lake.upsert_fenced(
                "records",
                records,
                {"catalog_lake.operation": "backfill"},
                admit=lambda rows: live_records(catalog.lake, rows),
            )
    _compare(before, after, report, examples)
    report["duration_s"] = round(time.perf_counter() - started, 3)
    return report


def deleted_since(catalog: Catalog, items: pa.Table) -> np.ndarray:
    """Which of these item rows a later delete removed: a replay never brings them back."""
    if items.num_rows == 0:
        return np.zeros(0, dtype=bool)
    keys = sellers.row_keys(items)
    stored = reads.lookup_items(
        catalog.lake, "items", pc.unique(keys).to_pylist(), ["updated_at", "deleted_at"]
    ).filter(pc.is_valid(pc.field("deleted_at")))
    pairs = (
        pa.table({"key": keys, "updated_at": items["updated_at"]})
        .append_column("_row", pa.array(np.arange(items.num_rows), pa.int64()))
        .join(
            stored.rename_columns(["deleted_updated_at", "deleted_at", "key"]),
            "key",
            join_type="inner",
        )
    )
    later = pc.greater_equal(pairs["deleted_updated_at"], pairs["updated_at"]).fill_null(False)
    gone = np.zeros(items.num_rows, dtype=bool)
    gone[pairs["_row"].filter(later).to_numpy()] = True
    return gone


def _chunks(pushes: pd.DataFrame, limit: int):
    """Consecutive pushes of one seller, about ``limit`` items at a time: (seller, ids)."""
    chunk: list[str] = []
    size, owner = 0, None
    owners = [s if isinstance(s, str) else DEFAULT_SELLER for s in pushes["seller"]]
    for request_id, n, seller in zip(pushes["request_id"], pushes["n"], owners, strict=True):
        if chunk and (size + n > limit or seller != owner):
            yield owner, chunk
            chunk, size = [], 0
        chunk.append(request_id)
        size += int(n)
        owner = seller
    if chunk:
        yield owner, chunk


def _shown_keys(frame: Any) -> pd.DataFrame:
    """Records keyed by their item (``seller/client_item_id`` beyond the default seller)."""
    frame = frame.to_pandas() if isinstance(frame, pa.Table) else frame
    keys = frame.pop("key").astype(object).str.replace(sellers.SEPARATOR, "/", regex=False)
    return frame.assign(client_item_id=keys.to_numpy())


def _compare(
    before: list[pd.DataFrame], after: list[pd.DataFrame], report: dict, examples: int
) -> None:
    """Count new, changed and unchanged records: the first state seen against the last."""
    if not after:
        return
    old = (
        pd.concat(before)
        .drop_duplicates("client_item_id", keep="first")
        .set_index("client_item_id")
    )
    new = (
        pd.concat(after).drop_duplicates("client_item_id", keep="last").set_index("client_item_id")
    )
    known = new.index.isin(old.index)
    report["records_new"] = int((~known).sum())
    fresh = new.index[~known]
    common = new.index[known]
    old, new = old.loc[common], new.loc[common]
    differs = pd.DataFrame(
        {column: _comparable(old[column]) != _comparable(new[column]) for column in new.columns},
        index=common,
    )
    changed = differs.any(axis=1)
    report["records_changed"] = int(changed.sum())
    report["records_unchanged"] = int((~changed).sum())
    report["examples"] = [
        {
            "client_item_id": key,
            "changes": {
                column: {"old": _plain(old.at[key, column]), "new": _plain(new.at[key, column])}
                for column in new.columns[differs.loc[key].to_numpy()]
            },
        }
        for key in common[changed.to_numpy()][:examples]
    ]
    # A record the lake lacks is an example too: a violation always names one.
    report["examples"] += [
        {"client_item_id": key, "changes": {"record": {"old": None, "new": "derived from raw"}}}
        for key in fresh[: max(0, examples - len(report["examples"]))]
    ]


def _comparable(values: pd.Series) -> pd.Series:
    """One string per value, so lists, NaN and None compare as equal when they are."""
    return values.map(lambda v: repr(_plain(v)))


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    return value
