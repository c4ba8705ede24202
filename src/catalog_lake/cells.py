"""Items laid out as columns: each field's text and its JSON kind, side by side.

Every rule depends on two things about a value: what it says and what JSON
kind it was sent as (``true`` is not ``"true"`` for a text field, ``5.0`` is a
count but ``"5.0"`` is not). So a push becomes two Polars frames with the same
columns, one per flat field (``name``, ``pricing_info.mrp``, ...): ``text``
holds each value as text (a string as is, a number as its JSON text, a list or
object as JSON) and ``kind`` its kind (``rules.KINDS``). List fields (images,
location_id) also keep their elements' texts and kinds. Fields outside the
spec are kept whole, as JSON, for ``items.extra_fields`` and
``items.extra_attributes``. From here on every rule is a column expression.

Built from the object frame ``flat.flatten`` lays decoded items out in:
columns of one JSON kind are converted whole, mixed ones value by value.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from .flat import NESTED, HugeInt, field_path
from .rules import CONTAINERS, KINDS, RULES_BY_SOURCE

KIND = pl.Enum(KINDS)
REQUIRED = tuple(r for r in RULES_BY_SOURCE.values() if r.required)
#: Fields whose rule takes a list: their elements are kept one by one.
LIST_FIELDS = tuple(r.source for r in RULES_BY_SOURCE.values() if r.rule in ("urls", "list"))


@dataclass
class Cells:
    """A push's items as columns (see the module's docstring); row i is item i."""

    text: pl.DataFrame
    kind: pl.DataFrame
    #: Per list field: its elements' texts and kinds, as List(String) columns.
    elements: dict[str, tuple[pl.Series, pl.Series]] = field(default_factory=dict)
    #: Fields outside the spec, as one JSON object per item (null when none).
    extra_fields: pl.Series | None = None
    extra_attributes: pl.Series | None = None
    #: (item, column, path, text) of every NaN or Infinity inside a field outside the spec.
    nonfinite: list[tuple[int, str, str, str]] = field(default_factory=list)
    #: The kinds as numpy codes per field, once asked for (``codes``).
    codes: dict[str, Any] | None = None

    def __len__(self) -> int:
        return self.text.height

    def filter(self, keep: pl.Series) -> Cells:
        """The cells of the items where ``keep`` is true, in order."""
        return Cells(
            self.text.filter(keep),
            self.kind.filter(keep),
            {k: (t.filter(keep), c.filter(keep)) for k, (t, c) in self.elements.items()},
            None if self.extra_fields is None else self.extra_fields.filter(keep),
            None if self.extra_attributes is None else self.extra_attributes.filter(keep),
            [],
        )

    def slice(self, start: int, end: int) -> Cells:
        """Rows ``start`` to ``end`` (a push of several read at once)."""
        if start == 0 and end == len(self):
            return self
        size = end - start
        return Cells(
            self.text.slice(start, size),
            self.kind.slice(start, size),
            {
                k: (t.slice(start, size), c.slice(start, size))
                for k, (t, c) in self.elements.items()
            },
            None if self.extra_fields is None else self.extra_fields.slice(start, size),
            None if self.extra_attributes is None else self.extra_attributes.slice(start, size),
            [(row - start, *rest) for row, *rest in self.nonfinite if start <= row < end],
        )

    def take(self, order: np.ndarray) -> Cells:
        """The cells with row i taken from row ``order[i]`` (a permutation of the rows)."""
        rows = pl.Series(order, dtype=pl.Int64)
        back = np.empty(len(order), np.int64)
        back[order] = np.arange(len(order))
        return Cells(
            self.text[rows],
            self.kind[rows],
            {k: (t.gather(rows), c.gather(rows)) for k, (t, c) in self.elements.items()},
            None if self.extra_fields is None else self.extra_fields.gather(rows),
            None if self.extra_attributes is None else self.extra_attributes.gather(rows),
            [(int(back[row]), *rest) for row, *rest in self.nonfinite],
        )


#: Kind codes as numpy sees them: the Enum's physical codes, ``ABSENT`` where not sent.
CODE = {kind: code for code, kind in enumerate(KINDS)}
ABSENT = 255


def codes(cells: Cells, name: str) -> np.ndarray:
    """The kind codes of one field (``CODE``), one per item: plain numpy, no Polars per check.

    Taken out of the kind frame once per push, in one call (``Cells.codes``).
    """
    if cells.codes is None:
        physical = cells.kind.select(pl.all().to_physical().fill_null(ABSENT))
        cells.codes = {name: physical[name].to_numpy() for name in physical.columns}
    return cells.codes[name]


def concat(parts: list[Cells]) -> Cells:
    """Several pushes' cells as one, rows in order (a group of pushes is validated at once)."""
    if len(parts) == 1:
        return parts[0]
    text = pl.concat([p.text for p in parts], how="diagonal_relaxed")
    kind = pl.concat([p.kind for p in parts], how="diagonal_relaxed")
    elements = {}
    for name in {n for p in parts for n in p.elements}:
        texts, kinds = [], []
        for p in parts:
            got = p.elements.get(name)
            if got is None:
                got = (_empty_lists(len(p)), _empty_lists(len(p)))
            texts.append(got[0])
            kinds.append(got[1])
        elements[name] = (pl.concat(texts), pl.concat(kinds))
    offsets, nonfinite = 0, []
    for p in parts:
        nonfinite += [(row + offsets, *rest) for row, *rest in p.nonfinite]
        offsets += len(p)
    return Cells(
        text,
        kind,
        elements,
        _concat_optional([p.extra_fields for p in parts], [len(p) for p in parts]),
        _concat_optional([p.extra_attributes for p in parts], [len(p) for p in parts]),
        nonfinite,
    )


def _concat_optional(series: list[pl.Series | None], sizes: list[int]) -> pl.Series | None:
    if all(s is None for s in series):
        return None
    filled = [
        s if s is not None else pl.Series([None] * n, dtype=pl.String)
        for s, n in zip(series, sizes, strict=True)
    ]
    return pl.concat(filled)


def _empty_lists(n: int) -> pl.Series:
    return pl.Series([None] * n, dtype=pl.List(pl.String))


def from_frame(frame: pd.DataFrame, item_json: list[str] | None = None) -> Cells:
    """Cells of the flat object frame ``flat.flatten`` made of a push's decoded items.

    Most columns hold one JSON kind (all text, all booleans) and are converted
    whole, by pandas' type inference and Arrow; only mixed columns visit their
    values one by one. ``item_json`` (the items' texts) lets the search for
    NaN and Infinity inside unknown fields skip the items that hold none.
    """
    n = len(frame)
    texts: dict[str, pa.Array] = {}
    kinds: dict[str, pa.Array] = {}
    elements: dict[str, tuple[pl.Series, pl.Series]] = {}
    for name in frame.columns:
        values = frame[name].to_numpy(dtype=object)
        if name in LIST_FIELDS:
            elements[name] = _elements(values)
            texts[name], kinds[name] = _column(values, lists=False)
        else:
            texts[name], kinds[name] = _column(values)
    for rule in REQUIRED:  # a row per item, whatever the items hold
        if rule.source not in texts:
            texts[rule.source] = pa.nulls(n, pa.string())
            kinds[rule.source] = pa.nulls(n, pa.string())
    unknown = [c for c in frame.columns if c not in RULES_BY_SOURCE and c not in CONTAINERS]
    attrs = [c for c in unknown if c.startswith("attributes.")]
    fields = [c for c in unknown if not c.startswith("attributes.")]
    return Cells(
        pl.DataFrame({k: pl.from_arrow(v) for k, v in texts.items()}, height=n)
        if texts
        else pl.DataFrame(height=n),
        pl.DataFrame(
            {k: pl.from_arrow(v).cast(pl.String).cast(KIND) for k, v in kinds.items()}, height=n
        ),
        elements,
        _extras(frame, fields, ""),
        _extras(frame, attrs, "attributes."),
        _nonfinite_cells(frame, unknown, item_json),
    )


#: Python type -> JSON kind, for the values of mixed columns.
_KIND_OF = {str: "str", int: "int", float: "float", bool: "bool", type(None): "null"}
_KIND_OF |= {list: "list", dict: "dict"}


def _column(values: np.ndarray, *, lists: bool = True) -> tuple[pa.Array, pa.Array]:
    """A column's texts and kinds; absent values (pandas' NaN) have neither.

    ``lists=False``: a list's text is not needed (a list field keeps its
    elements instead), only its kind.
    """
    inferred = pd.api.types.infer_dtype(values, skipna=True)
    if inferred == "string":
        text = pa.array(values, pa.string(), from_pandas=True)
        return text, pc.if_else(pc.is_valid(text), "str", pa.scalar(None, pa.string()))
    if inferred == "empty":
        missing = pd.isna(values)
        kind = np.where(missing, None, "null").astype(object)
        return pa.nulls(len(values), pa.string()), pa.array(kind, pa.string())
    if inferred == "boolean":
        missing = pd.isna(values)
        text = np.where(missing, None, np.where(values == True, "true", "false"))  # noqa: E712
        return pa.array(text, pa.string()), pa.array(np.where(missing, None, "bool"), pa.string())
    if inferred == "integer":
        try:
            numbers = pa.array(values, pa.int64(), from_pandas=True)
        except (pa.ArrowInvalid, OverflowError):
            pass  # an integer past 64 bits: value by value below
        else:
            kind = pc.if_else(pc.is_valid(numbers), "int", pa.scalar(None, pa.string()))
            return numbers.cast(pa.string()), kind
    # Mixed: strings are taken as they are, only the other values are visited.
    is_str = np.fromiter((v.__class__ is str for v in values), bool, len(values))
    texts = np.where(is_str, values, None)
    kinds = np.where(is_str, "str", None).astype(object)
    for position in np.flatnonzero(~is_str).tolist():
        value = values[position]
        if value is None:
            kinds[position] = "null"
        elif value.__class__ is float and value != value:
            continue  # absent: pandas fills missing cells with NaN (a JSON NaN is marked)
        elif not lists and value.__class__ is list:
            kinds[position] = "list"
        else:
            texts[position], kinds[position] = text_and_kind(value)
    return pa.array(texts, pa.string()), pa.array(kinds, pa.string())


def text_and_kind(value: Any) -> tuple[str | None, str]:
    """A value's text and JSON kind (numbers by their JSON text: ``flat.JsonFloat``)."""
    kind = _KIND_OF.get(value.__class__)
    if kind == "str":
        return value, kind
    if kind == "bool":
        return ("true" if value else "false"), kind
    if kind == "int":
        return str(value), kind
    if kind == "null":
        return None, kind
    if isinstance(value, float):
        return str(value), "float" if math.isfinite(value) else "nonfinite"
    if isinstance(value, (list, dict)):
        return _json(value), "list" if isinstance(value, list) else "dict"
    # parse's markers: NonFinite (NaN, Infinity) and Unencodable (lone surrogates)
    return str(value), getattr(value, "kind", "str")


def _elements(values: np.ndarray) -> tuple[pl.Series, pl.Series]:
    """The elements of a list field's lists: their texts and kinds, one list per item."""
    is_list = np.fromiter((v.__class__ is list for v in values), bool, len(values))
    lists = np.where(is_list, values, None)
    try:  # the common case: every element is text
        text = pa.array(lists, pa.list_(pa.string()))
        # Every element is text, or null (a JSON null in the list).
        strs = pc.if_else(pc.is_valid(text.values), "str", "null")
        kinds = pa.ListArray.from_arrays(text.offsets, strs, mask=text.is_null())
        return pl.from_arrow(text), pl.from_arrow(kinds)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pairs = [None if v is None else [text_and_kind(e) for e in v] for v in lists]
        texts = [None if p is None else [t for t, _ in p] for p in pairs]
        kinds_ = [None if p is None else [k for _, k in p] for p in pairs]
        return (
            pl.Series(texts, dtype=pl.List(pl.String)),
            pl.Series(kinds_, dtype=pl.List(pl.String)),
        )


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def extra_location(column: str) -> tuple[str, ...]:
    """Where a field outside the spec sits in ``extra_fields`` or ``extra_attributes``.

    The location is the field's path in the item's JSON, never a joined name
    another key could spell: ``pricing_info.currency`` (inside ``pricing_info``)
    is ``("pricing_info", "currency")``, the top-level key ``"pricing_info.currency"``
    is ``("pricing_info.currency",)``, and ``attributes.warranty`` is
    ``("warranty",)`` in ``extra_attributes``.
    """
    path = field_path(column)
    if path != column:
        return (path,)
    head, dot, rest = column.partition(".")
    if dot and head in NESTED:
        return (rest,) if head == "attributes" else (head, rest)
    return (column,)


def _extras(frame: pd.DataFrame, columns: list[str], prefix: str) -> pl.Series | None:
    """Fields outside SPEC 2.3-2.6 as one JSON object per item, so nothing sent is lost.

    Each field sits at its own path (``extra_location``), the fields in name
    order: an item's text never depends on which other fields its push held.
    """
    if not columns:
        return None
    columns = sorted(columns, key=extra_location)
    sub = frame[columns]
    present = sub.notna() | sub.map(lambda v: v is None)
    has_any = present.any(axis=1).to_numpy()
    out: list[str | None] = [None] * len(frame)
    rows = sub.to_numpy(dtype=object)
    mask = present.to_numpy()
    places = [extra_location(c) for c in columns]
    for row in np.flatnonzero(has_any):
        keep: dict[str, Any] = {}
        for i in np.flatnonzero(mask[row]):
            *outer, key = places[i]
            target = keep.setdefault(outer[0], {}) if outer else keep
            target[key] = rows[row, i]
        out[row] = json.dumps(keep, ensure_ascii=False, default=str)
    return pl.Series(out, dtype=pl.String)


_MAY_BE_NONFINITE = r"NaN|Infinity|[0-9][eE][+-]?[0-9]{3}|[0-9]{1000}"  # RE2 repeats at most 1,000


def _nonfinite_cells(
    frame: pd.DataFrame, columns: list[str], item_json: list[str] | None
) -> list[tuple[int, str, str, str]]:
    """(item, column, path, text) of each NaN or Infinity in fields outside the spec, at any depth.

    Known fields refuse them through their rules; unknown ones have none, and
    strict JSON cannot hold such a number, so the item is refused rather than
    stored with ``"NaN"`` in ``extra_fields``.
    """
    if not columns:
        return []
    if item_json is not None:
        texts = pa.array(item_json, pa.string())
        maybe = pc.match_substring_regex(texts, _MAY_BE_NONFINITE).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(maybe)
    else:
        rows = np.arange(len(frame))
    found = []
    for column in columns:
        values = frame[column].to_numpy(dtype=object)
        for row in rows:
            if values[row].__class__ is float and values[row] != values[row]:
                continue  # absent: pandas fills missing cells with NaN (a sent NaN is marked)
            found += [
                (int(row), column, path, text)
                for path, text in _nonfinite(values[row], field_path(column))
            ]
    return found


def _nonfinite(value: Any, path: str):
    if getattr(value, "kind", None) == "nonfinite" or isinstance(value, HugeInt):
        yield path, str(value)
    elif isinstance(value, float) and not math.isfinite(value):
        yield path, getattr(value, "text", None) or json.dumps(value)
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield from _nonfinite(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for position, inner in enumerate(value):
            yield from _nonfinite(inner, f"{path}[{position}]")


__all__ = [
    "ABSENT",
    "CODE",
    "Cells",
    "KIND",
    "LIST_FIELDS",
    "codes",
    "concat",
    "extra_location",
    "from_frame",
    "text_and_kind",
]
