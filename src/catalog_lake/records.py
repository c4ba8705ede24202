"""From typed item rows to flat search records.

Pure functions over whole columns: each takes Arrow columns (a ``Batch``)
and returns new ones. The price rule depends on a clock, so ``now`` is always
passed in; a backfill or a repair gives the same answer as the original push
when it passes the same instant.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
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
from .schemas import ATTRIBUTE_MAP, TS


@dataclass
class Batch:
    """Rows of one table in flight: one Arrow array per column, lists and maps alike.

    Typing, ids and records are Arrow kernels over whole columns, so from the
    parsed cells to Delta no value becomes a Python object, and no column is
    converted between pandas and Arrow on the way (issue 29).
    """

    columns: dict[str, pa.Array]
    size: int

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, name: str) -> pa.Array:
        return self.columns[name]

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    def get(self, name: str, kind: pa.DataType | None = None) -> pa.Array:
        """A column, or all nulls of ``kind`` (text) when no row of the batch sent it."""
        if name in self.columns:
            return self.columns[name]
        return pa.nulls(self.size, kind or pa.string())

    def with_columns(self, **columns: pa.Array) -> Batch:
        """The rows with columns added or replaced."""
        return Batch({**self.columns, **columns}, self.size)

    def table(self, schema: pa.Schema) -> pa.Table:
        """The rows as an Arrow table with exactly ``schema``: never Arrow null, plain strings.

        A column no row carries becomes nulls of the declared type, which
        Delta takes; an untyped all-null column would be refused.
        """
        arrays = [
            self.columns[column.name].cast(column.type)
            if column.name in self.columns
            else pa.nulls(self.size, column.type)
            for column in schema
        ]
        return pa.Table.from_arrays(arrays, schema=schema)

    def as_table(self) -> pa.Table:
        """Every column as one Arrow table (what travels from a worker)."""
        return pa.table(self.columns) if self.columns else pa.table({})

    @classmethod
    def of_table(cls, table: pa.Table) -> Batch:
        """The rows of an Arrow table, one array per column."""
        return cls({name: _array(table[name]) for name in table.column_names}, table.num_rows)


def _array(column: pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if column.num_chunks else pa.array([], column.type)


def pack_attributes(columns: Mapping[str, pa.Array], n: int) -> pa.MapArray:
    """The string attributes of ``n`` typed item rows as one map (name -> text) per row.

    ``columns`` holds ``attr_<name>`` columns (others are ignored). Entries
    follow SPEC 2.6's order; a row without any gets an empty map. Built
    column by column in Arrow: one mask and one gather per attribute sent
    at all, never a Python object per value.
    """
    rows, codes, values = [], [], []
    names = []
    for column, name in ATTRIBUTE_KEYS.items():
        if column not in columns:
            continue
        array = columns[column].cast(pa.string())
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
    texts = pa.concat_arrays(values).take(order)
    return pa.MapArray.from_arrays(offsets, keys, texts).cast(ATTRIBUTE_MAP)


def unpack_attributes(attributes: pa.Array | pa.ChunkedArray) -> dict[str, pa.Array]:
    """The ``attributes`` map column back as one text column per attribute (``attr_<name>``).

    For code that reads item rows back from the lake and derives records
    from them (re-pricing): every named attribute gets its column, null
    where an item does not carry it.
    """
    if isinstance(attributes, pa.ChunkedArray):
        attributes = _array(attributes)
    n = len(attributes)
    entries = attributes.cast(pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])))
    lengths = pc.fill_null(pc.list_value_length(entries), 0).to_numpy(zero_copy_only=False)
    row = np.repeat(np.arange(n), lengths)
    flat = pc.list_flatten(entries)
    keys = pc.struct_field(flat, "key")
    texts = pc.struct_field(flat, "value")
    out = {}
    for column, name in ATTRIBUTE_KEYS.items():
        hit = pc.equal(keys, name).to_numpy(zero_copy_only=False)
        at = np.full(n, -1, dtype="int64")
        at[row[hit]] = np.flatnonzero(hit)
        out[column] = texts.take(pa.array(at, mask=at < 0))
    return out


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


def current_price(items: Batch, now: datetime | None) -> pa.Array:
    """SPEC price rule: discounted_price inside the discount window, else sale_price.

    An empty start or end leaves that side of the window open; a bare end
    date covers the whole day (coercion made it the next midnight). ``now``
    None means each item's own ``updated_at``: the moment its push arrived.
    """
    if now is None:
        now_at = items["updated_at"].cast(TS)
    else:
        stamp = pd.Timestamp(now)
        now_at = pa.scalar(
            stamp.tz_convert("UTC") if stamp.tzinfo else stamp.tz_localize("UTC"), TS
        )
    sale, discounted = _number(items, "sale_price"), _number(items, "discounted_price")
    start, end = items.get("discount_start_date", TS), items.get("discount_end_date", TS)
    opened = pc.fill_null(pc.less_equal(start, now_at), True)  # no start: open
    not_closed = pc.fill_null(pc.less(now_at, end), True)  # no end: open
    active = pc.and_(pc.is_valid(discounted), pc.and_(opened, not_closed))
    return pc.if_else(active, discounted, sale)


def _number(items: Batch, column: str) -> pa.Array:
    """A money column (its text, or a decimal read back from the lake) as float64."""
    values = items.get(column)
    if pa.types.is_decimal(values.type):
        values = values.cast(pa.string())  # parsed from text, as when it was pushed
    return values.cast(pa.float64())


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


def _flag(items: Batch, column: str) -> pa.Array:
    return pc.fill_null(items.get(column, pa.bool_()), False)


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


def _tags(items: Batch, on_sale: pa.Array, in_stock: pa.Array) -> pa.Array:
    """Computed discovery tags (record design rule 4), in a fixed order per record.

    is_veg is free text (SPEC 2.6), so both it and veg_nonveg_flag are read
    through the same spellings: veg/vegetarian/yes/true mean veg, and so on.
    Each tag is an Arrow column, null where a record does not carry it; a
    record's list is its row of them, nulls left out (no Python string per tag).
    """
    is_veg = _folded(items.get("attr_is_veg"))
    flag = _folded(items.get("attr_veg_nonveg_flag"))
    veg_bool = clean.spelled_booleans(is_veg)

    def said(values: pa.Array, words) -> pa.Array:
        return pc.fill_null(pc.is_in(values, pa.array(sorted(words), pa.string())), False)

    egg = pc.or_(said(flag, {"egg"}), said(is_veg, {"egg"}))
    veg = pc.and_not(
        pc.or_(pc.or_(said(flag, _VEG), said(is_veg, _VEG)), pc.fill_null(veg_bool, False)),
        egg,
    )
    non_veg = pc.and_not(
        pc.or_(
            pc.or_(said(flag, _NON_VEG), said(is_veg, _NON_VEG)),
            pc.fill_null(pc.invert(veg_bool), False),
        ),
        pc.or_(veg, egg),
    )
    ship = items.get("attr_time_to_ship_seconds", pa.int64())
    fast = pc.fill_null(pc.less_equal(ship, settings.FAST_SHIPPING_SECONDS), False)
    colour = pc.coalesce(items.get("attr_colour"), items.get("attr_colour_name"))

    flags = [
        ("veg", veg),
        ("non-veg", non_veg),
        ("egg", egg),
        ("cod", _flag(items, "attr_available_on_cod")),
        ("returnable", _flag(items, "attr_returnable")),
        ("cancellable", _flag(items, "attr_cancellable")),
        ("fast-shipping", fast),
        ("on-sale", on_sale),
        ("in-stock", in_stock),
        ("out-of-stock", pc.invert(in_stock)),
    ]
    named = [
        ("brand:", items.get("attr_brand")),
        ("colour:", colour),
        ("gender:", items.get("attr_gender")),
    ]
    columns = [pc.if_else(mask, pa.scalar(name), _NULL_TEXT) for name, mask in flags] + [
        pc.binary_join_element_wise(pa.scalar(prefix), _slug(values.cast(pa.string())), "")
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


def _synonyms(items: Batch, synonyms: Synonyms) -> pa.Array:
    """The synonyms of the terms each record's name and categories mention, not those terms.

    Variants of a product share its name and categories, so each distinct
    text is matched once; a term's synonyms follow in the order it was found.
    """
    pattern = synonyms.pattern
    n = len(items)
    if pattern is None or n == 0:
        return clean.empty_lists(n)
    parts = [pc.fill_null(items.get(c).cast(pa.string()), "") for c in _SYNONYM_SOURCES]
    text = pc.dictionary_encode(pc.binary_join_element_wise(*parts, " | "))
    term_groups, groups = synonyms.term_groups, synonyms.groups
    rows, found = [], []
    for row, value in enumerate(text.dictionary.to_pylist()):
        terms = pattern.findall(value.lower())
        said = set(terms)
        expanded = dict.fromkeys(
            synonym
            for term in terms
            for number in term_groups[term]
            for synonym in groups[number]
            if synonym not in said
        )
        rows += [row] * len(expanded)
        found += expanded
    per_text = clean.lists_at(
        np.array(rows, dtype="int64"), pa.array(found, pa.string()), len(text.dictionary)
    )
    return per_text.take(text.indices)


_SYNONYM_SOURCES = ("name", "category", "lake_category")


def _categories(items: Batch) -> pa.Array:
    """lake_category then category, without case-insensitive repeats."""
    lake, category = items.get("lake_category"), items.get("category")
    lowered = [_each_distinct(text.cast(pa.string()), str.lower) for text in (lake, category)]
    same = pc.fill_null(pc.equal(*lowered), False)
    return _lists_of_rows([lake, pc.if_else(same, _NULL_TEXT, category)], len(items))


def derive_records(items: Batch, now: datetime | None, synonyms: Synonyms) -> Batch:
    """Flat search records (SPEC 1 and 2.1) from typed item rows.

    ``now`` is the instant of the price rule (None: each item's push time).

    No nested objects: categories, tags and synonyms are lists of strings,
    everything else a scalar a search engine can filter or rank on. Every
    column is an Arrow kernel over the whole batch.
    """
    price = current_price(items, now)
    mrp = _number(items, "mrp")
    on_sale = pc.fill_null(pc.less(price, mrp), False)
    # numpy's round (half to even, on x * 10), as the records have always been rounded.
    gap = pc.multiply(pc.divide(pc.subtract(mrp, price), mrp), 100.0)
    rounded = pa.array(np.round(gap.to_numpy(zero_copy_only=False), 1), pa.float64())
    cut = pc.and_(on_sale, pc.fill_null(pc.greater(mrp, 0.0), False))
    qty = items.get("qty", pa.int64()).cast(pa.int64())
    in_stock = pc.coalesce(
        items.get("is_in_stock", pa.bool_()), pc.greater(qty, 0), pa.scalar(False)
    )
    object_id = items["object_id"].cast(pa.int64())
    columns = {
        "object_id": object_id,
        "client_item_id": items["client_item_id"],
        "product_name": items.get("name"),
        "description": pc.coalesce(items.get("description"), items.get("short_description")),
        "price": price,
        "mrp": mrp,
        "on_sale": on_sale,
        "discount_pct": pc.if_else(cut, rounded, 0.0),
        "image": first_element(items["images"]),
        "inventory": qty,
        "in_stock": in_stock,
        "likes": pc.fill_null(items.get("likes", pa.int64()), 0),
        "sales": pc.fill_null(items.get("sales", pa.int64()), 0),
        "brand": items.get("attr_brand"),
        "colour": pc.coalesce(items.get("attr_colour"), items.get("attr_colour_name")),
        "size": items.get("attr_size"),
        "gender": items.get("attr_gender"),
        "lake_category": items.get("lake_category"),
        "variant_group_id": items.get("variant_group_id"),
        "variant": items.get("variant"),
        "updated_at": items["updated_at"],
        "id_block": pc.divide(object_id, settings.ID_BLOCK_SIZE),
        "seller": items.get("seller", pa.string()),
        # The item's push time: the replay guard. ``updated_at`` is where the content
        # last changed, which the upsert keeps when this record changes nothing.
        "received_at": items["updated_at"],
        "categories": _categories(items),
        "tags": _tags(items, on_sale, in_stock),
        "synonyms": _synonyms(items, synonyms),
    }
    return Batch(columns, len(items))


__all__ = [
    "Batch",
    "Synonyms",
    "current_price",
    "derive_records",
    "pack_attributes",
    "unpack_attributes",
]
