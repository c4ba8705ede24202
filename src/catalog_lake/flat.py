"""Decoded items laid out flat: one column per field, every JSON value as it was sent.

Validation must see what the caller sent: ``true`` is not ``"true"``,
``NaN`` is not absent, and a lone surrogate cannot reach Arrow. So the
object frame keeps each value as a Python object, and replaces the values
that pandas or Arrow would silently change with markers that carry their
text (``NonFinite``, ``Unencodable``) or keep it (``JsonFloat``). ``cells``
turns this frame into text and kind columns.

The same values, and an object's repeated keys (``DuplicateKeys``), are
written back exactly by ``canonical_json``: an item's content digest.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import orjson
import pandas as pd

#: Item fields that hold an object whose keys become their own columns.
NESTED = ("inventory_info", "pricing_info", "attributes")

#: Marks a top-level key's column whose name a nested field could also spell (issue 26).
_TOP = "\x00"


def column_name(key: str) -> str:
    """The flat column of a top-level key: a field's identity is its path, not a joined name.

    ``pricing_info.mrp`` names the ``mrp`` inside ``pricing_info``; a top-level
    key spelled ``"pricing_info.mrp"`` is another field, and must neither
    override the price nor satisfy the required-price rule. So a top-level key
    holding a dot (or starting with the marker) gets the marker in front: the
    mapping is one to one, and no marked name starts like a nested one.
    """
    return _TOP + key if "." in key or key.startswith(_TOP) else key


def field_path(column: str) -> str:
    """The field a flat column stands for, as the sender spelled it (``column_name`` undone)."""
    return column[1:] if column.startswith(_TOP) else column


class Marker:
    """A value the flat frame holds as its JSON text, with the JSON kind ``cells`` gives it.

    Not a ``str`` subclass, so a column holding one is never taken for a
    column of text.
    """

    __slots__ = ("text",)
    kind = "str"

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


class NonFinite(Marker):
    """A JSON NaN or Infinity, kept visible so no check mistakes it for absent.

    pandas treats float NaN as "missing", so an item that sent ``NaN`` for a
    price would otherwise pass as if it sent nothing (SPEC 2.5 wants finite
    money; stdlib json accepts NaN silently).
    """

    __slots__ = ()
    kind = "nonfinite"


class Unencodable(Marker):
    """A value holding lone surrogates, which UTF-8 (and so Arrow) cannot store.

    It replaces the value in the flat frame so that no later step, pandas'
    string inference included, ever touches the surrogate; the item is
    rejected with ``invalid_text`` and the raw table keeps it escaped.
    """

    __slots__ = ()
    kind = "unencodable"

    def __init__(self, value: Any) -> None:
        super().__init__(json.dumps(value, ensure_ascii=True))


class HugeInt(Marker):
    """A JSON integer of more digits than Python converts to a number (4,300), as its text.

    ``int()`` refuses such text (a guard against quadratic conversion), and the
    decoder used to raise a bare ``ValueError`` for the whole push (issue 26).
    The value keeps its digits: a count or price rule refuses it by its text,
    an unknown field holding one is dropped with a warning, and the raw table
    writes it back exactly.
    """

    __slots__ = ()
    kind = "int"


#: The most digits ``int()`` converts (CPython's default ``sys.get_int_max_str_digits()``).
INT_DIGITS = 4_300


def json_int(text: str) -> int | HugeInt:
    """A JSON integer's value, or a ``HugeInt`` past what ``int()`` converts."""
    return int(text) if len(text.lstrip("-")) <= INT_DIGITS else HugeInt(text)


def has_surrogate(value: Any) -> bool:
    """Whether a value (or a key in it) holds a lone surrogate, which UTF-8 cannot encode."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except (TypeError, ValueError, RecursionError):
        return False
    return False


class JsonFloat(float):
    """A JSON number with a fraction or exponent, keeping the text it was sent as.

    A float cannot tell ``4.9999999999999999`` from ``5`` or ``19.999999999999999``
    from ``20``: rules judge numbers by this text (issue 16), and the raw table
    writes it back unchanged, so a replay judges the same number.
    """

    __slots__ = ("text",)

    def __new__(cls, text: str) -> JsonFloat:  # noqa: D102 - see the class
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


_OVERFLOW = re.compile(r"[0-9][eE][+-]?[0-9]{3}")


def may_be_nonfinite(text: str) -> bool:
    """Whether an item's text may hold a NaN, an Infinity or a number too big for a float."""
    # json.dumps writes NaN and (-)Infinity bare; text values holding the word are rare.
    # A number such as 1e400 overflows to infinity (its text is kept, exponent and all).
    return "NaN" in text or "Infinity" in text or _OVERFLOW.search(text) is not None


def flatten(
    items: list[dict[str, Any]],
    unencodable: set[int] = frozenset(),  # type: ignore[assignment]
    *,
    nonfinite: bool = True,
) -> pd.DataFrame:
    """Lay items out as an object-dtype frame, one column per (nested) field.

    ``dtype=object`` keeps each JSON value exactly as it arrived (an int stays
    an int, a bool a bool) so the type checks see what the caller sent.
    Items listed in ``unencodable`` get their surrogate-holding values (and
    keys) replaced by ``Unencodable`` markers, and with ``nonfinite`` every
    NaN or Infinity becomes a ``NonFinite`` marker, which needs a look at
    each value. Without either, pandas builds the frame from the dicts
    directly, one nested object at a time, which is three times faster.
    """
    if not unencodable and not nonfinite and len(items) >= 64:
        return _flatten_columns(items)  # below ~64 items, building frames costs more
    rows = []
    for item in items:
        row: dict[str, Any] = {}
        for key, value in item.items():
            if key in NESTED and isinstance(value, dict):
                prefix = key + "."
                for sub, sub_value in value.items():
                    row[prefix + sub] = _mark(sub_value)
            else:
                row[column_name(key)] = _mark(value)
        rows.append(row)
    for index in unencodable:
        rows[index] = {
            _safe_key(k): Unencodable(v) if has_surrogate(v) else v for k, v in rows[index].items()
        }
    frame = pd.DataFrame(rows, dtype=object)
    frame.index = pd.RangeIndex(len(items))
    return frame


def _flatten_columns(items: list[dict[str, Any]]) -> pd.DataFrame:
    """``flatten`` for items with nothing to mark, built by pandas from the dicts."""
    frame = pd.DataFrame(items, dtype=object)
    frame.index = pd.RangeIndex(len(items))
    if any(column_name(c) != c for c in frame.columns):
        frame.columns = [column_name(c) for c in frame.columns]
    for name in NESTED:
        if name not in frame.columns:
            continue
        values = frame.pop(name).to_numpy(dtype=object)
        nested = np.fromiter((isinstance(v, dict) for v in values), bool, len(values))
        if nested.any():
            sub = pd.DataFrame(list(values[nested]), dtype=object)
            sub.index = frame.index[nested]
            sub.columns = [f"{name}.{key}" for key in sub.columns]
            frame = frame.join(sub) if len(sub.columns) else frame
        if (~nested & ~pd.isna(values)).any():
            # A container that is not an object stays, for the invalid_type check.
            frame[name] = pd.Series(
                np.where(nested, np.nan, values), index=frame.index, dtype=object
            )
    return frame.astype(object)


def _safe_key(key: str) -> str:
    return key if not has_surrogate(key) else str(Unencodable(key))


def _mark(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return NonFinite(value.text if isinstance(value, JsonFloat) else json.dumps(value))
    return value


class DuplicateKeys(dict):
    """A JSON object that repeated a key; ``duplicates`` names the repeats.

    ``pairs`` keeps every key/value as sent, so the raw table can store the
    item exactly as received and a replay finds the same duplicates again.
    """

    duplicates: list[str]
    pairs: list[tuple[str, Any]]


def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A decoded JSON object; a ``DuplicateKeys`` when it repeated a key."""
    # stdlib json and orjson keep the last duplicate silently; we want to say so.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dups = [k for k, _ in pairs if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
        obj = DuplicateKeys(obj)
        obj.duplicates = dups
        obj.pairs = pairs
    return obj


def canonical_json(item: Any, *, exact: bool = False) -> bytes:
    """``item`` as JSON with sorted keys, numbers as sent: the same bytes for the same content.

    ``exact``: the item may hold a NaN or Infinity, which orjson would write as null.
    """
    if exact:
        return _canonical(item).encode("utf-8", "surrogatepass")
    try:
        return orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        # JsonFloat, integers past 64 bits, lone surrogates: always this path for such content.
        return _canonical(item).encode("utf-8", "surrogatepass")


def _canonical(value: Any) -> str:
    if isinstance(value, dict):
        pairs = value.pairs if isinstance(value, DuplicateKeys) else list(value.items())
        body = ",".join(f"{json.dumps(k)}:{_canonical(v)}" for k, v in sorted(pairs, key=_key))
        return "{" + body + "}"
    if isinstance(value, list):
        return "[" + ",".join(_canonical(v) for v in value) + "]"
    if isinstance(value, (JsonFloat, HugeInt)):
        return value.text
    return json.dumps(value)


def _key(pair: tuple[str, Any]) -> str:
    return pair[0]
