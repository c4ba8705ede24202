"""From typed item rows to flat search records.

Pure functions over whole columns: each takes frames or Arrow tables and
returns new ones. The price rule depends on a clock, so ``now`` is always
passed in; a backfill or a repair gives the same answer as the original push
when it passes the same instant.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import clean, settings
from .rules import ATTRIBUTE_KEYS
from .schemas import ATTRIBUTE_MAP


@dataclass
class Batch:
    """Rows of one table in flight: scalar columns in pandas, list columns in Arrow.

    List columns stay Arrow arrays from the moment they are built, so they
    never turn into per-row Python lists on the way to Delta.
    """

    frame: pd.DataFrame
    lists: dict[str, pa.Array] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.frame)

    def table(self, schema: pa.Schema) -> pa.Table:
        """The rows as an Arrow table with exactly ``schema``."""
        return to_arrow(self.frame, self.lists, schema)


def to_arrow(frame: pd.DataFrame, lists: dict[str, pa.Array], schema: pa.Schema) -> pa.Table:
    """Build an Arrow table with exactly ``schema``: explicit types, never Arrow null.

    pandas 3 infers ``str`` and an all-null column would become Arrow ``null``,
    which Delta refuses; converting column by column to the declared type
    avoids both.
    """
    arrays = []
    for column in schema:
        if column.type == ATTRIBUTE_MAP and column.name not in lists:
            arrays.append(pack_attributes(frame, len(frame)))
        elif column.name in lists:
            arrays.append(lists[column.name].cast(column.type))
        elif column.name not in frame.columns:
            arrays.append(pa.nulls(len(frame), column.type))
        else:
            arrays.append(_column(frame[column.name], column.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(values: pd.Series, kind: pa.DataType) -> pa.Array:
    if pa.types.is_decimal(kind):
        return pa.array(values.astype(object), pa.string(), from_pandas=True).cast(kind)
    if pa.types.is_timestamp(kind):
        return pa.array(values.astype("datetime64[us, UTC]"), kind)
    if pa.types.is_string(kind):
        if isinstance(values.dtype, pd.StringDtype):
            return pa.array(values.array).cast(kind)  # already Arrow: no Python strings
        return pa.array(values.astype(object), pa.string(), from_pandas=True)
    return pa.array(values, from_pandas=True).cast(kind)


def pack_attributes(columns: Mapping[str, pd.Series], n: int) -> pa.MapArray:
    """The string attributes of ``n`` typed item rows as one map (name -> text) per row.

    ``columns`` holds ``attr_<name>`` columns (a frame or a dict; others
    are ignored). Entries follow SPEC 2.6's order; a row without any gets
    an empty map. Built column by column in Arrow: one mask and one gather
    per attribute sent at all, never a Python object per value.
    """
    rows, codes, values = [], [], []
    names = []
    for column, name in ATTRIBUTE_KEYS.items():
        if column not in columns:
            continue
        array = _column(columns[column], pa.string())
        if array.null_count == n:
            continue
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        rows.append(np.flatnonzero(valid))
        codes.append(np.full(len(rows[-1]), len(names), dtype="int32"))
        values.append(array.filter(pa.array(valid)))
        names.append(name)
    if not names:
        offsets = pa.array(np.zeros(n + 1, dtype="int32"))
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(offsets, empty, empty).cast(ATTRIBUTE_MAP)
    order, offsets = clean.grouped_by_row(np.concatenate(rows), n)  # by row, then SPEC order
    order = pa.array(order)
    keys = pa.array(names, pa.string()).take(pa.array(np.concatenate(codes))).take(order)
    texts = pa.concat_arrays([v.cast(pa.string()) for v in values]).take(order)
    return pa.MapArray.from_arrays(offsets, keys, texts).cast(ATTRIBUTE_MAP)


def unpack_attributes(attributes: pa.Array | pa.ChunkedArray) -> pd.DataFrame:
    """The ``attributes`` map column back as one text column per attribute (``attr_<name>``).

    For code that reads item rows back from the lake and derives records
    from them (re-pricing): every named attribute gets its column, null
    where an item does not carry it.
    """
    if isinstance(attributes, pa.ChunkedArray):
        attributes = (
            attributes.combine_chunks() if attributes.num_chunks else pa.array([], ATTRIBUTE_MAP)
        )
    n = len(attributes)
    entries = attributes.cast(pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])))
    lengths = pc.fill_null(pc.list_value_length(entries), 0).to_numpy(zero_copy_only=False)
    row = np.repeat(np.arange(n), lengths)
    flat = pc.list_flatten(entries)
    keys = pc.struct_field(flat, "key").to_numpy(zero_copy_only=False)
    texts = pc.struct_field(flat, "value").to_numpy(zero_copy_only=False)
    out = {}
    for column, name in ATTRIBUTE_KEYS.items():
        values = np.full(n, None, dtype=object)
        hit = keys == name
        values[row[hit]] = texts[hit]
        out[column] = values
    return pd.DataFrame(out, dtype=object)


def first_element(lists: pa.ListArray) -> pa.Array:
    """The first value of each list, null for empty lists."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    offsets = lists.offsets.to_numpy()[:-1]
    values = lists.flatten()
    if len(values) == 0:
        return pa.nulls(len(lists), lists.type.value_type)
    picked = values.take(pa.array(np.minimum(offsets, len(values) - 1)))
    return pc.if_else(pa.array(lengths > 0), picked, pa.nulls(len(lists), picked.type))


# --- records ---------------------------------------------------------------------


@dataclass(frozen=True)
class Synonyms:
    """Groups of equivalent search terms, one comma-separated group a line."""

    groups: tuple[tuple[str, ...], ...]

    @classmethod
    def load(cls, path: str | Path | None = None) -> Synonyms:
        """Read a synonym list (cached per path).

        The default is ``$CATALOG_LAKE_SYNONYMS`` when set, else the list that
        ships inside the package (``catalog_lake/synonyms.txt``), so an
        install from a wheel finds it wherever it runs.
        """
        path = path or os.environ.get(settings.SYNONYMS_ENV)
        if path:
            return _load_synonyms(Path(path).read_text(encoding="utf-8"))
        packaged = resources.files("catalog_lake").joinpath("synonyms.txt")
        return _load_synonyms(packaged.read_text(encoding="utf-8"))

    @cached_property
    def pattern(self) -> re.Pattern[str] | None:
        """One regex for every term, longest first so "cell phone" beats "phone"."""
        terms = sorted({t for g in self.groups for t in g}, key=len, reverse=True)
        if not terms:
            return None
        return re.compile(r"(?<![\w])(" + "|".join(map(re.escape, terms)) + r")(?![\w])")

    @cached_property
    def term_groups(self) -> dict[str, list[int]]:
        """For each term, the numbers of the groups it belongs to."""
        out: dict[str, list[int]] = {}
        for number, group in enumerate(self.groups):
            for term in group:
                out.setdefault(term, []).append(number)
        return out


@lru_cache(maxsize=8)
def _load_synonyms(text: str) -> Synonyms:
    groups = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        terms = tuple(dict.fromkeys(t.strip().lower() for t in line.split(",") if t.strip()))
        if len(terms) > 1:
            groups.append(terms)
    return Synonyms(tuple(groups))


def current_price(items: pd.DataFrame, now: datetime | None) -> pd.Series:
    """SPEC price rule: discounted_price inside the discount window, else sale_price.

    An empty start or end leaves that side of the window open; a bare end
    date covers the whole day (coercion made it the next midnight). ``now``
    None means each item's own ``updated_at``: the moment its push arrived.
    """
    if now is None:
        now_ts = items["updated_at"].astype("datetime64[us, UTC]")
    else:
        stamp = pd.Timestamp(now)
        now_ts = stamp.tz_convert("UTC") if stamp.tzinfo else stamp.tz_localize("UTC")
    sale = pd.to_numeric(items["sale_price"], errors="coerce")
    discounted = pd.to_numeric(items["discounted_price"], errors="coerce")
    start = pd.Series(items["discount_start_date"])
    end = pd.Series(items["discount_end_date"])
    opened = start.isna() | (start <= now_ts)
    not_closed = end.isna() | (now_ts < end)
    active = discounted.notna() & opened & not_closed
    return discounted.where(active, sale).astype("float64")


def _slug(text: pa.Array) -> pa.Array:
    """Lower case, each run of non-word characters one hyphen, none at the ends; null if empty.

    ASCII text (nearly all of it) is done by Arrow kernels; other text keeps
    Python's Unicode ``lower`` and word characters, which Arrow's do not match
    exactly.
    """
    slug = pc.utf8_trim(
        pc.replace_substring_regex(pc.ascii_lower(text), "[^0-9A-Za-z_]+", "-"), "-"
    )
    unicode = pc.fill_null(pc.invert(pc.string_is_ascii(text)), False)
    if pc.any(unicode).as_py():
        fixed = [
            _NON_WORD.sub("-", value.lower()).strip("-")
            for value in text.filter(unicode).to_pylist()
        ]
        slug = pc.replace_with_mask(slug, unicode, pa.array(fixed, pa.string()))
    return pc.if_else(pc.equal(slug, ""), _NULL_TEXT, slug)


_NON_WORD = re.compile(r"[^\w]+")
_NULL_TEXT = pa.scalar(None, pa.string())


_VEG = frozenset({"veg", "vegetarian", "v", "green", "pure veg"})
_NON_VEG = frozenset({"non-veg", "nonveg", "non veg", "non_veg", "nv", "non-vegetarian"})


def _flag(values: pd.Series) -> pa.Array:
    return pa.array(values.astype("boolean").fillna(False).astype(bool).to_numpy())


def _attribute(items: pd.DataFrame, column: str) -> pd.Series:
    """A string attribute's column, all null when no item of the batch sent it."""
    if column in items.columns:
        return items[column]
    return pd.Series(None, index=items.index, dtype=object)


def _each_distinct(text: pa.Array, change) -> pa.Array:
    """``change`` (a Python string method) of each text, run once per distinct text.

    Such columns hold a handful of spellings ("Veg", "veg ", "Non-Veg") or
    categories: Python's Unicode rules run on those, not on every row.
    """
    encoded = pc.dictionary_encode(text)
    changed = pa.array([change(value) for value in encoded.dictionary.to_pylist()], pa.string())
    return changed.take(encoded.indices)


def _folded(text: pa.Array) -> pa.Array:
    """Stripped, lower-cased text (null where absent)."""
    return _each_distinct(text, lambda value: value.strip().lower())


def _tags(items: pd.DataFrame, on_sale: pd.Series, in_stock: pd.Series) -> pa.Array:
    """Computed discovery tags (record design rule 4), in a fixed order per record.

    is_veg is free text (SPEC 2.6), so both it and veg_nonveg_flag are read
    through the same spellings: veg/vegetarian/yes/true mean veg, and so on.
    Each tag is an Arrow column, null where a record does not carry it; a
    record's list is its row of them, nulls left out (no Python string per tag).
    """
    is_veg = _folded(_text(items, "attr_is_veg"))
    flag = _folded(_text(items, "attr_veg_nonveg_flag"))
    veg_bool = clean.spelled_booleans(is_veg)

    def said(values: pa.Array, words) -> pa.Array:
        return pc.fill_null(pc.is_in(values, pa.array(sorted(words), pa.string())), False)

    egg = pc.or_(said(flag, {"egg"}), said(is_veg, {"egg"}))
    veg = pc.and_not(
        pc.or_(
            pc.or_(said(flag, _VEG), said(is_veg, _VEG)), pc.fill_null(veg_bool, False)
        ),
        egg,
    )
    non_veg = pc.and_not(
        pc.or_(
            pc.or_(said(flag, _NON_VEG), said(is_veg, _NON_VEG)),
            pc.fill_null(pc.invert(veg_bool), False),
        ),
        pc.or_(veg, egg),
    )
    ship = pa.array(pd.to_numeric(items["attr_time_to_ship_seconds"], errors="coerce"))
    fast = pc.fill_null(pc.less_equal(ship, settings.FAST_SHIPPING_SECONDS), False)
    stocked = pa.array(in_stock.to_numpy(dtype=bool))
    colour = pc.coalesce(_text(items, "attr_colour"), _text(items, "attr_colour_name"))

    flags = [
        ("veg", veg),
        ("non-veg", non_veg),
        ("egg", egg),
        ("cod", _flag(items["attr_available_on_cod"])),
        ("returnable", _flag(items["attr_returnable"])),
        ("cancellable", _flag(items["attr_cancellable"])),
        ("fast-shipping", fast),
        ("on-sale", pa.array(on_sale.to_numpy(dtype=bool))),
        ("in-stock", stocked),
        ("out-of-stock", pc.invert(stocked)),
    ]
    named = [
        ("brand:", _text(items, "attr_brand")),
        ("colour:", colour),
        ("gender:", _text(items, "attr_gender")),
    ]
    columns = [pc.if_else(mask, pa.scalar(name), _NULL_TEXT) for name, mask in flags] + [
        pc.binary_join_element_wise(pa.scalar(prefix), _slug(values), "")
        for prefix, values in named
    ]
    return _lists_of_rows(columns, len(items))


def _lists_of_rows(columns: list[pa.Array], n: int) -> pa.ListArray:
    """Each row's values of ``columns``, in column order, nulls left out, as one list a row."""
    # Value k of row r sits at k * n + r of the columns joined.
    order = (np.arange(n)[:, None] + n * np.arange(len(columns))).ravel()
    every = pa.concat_arrays([column.cast(pa.string()) for column in columns]).take(order)
    carried = every.is_valid().to_numpy(zero_copy_only=False)
    offsets = clean.row_offsets(carried.reshape(n, len(columns)).sum(axis=1))
    return pa.ListArray.from_arrays(offsets, every.filter(pa.array(carried)))


def _text(items: pd.DataFrame, column: str) -> pa.Array:
    """A string attribute's column in Arrow, all null when no item of the batch sent it."""
    return _column(_attribute(items, column), pa.string())


def _synonyms(items: pd.DataFrame, synonyms: Synonyms) -> pa.Array:
    pattern = synonyms.pattern
    n = len(items)
    if pattern is None or n == 0:
        return clean.list_array(pd.Series([], dtype=object), n)
    text = (
        items["name"].fillna("").astype(object)
        + " | "
        + items["category"].fillna("").astype(object)
        + " | "
        + items["lake_category"].fillna("").astype(object)
    ).str.lower()
    # Variants of a product share its name and categories: match each distinct text once.
    codes, texts = pd.factorize(text)
    # findall + explode: extractall builds a MultiIndex per match and took 5x longer.
    found = pd.Series(texts, dtype=object).str.findall(pattern).explode().dropna()
    if found.empty:
        return clean.list_array(pd.Series([], dtype=object), n)
    matched = pd.DataFrame({"row": found.index.to_numpy(), "term": found.to_numpy()})
    term_groups = synonyms.term_groups
    matched["group"] = matched["term"].map(term_groups)
    expanded = matched.explode("group")
    expanded["synonym"] = expanded["group"].map(lambda g: synonyms.groups[g])
    expanded = expanded.explode("synonym")[["row", "synonym"]]
    seen = pd.MultiIndex.from_frame(matched[["row", "term"]])
    candidate = pd.MultiIndex.from_frame(expanded)
    expanded = expanded[~candidate.isin(seen)].drop_duplicates()
    per_text = clean.list_array(
        pd.Series(expanded["synonym"].to_numpy(), index=expanded["row"].to_numpy()), len(texts)
    )
    return per_text.take(pa.array(codes))


def _categories(items: pd.DataFrame) -> pa.Array:
    """lake_category then category, without case-insensitive repeats."""
    lake, category = _text(items, "lake_category"), _text(items, "category")
    lowered = [_each_distinct(text, str.lower) for text in (lake, category)]
    same = pc.fill_null(pc.equal(*lowered), False)
    return _lists_of_rows([lake, pc.if_else(same, _NULL_TEXT, category)], len(items))


def derive_records(items: Batch, now: datetime | None, synonyms: Synonyms) -> Batch:
    """Flat search records (SPEC 1 and 2.1) from typed item rows.

    ``now`` is the instant of the price rule (None: each item's push time).

    No nested objects: categories, tags and synonyms are lists of strings,
    everything else a scalar a search engine can filter or rank on.
    """
    rows = items.frame.reset_index(drop=True)
    price = current_price(rows, now)
    mrp = pd.to_numeric(rows["mrp"], errors="coerce").astype("float64")
    on_sale = (price < mrp).fillna(False).astype(bool)
    pct = ((mrp - price) / mrp * 100).round(1).where(on_sale & (mrp > 0), 0.0)
    qty = rows["qty"].astype("Int64")
    in_stock = rows["is_in_stock"].astype("boolean").fillna(qty > 0).fillna(False).astype(bool)
    description = rows["description"].where(rows["description"].notna(), rows["short_description"])
    image = first_element(items.lists["images"]).to_pandas().astype(object)
    frame = pd.DataFrame(
        {
            "object_id": rows["object_id"].astype("int64"),
            "client_item_id": rows["client_item_id"],
            "product_name": rows["name"],
            "description": description,
            "price": price,
            "mrp": mrp,
            "on_sale": on_sale,
            "discount_pct": pct.astype("float64"),
            "image": image,
            "inventory": qty,
            "in_stock": in_stock,
            "likes": rows["likes"].astype("Int64").fillna(0),
            "sales": rows["sales"].astype("Int64").fillna(0),
            "brand": _attribute(rows, "attr_brand"),
            "colour": _attribute(rows, "attr_colour").fillna(_attribute(rows, "attr_colour_name")),
            "size": _attribute(rows, "attr_size"),
            "gender": _attribute(rows, "attr_gender"),
            "lake_category": rows["lake_category"],
            "variant_group_id": rows["variant_group_id"],
            "variant": rows["variant"],
            "updated_at": rows["updated_at"],
            "id_block": rows["object_id"].astype("int64") // settings.ID_BLOCK_SIZE,
            # The item's push time: the replay guard. ``updated_at`` is where the content
            # last changed, which the upsert keeps when this record changes nothing.
            "received_at": rows["updated_at"],
        }
    )
    lists = {
        "categories": _categories(rows),
        "tags": _tags(rows, on_sale, in_stock),
        "synonyms": _synonyms(rows, synonyms),
    }
    return Batch(frame, lists)


__all__ = [
    "Batch",
    "Synonyms",
    "current_price",
    "derive_records",
    "pack_attributes",
    "to_arrow",
    "unpack_attributes",
]
