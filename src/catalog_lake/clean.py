"""Recognize and normalize values, a whole column at a time.

Each function takes a pandas Series of JSON values (object dtype, exactly as
received, or the Arrow-backed ``TEXT`` dtype once a column of text has been
cleaned) and returns a new Series; inputs are never mutated. The same
predicates back the pandera checks (``schemas.py``) and the coercion to typed
columns, so what validation accepts is exactly what coercion can convert.
String work runs in Arrow compute kernels (RE2) wherever Python's ``re``
semantics allow it.
"""

from __future__ import annotations

import functools
import html
import inspect
import operator
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import settings
from .parse import JsonFloat, NonFinite, Unencodable

_KIND = {
    str: "str",
    bool: "bool",
    int: "int",
    float: "float",
    JsonFloat: "float",
    dict: "dict",
    list: "list",
    type(None): "null",
    NonFinite: "nonfinite",
    Unencodable: "unencodable",
}

TRUE_SPELLINGS = frozenset({"true", "yes", "y", "t", "1", "on"})
FALSE_SPELLINGS = frozenset({"false", "no", "n", "f", "0", "off"})
_TRUE = pa.array(sorted(TRUE_SPELLINGS))
_FALSE = pa.array(sorted(FALSE_SPELLINGS))

# Block-level tags separate words; inline ones (<b>, <i>, <span>) do not.
_BLOCK_TAG = re.compile(
    r"</?(?:p|br|div|li|ul|ol|h[1-6]|tr|td|th|table|section|article|blockquote|hr)\b[^<>]*>",
    re.I,
)
_TAG = re.compile(r"<!--.*?-->|</?[A-Za-z][^<>]*>", re.S)
# Text cleaning runs in Arrow, so these are RE2 patterns. Python's \s (Unicode
# whitespace) is spelled out: RE2's \s is ASCII only. \x1c-\x1f and \x85 are
# whitespace to Python too, but the control pattern has removed them already.
_BLOCK_TAG_RE2 = "(?i)" + _BLOCK_TAG.pattern
_TAG_RE2 = "(?s)" + _TAG.pattern
_CONTROL_RE2 = (
    r"[\x{00}-\x{08}\x{0b}\x{0c}\x{0e}-\x{1f}\x{7f}-\x{9f}\x{200b}\x{2028}\x{2029}\x{feff}]"
)
# The whitespace rule: every run becomes one space. The pass runs the faster
# _SPACE_CHANGE_RE2 below; tests/test_cleaning.py checks the two agree.
_SPACE_RE2 = r"[\t\n\x{0b}\x{0c}\r\p{Z}]+"
# The same rewrite with far fewer replacements: a run of two or more, or one
# whitespace character other than a plain space (\p{Z} without U+0020, spelled
# out). A lone space, which _SPACE_RE2 replaces by itself, is left alone:
# on descriptions, where every word gap is one, that was 5x faster.
_SPACE_CHANGE_RE2 = (
    r"[\t\n\x{0b}\x{0c}\r\p{Z}]{2,}"
    r"|[\t\n\x{0b}\x{0c}\r\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"
)
# What those two can match in ASCII text (cheap to test for before running them).
_ASCII_CONTROL = r"[\x{00}-\x{08}\x{0b}\x{0c}\x{0e}-\x{1f}\x{7f}]"
_ASCII_SPACE = r"[\t\n\x{0b}\x{0c}\r]"
# ASCII text matching none of these needs no pass but the trim (``_clean_arrow``).
_ASCII_WORK = {True: r"[<&\x{00}-\x{1f}\x{7f}]|  ", False: r"[\x{00}-\x{1f}\x{7f}]|  "}
# [0-9], not \d: Python's \d also matches other scripts' digits (fullwidth,
# Arabic-Indic), which would pass the check and then fail the decimal cast.
_MONEY = r"[0-9]{1,10}(?:\.[0-9]{1,2})?"
_COUNT = r"[0-9]{1,13}"
#: Seconds per duration unit; a year is 365 days and a month 30, as documented.
_UNIT_SECONDS = (365 * 86400, 30 * 86400, 7 * 86400, 86400, 3600, 60, 1)
_DURATION_GROUPS = ("y", "mo", "w", "d", "h", "mi", "s")
#: Durations are stored as int64 seconds; longer ones (~292 billion years) are refused.
_MAX_SECONDS = float(2**63 - 1024)
_NUM_RE2 = "[0-9]+(?:[.,][0-9]+)?"
_DURATION_RE2 = (
    f"^P(?:(?P<y>{_NUM_RE2})Y)?(?:(?P<mo>{_NUM_RE2})M)?(?:(?P<w>{_NUM_RE2})W)?"
    f"(?:(?P<d>{_NUM_RE2})D)?(?:T(?:(?P<h>{_NUM_RE2})H)?(?:(?P<mi>{_NUM_RE2})M)?"
    f"(?:(?P<s>{_NUM_RE2})S)?)?$"
)
_URL = r"https?://[^\s/?#<>\"]+[^\s<>\"]*"
_DATE_ONLY = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"


#: pandas' Arrow-backed text dtype (pandas 3's ``str``, NaN for missing). Text
#: columns that hold only strings are kept in it after cleaning, so checks,
#: coercion and the Delta write run as Arrow kernels without a Python object
#: per value.
TEXT = pd.StringDtype("pyarrow", na_value=np.nan)

#: ``infer_dtype`` answers for columns whose values all have one JSON type.
_UNIFORM = {"string": "str", "boolean": "bool", "integer": "int", "floating": "float"}


_KEPT: ContextVar[dict | None] = ContextVar("catalog_lake_kept_conversions", default=None)
_IS = np.frompyfunc(operator.is_, 2, 1)


@contextmanager
def keeping(store: dict) -> Iterator[None]:
    """Within it, each conversion of a named column is made once and kept in ``store``.

    Validation parses every flag, count, price, date and duration of a push
    to check it, and the typed items are made of those very parsed values
    (a third of typing's time went to parsing them again). Enter ``keeping``
    with one store around both. A kept result is reused only for a column of
    the same name, options and values (or a subset of its rows), so passing
    other data can never return a stale result, only cost a check.
    """
    token = _KEPT.set(store)
    try:
        yield
    finally:
        _KEPT.reset(token)


def _kept(convert):
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(convert).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }

    @functools.wraps(convert)
    def kept(values: pd.Series, **options):
        store = _KEPT.get()
        if store is None or not isinstance(values.name, str):
            return convert(values, **options)
        options = {**defaults, **options}
        key = (convert.__name__, values.name, *sorted(options.items()))
        made = store.get(key)
        if made is not None:
            source, result = made
            if values.index.equals(source.index):
                if _same_values(values, source):
                    return result
            elif values.index.isin(source.index).all() and _same_values(
                values, source.loc[values.index]
            ):
                return result.loc[values.index]
        result = convert(values, **options)
        store[key] = (values, result)
        return result

    return kept


def _same_values(values: pd.Series, other: pd.Series) -> bool:
    """Whether two columns hold the same values, Python objects by identity.

    ``equals`` would take ``1``, ``1.0`` and ``True`` for one another, yet a
    price check reads them differently; a column's rows taken out of the
    validated frame are the very same objects.
    """
    if values.dtype != other.dtype or len(values) != len(other):
        return False
    if values.dtype == object:
        return bool(_IS(values.to_numpy(), other.to_numpy()).all())
    return values.equals(other)


def kinds(values: pd.Series) -> pd.Series:
    """Name the JSON type of every value: str, int, float, bool, list, dict, null.

    Most columns hold one type (all text, all booleans): pandas'
    ``infer_dtype`` recognizes those in C, and only mixed columns pay for a
    Python lookup per value (kept, within ``keeping``: a mixed column's
    checks ask for its kinds four or five times). Markers (``NonFinite``,
    ``Unencodable``) are not ``str``, so a column holding one always takes
    the per-value path.
    """
    if isinstance(values.dtype, pd.StringDtype):
        missing = values.isna().to_numpy()
        return pd.Series(
            np.where(missing, "null", "str").astype(object), index=values.index, dtype=object
        )
    array = values.to_numpy(dtype=object)
    inferred = pd.api.types.infer_dtype(array, skipna=True)
    uniform = _UNIFORM.get(inferred)
    if uniform is not None or inferred == "empty":
        out = np.where(pd.isna(array), "null", uniform or "null").astype(object)
        return pd.Series(out, index=values.index, dtype=object)
    return _mixed_kinds(values)


@_kept
def _mixed_kinds(values: pd.Series) -> pd.Series:
    array = values.to_numpy(dtype=object)
    get = _KIND.get
    out = np.array([get(type(v), "other") for v in array], dtype=object)
    floats = out == "float"
    if floats.any():
        out[floats & pd.isna(array)] = "null"
    return pd.Series(out, index=values.index, dtype=object)


def may_hold_markers(values: pd.Series) -> bool:
    """Whether a column could hold a parse marker: only mixed Python-object columns can.

    Every check runs on every column of a push, so a column of one JSON type
    (nearly all of them) skips the per-value marker search.
    """
    if values.dtype != object:
        return False
    inferred = pd.api.types.infer_dtype(values.to_numpy(), skipna=True)
    return inferred not in _UNIFORM and inferred != "empty"


def text_of(values: pd.Series) -> pd.Series:
    """Strings stay, JSON numbers become their text, everything else is NA.

    SPEC 2.6: numbers in string attributes lose nothing by becoming text.
    """
    if isinstance(values.dtype, pd.StringDtype):
        return values
    k = kinds(values)
    out = values.where(k == "str")
    numeric = k.isin(["int", "float"])
    if numeric.any():
        out = _put(out, numeric, values[numeric].map(str))
    return out


def clean_text(values: pd.Series, *, rich: bool = True) -> pd.Series:
    """Trim, collapse whitespace and drop control characters of text values.

    ``rich`` also strips HTML tags and unescapes entities; identifiers skip it
    so that a key such as ``A&amp;B`` is never silently rewritten. Values that
    are not strings pass through untouched for the type checks to judge, and
    text that is blank after cleaning becomes None (absent). The regexes run
    in Arrow (RE2) over the whole column; only entities go through Python.
    A column of nothing but text comes back in the ``TEXT`` dtype.
    """
    if isinstance(values.dtype, pd.StringDtype) or pd.api.types.infer_dtype(
        values.to_numpy(dtype=object), skipna=True
    ) in ("string", "empty"):
        text = pa.array(values.to_numpy(dtype=object), pa.string(), from_pandas=True)
        return pd.Series(TEXT.__from_arrow__(_clean_arrow(text, rich)), index=values.index)
    is_str = kinds(values) == "str"
    if not is_str.any():
        return values.copy()
    text = pa.array(values[is_str].to_numpy(dtype=object), pa.string())
    cleaned = _clean_arrow(text, rich).to_numpy(zero_copy_only=False).astype(object)
    cleaned[pd.isna(cleaned)] = None
    return _put(values, is_str, pd.Series(cleaned, dtype=object))


# Characters an identifier may not hold: C0 and C1 controls (tab and line
# breaks included), zero-width and direction marks, line and paragraph
# separators, word joiners and the BOM. Invisible, so two ids that differ only
# by them look the same to every person who reads them (issue 16).
_ID_FORBIDDEN_RE2 = (
    r"[\x{00}-\x{1f}\x{7f}-\x{9f}\x{200b}-\x{200f}\x{2028}-\x{202e}\x{2060}-\x{2064}\x{feff}]"
)

_ID_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]")


def identifier(values: pd.Series) -> pd.Series:
    """Identifiers trimmed of leading and trailing whitespace, and nothing else.

    Unlike ``clean_text``, inner whitespace is kept as sent and nothing is
    dropped: cleaning must never make two different ids one (``"A  B"`` and
    ``"A B"`` stay two). Text blank after trimming becomes None (absent).
    ``identifier_ok`` refuses ids holding invisible characters instead of
    removing them.
    """
    is_str = kinds(values) == "str"
    if not is_str.any():
        return values.copy()
    text = pc.utf8_trim_whitespace(pa.array(values[is_str].to_numpy(dtype=object), pa.string()))
    text = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
    trimmed = text.to_numpy(zero_copy_only=False).astype(object)
    trimmed[pd.isna(trimmed)] = None
    return _put(values, is_str, pd.Series(trimmed, dtype=object))


def identifier_ok(values: pd.Series) -> pd.Series:
    """False where a text identifier holds a control or invisible character."""
    is_str = (kinds(values) == "str").to_numpy()
    ok = np.ones(len(values), dtype=bool)
    if is_str.any():
        text = pa.array(values[is_str].to_numpy(dtype=object), pa.string())
        ok[is_str] = ~_numpy(pc.match_substring_regex(text, _ID_FORBIDDEN_RE2))
    return pd.Series(ok, index=values.index)


def first_invisible(value: object) -> str:
    """The first character ``identifier_ok`` refuses in ``value``, as U+XXXX (for messages)."""
    found = _ID_FORBIDDEN.search(str(value))
    return f"U+{ord(found.group()):04X}" if found else ""


def _clean_arrow(text: pa.Array, rich: bool) -> pa.Array:
    """``clean_text`` on an Arrow string array; blank results become null.

    Each regex runs only on the strings that can match it, found by a cheap
    test first: most text holds no ``<``, and ASCII text without a control
    character, tab, line break or double space needs no whitespace work.
    RE2 with Unicode classes costs far more per byte than those tests
    (the tag and whitespace regexes were 60% of cleaning 20,000 items).
    """
    if (
        pc.all(pc.string_is_ascii(text)).as_py() is not False
        and not pc.any(pc.match_substring_regex(text, _ASCII_WORK[rich])).as_py()
    ):
        # Most columns (names, brands, sizes) are plain ASCII: one test instead of six.
        return _trimmed(text)
    if rich:
        tagged = pc.match_substring(text, "<")
        text = _where(text, tagged, lambda t: pc.replace_substring_regex(t, _BLOCK_TAG_RE2, " "))
        text = _where(text, tagged, lambda t: pc.replace_substring_regex(t, _TAG_RE2, ""))
        has_entity = pc.fill_null(pc.match_substring(text, "&"), False).to_numpy(
            zero_copy_only=False
        )
        if has_entity.any():
            plain = text.to_numpy(zero_copy_only=False).astype(object)
            plain[has_entity] = [html.unescape(t) for t in plain[has_entity]]
            text = pa.array(plain, pa.string())
    unusual = pc.invert(pc.string_is_ascii(text))
    text = _where(
        text,
        pc.or_(unusual, pc.match_substring_regex(text, _ASCII_CONTROL)),
        lambda t: pc.replace_substring_regex(t, _CONTROL_RE2, ""),
    )
    spaced = pc.or_(pc.match_substring(text, "  "), pc.match_substring_regex(text, _ASCII_SPACE))
    text = _where(
        text,
        pc.or_(pc.invert(pc.string_is_ascii(text)), spaced),
        lambda t: pc.replace_substring_regex(t, _SPACE_CHANGE_RE2, " "),
    )
    return _trimmed(text)


def _trimmed(text: pa.Array) -> pa.Array:
    text = pc.utf8_trim(text, " ")
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def _where(text: pa.Array, mask: pa.Array, change) -> pa.Array:
    """``text`` with ``change`` applied to the strings where ``mask`` holds, and only to them."""
    mask = pc.fill_null(mask, False)
    hits = pc.sum(mask).as_py() or 0
    if hits == 0:
        return text
    if hits == len(text):
        return change(text)
    return pc.replace_with_mask(text, mask, change(text.filter(mask)))


def _put(values: pd.Series, mask: pd.Series, replacement: pd.Series) -> pd.Series:
    """``values`` with ``replacement`` where ``mask``, kept as plain object dtype.

    Assigning through numpy keeps pandas 3 from inferring its Arrow-backed
    ``str`` dtype, which cannot hold lone surrogates and would crash before
    the validation could reject them.
    """
    out = values.to_numpy(dtype=object, copy=True)
    out[mask.to_numpy(dtype=bool)] = replacement.to_numpy(dtype=object)
    return pd.Series(out, index=values.index, dtype=object)


def arrow_text(values: pd.Series, kind: pd.Series | None = None) -> pa.Array:
    """The string values of a column as Arrow strings, null for every other kind."""
    if isinstance(values.dtype, pd.StringDtype):
        return pa.array(values.array).cast(pa.string())
    is_str = ((kinds(values) if kind is None else kind) == "str").to_numpy()
    return pa.array(np.where(is_str, values.to_numpy(dtype=object), None), pa.string())


def _numpy(mask: pa.Array) -> np.ndarray:
    """An Arrow boolean array as numpy, null counted as False."""
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def blank_to_none(values: pd.Series, *, keep_text: bool = False) -> pd.Series:
    """Strings that are empty or only whitespace mean "unused" (SPEC 2.5) and become None.

    With ``keep_text``, a column of nothing but strings comes back in the
    ``TEXT`` dtype, converted to Arrow once here rather than by each of its
    checks and again by typing.
    """
    if keep_text and values.dtype == object:
        array = values.to_numpy()
        if pd.api.types.infer_dtype(array, skipna=True) == "string":
            text = pa.array(array, pa.string(), from_pandas=True)
            blank = pc.equal(pc.utf8_trim_whitespace(text), "")
            text = pc.if_else(blank, pa.scalar(None, pa.string()), text)
            return pd.Series(TEXT.__from_arrow__(text), index=values.index)
    kind = kinds(values)
    if not (kind == "str").any():
        return values
    blank = _numpy(pc.equal(pc.utf8_trim_whitespace(arrow_text(values, kind)), ""))
    return values.where(~blank, None) if blank.any() else values


def text_length(values: pd.Series) -> pd.Series:
    """Characters in each value's text form (0 where there is none).

    Cleaned text columns are counted by one Arrow kernel: every text field
    is checked, and four pandas steps cost a small push 0.3 ms a column.
    """
    if isinstance(values.dtype, pd.StringDtype):
        lengths = pc.fill_null(pc.utf8_length(arrow_text(values)), 0)
        return pd.Series(lengths.to_numpy(zero_copy_only=False).astype("int64"), index=values.index)
    return text_of(values).str.len().fillna(0).astype("int64")


# --- booleans -----------------------------------------------------------------


def boolean_ok(values: pd.Series) -> pd.Series:
    """JSON booleans, 0 and 1, and the common spellings (yes/no, true/false, ...)."""
    return to_bool(values).notna() | values.isna()


@_kept
def to_bool(values: pd.Series) -> pd.Series:
    """Normalize boolean spellings; anything unrecognized becomes NA.

    Built in numpy and handed to pandas once: masked assignments into a
    nullable boolean Series cost a fixed ~0.3 ms each, which a small push
    paid dozens of times.
    """
    k = kinds(values).to_numpy()
    truth = np.zeros(len(values), dtype=bool)
    known = np.zeros(len(values), dtype=bool)
    is_bool, is_int = k == "bool", k == "int"
    if is_bool.any() or is_int.any():
        array = values.to_numpy(dtype=object)
        truth[is_bool] = array[is_bool].astype(bool)
        known |= is_bool
        if is_int.any():
            ints = array[is_int]
            where = np.flatnonzero(is_int)
            one, zero = ints == 1, ints == 0
            truth[where[one]] = True
            known[where[one | zero]] = True
    if (k == "str").any():
        low = pc.utf8_lower(pc.utf8_trim_whitespace(arrow_text(values, pd.Series(k))))
        spelled_true = _numpy(pc.is_in(low, _TRUE))
        truth |= spelled_true
        known |= spelled_true | _numpy(pc.is_in(low, _FALSE))
    return pd.Series(pd.arrays.BooleanArray(truth, ~known), index=values.index)


# --- durations ----------------------------------------------------------------


def _durations(values: pd.Series) -> tuple[pa.Array, pa.Array]:
    """Canonical text and seconds of ISO 8601 durations, both null where a value is not one.

    All in Arrow: one RE2 match, then each unit's number scaled and summed.
    """
    text = pc.utf8_upper(pc.utf8_trim_whitespace(arrow_text(values)))
    parts = pc.extract_regex(text, _DURATION_RE2)
    present = total = None
    for name, unit in zip(_DURATION_GROUPS, _UNIT_SECONDS, strict=True):
        field = pc.struct_field(parts, name)
        used = pc.not_equal(field, "")  # a group that took no part matches ""
        if present is not None and not pc.any(used).as_py():
            continue  # most feeds use one or two units: the rest add nothing
        number = pc.cast(
            pc.replace_substring(pc.if_else(used, field, None), ",", "."), pa.float64()
        )
        scaled = pc.multiply(pc.fill_null(number, 0.0), float(unit))
        present = used if present is None else pc.or_(present, used)
        total = scaled if total is None else pc.add(total, scaled)
    # "P" and "P1DT" match the grammar's optional groups but are not durations,
    # and one whose seconds overflow the int64 column is not a usable one.
    valid = pc.and_(pc.and_not(present, pc.ends_with(text, "T")), pc.less(total, _MAX_SECONDS))
    valid = pc.fill_null(valid, False)
    return pc.if_else(valid, text, None), pc.if_else(valid, total, None)


def duration_ok(values: pd.Series) -> pd.Series:
    """True for ISO 8601 durations such as P7D or PT24H, and for absent values."""
    return duration_seconds(values)["text"].notna() | values.isna()


@_kept
def duration_seconds(values: pd.Series) -> pd.DataFrame:
    """Canonical text and whole seconds for each duration (NA where invalid)."""
    text, seconds = _durations(values)
    whole = pc.cast(pc.round(seconds), pa.int64())
    missing = _numpy(pc.is_null(whole))
    numbers = pc.fill_null(whole, 0).to_numpy(zero_copy_only=False)
    return pd.DataFrame(
        {
            "text": pd.Series(
                text.to_numpy(zero_copy_only=False), index=values.index, dtype=object
            ),
            "seconds": pd.arrays.IntegerArray(numbers, missing),
        },
        index=values.index,
    )


# --- numbers ------------------------------------------------------------------


def _numeric_text(values: pd.Series, pattern: str) -> pd.Series:
    """Text form of strings and JSON numbers that fully match ``pattern``."""
    k = kinds(values)
    text = text_of(values.where(k != "bool"))  # NA for anything but text and numbers
    arrow = pc.utf8_trim_whitespace(
        pa.array(text.to_numpy(dtype=object), pa.string(), from_pandas=True)
    )
    ok = pc.match_substring_regex(arrow, f"^(?:{pattern})$")
    kept = pc.if_else(ok, arrow, pa.scalar(None, pa.string()))
    return pd.Series(TEXT.__from_arrow__(kept), index=values.index)


@_kept
def money_text(values: pd.Series) -> pd.Series:
    """Plain decimal text with at most two decimals; NA where not money.

    JSON numbers are judged by their shortest repr, so 0.1 + 0.2 (which is
    0.30000000000000004) is refused rather than rounded. Currency symbols and
    thousands separators are refused: "1,299" could be 1299 or 1.299.
    """
    return _numeric_text(values, _MONEY)


def money_ok(values: pd.Series) -> pd.Series:
    """True for money values and for absent ones (absence is judged by ``required``)."""
    return money_text(values).notna() | values.isna()


@_kept
def count_values(values: pd.Series) -> pd.Series:
    """Non-negative whole numbers, from text or JSON numbers (5.0 counts as 5).

    A JSON number is judged by its text, never its float: ``4.9999999999999999``
    is a fraction even though the nearest float is 5 (``parse.JsonFloat``).
    """
    k = kinds(values)
    is_float = (k == "float").to_numpy()
    source = values
    if is_float.any():
        out = values.to_numpy(dtype=object, copy=True)
        text = pd.Series(out[is_float], dtype=object).map(str)
        whole = text.str.fullmatch(r"[0-9]+(?:\.0+)?")
        # "120.0" -> "120": the whole part, as text, for the count pattern below.
        out[is_float] = text.str.split(".", n=1).str[0].where(whole, None).to_numpy()
        source = pd.Series(out, index=values.index, dtype=object)
    text = _numeric_text(source, _COUNT)
    number = pd.to_numeric(text, errors="coerce")
    return number.where(number <= settings.MAX_COUNT).astype("Int64")


def count_ok(values: pd.Series) -> pd.Series:
    """True for counts and for absent values."""
    return count_values(values).notna() | values.isna()


# --- dates --------------------------------------------------------------------


_LAST_INSTANT = pd.Timestamp("9999-12-31T23:59:59.999999", tz="UTC")
_LAST_DATE_START = pd.Timestamp("9999-12-31", tz="UTC")


@_kept
def to_timestamp(values: pd.Series, *, end_of_day: bool = False) -> pd.Series:
    """Parse ISO 8601 dates and date-times to UTC; NA where not parseable.

    A date-time without an offset is taken as UTC. A bare date that ends a
    window means the whole of that day, so it becomes the next midnight.
    """
    text = values.where(kinds(values) == "str").astype(object).str.strip()
    parsed = pd.to_datetime(text, format="ISO8601", utc=True, errors="coerce")
    parsed = pd.Series(parsed, index=values.index).astype("datetime64[us, UTC]")
    # Delta and every reader store years 1 to 9999: a time zone can push a date
    # past either end (0001-01-01T00:30+01:00 is year 0 in UTC), so those are refused.
    year = parsed.dt.year
    parsed = parsed.where((year >= 1) & (year <= 9999))
    if end_of_day:
        date_only = text.str.fullmatch(_DATE_ONLY).fillna(False).astype(bool)
        # The day after 9999-12-31 cannot be stored: that day ends at its last microsecond.
        last = (parsed == _LAST_DATE_START).to_numpy()
        following = (parsed.where(~last) + pd.Timedelta(days=1)).where(~last, _LAST_INSTANT)
        parsed = parsed.where(~date_only, following)
    return parsed.astype("datetime64[us, UTC]")


def date_ok(values: pd.Series) -> pd.Series:
    """True for ISO 8601 dates or date-times and for absent values."""
    return to_timestamp(values).notna() | values.isna()


# --- lists --------------------------------------------------------------------


def list_elements(values: pd.Series) -> pd.Series:
    """One row per list element, indexed by its item (empty lists vanish)."""
    lists = values[kinds(values) == "list"]
    return lists.explode().dropna()


def _all_per_item(ok: pd.Series, index: pd.Index) -> pd.Series:
    bad = ok[~ok].index.unique()
    return pd.Series(~index.isin(bad), index=index)


def is_list_ok(values: pd.Series) -> pd.Series:
    """True for JSON arrays and for absent values."""
    return values.isna() | (kinds(values) == "list")


def list_size_ok(values: pd.Series) -> pd.Series:
    """False where a list is longer than the documented bound."""
    sizes = values.where(kinds(values) == "list").str.len()
    return ~(sizes > settings.MAX_LIST_VALUES).fillna(False).astype(bool)


def urls_ok(values: pd.Series) -> pd.Series:
    """Every element of a list is an http(s) URL string of sensible length."""
    elements = list_elements(values)
    text = elements.where(kinds(elements) == "str").astype(object)
    ok = text.str.fullmatch(_URL, case=False).fillna(False).astype(bool)
    ok &= text.str.len().fillna(0) <= settings.MAX_URL_CHARS
    return _all_per_item(ok, values.index)


def first_bad_url(value: object) -> object:
    """The first element of an image list that is not a URL, for the message."""
    if not isinstance(value, list):
        return value
    for element in value:
        if not (isinstance(element, str) and re.fullmatch(_URL, element, re.I)):
            return element
    return value


def scalar_elements_ok(values: pd.Series) -> pd.Series:
    """Every element of a list is text or a number (SPEC 2.3 leaves its type open)."""
    lists = values[kinds(values) == "list"]
    # Not list_elements: its dropna would drop a NaN element before it is judged.
    elements = lists[lists.str.len() > 0].explode()
    kind = kinds(elements)
    ok = kind.isin(["str", "int", "float"])
    floats = kind == "float"
    if floats.any():  # NaN and Infinity are no numbers to keep as text
        finite = np.isfinite(elements[floats].astype("float64").to_numpy())
        ok[floats] = finite
    return _all_per_item(ok, values.index)


def list_array(elements: pd.Series, length: int) -> pa.ListArray:
    """Build an Arrow list<string> column from exploded elements.

    ``elements`` is indexed by row position (0..length-1), possibly repeated,
    in element order; rows with no elements get an empty list, never null.
    """
    elements = elements.dropna()
    return lists_at(elements.index.to_numpy(dtype="int64"), elements.to_numpy(dtype=object), length)


def lists_at(positions: np.ndarray, values: np.ndarray, length: int) -> pa.ListArray:
    """``list_array`` from parallel arrays: each value goes to the list of its row position."""
    order, offsets = grouped_by_row(positions, length)
    strings = pa.array(values[order], type=pa.string())
    return pa.ListArray.from_arrays(offsets, strings)


def grouped_by_row(positions: np.ndarray, length: int) -> tuple[np.ndarray, pa.Array]:
    """The order that groups values by row position (stable), and the list offsets of the rows.

    What building any list or map column from (row, value) pairs needs.
    """
    order = np.argsort(positions, kind="stable")
    counts = np.bincount(positions, minlength=length) if length else np.zeros(0, "int64")
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype("int32")
    return order, pa.array(offsets, pa.int32())


def text_elements(values: pd.Series) -> pd.Series:
    """List elements as text (numbers made text), indexed by their row."""
    return text_of(list_elements(values)).dropna()
