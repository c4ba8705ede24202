"""Judge a push's cells against the rule table; every refusal as (item, field, code, value).

Validation is one pass over whole columns: each rule of ``rules.RULES`` is a
handful of Arrow and Polars expressions over the field's text and JSON kind
(``cells.Cells``), and only the items that fail are visited one by one, to
say why in words. pandera's Polars backend checks the shape of the cells
themselves (``cell_schemas``) before any rule runs. One pass collects every problem
of every item, in the order of the rule table.

A problem with a field of severity ``error`` refuses the item. One with a
``warning`` field costs only the value: it is dropped, or repaired where it
has exactly one reading, and reported with the value as sent (issue 19).
Strict items (``strict=True``) are refused for either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as arrow
import pyarrow.compute as pc

from . import clean, settings
from .cells import ABSENT, CODE, KIND, Cells, codes
from .errors import ErrorCode, item_error, item_warning
from .findings import Findings, as_sent, cut
from .parse import ParsedPush
from .rules import (
    ACCEPTS,
    CONTAINERS,
    ERROR,
    PLACEHOLDER_RULES,
    PLACEHOLDERS,
    RULES,
    RULES_BY_SOURCE,
    WRONG_KIND,
    Rule,
    above_mrp_message,
    message,
    shown,
)


@cache
def cell_schemas() -> tuple[Any, Any]:
    """The shape every push's cells have, whatever path made them, as pandera schemas.

    Text columns of strings, and kind columns of the JSON kinds
    (``cells.from_frame`` gives the required fields a column even when no item
    sends them). Built on first use, so that a command that checks nothing
    (``search``, ``export``) does not import pandera (0.15-0.25 s); an ingest
    imports it while its first group is read (``groups._pipeline``). pandera
    registers its Polars backends, and imports their checks, on a schema's
    first ``validate`` (0.1 s): an empty frame is validated here, so that
    this too is done before the first group, not during it.
    """
    import pandera.polars as pa

    schemas = (
        pa.DataFrameSchema(
            {r".*": pa.Column(pl.String, nullable=True, regex=True, required=False)}
        ),
        pa.DataFrameSchema({r".*": pa.Column(KIND, nullable=True, regex=True, required=False)}),
    )
    for schema in schemas:
        schema.validate(pl.DataFrame())
    return schemas


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
    text_schema, kind_schema = cell_schemas()
    text_schema.validate(cells.text)
    kind_schema.validate(cells.kind)
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
    _judge_above_mrp(cleaned, parsed, found)
    for row, column, path, text in cells.nonfinite:  # outside the spec: optional by definition
        if found.strict[row]:
            found.errors.setdefault(row, []).append(
                item_error(
                    path,
                    ErrorCode.INVALID_NUMBER,
                    message(ErrorCode.INVALID_NUMBER, path, text),
                    cut(text),
                )
            )
        else:
            found.extras.setdefault(row, []).append(column)
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


def _any_of(kinds: np.ndarray, names) -> np.ndarray:
    return np.isin(kinds, [CODE[k] for k in names])


def _placeholders(cleaned: Cells, found: Findings) -> None:
    """Optional shaped values sent as a placeholder (``rules.PLACEHOLDERS``): absent, warned.

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
            valid, code = clean.durations, ErrorCode.INVALID_DURATION
            repaired = partial(clean.repaired_duration, checked=False)  # checked below, at once
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
        rows = np.flatnonzero(failed).tolist()
        candidates = [(row, repaired(text[row].as_py())) for row in rows]
        candidates = [(row, fixed) for row, fixed in candidates if fixed is not None]
        if not candidates:
            continue
        ok = pc.is_valid(valid(arrow.array([fixed for _, fixed in candidates]))[0])
        for (row, fixed), good in zip(candidates, ok.to_pylist(), strict=True):
            if good:
                sent = text[row].as_py()
                if kind[row] != CODE["str"]:
                    sent = as_sent(_sent(found.parsed, row, name))  # a JSON number, as sent
                found.repair(row, name, code, sent, fixed)


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
            add(
                np.flatnonzero(bad),
                name,
                ErrorCode.INVALID_IDENTIFIER,
                sent,
                lambda r: clean.first_invisible(sent(r)),
            )
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
        found.add(
            np.unique(rows[strict]),
            name,
            ErrorCode.INVALID_URL,
            sent,
            lambda r: _first_bad_url(sent(r)),
        )
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
    return as_sent(value[position]) if isinstance(value, list) and position < len(value) else value


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
        found.add(
            np.flatnonzero(before),
            end,
            ErrorCode.INVALID_DISCOUNT_WINDOW,
            lambda r: _sent(parsed, r, end),
        )
        window_lost[np.flatnonzero(before & ~found.strict)] = True
    for name in (start, end):  # a placeholder date is an open side, not a lost one
        window_lost[list(found.drops.get(name, set()) - found.placeheld.get(name, set()))] = True
    if price not in cleaned.text.columns or not window_lost.any():
        return
    kind = codes(cleaned, price)
    given = _numpy(pc.is_valid(cleaned.text[price].to_arrow()))  # blank is unused (SPEC 2.5)
    priced = window_lost & (kind != ABSENT) & (kind != CODE["null"]) & given
    for row in np.flatnonzero(priced).tolist():
        sent = as_sent(_sent(parsed, row, price))
        found.drop(row, price, ErrorCode.INVALID_DISCOUNT_WINDOW, sent, "window dropped")


def _judge_above_mrp(cleaned: Cells, parsed: ParsedPush, found: Findings) -> None:
    """A sale or discounted price above ``mrp``: kept as sent, with a warning (issue 26).

    MRP is the most a product may sell for, so a price above it is almost
    always a swapped column or a typo. The feed may still mean it, so the
    item is stored as sent and the user told; a strict push refuses it.
    """
    mrp_name = "pricing_info.mrp"
    if mrp_name not in cleaned.text.columns:
        return
    mrp = _amount(cleaned, mrp_name, found)
    for name in ("pricing_info.sale_price", "pricing_info.discounted_price"):
        if name not in cleaned.text.columns:
            continue
        above = _numpy(pc.fill_null(pc.greater(_amount(cleaned, name, found), mrp), False))
        for row in np.flatnonzero(above).tolist():
            sent = as_sent(_sent(parsed, row, name))
            strict = bool(found.strict[row])
            text = above_mrp_message(
                name, sent, as_sent(_sent(parsed, row, mrp_name)), strict=strict
            )
            if strict:
                entry = item_error(name, ErrorCode.PRICE_ABOVE_MRP, text, cut(sent))
                found.errors.setdefault(row, []).append(entry)
            else:
                entry = item_warning(name, ErrorCode.PRICE_ABOVE_MRP, text, cut(sent), "kept")
                found.warnings.setdefault(row, []).append(entry)


def _amount(cleaned: Cells, name: str, found: Findings) -> arrow.Array:
    """A money field as numbers; null where absent, invalid or dropped."""
    amount = pc.cast(clean.money(cleaned.text[name].to_arrow().cast(arrow.string())), "float64")
    dropped = np.zeros(len(cleaned), dtype=bool)
    dropped[list(found.drops.get(name, ()))] = True
    return pc.if_else(arrow.array(dropped), arrow.scalar(None, arrow.float64()), amount)


def _dated(cleaned: Cells, name: str) -> arrow.Array:
    """A date field's text where it was sent as text; null elsewhere."""
    is_str = arrow.array(codes(cleaned, name) == CODE["str"])
    text = cleaned.text[name].to_arrow().cast(arrow.string())
    return pc.if_else(is_str, text, arrow.scalar(None, arrow.string()))


# --- values as sent, for the refusals -------------------------------------------------


def _sent(parsed: ParsedPush, row: int, path: str) -> Any:
    """The value of field ``path`` of item ``row`` as it was sent."""
    item = parsed.item(row)
    head, _, rest = path.partition(".")
    if rest and head in CONTAINERS and isinstance(item.get(head), dict):
        return item[head].get(rest)
    return item.get(path)


def _first_bad_url(value: Any) -> str:
    """The first element of an image list that is not a URL, shown; the list if none."""
    if isinstance(value, list):
        for element in value:
            if element is not None and not clean.is_url(element):
                return shown(as_sent(element))
    return shown(as_sent(value))


def _numpy(mask: arrow.Array) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False).astype(bool)


__all__ = ["Validation", "client_ids", "prepare", "validate"]
