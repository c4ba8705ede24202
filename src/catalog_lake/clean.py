"""Recognize and normalize values, a whole Arrow column at a time.

Each function takes an Arrow array of text and returns a new one: cleaned
text, booleans, durations, timestamps. The same functions judge a value
(``validate``) and convert it (``items``), so what validation accepts is
exactly what typing can store. String work runs in Arrow compute kernels
(RE2) wherever Python's ``re`` semantics allow it.
"""

from __future__ import annotations

import html
import re
import unicodedata

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from . import settings

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
# No whitespace, quotes, angle brackets or control characters (RFC 3986 has no place
# for them; ``repaired_url`` percent-encodes them as browsers do).
_URL = r"https?://[^\s/?#<>\"\x00-\x1f\x7f]+[^\s<>\"\x00-\x1f\x7f]*"
_DATE_ONLY = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"


_NULL_TEXT = pa.scalar(None, pa.string())


def clean_text(text: pa.Array, *, rich: bool = True) -> pa.Array:
    """Trim, collapse whitespace and drop control characters; blank text becomes null.

    ``rich`` also strips HTML tags and unescapes entities; identifiers skip it
    so that a key such as ``A&amp;B`` is never silently rewritten.
    """
    return once_per_value(lambda values: _clean_arrow(values, rich), text.cast(pa.string()))


def once_per_value(function, text: pa.Array):
    """``function`` of a text column, run on its distinct values when they are few.

    Feeds repeat most columns' values (categories, brands, durations,
    "F&B"): a column of 20,000 rows holds a handful. Only for functions that
    read each value alone, whose result for a value does not depend on the
    rest of the column, so the result is the same either way. ``function``
    returns an array or a pandas Series (timestamps), or a tuple of arrays,
    one value a row.
    """
    if isinstance(text, pa.ChunkedArray):  # a table's column: one dictionary for it all
        text = text.combine_chunks()
    encoded = pc.dictionary_encode(text)
    if len(encoded.dictionary) * 4 > len(text):
        return function(text)
    result = function(encoded.dictionary)

    def placed(column):
        if isinstance(column, pd.Series):  # timestamps: missing rows become NaT
            codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
            return pd.Series(column.array.take(codes, allow_fill=True))
        return column.take(encoded.indices)

    return tuple(map(placed, result)) if isinstance(result, tuple) else placed(result)


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
    # An ASCII string is searched for what the pass could change in it; any other string
    # takes the pass (a column of non-ASCII text, such as descriptions, skips the search).
    unusual = pc.invert(pc.string_is_ascii(text))
    text = _where(
        text,
        _or_else_search(unusual, text, _ASCII_CONTROL),
        lambda t: pc.replace_substring_regex(t, _CONTROL_RE2, ""),
    )
    unusual = pc.invert(pc.string_is_ascii(text))
    text = _where(
        text,
        _or_else_search(unusual, text, f"  |{_ASCII_SPACE}"),
        lambda t: pc.replace_substring_regex(t, _SPACE_CHANGE_RE2, " "),
    )
    return _trimmed(text)


def _or_else_search(unusual: pa.Array, text: pa.Array, pattern: str) -> pa.Array:
    """``unusual``, or where ``pattern`` matches; not searched when every string is unusual."""
    if pc.all(unusual).as_py() is not False:
        return unusual
    return pc.or_(unusual, pc.match_substring_regex(text, pattern))


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


def _numpy(mask: pa.Array) -> np.ndarray:
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False).astype(bool)


def trimmed_or_null(text: pa.Array) -> pa.Array:
    """Text trimmed of Unicode whitespace at both ends; blank text becomes null."""
    text = pc.utf8_trim_whitespace(text.cast(pa.string()))
    return pc.if_else(pc.equal(text, ""), _NULL_TEXT, text)


def blank_to_null(text: pa.Array) -> pa.Array:
    """Text that is empty or only whitespace means "unused" (SPEC 2.5): null; the rest as is."""
    text = text.cast(pa.string())
    return pc.if_else(pc.equal(pc.utf8_trim_whitespace(text), ""), _NULL_TEXT, text)


# Characters an identifier may not hold, by Unicode category rather than by a
# list (issue 26: the soft hyphen passed a list of zero-width marks): controls
# (Cc: tab and line breaks included), format characters (Cf: soft hyphen,
# zero-width and direction marks, word joiners, the BOM, tag characters), line
# and paragraph separators (Zl, Zp) and private-use characters (Co). Invisible
# or unknowable, so two ids that differ only by them look the same to every
# person who reads them (issue 16).
_ID_FORBIDDEN_RE2 = r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Co}]"
_ID_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Co"})


def first_invisible(value: object) -> str:
    """The first character ``identifier_ok`` refuses in ``value``, as U+XXXX (for messages)."""
    for character in str(value):
        if unicodedata.category(character) in _ID_FORBIDDEN_CATEGORIES:
            return f"U+{ord(character):04X}"
    return ""


def identifier_ok(text: pa.Array) -> np.ndarray:
    """False where an identifier holds a control or invisible character."""
    return ~_numpy(pc.match_substring_regex(text.cast(pa.string()), _ID_FORBIDDEN_RE2))


# --- booleans -----------------------------------------------------------------


def spelled_booleans(text: pa.Array) -> pa.Array:
    """True or False for the boolean spellings (any case, trimmed); null for anything else."""
    low = pc.utf8_lower(pc.utf8_trim_whitespace(text.cast(pa.string())))
    truth = pc.is_in(low, _TRUE)
    known = pc.or_(truth, pc.is_in(low, _FALSE))
    return pc.if_else(known, truth, pa.scalar(None, pa.bool_()))


# --- numbers ------------------------------------------------------------------


def counts(text: pa.Array, floats: pa.Array | None = None) -> pa.Array:
    """Whole numbers 0 to MAX_COUNT from their text (``5``, ``" 7 "``); null otherwise.

    ``floats`` marks the values sent as JSON numbers with a fraction or an
    exponent, which arrive as their JSON text (``flat.JsonFloat``): ``5.0``
    is then a count and ``4.9999999999999999`` is not, whatever the nearest
    float is. Text such as ``"5.0"`` is not a count.
    """
    text = pc.utf8_trim_whitespace(text.cast(pa.string()))
    whole = pc.replace_substring_regex(text, r"^([0-9]+)\.0+$", r"\1")
    if floats is None:
        whole = text
    else:
        whole = pc.if_else(floats, whole, text)
    ok = pc.match_substring_regex(whole, f"^{_COUNT}$")
    number = pc.cast(pc.if_else(ok, whole, _NULL_TEXT), pa.int64())
    return pc.if_else(
        pc.less_equal(number, settings.MAX_COUNT), number, pa.scalar(None, pa.int64())
    )


def money(text: pa.Array) -> pa.Array:
    """Plain decimal text with at most two decimals, trimmed; null where not money.

    Currency symbols and thousands separators are refused: "1,299" could be
    1299 or 1.299; so are exponents and a third decimal, never rounded.
    """
    text = pc.utf8_trim_whitespace(text.cast(pa.string()))
    return pc.if_else(pc.match_substring_regex(text, f"^(?:{_MONEY})$"), text, _NULL_TEXT)


# --- durations ----------------------------------------------------------------


def durations(text: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Canonical text and whole seconds of ISO 8601 durations, both null where not one.

    All in Arrow: one RE2 match, then each unit's number scaled and summed,
    once per distinct text.
    """
    return once_per_value(_durations, text.cast(pa.string()))


def _durations(text: pa.Array) -> tuple[pa.Array, pa.Array]:
    text = pc.utf8_upper(pc.utf8_trim_whitespace(text))
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
    seconds = pc.cast(pc.round(pc.if_else(valid, total, None)), pa.int64())
    return pc.if_else(valid, text, _NULL_TEXT), seconds


# --- dates --------------------------------------------------------------------

#: Fractional seconds past the microsecond: ``:59.9999999`` is read as ``:59.999999``.
_PAST_MICROSECONDS = r"(:[0-9]{2}[.,][0-9]{6})[0-9]+"
_LAST_INSTANT = pd.Timestamp("9999-12-31T23:59:59.999999", tz="UTC")
_LAST_DATE_START = pd.Timestamp("9999-12-31", tz="UTC")


def timestamps(text: pa.Array, *, end_of_day: bool = False) -> pd.Series:
    """ISO 8601 dates and date-times in UTC; NaT where not parseable.

    A date-time without an offset is taken as UTC. A bare date that ends a
    window means the whole of that day, so it becomes the next midnight.
    Delta and every reader store years 1 to 9999: a time zone can push a
    date past either end (0001-01-01T00:30+01:00 is year 0 in UTC), so those
    are refused.
    """
    text = text.cast(pa.string())
    if text.null_count == len(text):  # most feeds leave the discount dates empty
        return pd.Series(pd.NaT, index=pd.RangeIndex(len(text)), dtype="datetime64[us, UTC]")
    # pandas costs per row, missing ones too, and a feed's dates repeat (a sale's window):
    # each value is read alone, so each distinct one is read once.
    return once_per_value(lambda values: _timestamps(values, end_of_day), text)


def _timestamps(text: pa.Array, end_of_day: bool) -> pd.Series:
    """``timestamps`` of text with no null."""
    # The lake keeps microseconds. pandas parses a column at the finest resolution any of
    # its values needs, and 9999-12-31 does not fit nanoseconds: one .NET time with seven
    # digits of fraction in the push made every far date invalid (issue 26). Digits past
    # the sixth are cut first, so each value parses the same, whatever its neighbours.
    text = pc.replace_substring_regex(text, _PAST_MICROSECONDS, r"\1")
    values = pd.Series(text.to_pandas(), dtype=object).str.strip()
    parsed = pd.to_datetime(values, format="ISO8601", utc=True, errors="coerce")
    parsed = pd.Series(parsed).astype("datetime64[us, UTC]")
    year = parsed.dt.year
    parsed = parsed.where((year >= 1) & (year <= 9999))
    if end_of_day:
        date_only = values.str.fullmatch(_DATE_ONLY).fillna(False).astype(bool)
        # The day after 9999-12-31 cannot be stored: that day ends at its last microsecond.
        last = (parsed == _LAST_DATE_START).to_numpy()
        following = (parsed.where(~last) + pd.Timedelta(days=1)).where(~last, _LAST_INSTANT)
        parsed = parsed.where(~date_only, following)
    return parsed.astype("datetime64[us, UTC]").reset_index(drop=True)


# --- URLs and lists ---------------------------------------------------------------


def urls_ok(text: pa.Array) -> np.ndarray:
    """True for http(s) URLs of at most MAX_URL_CHARS characters."""
    text = text.cast(pa.string())
    ok = _numpy(pc.match_substring_regex(text, f"^(?:{_URL})$", ignore_case=True))
    return ok & (
        pc.fill_null(pc.utf8_length(text), 0).to_numpy(zero_copy_only=False)
        <= settings.MAX_URL_CHARS
    )


def is_url(value: object) -> bool:
    """One value is an http(s) URL (for messages)."""
    return isinstance(value, str) and re.fullmatch(_URL, value, re.I) is not None


# --- repairs: values with exactly one reading (issue 19) ---------------------------

#: What the WHATWG URL standard does to a URL as typed: leading and trailing
#: C0 controls and spaces are stripped, tabs and newlines inside removed, and
#: a space, ``"<>`` or a control character in the path, query or fragment
#: percent-encoded.
_URL_EDGES = "".join(map(chr, range(0x21)))  # C0 controls and the space
_URL_REMOVED = re.compile(r"[\t\n\r]")
_URL_ENCODED = re.compile(r'[ "<>\x00-\x1f\x7f]')
_URL_HEAD = re.compile(r"(https?://[^\s/?#<>\"]+)((?:[/?#].*)?)", re.I | re.S)


def repaired_url(value: str) -> str | None:
    """The URL a browser would request for ``value``; None when that is not an http(s) URL.

    Only the repairs the URL standard itself makes, so the result names the
    same resource: nothing is guessed about a host, a scheme or a path.
    """
    head = _URL_HEAD.fullmatch(_URL_REMOVED.sub("", value.strip(_URL_EDGES)))
    if head is None:
        return None
    rest = _URL_ENCODED.sub(lambda m: f"%{ord(m.group()):02X}", head.group(2))
    fixed = head.group(1) + rest
    return fixed if fixed != value and urls_ok(pa.array([fixed]))[0] else None


_ZEROS_PAST_CENTS = re.compile(r"([0-9]{1,10})\.([0-9]{0,2}?)0+")


def repaired_money(value: str) -> str | None:
    """A price sent with more than two decimals that are all trailing zeros, without them.

    ``42.000000`` is exactly ``42``; ``12.345`` is not a price, and is not rounded.
    """
    match = _ZEROS_PAST_CENTS.fullmatch(value.strip())
    if match is None or len(value.strip().split(".")[1]) <= 2:
        return None
    whole, cents = match.groups()
    return whole + (f".{cents}" if cents else "")


_DURATION_PART = re.compile(r"([0-9]+(?:[.,][0-9]+)?)([YMWDHS])")


def repaired_duration(value: str, *, checked: bool = True) -> str | None:
    """An ISO 8601 duration for text with exactly one reading as one; None otherwise.

    The one rewrite: a designator on the wrong side of the ``T`` that starts
    the time part, or the ``T`` left out. Hours and seconds exist only after
    it and years, weeks and days only before it, so ``P3H`` is ``PT3H``,
    ``P1D12H`` is ``P1DT12H``, ``PT2D`` is ``P2D`` and ``P1DT`` is ``P1D``.
    An ``M`` keeps its side of a ``T`` that was sent; without one, it is moved
    only after hours (``P1H30M``: minutes) or kept before days (``P1M2D3H``:
    months). Alone with seconds (``P2M30S``) it may be either, and the value is
    left alone, as is anything out of order.
    """
    text = value.strip().upper()
    if not text.startswith("P") or text.count("T") > 1:
        return None
    before, _, after = text[1:].partition("T")
    sent_t = "T" in text
    sides = []
    for side, body in ((0, before), (1, after)):
        parts = _DURATION_PART.findall(body)
        if "".join(n + u for n, u in parts) != body:
            return None
        sides += [(side, n, u) for n, u in parts]
    if not sides:
        return None
    date, time = [], []
    has_hours = any(u == "H" for _, _, u in sides)
    for position, (side, number, unit) in enumerate(sides):
        if unit in "YWD":
            date.append((number, unit))
        elif unit in "HS":
            time.append((number, unit))
        elif sent_t:
            (time if side else date).append((number, unit))
        else:
            later = {u for _, _, u in sides[position + 1 :]}
            if later & {"W", "D"}:
                date.append((number, unit))  # before days or weeks: months
            elif has_hours and not later & {"H"}:
                time.append((number, unit))  # after the hours: minutes
            else:
                return None
    fixed = (
        "P"
        + "".join(n + u for n, u in date)
        + ("T" + "".join(n + u for n, u in time) if time else "")
    )
    in_order = [u for _, u in date] == sorted((u for _, u in date), key="YMWD".index) and [
        u for _, u in time
    ] == sorted((u for _, u in time), key="HMS".index)
    if not in_order or fixed == text:
        return None
    # ``checked=False``: the caller checks many at once (``validate._repairs``).
    return fixed if not checked or durations(pa.array([fixed]))[0][0].is_valid else None


def lists_at(positions: np.ndarray, values: pa.Array, length: int) -> pa.ListArray:
    """A list<string> column from parallel arrays: each value goes to its row position's list.

    Rows with no value get an empty list, never null; the values stay Arrow,
    with no Python string per value.
    """
    order, offsets = grouped_by_row(positions, length)
    return pa.ListArray.from_arrays(offsets, values.cast(pa.string()).take(order))


def empty_lists(length: int) -> pa.ListArray:
    """A list<string> column of ``length`` empty lists."""
    return lists_at(np.zeros(0, dtype="int64"), pa.array([], pa.string()), length)


def grouped_by_row(positions: np.ndarray, length: int) -> tuple[np.ndarray, pa.Array]:
    """The order that groups values by row position (stable), and the list offsets of the rows.

    What building any list or map column from (row, value) pairs needs.
    """
    order = np.argsort(positions, kind="stable")
    counts = np.bincount(positions, minlength=length) if length else np.zeros(0, "int64")
    return order, row_offsets(counts)


def row_offsets(counts: np.ndarray) -> pa.Array:
    """A list column's offsets from the number of values of each row."""
    return pa.array(np.concatenate([[0], np.cumsum(counts)]), pa.int32())
