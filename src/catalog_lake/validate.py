"""Run the pandera schema over a push and turn its failures into item errors.

Validation is lazy (``lazy=True``) so one pass collects every problem of
every item; ``failure_cases.index`` maps each failure back to its item, which
is why we stay on pandera's pandas backend (the pyarrow backend loses it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pyarrow as pa_
import pyarrow.compute as pc

from . import clean, settings
from .errors import ErrorCode, item_error
from .parse import JsonFloat, NonFinite, ParsedPush, Unencodable
from .schemas import CONTAINERS, FIELDS, FIELDS_BY_SOURCE, item_schema

_MAX_VALUE_CHARS = 200


@dataclass
class Validation:
    """The cleaned frame, the errors by item index, and which items passed."""

    frame: pd.DataFrame
    errors: dict[int, list[dict[str, Any]]]

    @property
    def passed(self) -> pd.Series:
        """True for the items with no error at all."""
        return pd.Series(~self.frame.index.isin(list(self.errors)), index=self.frame.index)


def prepare(frame: pd.DataFrame) -> pd.DataFrame:
    """Clean every text field and add absent required fields as null columns.

    The copy is shallow: every column it changes is replaced whole, and
    pandas' copy-on-write keeps ``frame`` as it was (a deep copy of the
    object columns was a fifth of this function's time).
    """
    out = frame.copy(deep=False)
    for spec in FIELDS:
        if spec.source in out.columns:
            if spec.rule == "key":
                out[spec.source] = clean.identifier(out[spec.source])
            elif spec.rule in ("id", "text"):
                out[spec.source] = clean.clean_text(out[spec.source], rich=spec.rule == "text")
            else:
                # Scalars (not lists) that hold only text become Arrow text here.
                out[spec.source] = clean.blank_to_none(
                    out[spec.source], keep_text=spec.rule not in ("urls", "list")
                )
        elif spec.required:
            out[spec.source] = pd.Series(None, index=out.index, dtype=object)
    return out


def validate(parsed: ParsedPush, groups: pd.Series | None = None) -> Validation:
    """Validate a parsed push; never raises for bad items, only reports them.

    ``groups`` names the push of each item when several pushes are validated
    together (a backfill): ``duplicate_in_push`` applies within a push only.
    """
    frame = prepare(parsed.frame)
    errors: dict[int, list[dict[str, Any]]] = {k: list(v) for k, v in parsed.errors.items()}
    schema = item_schema(frozenset(frame.columns))
    try:
        schema.validate(frame, lazy=True)
    except pa.errors.SchemaErrors as exc:
        for index, error in _failure_errors(exc.failure_cases, frame):
            errors.setdefault(index, []).append(error)
    for index, error in _nonfinite_errors(parsed, frame):
        errors.setdefault(index, []).append(error)
    for index, error in _duplicate_errors(frame, groups):
        errors.setdefault(index, []).append(error)
    errors = {i: errors[i] for i in sorted(errors)}
    return Validation(frame=frame, errors=errors)


def _failure_errors(cases: pd.DataFrame, frame: pd.DataFrame):
    cases = cases.dropna(subset=["index"])
    # A frame-wide check (the discount window) is reported once per column.
    wide = cases["schema_context"] == "DataFrameSchema"
    cases = pd.concat([cases[~wide], cases[wide].drop_duplicates(["index", "check"])])
    positions = frame.index.get_indexer(cases["index"].astype("int64"))
    sent: dict[str, np.ndarray] = {}  # each failing column's values, taken out once
    for case, position in zip(cases.itertuples(index=False), positions, strict=True):
        index = int(case.index)
        check = str(case.check)
        if check == "not_nullable":
            code = ErrorCode.MISSING_REQUIRED_FIELD
        else:
            code = ErrorCode(check)
        field = case.column if isinstance(case.column, str) else ""
        if code is ErrorCode.INVALID_DISCOUNT_WINDOW:
            field = "pricing_info.discount_end_date"
        if field in frame.columns:
            if field not in sent:
                sent[field] = frame[field].to_numpy(dtype=object)
            value = sent[field][position]
        else:
            value = case.failure_case
        yield index, item_error(field, code, _message(code, field, value), _jsonable(value))


def _nonfinite_errors(parsed: ParsedPush, frame: pd.DataFrame):
    """NaN or Infinity in fields outside the spec, which the lake keeps as JSON.

    Known fields refuse them through their own rules; unknown ones have none,
    and strict JSON cannot hold such a number, so the item is refused rather
    than stored with ``"NaN"`` in ``extra_fields``. Only items whose text could
    hold one (``parse._may_be_nonfinite``, as one Arrow regex) are looked at.
    """
    unknown = [c for c in frame.columns if c not in FIELDS_BY_SOURCE and c not in CONTAINERS]
    if not unknown or not parsed.item_json:
        return
    texts = pa_.array(parsed.item_json, pa_.string())
    maybe = pc.match_substring_regex(texts, r"NaN|Infinity|[0-9][eE][+-]?[0-9]{3}")
    rows = np.flatnonzero(maybe.to_numpy(zero_copy_only=False))
    for column in unknown:
        values = frame[column].to_numpy(dtype=object)
        for position in rows:
            for path, number in _nonfinite(values[position], column):
                yield (
                    int(frame.index[position]),
                    item_error(
                        path,
                        ErrorCode.INVALID_NUMBER,
                        f"{path} is {number}, which a JSON number cannot be; "
                        "send a finite number, or text",
                        number,
                    ),
                )


def _nonfinite(value: Any, path: str):
    """(path, text as sent) of every NaN or Infinity in ``value``, at any depth."""
    if isinstance(value, NonFinite):
        yield path, str(value)
    elif isinstance(value, float) and not math.isfinite(value):
        yield path, _as_sent(value)
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield from _nonfinite(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for position, inner in enumerate(value):
            yield from _nonfinite(inner, f"{path}[{position}]")


def _duplicate_errors(frame: pd.DataFrame, groups: pd.Series | None):
    ids = clean.text_of(frame["client_item_id"])
    keys = pd.DataFrame({"group": 0 if groups is None else groups.to_numpy(), "id": ids})
    earlier = ids.notna() & keys.duplicated(keep="last")
    for index in frame.index[earlier]:
        value = ids[index]
        yield (
            int(index),
            item_error(
                "client_item_id",
                ErrorCode.DUPLICATE_IN_PUSH,
                f"client_item_id {value!r} appears again later in this push; the last one wins",
                value,
            ),
        )


def _as_sent(value: Any) -> Any:
    """``value`` as strict JSON can carry it, numbers as they were sent.

    A number whose float would misquote it (``4.9999999999999999``, ``NaN``)
    becomes the text it was sent as.
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
    return value


def _jsonable(value: Any) -> Any:
    if value is None or (
        isinstance(value, float) and value != value and not isinstance(value, JsonFloat)
    ):
        return None
    if isinstance(value, (Unencodable, NonFinite)):
        return str(value)  # the text sent, e.g. "NaN"
    value = _as_sent(value)
    if isinstance(value, str):
        if len(value) > _MAX_VALUE_CHARS:
            return value[:_MAX_VALUE_CHARS] + "…"
        return value
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
    return value if len(text) <= _MAX_VALUE_CHARS else text[:_MAX_VALUE_CHARS] + "…"


def _shown(value: Any) -> str:
    shown = _jsonable(value)
    return json.dumps(shown, ensure_ascii=False) if not isinstance(shown, str) else repr(shown)


def _message(code: ErrorCode, field: str, value: Any) -> str:
    spec = FIELDS_BY_SOURCE.get(field)
    shown = _shown(value)
    if code is ErrorCode.MISSING_REQUIRED_FIELD:
        return f"{field} is required and was missing or blank"
    if code is ErrorCode.INVALID_TYPE:
        return f"{field} must be an object of named fields, got {shown}"
    if code is ErrorCode.INVALID_STRING:
        return f"{field} must be text (a JSON number is accepted as its text), got {shown}"
    if code is ErrorCode.INVALID_IDENTIFIER:
        return (
            f"{field} holds an invisible or control character ({clean.first_invisible(value)}) "
            f"in {shown}; an identifier must be visible text, since two ids differing only by "
            "such a character cannot be told apart"
        )
    if code is ErrorCode.TEXT_TOO_LONG:
        limit = spec.max_chars if spec else settings.MAX_TEXT_CHARS
        length = len(clean.text_of(pd.Series([value], dtype=object)).iloc[0])
        return f"{field} is {length:,} characters, over the limit of {limit:,}"
    if code is ErrorCode.INVALID_BOOLEAN:
        return (
            f"{field} must be a boolean: true/false, yes/no, y/n, t/f, on/off or 1/0; got {shown}"
        )
    if code is ErrorCode.INVALID_DURATION:
        return f"{field} must be an ISO 8601 duration such as P7D or PT24H, got {shown}"
    if code is ErrorCode.INVALID_COUNT:
        return f"{field} must be a whole number from 0 to {settings.MAX_COUNT:,}, got {shown}"
    if code is ErrorCode.INVALID_PRICE:
        return (
            f"{field} must be a non-negative decimal with at most two decimals and no "
            f"currency symbol or thousands separator, such as 1299.00; got {shown}"
        )
    if code is ErrorCode.INVALID_DATE:
        return (
            f"{field} must be an ISO 8601 date or date-time such as 2026-11-30 or "
            f"2026-11-30T18:00:00+05:30, or empty; got {shown}"
        )
    if code is ErrorCode.INVALID_DISCOUNT_WINDOW:
        return f"{field} {shown} is before pricing_info.discount_start_date"
    if code is ErrorCode.INVALID_URL:
        return (
            f"{field} must hold only http(s) URLs; {_shown(clean.first_bad_url(value))} is not one"
        )
    if code is ErrorCode.INVALID_LIST:
        return f"{field} must be a list of text values, got {shown}"
    if code is ErrorCode.TOO_MANY_VALUES:
        return f"{field} holds more than {settings.MAX_LIST_VALUES} values"
    return f"{field} is invalid: {shown}"


__all__ = ["Validation", "prepare", "validate"]
