"""Judge a push's cells against the rule table; every refusal as (item, field, code, value).

Validation is one pass over whole columns: each rule of ``rules.RULES`` is a
handful of Arrow and Polars expressions over the field's text and JSON kind
(``cells.Cells``), and only the items that fail are visited one by one, to
say why in words. pandera's Polars backend checks the shape of the cells
themselves (``CELLS``) before any rule runs. One pass collects every problem
of every item, in the order of the rule table.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pandera.polars as pa
import polars as pl
import pyarrow as arrow
import pyarrow.compute as pc

from . import clean, settings
from .cells import KIND, Cells
from .errors import ErrorCode, item_error
from .parse import JsonFloat, ParsedPush
from .rules import (
    ACCEPTS,
    CONTAINERS,
    KINDS,
    RULES,
    RULES_BY_SOURCE,
    WRONG_KIND,
    Rule,
    message,
    shown,
)

#: The shape every push's cells have, whatever path made them: text columns of
#: strings and kind columns of the JSON kinds (``cells.from_frame`` gives the
#: required fields a column even when no item sends them).
CELLS_TEXT = pa.DataFrameSchema(
    {r".*": pa.Column(pl.String, nullable=True, regex=True, required=False)}
)
CELLS_KIND = pa.DataFrameSchema({r".*": pa.Column(KIND, nullable=True, regex=True, required=False)})


@dataclass
class Validation:
    """The cleaned cells, the errors by item index, and which items passed."""

    frame: Cells
    errors: dict[int, list[dict[str, Any]]]
    #: Items judged; the cells may be dropped once typed (``catalog.check_group``).
    size: int = -1

    def __post_init__(self) -> None:
        if self.size < 0:
            self.size = len(self.frame)

    @property
    def passed(self) -> pd.Series:
        """True for the items with no error at all."""
        ok = np.ones(self.size, dtype=bool)
        ok[list(self.errors)] = False
        return pd.Series(ok)


def validate(parsed: ParsedPush, groups: pd.Series | None = None) -> Validation:
    """Validate a parsed push; never raises for bad items, only reports them.

    ``groups`` names the push of each item when several pushes are validated
    together (a group write, a backfill): ``duplicate_in_push`` applies within
    a push only.
    """
    cells = parsed.cells
    CELLS_TEXT.validate(cells.text)
    CELLS_KIND.validate(cells.kind)
    cleaned = prepare(cells)
    errors: dict[int, list[dict[str, Any]]] = {k: list(v) for k, v in parsed.errors.items()}

    def add(rows: np.ndarray, field: str, code: ErrorCode, value=None, detail=None) -> None:
        for row in rows.tolist():
            sent = _as_sent(value(row) if callable(value) else value)
            said = detail(row) if callable(detail) else (detail or "")
            errors.setdefault(row, []).append(
                item_error(field, code, message(code, field, sent, said), _cut(sent))
            )

    for rule in RULES:
        if rule.source in cleaned.text.columns:
            _judge(rule, cleaned, parsed, add)
    for container in CONTAINERS:
        if container in cells.kind.columns:
            kind = codes(cells, container)
            wrong = np.flatnonzero((kind != ABSENT) & (kind != CODE["null"]))
            add(
                wrong, container, ErrorCode.INVALID_TYPE, lambda r, c=container: _sent(parsed, r, c)
            )
    _judge_window(cleaned, parsed, add)
    for row, path, text in cells.nonfinite:
        errors.setdefault(row, []).append(
            item_error(
                path, ErrorCode.INVALID_NUMBER, message(ErrorCode.INVALID_NUMBER, path, text), text
            )
        )
    ids = client_ids(cleaned)
    add_duplicates(ids, groups, errors)
    errors = {i: errors[i] for i in sorted(errors)}
    return Validation(frame=cleaned, errors=errors)


def prepare(cells: Cells) -> Cells:
    """The cells with text cleaned as each rule says; other kinds keep their text.

    Identifiers are only trimmed; other identifiers and text are cleaned
    (``clean.clean_text``); every other rule's blank text means absent
    (SPEC 2.5). Only strings are cleaned: a number's text is its JSON text.
    """
    columns = []
    for name in cells.text.columns:
        rule = RULES_BY_SOURCE.get(name)
        if rule is None or rule.rule in ("urls", "list"):
            continue
        text = cells.text[name].to_arrow()
        is_str = arrow.array(codes(cells, name) == CODE["str"])
        if rule.rule == "key":
            fixed = clean.trimmed_or_null(text)
        elif rule.rule in ("id", "text"):
            fixed = clean.clean_text(text, rich=rule.rule == "text")
        else:
            fixed = clean.blank_to_null(text)
        columns.append(
            pl.from_arrow(pc.if_else(is_str, fixed, text.cast(arrow.string()))).alias(name)
        )
    text = cells.text.with_columns(columns) if columns else cells.text
    return Cells(
        text,
        cells.kind,
        cells.elements,
        cells.extra_fields,
        cells.extra_attributes,
        cells.nonfinite,
        cells.codes,  # the kinds did not change: neither did their codes
    )


def client_ids(cleaned: Cells) -> pd.Series:
    """Each item's ``client_item_id`` as stored (text, or a number's text); NA otherwise."""
    usable = arrow.array(_any_of(codes(cleaned, "client_item_id"), ("str", "int", "float")))
    ids = cleaned.text["client_item_id"].to_arrow()
    ids = pc.if_else(usable, ids.cast(arrow.string()), arrow.scalar(None, arrow.string()))
    return pd.Series(ids.to_pandas(), dtype=object).where(lambda s: s.notna(), None)


def add_duplicates(ids: pd.Series, groups: pd.Series | None, errors: dict) -> None:
    """``duplicate_in_push`` for every earlier repeat of an id within its push: the last wins."""
    keys = pd.DataFrame({"group": 0 if groups is None else groups.to_numpy(), "id": ids.to_numpy()})
    earlier = ids.notna().to_numpy() & keys.duplicated(keep="last").to_numpy()
    for index in np.flatnonzero(earlier).tolist():
        value = ids[index]
        errors.setdefault(index, []).append(
            item_error(
                "client_item_id",
                ErrorCode.DUPLICATE_IN_PUSH,
                f"client_item_id {value!r} appears again later in this push; the last one wins",
                value,
            )
        )


# --- the rules, one field at a time ------------------------------------------------

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


def _any_of(kinds: np.ndarray, names) -> np.ndarray:
    return np.isin(kinds, [CODE[k] for k in names])


def _judge(rule: Rule, cleaned: Cells, parsed: ParsedPush, add) -> None:
    """Every check of one field, in the order its errors are reported."""
    name = rule.source
    kind = codes(cleaned, name)
    text = cleaned.text[name].to_arrow().cast(arrow.string())
    unsent = (kind == ABSENT) | (kind == CODE["null"])
    unencodable = kind == CODE["unencodable"]
    if rule.rule in ("urls", "list"):
        # Empty text means unused (SPEC 2.5), here as everywhere.
        blank = (kind == CODE["str"]) & _numpy(pc.is_null(clean.blank_to_null(text)))
        absent = unsent | blank
    else:
        absent = (unsent | _numpy(pc.is_null(text))) & ~unencodable
    accepted = _any_of(kind, ACCEPTS[rule.rule])

    def sent(row: int) -> Any:
        if rule.rule in ("key", "id", "text") and kind[row] == CODE["str"]:
            return cleaned.text[name][row]  # the text as cleaned: what the rule judged
        return _sent(parsed, row, name)

    if rule.required:
        add(np.flatnonzero(absent), name, ErrorCode.MISSING_REQUIRED_FIELD)
    wrong = ~absent & ~accepted & ~unencodable
    add(np.flatnonzero(wrong), name, WRONG_KIND[rule.rule], sent)
    judged = accepted & ~absent
    if not judged.any():
        return
    if rule.rule in ("key", "id", "text"):
        if rule.rule == "key":
            bad = judged & ~clean.identifier_ok(text)
            add(np.flatnonzero(bad), name, ErrorCode.INVALID_IDENTIFIER, sent,
                lambda r: clean.first_invisible(sent(r)))  # fmt: skip
        # Characters are never more than bytes: most columns need no count.
        if (pc.max(pc.binary_length(text)).as_py() or 0) > rule.max_chars:
            lengths = pc.fill_null(pc.utf8_length(text), 0).to_numpy(zero_copy_only=False)
            long = judged & (lengths > rule.max_chars)
            add(np.flatnonzero(long), name, ErrorCode.TEXT_TOO_LONG, sent, lambda r: lengths[r])
    elif rule.rule == "flag":
        spelled = _numpy(pc.is_valid(clean.spelled_booleans(text)))
        ints = (kind == CODE["int"]) & _numpy(pc.is_in(text, _ZERO_ONE))
        ok = (kind == CODE["bool"]) | ints | ((kind == CODE["str"]) & spelled)
        add(np.flatnonzero(judged & ~ok), name, ErrorCode.INVALID_BOOLEAN, sent)
    elif rule.rule == "count":
        floats = arrow.array(kind == CODE["float"])
        ok = _numpy(pc.is_valid(clean.counts(text, floats)))
        add(np.flatnonzero(judged & ~ok), name, ErrorCode.INVALID_COUNT, sent)
    elif rule.rule == "money":
        ok = _numpy(pc.is_valid(clean.money(text)))
        add(np.flatnonzero(judged & ~ok), name, ErrorCode.INVALID_PRICE, sent)
    elif rule.rule == "duration":
        ok = _numpy(pc.is_valid(clean.durations(text)[0]))
        add(np.flatnonzero(judged & ~ok), name, ErrorCode.INVALID_DURATION, sent)
    elif rule.rule == "date":
        ok = clean.timestamps(text).notna().to_numpy()
        add(np.flatnonzero(judged & ~ok), name, ErrorCode.INVALID_DATE, sent)
    else:
        _judge_list(rule, cleaned, judged, add, sent)


_ZERO_ONE = arrow.array(["0", "1"])


def _judge_list(rule: Rule, cleaned: Cells, judged: np.ndarray, add, sent) -> None:
    """Lists: every element of the right kind (and an http(s) URL for images), at most 100."""
    name = rule.source
    texts, kinds = cleaned.elements.get(name, (None, None))
    n = len(cleaned)
    if texts is None:
        return
    frame = pl.DataFrame({"row": np.arange(n), "text": texts, "kind": kinds}).filter(
        pl.Series(judged)
    )
    flat = frame.explode(["text", "kind"]).drop_nulls("kind")
    if rule.rule == "urls":
        flat = flat.filter(pl.col("kind") != "null")  # a null element is no image: skipped
        good = (flat["kind"] == "str").to_numpy() & clean.urls_ok(flat["text"].to_arrow())
        bad_rows = np.unique(flat["row"].to_numpy()[~good])
        add(bad_rows, name, ErrorCode.INVALID_URL, sent,
            lambda r: _first_bad_url(sent(r)))  # fmt: skip
    else:
        good = flat["kind"].is_in(["str", "int", "float"]).to_numpy()
        bad_rows = np.unique(flat["row"].to_numpy()[~good])
        add(bad_rows, name, ErrorCode.INVALID_LIST, sent)
    sizes = texts.list.len().fill_null(0).to_numpy()
    add(
        np.flatnonzero(judged & (sizes > settings.MAX_LIST_VALUES)), name, ErrorCode.TOO_MANY_VALUES
    )


def _judge_window(cleaned: Cells, parsed: ParsedPush, add) -> None:
    """A discount window that ends before it starts."""
    start, end = "pricing_info.discount_start_date", "pricing_info.discount_end_date"
    if start not in cleaned.text.columns or end not in cleaned.text.columns:
        return
    begins = clean.timestamps(_dated(cleaned, start))
    ends = clean.timestamps(_dated(cleaned, end), end_of_day=True)
    before = (ends < begins).fillna(False).to_numpy(dtype=bool)
    add(np.flatnonzero(before), end, ErrorCode.INVALID_DISCOUNT_WINDOW,
        lambda r: _sent(parsed, r, end))  # fmt: skip


def _dated(cleaned: Cells, name: str) -> arrow.Array:
    """A date field's text where it was sent as text; null elsewhere."""
    is_str = arrow.array(codes(cleaned, name) == CODE["str"])
    text = cleaned.text[name].to_arrow().cast(arrow.string())
    return pc.if_else(is_str, text, arrow.scalar(None, arrow.string()))


# --- values as sent, for the refusals -------------------------------------------------


def _sent(parsed: ParsedPush, row: int, path: str) -> Any:
    """The value of field ``path`` of item ``row`` as it was sent."""
    item = parsed.items[row] if row < len(parsed.items) else {}
    head, _, rest = path.partition(".")
    if rest and head in CONTAINERS and isinstance(item.get(head), dict):
        return item[head].get(rest)
    return item.get(path)


def _first_bad_url(value: Any) -> str:
    """The first element of an image list that is not a URL, shown; the list if none."""
    if isinstance(value, list):
        for element in value:
            if element is not None and not clean.is_url(element):
                return shown(_as_sent(element))
    return shown(_as_sent(value))


def _as_sent(value: Any) -> Any:
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
        return [_as_sent(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_sent(v) for k, v in value.items()}
    if getattr(value, "kind", None) in ("nonfinite", "unencodable"):
        return str(value)
    return value


def _cut(value: Any) -> Any:
    """The value a refusal carries, long ones cut to 200 characters of their JSON."""
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "…"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
    return value if len(text) <= 200 else text[:200] + "…"


def _numpy(mask: arrow.Array) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False).astype(bool)


__all__ = ["Validation", "client_ids", "prepare", "validate"]
