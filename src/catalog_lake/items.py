"""Typed item rows from validated cells: every field converted to the column it is stored as.

Only items that passed validation are given, so each conversion trusts the
checks and turns what it does not recognize into null. The conversions are
the very functions validation judged with (``clean``), so what was accepted
is exactly what is stored.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from . import clean
from .cells import CODE, Cells, codes
from .records import Batch, pack_attributes
from .rules import ARROW, ATTRIBUTE_KEYS, RULES
from .schemas import TS


def typed_items(cells: Cells) -> Batch:
    """Convert the cleaned cells of passed items to typed columns named as in the items table.

    Every column is built in Arrow from the cells' Arrow text: the checks'
    own conversions (``clean``), masked by each value's JSON kind.
    """
    n = len(cells)
    out: dict[str, pa.Array] = {}
    for rule in RULES:
        name = rule.source
        if name not in cells.text.columns:
            # Nothing sent for this field in the whole push: typed nulls, no work.
            if rule.column in ATTRIBUTE_KEYS:
                continue  # a string attribute: absent from the map, no column needed
            if rule.rule in ("urls", "list"):
                out[rule.column] = clean.empty_lists(n)
            else:
                out[rule.column] = pa.nulls(n, ARROW[rule.rule])
                if rule.rule == "duration":
                    out[f"{rule.column}_seconds"] = pa.nulls(n, pa.int64())
            continue
        text = cells.text[name].to_arrow().cast(pa.string())
        kind = codes(cells, name)  # numpy, one Polars call for every field
        is_str = pa.array(kind == CODE["str"])
        if rule.rule in ("key", "id", "text"):
            usable = pa.array(np.isin(kind, _TEXT_KINDS))
            out[rule.column] = pc.if_else(usable, text, _NULL)
        elif rule.rule == "count":
            out[rule.column] = clean.counts(text, pa.array(kind == CODE["float"]))
        elif rule.rule == "money":
            out[rule.column] = clean.money(text)
        elif rule.rule == "flag":
            out[rule.column] = _flags(text, kind)
        elif rule.rule == "date":
            dates = clean.timestamps(
                pc.if_else(is_str, text, _NULL), end_of_day=rule.column == "discount_end_date"
            )
            out[rule.column] = pa.array(dates, TS)
        elif rule.rule == "duration":
            canonical, seconds = clean.durations(pc.if_else(is_str, text, _NULL))
            out[rule.column] = canonical
            out[f"{rule.column}_seconds"] = seconds
        else:  # urls, list: the elements' texts, nulls left out
            out[rule.column] = _elements(cells, name, n)
    out["attributes"] = pack_attributes(out, n)
    out["extra_attributes"] = _extras(cells.extra_attributes, n)
    out["extra_fields"] = _extras(cells.extra_fields, n)
    return Batch(out, n)


_NULL = pa.scalar(None, pa.string())


_TEXT_KINDS = [CODE["str"], CODE["int"], CODE["float"]]


def _flags(text: pa.Array, kind: np.ndarray) -> pa.Array:
    """JSON booleans, 0 and 1, and the spellings; null for anything else."""
    spelled = clean.spelled_booleans(text)
    json_bool = pc.equal(text, "true")
    as_int = pc.equal(text, "1")
    return pc.case_when(
        pc.make_struct(
            *(pa.array(kind == CODE[name]) for name in ("bool", "int", "str")),
            field_names=["bool", "int", "str"],
        ),
        json_bool,
        pc.if_else(pc.is_in(text, pa.array(["0", "1"])), as_int, pa.scalar(None, pa.bool_())),
        spelled,
    )


def _elements(cells: Cells, name: str, n: int) -> pa.ListArray:
    texts, kinds = cells.elements.get(name, (None, None))
    if texts is None:
        return clean.empty_lists(n)
    frame = pl.DataFrame({"row": np.arange(n), "text": texts, "kind": kinds})
    flat = frame.explode(["text", "kind"]).filter(pl.col("kind").is_in(["str", "int", "float"]))
    return clean.lists_at(flat["row"].to_numpy(), flat["text"].to_arrow(), n)


def _extras(series: pl.Series | None, n: int) -> pa.Array:
    if series is None:
        return pa.nulls(n, pa.string())
    return series.to_arrow().cast(pa.string())


__all__ = ["typed_items"]
