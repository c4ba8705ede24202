"""Turn a push payload into items, their exact JSON text and their cells.

This is the only stage that walks Python objects item by item: a payload
arrives as JSON (or dicts), and something has to visit each value once to
lay it out in columns. Everything after it works on whole columns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import orjson
import polars as pl
import pyarrow as pa

from . import cells, gate, settings
from .cells import Cells
from .errors import ErrorCode, PushError, item_error
from .flat import (
    INT_DIGITS,
    NESTED,
    DuplicateKeys,
    HugeInt,
    JsonFloat,
    Unencodable,
    canonical_json,
    flatten,
    has_surrogate,
    json_int,
    may_be_nonfinite,
    pairs_hook,
)


class Texts(Sequence[str]):
    """Item texts kept in Arrow; a Python string is made only for a text asked for.

    The texts split from a feed are the raw table's column as they are, and
    a refusal or a digest reads the few it needs: making a Python string of
    every item held the GIL 0.17 s per 100,000 items, on the thread that
    reads ahead while the group before is written (issue 29). A group's
    texts are its pushes' arrays side by side (``joined``), never copied
    into one.
    """

    __slots__ = ("array",)

    def __init__(self, array: pa.Array | pa.ChunkedArray) -> None:
        self.array = array

    @classmethod
    def joined(cls, parts: list[Texts | list[str]]) -> Texts:
        """Several pushes' texts as one sequence, in order, without copying a split text.

        A push made of a caller's objects holds its texts as a list: those
        become an array of their own.
        """
        chunks: list[pa.Array] = []
        for part in parts:
            if not isinstance(part, Texts):
                chunks.append(pa.array(part, pa.string()))
            elif isinstance(part.array, pa.ChunkedArray):
                chunks.extend(part.array.chunks)
            else:
                chunks.append(part.array)
        return cls(pa.chunked_array(chunks, pa.string()))

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, key):  # type: ignore[override]
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self.array))
            if step != 1:
                return self.array.to_pylist()[key]
            return Texts(self.array.slice(start, max(stop - start, 0)))
        return self.array[key].as_py()

    def __iter__(self) -> Iterator[str]:
        return iter(self.array.to_pylist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Texts):
            return self.compact().equals(other.compact())
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Texts({len(self)} texts)"

    def compact(self) -> pa.Array:
        """The texts as one array holding only their own bytes (a copy)."""
        if isinstance(self.array, pa.ChunkedArray):
            return self.array.combine_chunks()
        return pa.concat_arrays([self.array])

    def __reduce__(self):
        # A slice pickles its whole parent's buffers (a push cut from a part of 5,000
        # items would carry all 5,000 to the committer): only the texts travel.
        return (Texts, (self.compact(),))


@dataclass
class ParsedPush:
    """A payload laid out for validation; ``item_json`` keeps what was received."""

    items: list[dict[str, Any]]
    item_json: list[str] | Texts
    cells: Cells | None  # None once only what writing needs is kept (``received_only``)
    errors: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    #: ``digest()``, once computed (kept by ``received_only``).
    content_digest: str | None = None
    #: Each item's canonical text (``canonical_json``) where ``parse_split`` wrote it
    #: already; such an item is None in ``items`` until asked for (``item``).
    canonical: list[bytes | None] | None = None

    def item(self, row: int) -> Any:
        """Item ``row`` as decoded, decoded again from its text if it was not kept."""
        found = self.items[row] if row < len(self.items) else None
        if found is None and row < len(self.item_json):
            found = decode_payload(self.item_json[row])
        return {} if found is None else found

    def digest(self) -> str:
        """SHA-256 of the items' content, bound to what was sent and not to how it was spelled.

        Each item is written canonically (keys sorted at every level, numbers
        as sent), so the same items with their keys in another order are the
        same push under an idempotency key, and a dict, text or bytes payload
        of the same items digest alike.
        """
        if self.content_digest is None:
            texts = self.item_json
            canonical = list(self.canonical or [None] * max(len(self.items), len(texts)))
            unwritten = [index for index, text in enumerate(canonical) if text is None]
            # orjson writes a caller's float NaN or Infinity as null, so NaN and None
            # would digest alike; the item's text (json.dumps) spells them out. One
            # search of the texts spares most pushes a search per item.
            whole = "".join(texts[index] for index in unwritten if index < len(texts))
            spelled = "NaN" in whole or "Infinity" in whole
            for index in unwritten:
                canonical[index] = canonical_json(
                    self.item(index),
                    exact=spelled
                    and index < len(texts)
                    and ("NaN" in texts[index] or "Infinity" in texts[index]),
                )
            canonical.append(b"")  # each item's text ends in a line break
            self.content_digest = hashlib.sha256(b"\n".join(canonical)).hexdigest()
            self.canonical = None  # written into the digest: no longer needed
        return self.content_digest

    def sliced(self, start: int, end: int) -> ParsedPush:
        """Items ``start`` to ``end`` as a push of their own (``parse_split`` reads several)."""
        assert self.cells is not None and self.content_digest is None
        return ParsedPush(
            items=self.items[start:end],
            item_json=self.item_json[start:end],
            cells=self.cells.slice(start, end),
            errors={i - start: e for i, e in self.errors.items() if start <= i < end},
            canonical=None if self.canonical is None else self.canonical[start:end],
        )

    def received_only(self) -> ParsedPush:
        """The push without its decoded items and frame: what writing needs once it is checked.

        A Dask worker that validated the push sends this back; the items
        themselves travel as typed columns (``catalog.Checked``).
        """
        return ParsedPush(
            items=[],
            item_json=self.item_json,
            cells=None,
            errors=self.errors,
            content_digest=self.digest(),
        )


def decode_payload(payload: Any, notes: set[str] | None = None) -> Any:
    """Decode JSON text or bytes; pass other objects through untouched.

    ``notes`` gets ``"repeated"`` if an object repeated a key. Every float
    becomes a ``JsonFloat`` that keeps its text, NaN and Infinity included
    (stdlib json accepts them): no rule mistakes one for an absent value.
    """
    if isinstance(payload, (bytes, bytearray, memoryview)):
        raw = bytes(payload)
        if len(raw) > settings.MAX_PAYLOAD_BYTES:
            raise _too_large(len(raw))
        try:
            payload = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PushError("invalid_json", f"payload is not UTF-8 text: {exc}") from None
    if isinstance(payload, str):
        if len(payload) > settings.MAX_PAYLOAD_BYTES:
            raise _too_large(len(payload))
        hook = pairs_hook
        if notes is not None:

            def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
                obj = pairs_hook(pairs)
                if obj.__class__ is DuplicateKeys:
                    notes.add("repeated")
                return obj

        hooks = {
            "object_pairs_hook": hook,
            "parse_float": JsonFloat,
            "parse_constant": JsonFloat,
        }
        try:
            try:
                return json.loads(payload, **hooks)
            except json.JSONDecodeError:
                raise
            except ValueError:
                # An integer of more than 4,300 digits: decoded again, each such one kept as
                # its text (``flat.HugeInt``). Only then, so no other payload pays for a hook.
                return json.loads(payload, parse_int=json_int, **hooks)
        except json.JSONDecodeError as exc:
            # A one-line payload (a JSON Lines item, which its reader numbers) has a column;
            # only a document of several lines has a line of its own to name.
            several = "\n" in exc.doc.rstrip("\r\n")
            where = f"line {exc.lineno} column {exc.colno}" if several else f"column {exc.colno}"
            raise PushError(
                "invalid_json", f"payload is not valid JSON: {exc.msg} at {where}"
            ) from None
        except RecursionError:
            raise PushError(
                "invalid_json", "payload is nested too deeply to be a product object"
            ) from None
    return payload


def _too_large(size: int) -> PushError:
    return PushError(
        "payload_too_large",
        f"payload is {size:,} bytes, over the limit of {settings.MAX_PAYLOAD_BYTES:,}; "
        "split it into several pushes",
    )


def product_items(
    obj: Any, what: str = "a product object", *, bounded: bool = True
) -> list[dict[str, Any]]:
    """The ``items`` of a decoded product object, after checking its outer shape (SPEC 2.2).

    Shared by pushes and ``.json`` feed files, so a file and a push of the same
    bytes get the same answer. ``bounded=False`` (a feed file, pushed in
    batches) lifts the limit on items per push.

    Raises:
        PushError: not an object, a repeated key, no ``items`` list, an empty or
            oversized one, or an item that is not an object.
    """
    if not isinstance(obj, dict):
        raise PushError(
            "invalid_payload",
            f"{what} must be a JSON object with an 'items' list, got {_kind(obj)}",
        )
    if isinstance(obj, DuplicateKeys):
        # json keeps the last of two "items" lists silently: the first would be lost.
        repeated = ", ".join(repr(k) for k in dict.fromkeys(obj.duplicates))
        raise PushError("duplicate_key", f"{what} repeats the key {repeated}; send each key once")
    if "items" not in obj:
        raise PushError("invalid_payload", f"{what} has no 'items' list")
    items = obj["items"]
    if not isinstance(items, list):
        raise PushError("invalid_payload", f"'items' must be a list, got {_kind(items)}")
    check_items(items, bounded=bounded)
    return items


def check_items(items: list[Any], *, bounded: bool = True) -> None:
    """Refuse an empty (or, ``bounded``, oversized) item list, or one holding non-objects."""
    if not items:
        raise PushError("invalid_payload", "'items' is empty; a push carries one or more items")
    if bounded and len(items) > settings.MAX_ITEMS_PER_PUSH:
        raise PushError(
            "too_many_items",
            f"{len(items):,} items in one push, over the limit of "
            f"{settings.MAX_ITEMS_PER_PUSH:,}; split the feed into batches",
        )
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise PushError(
                "invalid_payload", f"items[{index}] must be an object, got {_kind(item)}"
            )


def parse_push(payload: Any, *, decoded: bool = False, repeats: bool = True) -> ParsedPush:
    """Check the payload's outer shape and lay its items out as cells.

    ``decoded`` says the items were decoded from JSON text by
    ``decode_payload`` (``feeds`` knows it of a file; a text payload is
    decoded here): every float in them is then a ``JsonFloat``, NaN and
    Infinity included, and orjson writes the raw text of each item that
    holds none (``_dump``). ``repeats=False`` says no
    object of the items repeated a key (the decoder noted none), which spares
    a walk over every item's objects.

    Raises:
        PushError: the payload as a whole is unusable (SPEC 2.2 shape broken).
    """
    notes: set[str] = set()
    is_text = isinstance(payload, (str, bytes, bytearray, memoryview))
    obj = decode_payload(payload, notes)
    decoded = decoded or is_text
    repeats = repeats and (not is_text or "repeated" in notes)
    items = product_items(obj)
    try:
        item_json = [
            _dump(item, index, decoded=decoded, repeats=repeats) for index, item in enumerate(items)
        ]
    except PushError:
        if is_text:
            raise
        foreign = _foreign_value(obj)
        if foreign is not None and foreign.endswith(" digits"):
            # Python writes no int past 4,300 digits as text (a guard against slow
            # conversion), so the item has no raw text to keep: the caller must send text.
            raise PushError(
                "invalid_payload", f"{foreign} cannot be written as JSON here; send it as text"
            ) from None
        if foreign is not None:
            raise PushError(
                "invalid_payload",
                f"{foreign} cannot be represented as JSON (JSON values, Decimal, date, "
                "datetime and time are accepted)",
            ) from None
        # A Decimal has one exact JSON number and a date or date-time one ISO 8601 text:
        # the payload is written so and read as the JSON text it stands for.
        return parse_push(_EXACT_VALUES.encode(obj))
    total = sum(map(len, item_json))
    if total > settings.MAX_PAYLOAD_BYTES:
        raise _too_large(total)
    errors: dict[int, list[dict[str, Any]]] = {}
    for index, text in enumerate(item_json):
        if len(text) > settings.MAX_ITEM_BYTES:
            errors.setdefault(index, []).append(
                item_error(
                    "",
                    ErrorCode.ITEM_TOO_LARGE,
                    f"item is {len(text):,} characters of JSON, over the limit of "
                    f"{settings.MAX_ITEM_BYTES:,}",
                    len(text),
                )
            )
    unencodable: set[int] = set()
    for index, item in enumerate(items):
        if item_json[index].isascii() and "\\ud" in item_json[index].lower():
            for path in _surrogate_paths(item):
                unencodable.add(index)
                errors.setdefault(index, []).append(
                    item_error(
                        path,
                        ErrorCode.INVALID_TEXT,
                        f"{path} holds a lone surrogate, which cannot be stored as UTF-8; "
                        "send valid Unicode text",
                        str(Unencodable(_get(item, path))),
                    )
                )
        if not repeats:
            continue
        for path, container in _objects(item):
            if isinstance(container, DuplicateKeys):
                for key in container.duplicates:
                    name = f"{path}.{key}" if path else key
                    errors.setdefault(index, []).append(
                        item_error(
                            name,
                            ErrorCode.DUPLICATE_KEY,
                            f"{name} appears more than once in the item; send each key once",
                            key,
                        )
                    )
    return ParsedPush(
        items=items,
        item_json=item_json,
        cells=cells.from_frame(
            flatten(
                items,
                unencodable,
                # A NaN or Infinity, our decoder's JsonFloat or a caller's float, must be
                # marked: pandas and Arrow take any float NaN in a column of texts for a
                # missing cell. Left unmarked, a NaN price read as absent once a push held
                # 64 items (the columnar flatten), and earned another code (issue 29).
                nonfinite=any(map(may_be_nonfinite, item_json)),
            ),
            item_json,
        ),
        errors=errors,
    )


def parse_texts(texts: list[bytes | msgspec.Raw]) -> ParsedPush:
    """A push of item texts split from a feed file: what ``parse_push`` gives for their payload.

    The items the gate vouches for (``gate.read``) are read as columns, their
    canonical texts (the digest's) written from the same columns, and are
    decoded only if a refusal shows one (``ParsedPush.item``); every other
    item takes ``parse_push``. What is stored, every error and warning and
    the digest are those of ``parse_push`` (``tests/test_gate.py``); the raw
    texts are the texts as split from the file, not written again (issue 29).

    Raises:
        PushError: what ``parse_push`` raises for the payload of these texts.
    """
    raw = as_bytes(texts)
    if (
        not raw
        or len(raw) > settings.MAX_ITEMS_PER_PUSH
        or payload_size(raw) > settings.MAX_PAYLOAD_BYTES
    ):
        return parse_push(_payload(raw))  # refused as that payload is
    return parse_split(raw)


def as_bytes(texts: list[bytes | msgspec.Raw]) -> list[bytes]:
    """Split item texts as bytes (msgspec's spans are views of a file's bytes)."""
    return [text if text.__class__ is bytes else bytes(text) for text in texts]


def fits(texts: list[bytes], batch_size: int) -> bool:
    """Whether each push of ``batch_size`` of these texts is within the payload limit."""
    return all(
        payload_size(texts[start : start + batch_size]) <= settings.MAX_PAYLOAD_BYTES
        for start in range(0, len(texts), batch_size)
    )


def payload_size(texts: list[bytes]) -> int:
    """The bytes of the push payload ``{"items":[...]}`` that holds these item texts."""
    return len(b'{"items":[]}') + sum(map(len, texts)) + max(len(texts) - 1, 0)


def parse_split(raw: list[bytes]) -> ParsedPush:
    """``parse_texts`` without the push's own checks: for several pushes at once.

    A call of the gate costs about 15 ms whatever its size, so a file's batches,
    and small files, are parsed thousands of items at a time
    (``sources.parse_together``), then cut into pushes (``ParsedPush.sliced``).
    """
    series = pl.Series(raw, dtype=pl.Binary).cast(pl.String)
    item_json = Texts(series.to_arrow().cast(pa.string()))
    vouched, fast, written = gate.read(series, raw)
    exact = np.flatnonzero(~vouched)
    if fast is None:
        parsed = parse_push(_payload(raw))
        parsed.item_json = item_json
        return parsed
    quick = np.flatnonzero(vouched)
    # The gate wrote the canonical text of each vouched item whose texts need no escape.
    # Any other vouched item holds no float, NaN, huge integer, lone surrogate or repeated
    # key: orjson decodes it as our decoder would and writes the text ``canonical_json``
    # would. Only the texts are kept, not the objects (memory).
    items: list[Any] = [None] * len(raw)
    assert written is not None
    scattered = np.full(len(raw), None, dtype=object)
    scattered[quick] = written.cast(pl.Binary).to_numpy()
    unwritten = quick[written.is_null().to_numpy()].tolist()
    canonical: list[bytes | None] = scattered.tolist()
    for first in range(0, len(unwritten), _DECODED_AT_ONCE):  # 20,000 items' objects: 180 MB
        rows = unwritten[first : first + _DECODED_AT_ONCE]
        decoded = orjson.loads(_payload([raw[i] for i in rows], b"["))
        for index, item in zip(rows, decoded, strict=True):
            canonical[index] = orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
    if not len(exact):
        return ParsedPush(
            items=items,
            item_json=item_json,
            cells=fast,
            canonical=canonical,
        )
    slow = parse_push(_payload([raw[i] for i in exact]))
    for index, item in zip(exact.tolist(), slow.items, strict=True):
        items[index] = item
    order = np.empty(len(raw), np.int64)
    order[exact] = np.arange(len(exact))
    order[quick] = len(exact) + np.arange(len(quick))
    return ParsedPush(
        items=items,
        item_json=item_json,
        cells=cells.concat([slow.cells, fast]).take(order),  # type: ignore[list-item]
        errors={int(exact[index]): errs for index, errs in slow.errors.items()},
        canonical=canonical,
    )


#: Vouched items decoded at once for their canonical texts (``parse_split``).
_DECODED_AT_ONCE = 1_000


def _payload(texts: list[bytes], opening: bytes = b'{"items":[') -> bytes:
    return opening + b",".join(texts) + (b"]}" if opening.startswith(b"{") else b"]")


def _surrogate_paths(item: dict[str, Any]) -> list[str]:
    """Flat-frame names of the fields of ``item`` that hold lone surrogates."""
    paths = []
    for key, value in item.items():
        if key in NESTED and isinstance(value, dict):
            paths += [
                f"{key}.{_escaped(sub)}"
                for sub, v in value.items()
                if has_surrogate(v) or has_surrogate(sub)
            ]
        elif has_surrogate(value) or has_surrogate(key):
            paths.append(_escaped(key))
    return paths


def _escaped(key: str) -> str:
    """A key as storable text: lone surrogates become backslash-u escapes."""
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


def _get(item: dict[str, Any], path: str) -> Any:
    head, _, rest = path.partition(".")
    if rest and head in NESTED and isinstance(item.get(head), dict):
        return item[head].get(rest)
    return item.get(path)


def _objects(value: Any, path: str = ""):
    """Every JSON object in ``value`` with its path (``a.b``, ``a[0].b``), at any depth.

    Repeated keys are refused wherever they are, unknown fields included: the
    lake keeps those losslessly, so it must not keep only the last of two.
    """
    if isinstance(value, dict):
        yield path, value
        for key, inner in value.items():
            if isinstance(inner, (dict, list)):
                yield from _objects(inner, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for position, inner in enumerate(value):
            if isinstance(inner, (dict, list)):
                yield from _objects(inner, f"{path}[{position}]")


#: An int of more bits than this may have more decimal digits than ``str()`` writes.
_INT_BITS = int(INT_DIGITS * 3.3219)  # log2(10)

#: Writes a caller's ``Decimal`` as the JSON number it spells (``Decimal("310.00")`` ->
#: ``310.00``) and dates and date-times as ISO 8601 text, exactly.
_EXACT_VALUES = msgspec.json.Encoder(decimal_format="number")
_EXACT_TYPES = (Decimal, date, datetime, time)


def _foreign_value(value: Any, path: str = "") -> str | None:
    """Where the first value stands that is neither JSON nor a Decimal, date or time, and what."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if not isinstance(key, str):
                return f"{path or 'the payload'}: the key {key!r}"
            found = _foreign_value(inner, f"{path}.{key}" if path else key)
            if found:
                return found
        return None
    if isinstance(value, list):
        for position, inner in enumerate(value):
            found = _foreign_value(inner, f"{path}[{position}]")
            if found:
                return found
        return None
    if isinstance(value, int) and value.bit_length() > _INT_BITS:
        return f"{path}: an integer of more than {INT_DIGITS:,} digits"
    if value is None or isinstance(value, (str, int, float, bool, *_EXACT_TYPES)):
        return None
    return f"{path}: a {type(value).__name__}"


def _dump(item: dict[str, Any], index: int, *, decoded: bool = False, repeats: bool = True) -> str:
    """The item's raw text: compact JSON of what was sent, numbers as they were spelled.

    Items our decoder made (``decoded``) are written by orjson, four times
    faster than ``json``, each ``JsonFloat`` (NaN and Infinity included) and
    ``HugeInt`` as the text it was sent as (``_as_sent``): the items the gate
    leaves to this path mostly hold one (the bench feed's 350 in 20,000 were
    written in 26 ms value by value, in 1.3 ms so). orjson refuses the rest of
    what needs care (an integer past 64 bits, a lone surrogate), and those are
    spelled out value by value (``_dump_pairs``).
    A caller's own dicts are written by ``json``, which keeps their floats,
    NaN included. ``repeats=False``: no object of the item repeated a key.
    """
    repeats = repeats and any(isinstance(c, DuplicateKeys) for _, c in _objects(item))
    try:
        if decoded and not repeats:
            try:
                return orjson.dumps(item, default=_as_sent).decode("utf-8")
            except (orjson.JSONEncodeError, TypeError, UnicodeDecodeError):
                pass  # spelled out below, value by value
        if decoded or repeats:
            text = _dump_pairs(item)
        else:
            text = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise PushError(
            "invalid_payload", f"items[{index}] cannot be represented as JSON: {exc}"
        ) from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates cannot be stored as UTF-8; escaped JSON keeps them exactly.
        if decoded or repeats:
            return _dump_pairs(item, ascii=True)
        text = json.dumps(item, ensure_ascii=True, separators=(",", ":"))
    return text


def _as_sent(value: Any) -> orjson.Fragment:
    """A number kept as its JSON text, for orjson to write as it is (``_dump``)."""
    if isinstance(value, (JsonFloat, HugeInt)):
        return orjson.Fragment(value.text)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _dump_pairs(value: Any, *, ascii: bool = False) -> str:
    """JSON text that repeats keys and spells numbers the way the sender did (json.dumps cannot).

    Written as ``json.dumps(..., separators=(",", ":"))`` writes, so an item
    without repeats or JSON-spelled floats gets the same text either way.
    """
    if isinstance(value, dict):
        pairs = value.pairs if isinstance(value, DuplicateKeys) else list(value.items())
        body = ",".join(
            f"{json.dumps(k, ensure_ascii=ascii)}:{_dump_pairs(v, ascii=ascii)}" for k, v in pairs
        )
        return "{" + body + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump_pairs(v, ascii=ascii) for v in value) + "]"
    if isinstance(value, (JsonFloat, HugeInt)):
        return value.text
    return json.dumps(value, ensure_ascii=ascii)


def combine(parsed: list[ParsedPush]) -> ParsedPush:
    """Several parsed pushes as one, items numbered in order (for group writes)."""
    if len(parsed) == 1:
        return parsed[0]
    errors: dict[int, list[dict[str, Any]]] = {}
    offset = 0
    for one in parsed:
        errors.update({offset + index: errs for index, errs in one.errors.items()})
        offset += len(one.item_json)
    return ParsedPush(
        items=[item for one in parsed for item in one.items],
        item_json=Texts.joined([one.item_json for one in parsed]),
        canonical=None
        if all(one.canonical is None for one in parsed)
        else [c for one in parsed for c in (one.canonical or [None] * len(one.item_json))],
        cells=None
        if any(one.cells is None for one in parsed)
        else cells.concat([one.cells for one in parsed]),  # type: ignore[misc]
        errors=errors,
    )


def payload_from_raw(item_json: list[str]) -> str:
    """Rebuild a push payload from raw-table item texts, for replays."""
    return '{"items":[' + ",".join(item_json) + "]}"


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "text",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)
