"""Business metrics (likes, sales) from a CSV or Parquet file onto items and records.

Only ``likes`` and ``sales`` change, and only for ids the lake knows: an
unknown ``client_item_id`` is reported, never invented. A row is one
seller's item: the file's ``seller`` column says whose, else the run's seller
(``sellers``).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa_
import pyarrow.compute as pc

from . import sellers, settings
from .errors import CatalogLakeError, LakeError, first_line
from .lake import STORE_ERRORS, reads
from .sellers import SELLER, seller_name
from .store import Catalog


@cache
def metrics_schema() -> Any:
    """The metrics file's pandera schema, built on first use (pandera is slow to import)."""
    import pandera.pandas as pa

    return pa.DataFrameSchema(
        {
            # Each check carries the words a user reads (``error=``): its failure is
            # reported as that, never as pandera's name for it.
            "client_item_id": pa.Column(
                str, nullable=False, checks=pa.Check.str_length(min_value=1, error="is blank")
            ),
            "likes": pa.Column(
                "Int64", nullable=True, checks=pa.Check.ge(0, error="is negative"), required=False
            ),
            "sales": pa.Column(
                "Int64", nullable=True, checks=pa.Check.ge(0, error="is negative"), required=False
            ),
            "seller": pa.Column(
                str,
                nullable=True,  # blank: the run's seller
                checks=pa.Check.str_matches(
                    rf"^{SELLER.pattern}\Z", error="is not a seller's name"
                ),
                required=False,
            ),
        },
        strict="filter",
        coerce=True,
    )


def load_metrics(path: str | Path) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Read and validate a metrics file; return good rows and one entry per bad row."""
    path = Path(path)
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path, dtype={"client_item_id": str, "seller": str})
    except (OSError, ValueError) as exc:
        raise CatalogLakeError(f"cannot read metrics file {path}: {exc}") from None
    if "client_item_id" not in frame.columns or not {"likes", "sales"} & set(frame.columns):
        raise CatalogLakeError(
            f"{path} needs a client_item_id column and at least one of likes, sales; "
            f"it has {', '.join(map(str, frame.columns))}"
        )
    frame = frame.reset_index(drop=True)
    frame["client_item_id"] = frame["client_item_id"].astype(object).str.strip()
    bad: dict[int, list[str]] = {}
    for column in ("likes", "sales"):
        if column in frame.columns:
            # A blank cell is no value, as an empty one is: nothing to update.
            blank = frame[column].astype("string").str.strip().eq("").fillna(False).astype(bool)
            given = frame[column].notna() & ~blank
            numbers = pd.to_numeric(frame[column].where(given), errors="coerce")
            whole = numbers.notna() & (numbers == numbers.round())
            too_big = whole & (numbers.abs() > settings.MAX_COUNT)
            for index in frame.index[given & ~whole]:
                value = _plain(frame.at[index, column])
                bad.setdefault(int(index), []).append(f"{column}: not a whole number ({value!r})")
            for index in frame.index[too_big]:
                value = _plain(frame.at[index, column])
                bad.setdefault(int(index), []).append(
                    f"{column}: {value!r} is more than {settings.MAX_COUNT:,}"
                )
            frame[column] = numbers.where(given & whole & ~too_big, None)
    from pandera.errors import SchemaErrors

    schema = metrics_schema()
    try:
        schema.validate(frame, lazy=True)
    except SchemaErrors as exc:
        for case in exc.failure_cases.dropna(subset=["index"]).itertuples(index=False):
            check = "is missing" if case.check == "not_nullable" else str(case.check)
            if check.startswith(("coerce_dtype", "dtype")):  # pandera's words for a type
                check = (
                    "is not text" if case.column == "client_item_id" else "is not a whole number"
                )
            shown = "" if pd.isna(case.failure_case) else f" ({case.failure_case!r})"
            bad.setdefault(int(case.index), []).append(f"{case.column}: {check}{shown}")
    frame = schema.validate(frame.drop(index=list(bad)), lazy=False)
    # Rows are numbered as a spreadsheet shows them: the header is row 1.
    invalid = [{"row": i + 2, "errors": errs} for i, errs in sorted(bad.items())]
    return frame, invalid


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value  # a numpy scalar


#: How many unknown ids a report lists; the rest are counted (``unknown_count``).
UNKNOWN_SHOWN = 100


def apply_metrics(catalog: Catalog, path: str | Path, seller: str | None = None) -> dict[str, Any]:
    """Update likes and sales of known items from ``path``; report the rest.

    A row is the item of the seller its ``seller`` column names, else of
    ``seller`` (None: the default seller). With more than one seller, the
    report counts each one's rows apart (``by_seller``).

    Raises:
        LakeError: ``seller`` is named and has no item in the lake.
    """
    named = seller is not None
    seller = seller_name(seller)
    catalog.lake.require()
    if named and not catalog.has_seller(seller):  # a mistyped seller is told, not guessed
        raise LakeError(f"seller {seller!r} has no items in this lake; nothing was updated")
    frame, invalid = load_metrics(path)
    catalog.lake.ensure()  # a read-only or newer lake is refused before anything is written
    rows = len(frame) + len(invalid)
    owners = frame["seller"].fillna(seller) if "seller" in frame.columns else seller
    frame = frame.assign(seller=owners)
    frame = frame.assign(key=sellers.keys(frame["client_item_id"], frame["seller"]).to_pylist())
    frame = frame.drop_duplicates("key", keep="last")
    keys = frame["key"].tolist()
    found = reads.lookup_items(catalog.lake, "items", keys, ["object_id", "deleted_at"])
    # A deleted item is not updated: its metrics would come back with it unasked.
    deleted = set(found.filter(pc.is_valid(found["deleted_at"]))["key"].to_pylist())
    found = found.filter(pc.is_null(found["deleted_at"]))
    known = set(found["key"].to_pylist())
    # The service id of each item, and its partition, so the merge rewrites only those blocks.
    id_of = pd.Series(found["object_id"].to_numpy(), index=found["key"].to_numpy(False))
    gone = ~frame["key"].isin(known)
    unknown = frame["client_item_id"][gone & ~frame["key"].isin(deleted)].tolist()
    deleted_ids = frame["client_item_id"][frame["key"].isin(deleted)].tolist()
    by_seller = _by_seller(frame, known, deleted)
    frame = frame[~gone]
    updated = 0
    if len(frame):
        columns = [c for c in ("likes", "sales") if c in frame.columns]
        object_id = frame["key"].map(id_of).astype("int64")
        source = pa_.table(
            {
                "object_id": pa_.array(object_id, pa_.int64()),
                "id_block": pa_.array(object_id // settings.ID_BLOCK_SIZE, pa_.int64()),
            }
            | {c: pa_.array(frame[c], pa_.int64(), from_pandas=True) for c in columns}
        )
        for table in ("items", "records"):  # items first: repair finishes records from them
            try:
                catalog.lake.update_matched(
                    table, source, columns, {"catalog_lake.operation": "metrics"}
                )
            except STORE_ERRORS as exc:
                done = "items were updated, records were not: run `catalog-lake repair`; "
                raise LakeError(
                    f"cannot write {table!r}: {first_line(exc)}; "
                    + (done if table == "records" else "nothing was written")
                ) from None
        updated = len(frame)
    # A million unknown ids made a 19 MB report (issue 26): the first ones show which.
    return {
        "file": str(path),
        "rows": rows,
        "updated": updated,
        "unknown_count": len(unknown),
        "unknown_ids": unknown[:UNKNOWN_SHOWN],
        "deleted_count": len(deleted_ids),
        "deleted_ids": deleted_ids[:UNKNOWN_SHOWN],
        "invalid_count": len(invalid),
        "invalid_rows": invalid[:UNKNOWN_SHOWN],
        **({"by_seller": by_seller} if len(by_seller) > 1 else {}),
    }


def _by_seller(frame: pd.DataFrame, known: set[str], deleted: set[str]) -> dict[str, dict]:
    """Each seller's rows: updated, unknown and deleted (a report with several sellers)."""
    counts: dict[str, dict[str, int]] = {}
    for name, rows in frame.groupby("seller", sort=True):
        keys = rows["key"]
        counts[str(name)] = {
            "updated": int(keys.isin(known).sum()),
            "unknown": int((~keys.isin(known) & ~keys.isin(deleted)).sum()),
            "deleted": int(keys.isin(deleted).sum()),
        }
    return counts


def lagging_counts(joined: pd.DataFrame, left: str, right: str) -> pd.Series:
    """Rows of an items/records join whose likes or sales differ (nulls equal each other)."""
    lagging = pd.Series(False, index=joined.index)
    for column in ("likes", "sales"):
        a, b = joined[column + left], joined[column + right]
        lagging |= (a.isna() != b.isna()) | (a.notna() & b.notna() & (a != b))
    return lagging


def resync_records(catalog: Catalog) -> list[str]:
    """Give records the likes and sales of their items; the ``client_item_id`` changed.

    ``apply_metrics`` commits items, then records: a run killed between the
    two leaves records behind (issue 26). Items are the source of truth, so
    ``repair`` finishes the run from them; nothing else writes these columns.
    """
    sql = 'SELECT client_item_id, object_id, likes, sales FROM "{}"'
    items = catalog.lake.read("items", sql.format("items")).to_pandas()
    records = catalog.lake.read("records", sql.format("records")).to_pandas()
    records = records.drop(columns=["client_item_id"])
    joined = items.merge(records, on="object_id", suffixes=("", "_records"))
    lagging = joined[lagging_counts(joined, "", "_records")]
    if lagging.empty:
        return []
    source = pa_.table(
        {
            "object_id": pa_.array(lagging["object_id"].astype("int64"), pa_.int64()),
            "id_block": pa_.array(
                lagging["object_id"].astype("int64") // settings.ID_BLOCK_SIZE, pa_.int64()
            ),
            "likes": pa_.array(lagging["likes"], pa_.int64(), from_pandas=True),
            "sales": pa_.array(lagging["sales"], pa_.int64(), from_pandas=True),
        }
    )
    catalog.lake.update_matched(
        "records", source, ["likes", "sales"], {"catalog_lake.operation": "metrics repair"}
    )
    return lagging["client_item_id"].tolist()
