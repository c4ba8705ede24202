"""What validation found, item by item, and the edits its warnings make to the cells.

``validate`` judges every rule as column operations and hands each failed check
to ``Findings.add``, the one place that decides what a failure costs: the item
(an error: an error field, or a strict push) or only the value (a warning: it is
dropped, or repaired where it has exactly one reading). ``Findings.settled``
then makes those drops and repairs on the cells, so that ``items`` stores exactly
what the warnings say (issue 19). Values are reported as they were sent.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as arrow
import pyarrow.compute as pc

from .cells import CODE, KIND, Cells, extra_location
from .errors import ErrorCode, item_error, item_warning
from .flat import JsonFloat
from .parse import ParsedPush
from .rules import ERROR, RULES_BY_SOURCE, message, warning_message


@dataclass
class Findings:
    """What validation found, item by item, and the edits its warnings make to the cells.

    ``add`` routes a failed check: an error for an error field or a strict
    item, else a warning and the value dropped. ``repair`` keeps a value
    rewritten. ``settled`` applies the drops and repairs to the cells that
    ``items`` types, so what is stored is what the warnings say.
    """

    parsed: ParsedPush
    strict: np.ndarray
    errors: dict[int, list[dict[str, Any]]]
    warnings: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    #: field -> rows whose value is dropped
    drops: dict[str, set[int]] = field(default_factory=dict)
    #: field -> row -> the repaired text
    repairs: dict[str, dict[int, str]] = field(default_factory=dict)
    #: field -> rows whose value was a placeholder (absent, not invalid)
    placeheld: dict[str, set[int]] = field(default_factory=dict)
    #: row -> paths of NaN or Infinity in fields outside the spec, whose field is dropped
    extras: dict[int, list[str]] = field(default_factory=dict)
    #: list field -> row -> element position -> its repaired text, or None to drop it
    elements: dict[str, dict[int, dict[int, str | None]]] = field(default_factory=dict)

    def add(self, rows: np.ndarray, name: str, code: ErrorCode, value=None, detail=None) -> None:
        """Report a failed check of field ``name`` for each row."""
        rule = RULES_BY_SOURCE.get(name)
        error_field = rule is None or rule.severity == ERROR
        for row in rows.tolist():
            sent = as_sent(value(row) if callable(value) else value)
            said = detail(row) if callable(detail) else (detail or "")
            if error_field or self.strict[row]:
                self.errors.setdefault(row, []).append(
                    item_error(name, code, message(code, name, sent, said), cut(sent))
                )
            else:
                self.drop(row, name, code, sent, said)

    def drop(self, row: int, name: str, code: ErrorCode, sent: Any, detail: str = "") -> None:
        """Drop field ``name`` of item ``row``, with a warning."""
        self.drops.setdefault(name, set()).add(row)
        self.warn(row, name, code, sent, detail)

    def warn(self, row, name, code, sent, detail="", action="dropped", to=None) -> None:
        """Report what was done to field ``name`` of item ``row``; the caller made the edit."""
        text = warning_message(code, name, sent, detail, action, to)
        self.warnings.setdefault(row, []).append(
            item_warning(name, code, text, cut(sent), action, to)
        )

    def repair(self, row: int, name: str, code: ErrorCode, sent: Any, to: str) -> None:
        """Keep field ``name`` of item ``row`` as ``to``, its one reading, with a warning."""
        self.repairs.setdefault(name, {})[row] = to
        self.warn(row, name, code, sent, "", "repaired", to)

    def element(self, row: int, name: str, position: int, code, sent, to: str | None) -> None:
        """Repair (``to``) or drop (None) one element of list field ``name``, with a warning."""
        self.elements.setdefault(name, {}).setdefault(row, {})[position] = to
        shown_as = f"{name}[{position}]"
        action = "dropped" if to is None else "repaired"
        self.warn(row, name, code, sent, shown_as, action, to)

    def settled(self, cleaned: Cells) -> Cells:
        """The cells with every warning's drop and repair made."""
        n = len(cleaned)
        text_columns, kind_columns = [], []
        codes = dict(cleaned.codes or {})
        elements = dict(cleaned.elements)
        for name in sorted(set(self.drops) | set(self.repairs)):
            dropped = np.zeros(n, dtype=bool)
            dropped[list(self.drops.get(name, ()))] = True
            text = cleaned.text[name].to_arrow().cast(arrow.string())
            fixes = {r: t for r, t in self.repairs.get(name, {}).items() if not dropped[r]}
            if fixes:
                mask = np.zeros(n, dtype=bool)
                mask[list(fixes)] = True
                text = pc.replace_with_mask(
                    text, arrow.array(mask), arrow.array([fixes[r] for r in sorted(fixes)])
                )
            text = pc.if_else(arrow.array(dropped), arrow.scalar(None, arrow.string()), text)
            text_columns.append(pl.from_arrow(text).alias(name))
            if dropped.any():
                kind = cleaned.kind[name]
                kind_columns.append(
                    pl.select(
                        pl.when(pl.Series(dropped)).then(pl.lit("null", KIND)).otherwise(kind)
                    )
                    .to_series()
                    .alias(name)
                )
                if name in codes:
                    codes[name] = np.where(dropped, CODE["null"], codes[name]).astype(
                        codes[name].dtype
                    )
                if name in elements:
                    elements[name] = _without(
                        elements[name], {r: None for r in np.flatnonzero(dropped)}
                    )
        for name, rows in self.elements.items():
            whole = self.drops.get(name, set())
            edits = {r: e for r, e in rows.items() if r not in whole}
            if edits and name in elements:
                elements[name] = _without(elements[name], edits)
        text = cleaned.text.with_columns(text_columns) if text_columns else cleaned.text
        kind = cleaned.kind.with_columns(kind_columns) if kind_columns else cleaned.kind
        return Cells(
            text,
            kind,
            elements,
            _without_keys(cleaned.extra_fields, self.extras, ""),
            _without_keys(cleaned.extra_attributes, self.extras, "attributes."),
            cleaned.nonfinite,
            codes or None,
        )


def _without_keys(extras: pl.Series | None, columns: dict[int, list[str]], prefix: str):
    """Extra fields (one JSON object per item) without the flat ``columns`` given, by location.

    Only the columns of this object (``attributes.`` ones for ``extra_attributes``)
    are taken out; a nested object left empty goes too.
    """
    if extras is None or not columns:
        return extras
    rows = sorted(columns)
    values = []
    for row, text in zip(rows, extras.gather(rows).to_list(), strict=True):
        kept = json.loads(text) if text is not None else {}  # json reads NaN; it goes here
        for column in columns[row]:
            if column.startswith("attributes.") != (prefix == "attributes."):
                continue
            *outer, key = extra_location(column)
            target = kept.get(outer[0], {}) if outer else kept
            target.pop(key, None)
            if outer and not target:
                kept.pop(outer[0], None)
        values.append(json.dumps(kept, ensure_ascii=False) if kept else None)
    return _placed(extras, rows, values)


def _without(lists: tuple[pl.Series, pl.Series], edits: dict) -> tuple[pl.Series, pl.Series]:
    """List columns (texts, kinds) with some rows' elements edited.

    ``edits`` maps a row to None (no elements left) or to positions that are
    repaired (new text) or dropped (None). Only the edited rows are rebuilt,
    and gathered back into place: the column itself is never a Python list.
    """
    texts, kinds = lists
    rows = sorted(edits)
    new_texts, new_kinds = [], []
    old = zip(texts.gather(rows).to_list(), kinds.gather(rows).to_list(), strict=True)
    for row, (text_row, kind_row) in zip(rows, old, strict=True):
        change = edits[row]
        kept_text, kept_kind = [], []
        for position, (t, k) in enumerate(zip(text_row or [], kind_row or [], strict=True)):
            if change is None or (position in change and change[position] is None):
                continue
            if position in change:
                t, k = change[position], "str"
            kept_text.append(t)
            kept_kind.append(k)
        new_texts.append(kept_text)
        new_kinds.append(kept_kind)
    return _placed(texts, rows, new_texts), _placed(kinds, rows, new_kinds)


def _placed(column: pl.Series, rows: list[int], values: list) -> pl.Series:
    """``column`` with the values at ``rows`` replaced (appended, then gathered into place)."""
    index = np.arange(len(column))
    index[rows] = len(column) + np.arange(len(rows))
    return pl.concat([column, pl.Series(column.name, values, column.dtype)]).gather(index)


def as_sent(value: Any) -> Any:
    """``value`` as strict JSON can carry it, numbers as they were sent.

    A number whose float would misquote it (``4.9999999999999999``, ``NaN``)
    becomes the text it was sent as; parse's markers become their text.
    """
    if isinstance(value, float):
        if not math.isfinite(value):
            return value.text if isinstance(value, JsonFloat) else json.dumps(value)
        if isinstance(value, JsonFloat) and repr(float(value)) != value.text:
            return value.text
        return float(value)
    if isinstance(value, list):
        return [as_sent(v) for v in value]
    if isinstance(value, dict):
        return {k: as_sent(v) for k, v in value.items()}
    if getattr(value, "kind", None) in ("nonfinite", "unencodable"):
        return str(value)
    return value


def cut(value: Any) -> Any:
    """The value a refusal carries, long ones cut to 200 characters of their JSON."""
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "…"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
    return value if len(text) <= 200 else text[:200] + "…"
