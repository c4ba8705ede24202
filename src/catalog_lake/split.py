"""A feed file's items as their exact JSON texts, split from its bytes without decoding them.

The gated fast path (docs/design.md, "How a push is judged") starts here: msgspec
checks a whole file and hands back each item's span, which ``gate.py`` then
reads as cells with Polars. What msgspec refuses but our decoder accepts (NaN,
lone surrogates, huge integers) is handled apart, so a split never refuses a
file that decoding it whole would take.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from .errors import PushError
from .parse import check_items, decode_payload


def split_items(data: bytes, name: str) -> list[bytes | msgspec.Raw] | None:
    """Each item's exact JSON text, if every item is a well-formed JSON object; else None.

    msgspec checks the whole file and hands back each item's span without
    decoding it. It is strict JSON, so what our decoder also accepts is
    handled apart: in JSON Lines, a line msgspec refuses is checked with our
    decoder (``_split_lines``); in a ``.json`` file, NaN and Infinity are
    masked for the split (``_split_masked``). A ``.json`` file holding a lone
    surrogate or an integer past 4,300 digits, or needing an exact refusal (a
    repeated top-level key, which msgspec would resolve silently), returns None.

    Raises:
        PushError: a JSON Lines file with a line that is not one JSON object.
    """
    name = name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson")):
        refuse_pushes_as_lines(data)
        return _split_lines(data)
    texts = _split_json(data)
    if texts is not None:
        return texts  # no NaN or Infinity outside a text: most feeds, with no search for one
    # msgspec stopped at the first thing it refuses, often a NaN price: the file's first
    # split cost that far (half the file on average), not the two searches of every file.
    nan, infinity = _places(data, b"NaN"), _places(data, b"Infinity")
    if nan or infinity:
        return _split_masked(data, nan, infinity)
    return None


#: A JSON Lines feed's first line that is a whole product object, not an item.
_PUSH_LINE = re.compile(rb'\s*\{\s*"items"\s*:\s*\[')


def refuse_pushes_as_lines(data: bytes) -> None:
    """Refuse a JSON Lines feed whose lines are whole pushes (``{"items": [...]}``).

    Each such line would be refused as an item missing every required field,
    and nothing would name the real cause (issue 50). The first line says
    which shape the file has, so only it is looked at.

    Raises:
        PushError: the first line is a product object.
    """
    if _PUSH_LINE.match(data, 0, 4096):
        raise PushError(
            "invalid_payload",
            'line 1 is a whole push ({"items": [...]}), but a .jsonl or .ndjson feed holds '
            "one item per line: write each item on a line of its own, or name a file that "
            "holds one product object .json",
        )


def _places(data: bytes, word: bytes) -> list[int]:
    """Where ``word`` starts in ``data``, left to right, as ``bytes.replace`` finds them.

    A feed holds few such words; the places then say which items hold one
    (``_split_masked``) with no search of each item. NumPy compares the
    file's bytes with the word's first one, then the few candidates with the
    rest, without the GIL: half the time of ``bytes.find``, which holds it.
    """
    at = np.frombuffer(data, np.uint8)
    end = len(at) - len(word) + 1
    if end <= 0:
        return []
    found = np.flatnonzero(at[:end] == word[0])
    for offset in range(1, len(word)):
        found = found[at[found + offset] == word[offset]]
    places: list[int] = []
    for place in found.tolist():  # overlapping matches ("NaNaN") count once, as a scan would
        if not places or place >= places[-1] + len(word):
            places.append(place)
    return places


class _ProductFile(msgspec.Struct, forbid_unknown_fields=True):
    """A product object file, ``{"items": [...]}``, its items left unparsed."""

    items: list[msgspec.Raw]


_PRODUCT_FILE = msgspec.json.Decoder(_ProductFile)


def _split_json(data: bytes | bytearray) -> list[msgspec.Raw] | None:
    """The items of a product object file as msgspec spans; None if msgspec cannot split it."""
    try:
        # One pass: "items" must be the only key (``forbid_unknown_fields``). Raw spans are
        # views of the file's bytes, joined into batches without a copy each.
        texts = _PRODUCT_FILE.decode(data).items
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if not texts or not all(memoryview(text)[:1] == b"{" for text in texts):
        return None  # empty, or an item that is not an object: refused by the decoding path
    # msgspec keeps the last of two "items": any other lies before the items kept, or after.
    # Only those bytes are searched (the whole file cost 0.7 ms a file of 1.3 MB).
    first, last = _offset(texts[0], data), _offset(texts[-1], data)
    if first is None or last is None:
        found = data.count(b'"items"')
    else:
        found = data.count(b'"items"', 0, first) + data.count(b'"items"', last + len(texts[-1]))
    if found != 1:
        return None  # "items" that may be repeated: the decoding path says what it holds
    return texts


def _offset(span: msgspec.Raw, data: bytes | bytearray) -> int | None:
    """Where a msgspec span starts in the bytes it was decoded from; None if it is a copy.

    Decoded from bytes, a ``msgspec.Raw`` is a view of them, so its place is
    the difference of the two addresses.
    """
    at = np.frombuffer(span, np.uint8).ctypes.data - np.frombuffer(data, np.uint8).ctypes.data
    return at if 0 <= at <= len(data) - len(span) else None


def _split_masked(data: bytes, nan: list[int], infinity: list[int]) -> list[bytes] | None:
    """The items of a file holding NaN or Infinity, split by msgspec all the same.

    Each ``NaN`` becomes ``0.0`` and each ``Infinity`` ``1.000000``, the same
    length, so every item keeps its place (``nan`` and ``infinity``: where
    each word starts); its text is then taken from the file as sent. Replacing
    inside a text value changes nothing of where items start and end. A
    replaced word outside a text may have made broken JSON whole (``NaN1``
    reads as ``0.01``), so every item that holds one must also be one JSON
    object to our decoder, or the file is decoded whole as before (and gets
    its exact error). In the synthetic bench feed nearly every file holds a
    NaN price, and was decoded whole (``python -m bench``).
    """
    masked = bytearray(data)  # a copy, changed at the places found: no second search
    for at in nan:
        masked[at : at + 3] = b"0.0"
    for at in infinity:
        masked[at : at + 8] = b"1.000000"
    spans = _split_json(masked)
    if spans is None:
        return None
    texts: list[bytes] = []
    starts: list[int] = []
    ends: list[int] = []
    position = _offset(spans[0], masked)
    if position is None:
        position = masked.index(bytes(spans[0]))  # the first item, past the "items" key
    for span in spans:
        start = masked.index(b"{", position)  # only separators lie between two items
        position = start + len(span)
        texts.append(data[start:position])
        starts.append(start)
        ends.append(position)
    places = np.array(nan + infinity, np.int64)
    held = np.searchsorted(np.array(starts), places, side="right") - 1  # the item each word lies in
    inside = (held >= 0) & (places < np.array(ends)[np.maximum(held, 0)])
    for index in np.unique(held[inside]).tolist():
        try:
            if not isinstance(decode_payload(texts[index]), dict):
                return None
        except PushError:
            return None
    return texts


#: Splits JSON Lines into each line's value, unparsed, as views of the file's bytes.
_LINES = msgspec.json.Decoder(msgspec.Raw)


def _split_lines(data: bytes) -> list[bytes | msgspec.Raw]:
    """The items of a JSON Lines feed as texts, each line checked to be one JSON object.

    msgspec's ``decode_lines`` takes one value per line (``1, 2`` on a line is
    an error), skips blank lines and copies nothing. A line it refuses is read
    again, alone, by our decoder, which accepts NaN, lone surrogates and huge
    integers, or says what is wrong with the line.
    """
    try:
        raws = _LINES.decode_lines(data)
    except (msgspec.DecodeError, RecursionError):
        raws = None
    if raws == []:
        check_items([], bounded=False)  # raises: an empty feed is refused as an empty push
    if raws is not None and all(memoryview(raw)[:1] == b"{" for raw in raws):
        return raws
    lines = []
    for number, line in enumerate(data.splitlines(), start=1):  # the reason, by line
        line = line.strip()
        if not line:
            continue
        try:
            msgspec.json.decode(line)
            ok = line.startswith(b"{")
        except (msgspec.DecodeError, RecursionError):
            try:
                ok = isinstance(decode_payload(line), dict)  # NaN, lone surrogates, huge numbers
            except PushError as exc:
                raise PushError(exc.reason, f"line {number}: {exc.detail}") from None
        if not ok:
            raise PushError("invalid_payload", f"line {number}: an item must be a JSON object")
        lines.append(line)
    return lines
