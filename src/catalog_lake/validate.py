"""Judge a push's cells against the rule table; every refusal as (item, field, code, value).

Validation is one pass over whole columns: each rule of ``rules.RULES`` is a
handful of Arrow and Polars expressions over the field's text and JSON kind
(``cells.Cells``), and only the items that fail are visited one by one, to
say why in words. pandera's Polars backend checks the shape of the cells
themselves (``CELLS``) before any rule runs. One pass collects every problem
of every item, in the order of the rule table.

A problem with a field of severity ``error`` refuses the item. One with a
``warning`` field costs only the value: it is dropped, or repaired where it
has exactly one reading, and reported with the value as sent (issue 19).
Strict items (``strict=True``) are refused for either.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pandera.polars as pa
import polars as pl
import pyarrow as arrow
import pyarrow.compute as pc

from . import clean, settings
from .cells import KIND, Cells
from .errors import ErrorCode, item_error, item_warning
from .parse import JsonFloat, ParsedPush
from .rules import (
    ACCEPTS,
    CONTAINERS,
    ERROR,
    KINDS,
    PLACEHOLDER_RULES,
    PLACEHOLDERS,
    RULES,
    RULES_BY_SOURCE,
    WRONG_KIND,
    Rule,
    message,
    shown,
    warning_message,
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
    """The cleaned cells, the errors and warnings by item index, and which items passed.

    ``warnings`` covers only items that passed: a refused item reports its errors.
    """

    frame: Cells
    errors: dict[int, list[dict[str, Any]]]
    #: Items judged; the cells may be dropped once typed (``catalog.check_group``).
    size: int = -1
    warnings: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.size < 0:
            self.size = len(self.frame)

    @property
    def passed(self) -> pd.Series:
        """True for the items with no error at all."""
        ok = np.ones(self.size, dtype=bool)
        ok[list(self.errors)] = False
        return pd.Series(ok)


def validate(
    parsed: ParsedPush, groups: pd.Series | None = None, strict: bool | np.ndarray = False
) -> Validation:
    """Validate a parsed push; never raises for bad items, only reports them.

    ``groups`` names the push of each item when several pushes are validated
    together (a group write, a backfill): ``duplicate_in_push`` applies within
    a push only. ``strict`` (one flag, or one per item) refuses an item for a
    warning too, and repairs nothing.
    """
    cells = parsed.cells
    CELLS_TEXT.validate(cells.text)
    CELLS_KIND.validate(cells.kind)
    cleaned = prepare(cells)
    if cleaned.codes is not None:  # shared with the parsed cells: warnings edit them
        cleaned.codes = {name: kinds.copy() for name, kinds in cleaned.codes.items()}
    strict_rows = np.broadcast_to(np.asarray(strict, dtype=bool), (len(cleaned),))
    found = Findings(parsed, strict_rows, {k: list(v) for k, v in parsed.errors.items()})
    _placeholders(cleaned, found)
    _repairs(cleaned, found)
    for rule in RULES:
        if rule.source in cleaned.text.columns:
            _judge(rule, cleaned, parsed, found)
    for container in CONTAINERS:
        if container in cells.kind.columns:
            _judge_container(container, cells, parsed, found)
    _judge_window(cleaned, parsed, found)
    for row, path, text in cells.nonfinite:  # outside the spec: optional by definition
        if found.strict[row]:
            found.errors.setdefault(row, []).append(
                item_error(
                    path,
                    ErrorCode.INVALID_NUMBER,
                    message(ErrorCode.INVALID_NUMBER, path, text),
                    text,
                )
            )
        else:
            found.extras.setdefault(row, []).append(path)
            found.warn(row, path, ErrorCode.INVALID_NUMBER, text, "nonfinite")
    errors = found.errors
    add_duplicates(client_ids(cleaned), groups, errors)
    errors = {i: errors[i] for i in sorted(errors)}
    warnings = {
        i: sorted(found.warnings[i], key=lambda w: _RANK.get(w["field"], len(_RANK)))
        for i in sorted(found.warnings)
        if i not in errors
    }
    return Validation(frame=found.settled(cleaned), errors=errors, warnings=warnings)


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
            sent = _as_sent(value(row) if callable(value) else value)
            said = detail(row) if callable(detail) else (detail or "")
            if error_field or self.strict[row]:
                self.errors.setdefault(row, []).append(
                    item_error(name, code, message(code, name, sent, said), _cut(sent))
                )
            else:
                self.drop(row, name, code, sent, said)

    def drop(self, row: int, name: str, code: ErrorCode, sent: Any, detail: str = "") -> None:
        """Drop field ``name`` of item ``row``, with a warning."""
        self.drops.setdefault(name, set()).add(row)
        self.warn(row, name, code, sent, detail)

    def warn(self, row, name, code, sent, detail="", action="dropped", to=None) -> None:
        text = warning_message(code, name, sent, detail, action, to)
        self.warnings.setdefault(row, []).append(
            item_warning(name, code, text, _cut(sent), action, to)
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


def _without_keys(extras: pl.Series | None, paths: dict[int, list[str]], prefix: str):
    """Extra fields (one JSON object per item) without those holding the paths given."""
    if extras is None or not paths:
        return extras
    values = extras.to_list()
    for row, found in paths.items():
        if values[row] is None:
            continue
        kept = json.loads(values[row])  # json reads NaN back; it is dropped here
        for key in list(kept):
            name = prefix + key
            if any(p == name or p.startswith((name + ".", name + "[")) for p in found):
                del kept[key]
        values[row] = json.dumps(kept, ensure_ascii=False) if kept else None
    return pl.Series(extras.name, values, pl.String)


def _without(lists: tuple[pl.Series, pl.Series], edits: dict) -> tuple[pl.Series, pl.Series]:
    """List columns (texts, kinds) with some rows' elements edited.

    ``edits`` maps a row to None (no elements left) or to positions that are
    repaired (new text) or dropped (None). Only the edited rows are rebuilt.
    """
    texts, kinds = lists
    text_rows, kind_rows = texts.to_list(), kinds.to_list()
    for row, change in edits.items():
        if change is None:
            text_rows[row], kind_rows[row] = [], []
            continue
        kept_text, kept_kind = [], []
        for position, (t, k) in enumerate(
            zip(text_rows[row] or [], kind_rows[row] or [], strict=True)
        ):
            if position in change:
                if change[position] is None:
                    continue
                t, k = change[position], "str"
            kept_text.append(t)
            kept_kind.append(k)
        text_rows[row], kind_rows[row] = kept_text, kept_kind
    return pl.Series(texts.name, text_rows, texts.dtype), pl.Series(
        kinds.name, kind_rows, kinds.dtype
    )


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


def _placeholders(cleaned: Cells, found: Findings) -> None:
    """Optional shaped values sent as "NA", "N/A", "-", "null" or "none": absent, with a warning.

    Only where the placeholder could not be a valid value (``PLACEHOLDER_RULES``),
    and never for strict items, which are refused for it as before.
    """
    for rule in RULES:
        name = rule.source
        if rule.required or rule.rule not in PLACEHOLDER_RULES or name not in cleaned.text.columns:
            continue
        kind = codes(cleaned, name)
        lenient = (kind == CODE["str"]) & ~found.strict
        if not lenient.any():
            continue
        text = pc.utf8_lower(
            pc.utf8_trim_whitespace(cleaned.text[name].to_arrow().cast(arrow.string()))
        )
        rows = np.flatnonzero(lenient & _numpy(pc.is_in(text, _PLACEHOLDERS)))
        if not len(rows):
            continue
        sent = cleaned.text[name].gather(rows).to_list()
        strict_code = (
            WRONG_KIND[rule.rule] if rule.rule in ("urls", "list") else _CODE_OF[rule.rule]
        )
        for row, value in zip(rows.tolist(), sent, strict=True):
            found.drop(row, name, strict_code, value, "placeholder")
            found.placeheld.setdefault(name, set()).add(row)
        kind[rows] = CODE["null"]  # absent from here on, for every rule that follows


_PLACEHOLDERS = arrow.array(list(PLACEHOLDERS))
#: A warning's place in the rule table: an item's warnings are listed in its order.
_RANK = {name: rank for rank, name in enumerate([*CONTAINERS, *RULES_BY_SOURCE])}
_CODE_OF = {
    "count": ErrorCode.INVALID_COUNT,
    "money": ErrorCode.INVALID_PRICE,
    "flag": ErrorCode.INVALID_BOOLEAN,
    "date": ErrorCode.INVALID_DATE,
    "duration": ErrorCode.INVALID_DURATION,
}


def _repairs(cleaned: Cells, found: Findings) -> None:
    """Values with exactly one valid reading, kept rewritten, with a warning.

    A duration whose designators sit on the wrong side of the ``T`` (``P3H`` is
    ``PT3H``), and a price whose decimals past the cents are all zeros
    (``42.000000`` is ``42``): a repair of a price is no guess at it, so it
    applies to the price fields too, whose other faults are errors.
    """
    for rule in RULES:
        name = rule.source
        if name not in cleaned.text.columns:
            continue
        if rule.rule == "duration" and rule.severity != ERROR:
            valid, repaired, code = (
                clean.durations,
                clean.repaired_duration,
                ErrorCode.INVALID_DURATION,
            )
            sendable = (CODE["str"],)
        elif rule.rule == "money":
            valid, repaired, code = _money_checked, clean.repaired_money, ErrorCode.INVALID_PRICE
            sendable = (CODE["str"], CODE["float"])
        else:
            continue
        kind = codes(cleaned, name)
        text = cleaned.text[name].to_arrow().cast(arrow.string())
        failed = np.isin(kind, sendable) & ~found.strict & ~_numpy(pc.is_valid(valid(text)[0]))
        failed &= _numpy(pc.is_valid(clean.blank_to_null(text)))
        for row in np.flatnonzero(failed).tolist():
            sent = text[row].as_py()
            fixed = repaired(sent)
            if fixed is not None:
                shown_as = (
                    sent if kind[row] == CODE["str"] else _as_sent(_sent(found.parsed, row, name))
                )
                found.repair(row, name, code, shown_as, fixed)


def _money_checked(text: arrow.Array) -> tuple[arrow.Array]:
    return (clean.money(text),)


def _judge(rule: Rule, cleaned: Cells, parsed: ParsedPush, found: Findings) -> None:
    """Every check of one field, in the order its errors are reported."""
    add = found.add
    name = rule.source
    kind = codes(cleaned, name)
    text = cleaned.text[name].to_arrow().cast(arrow.string())
    repaired = found.repairs.get(name)
    if repaired:  # judged as repaired: what will be stored
        mask = np.zeros(len(text), dtype=bool)
        mask[list(repaired)] = True
        text = pc.replace_with_mask(
            text, arrow.array(mask), arrow.array([repaired[r] for r in sorted(repaired)])
        )
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
        _judge_list(rule, cleaned, judged, found, sent)


_ZERO_ONE = arrow.array(["0", "1"])


def _judge_list(rule: Rule, cleaned: Cells, judged: np.ndarray, found: Findings, sent) -> None:
    """Lists: every element of the right kind (and an http(s) URL for images), at most 100.

    An image that is not a URL costs only itself (a warning): it is repaired
    when the URL standard gives it one reading, else dropped, and the record
    shows the next valid image. A strict item is refused for it.
    """
    name = rule.source
    texts, kinds = cleaned.elements.get(name, (None, None))
    n = len(cleaned)
    if texts is None:
        return
    frame = pl.DataFrame({"row": np.arange(n), "text": texts, "kind": kinds}).filter(
        pl.Series(judged)
    )
    flat = (
        frame.with_columns(position=pl.int_ranges(pl.col("kind").list.len()))
        .explode(["text", "kind", "position"])
        .drop_nulls("kind")
    )
    if rule.rule == "urls":
        flat = flat.filter(pl.col("kind") != "null")  # a null element is no image: skipped
        good = (flat["kind"] == "str").to_numpy() & clean.urls_ok(flat["text"].to_arrow())
        bad = flat.filter(pl.Series(~good))
        rows = bad["row"].to_numpy()
        strict = found.strict[rows] if len(rows) else np.zeros(0, dtype=bool)
        found.add(np.unique(rows[strict]), name, ErrorCode.INVALID_URL, sent,
                  lambda r: _first_bad_url(sent(r)))  # fmt: skip
        for row, position, text, kind in (
            bad.filter(pl.Series(~strict)).select("row", "position", "text", "kind").iter_rows()
        ):
            value = _element(sent(row), position)
            fixed = clean.repaired_url(text) if kind == "str" else None
            found.element(row, name, position, ErrorCode.INVALID_URL, value, fixed)
    else:
        good = flat["kind"].is_in(["str", "int", "float"]).to_numpy()
        bad_rows = np.unique(flat["row"].to_numpy()[~good])
        found.add(bad_rows, name, ErrorCode.INVALID_LIST, sent)
    sizes = texts.list.len().fill_null(0).to_numpy()
    found.add(
        np.flatnonzero(judged & (sizes > settings.MAX_LIST_VALUES)), name, ErrorCode.TOO_MANY_VALUES
    )


def _element(value: Any, position: int) -> Any:
    """Element ``position`` of a list as sent (the list itself if it is none)."""
    return _as_sent(value[position]) if isinstance(value, list) and position < len(value) else value


def _judge_container(container: str, cells: Cells, parsed: ParsedPush, found: Findings) -> None:
    """``inventory_info``, ``pricing_info`` and ``attributes`` must be objects.

    The item's structure depends on them, so anything else refuses the item,
    save one thing with a single reading: an empty list (``[]``, what PHP's
    ``json_encode`` makes of an empty object), which holds nothing and is
    taken as no object, with a warning.
    """
    kind = codes(cells, container)
    wrong = (kind != ABSENT) & (kind != CODE["null"])
    empty = wrong & (kind == CODE["list"]) & ~found.strict
    if empty.any():
        text = cells.text[container] if container in cells.text.columns else None
        for row in np.flatnonzero(empty).tolist():
            value = _sent(parsed, row, container)
            if value == [] or (value is None and text is not None and text[row] == "[]"):
                found.warn(row, container, ErrorCode.INVALID_TYPE, [], "empty list")
                wrong[row] = False
    found.add(
        np.flatnonzero(wrong),
        container,
        ErrorCode.INVALID_TYPE,
        lambda r: _sent(parsed, r, container),
    )


def _judge_window(cleaned: Cells, parsed: ParsedPush, found: Findings) -> None:
    """A discount window that ends before it starts, or that lost a date to a warning.

    Either way the window cannot be trusted, and a discount without its
    window would run for ever: the discount is not applied (its price is
    dropped with a warning) and the item sells at ``sale_price``.
    """
    start, end = "pricing_info.discount_start_date", "pricing_info.discount_end_date"
    price = "pricing_info.discounted_price"
    n = len(cleaned)
    window_lost = np.zeros(n, dtype=bool)
    if start in cleaned.text.columns and end in cleaned.text.columns:
        begins = clean.timestamps(_dated(cleaned, start))
        ends = clean.timestamps(_dated(cleaned, end), end_of_day=True)
        before = (ends < begins).fillna(False).to_numpy(dtype=bool)
        found.add(np.flatnonzero(before), end, ErrorCode.INVALID_DISCOUNT_WINDOW,
                  lambda r: _sent(parsed, r, end))  # fmt: skip
        window_lost[np.flatnonzero(before & ~found.strict)] = True
    for name in (start, end):  # a placeholder date is an open side, not a lost one
        window_lost[list(found.drops.get(name, set()) - found.placeheld.get(name, set()))] = True
    if price not in cleaned.text.columns or not window_lost.any():
        return
    kind = codes(cleaned, price)
    sent = _numpy(pc.is_valid(cleaned.text[price].to_arrow()))  # blank is unused (SPEC 2.5)
    priced = window_lost & (kind != ABSENT) & (kind != CODE["null"]) & sent
    for row in np.flatnonzero(priced).tolist():
        sent = _as_sent(_sent(parsed, row, price))
        found.drop(row, price, ErrorCode.INVALID_DISCOUNT_WINDOW, sent, "window dropped")


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
