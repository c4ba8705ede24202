"""Business metrics (likes, sales) from a CSV or Parquet file onto items and records.

Only ``likes`` and ``sales`` change, and only for ids the lake knows: an
unknown ``client_item_id`` is reported, never invented.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pandera.pandas as pa
import pyarrow as pa_

from . import reads, settings
from .errors import CatalogLakeError

if TYPE_CHECKING:  # the facade uses these modules; they only take one
    from .catalog import Catalog

METRICS_SCHEMA = pa.DataFrameSchema(
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
            frame = pd.read_csv(path, dtype={"client_item_id": str})
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
            given = frame[column].notna()
            numbers = pd.to_numeric(frame[column], errors="coerce")
            whole = numbers.notna() & (numbers == numbers.round())
            for index in frame.index[given & ~whole]:
                value = frame.at[index, column]
                value = value.item() if hasattr(value, "item") else value  # numpy scalar
                bad.setdefault(int(index), []).append(f"{column}: not a whole number ({value!r})")
            frame[column] = numbers.where(given & whole, None)
    try:
        METRICS_SCHEMA.validate(frame, lazy=True)
    except pa.errors.SchemaErrors as exc:
        for case in exc.failure_cases.dropna(subset=["index"]).itertuples(index=False):
            check = "is missing" if case.check == "not_nullable" else case.check
            shown = "" if pd.isna(case.failure_case) else f" ({case.failure_case!r})"
            bad.setdefault(int(case.index), []).append(f"{case.column}: {check}{shown}")
    frame = METRICS_SCHEMA.validate(frame.drop(index=list(bad)), lazy=False)
    # Rows are numbered as a spreadsheet shows them: the header is row 1.
    invalid = [{"row": i + 2, "errors": errs} for i, errs in sorted(bad.items())]
    return frame, invalid


def apply_metrics(catalog: Catalog, path: str | Path) -> dict[str, Any]:
    """Update likes and sales of known items from ``path``; report the rest."""
    catalog.lake.require()
    frame, invalid = load_metrics(path)
    rows = len(frame) + len(invalid)
    frame = frame.drop_duplicates("client_item_id", keep="last")
    keys = frame["client_item_id"].tolist()
    found = reads.lookup(
        catalog.lake, "items", "client_item_id", keys, ["client_item_id", "object_id"]
    )
    known = set(found["client_item_id"].to_pylist())
    # The partition of each item, so the merge rewrites only those blocks.
    block_of = pd.Series(
        found["object_id"].to_numpy() // settings.ID_BLOCK_SIZE,
        index=found["client_item_id"].to_numpy(zero_copy_only=False),
    )
    unknown = [k for k in keys if k not in known]
    frame = frame[frame["client_item_id"].isin(known)]
    updated = 0
    if len(frame):
        columns = [c for c in ("likes", "sales") if c in frame.columns]
        source = pa_.table(
            {
                "client_item_id": pa_.array(frame["client_item_id"], pa_.string()),
                "id_block": pa_.array(frame["client_item_id"].map(block_of), pa_.int64()),
            }
            | {c: pa_.array(frame[c], pa_.int64(), from_pandas=True) for c in columns}
        )
        for table in ("items", "records"):
            catalog.lake.update_matched(
                table, source, columns, {"catalog_lake.operation": "metrics"}
            )
        updated = len(frame)
    return {
        "file": str(path),
        "rows": rows,
        "updated": updated,
        "unknown_ids": unknown,
        "invalid_rows": invalid,
    }
