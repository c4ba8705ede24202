"""The gated fast path: items read as columns straight from their JSON text.

The exact path (``parse.parse_push``) decodes every item into Python objects,
lays them out in pandas and converts each column (``cells.from_frame``): 3.7 s
of an 8.6 s ingest of 100,000 items (``python -m bench``). Most items
of a real feed hold nothing that path exists for: no float whose spelling
matters, no repeated key, no NaN, no escape, no field outside the spec. This
module reads such items with one ``polars.read_ndjson`` into the same cells,
and leaves every other item to the exact path.

The gate must be exact: an item it vouches for gets the cells the exact path
would give it, byte for byte (``tests/test_gate.py`` judges clean and hostile
items both ways). Polars alone cannot tell: it resolves a repeated key to its
first value, skips fields it was not asked for, and reads ``true`` and ``5``
into a text column as ``"true"`` and ``"5"``, kind lost. So the gate reads the
item's text as well, with counts and patterns that are exact once the text
holds no escaped quote. Then every ``"`` opens or closes a text, and a ``"``
followed by ``:`` closes a key (the one exception, a text that starts with a
colon, is sent to the exact path):

- **keys**: the keys in the text must number the fields Polars found. A
  repeated key, a field outside the spec, a known field in the wrong object, an
  object inside a list or a null each leave a key that Polars did not read;
- **values that are not text** (``"k": 5``, ``"k": {``) are found by one
  pattern: an object where the spec has one, a list where it has a list, and
  otherwise ``true``, ``false`` or an integer of at most 18 digits, which gives
  the field its kind. Anything else (a float, whose spelling the exact path
  keeps; a null; a huge integer) sends the item to the exact path;
- **quotes**: two per key, two per text value and two per list element. A
  number, boolean or null inside a list leaves fewer.

Each count is one vectorized Polars expression over the batch, and each item's
verdict depends on its own text only.

The same columns give each vouched item its canonical text, the one the push's
content digest is made of (``parse.canonical_json``), so a vouched item is
never decoded into Python objects; a refusal decodes the few it shows
(``parse.ParsedPush.item``).
"""

from __future__ import annotations

import io

import numpy as np
import polars as pl

from . import settings
from .cells import KIND, LIST_FIELDS, REQUIRED, Cells
from .rules import CONTAINERS, RULES_BY_SOURCE

#: Flat field (``pricing_info.mrp``) of each key the spec names (``mrp``). Key names are
#: unique across the item and its objects (asserted below), so a key's name says where
#: it belongs, and the key count says whether it sits there.
_FIELD_OF_KEY: dict[str, str] = {s.rpartition(".")[2]: s for s in RULES_BY_SOURCE}
assert len(_FIELD_OF_KEY) == len(RULES_BY_SOURCE)
assert not set(_FIELD_OF_KEY) & set(CONTAINERS)

_SCALARS = tuple(s for s in RULES_BY_SOURCE if s not in LIST_FIELDS)
_LISTS = tuple(s for s in RULES_BY_SOURCE if s in LIST_FIELDS)


def _dtype(field: str) -> pl.DataType:
    return pl.List(pl.String) if field in LIST_FIELDS else pl.String()


#: What Polars reads: every field of the spec as text (lists as lists of text), in its object.
SCHEMA: dict[str, pl.DataType] = {
    field: _dtype(field) for field in RULES_BY_SOURCE if "." not in field
} | {
    container: pl.Struct(
        {
            field.partition(".")[2]: _dtype(field)
            for field in RULES_BY_SOURCE
            if field.startswith(container + ".")
        }
    )
    for container in CONTAINERS
}

#: The attributes Polars is asked for are only those a batch's texts name: it builds a
#: struct value by value, each with a copy of its fields, and the struct of all 120
#: attributes was two thirds of the read (61 ms for 5,000 items, 16 ms without the
#: attributes; 25 ms asking for the 21 the bench's feed uses). Every key a vouched text
#: holds is spelled ``"key":``, so the attributes named are found by one Aho-Corasick pass
#: over the batch (11 ms).
_ATTRIBUTES = dict(SCHEMA["attributes"].to_schema())  # type: ignore[attr-defined]
_ATTRIBUTE_KEYS = [f'"{name}":' for name in _ATTRIBUTES]


def _schema(texts: pl.Series) -> dict[str, pl.DataType]:
    """``SCHEMA`` with only the attributes some text names (a superset of those read).

    Asking for fewer fields changes no value read: each item's attributes are
    all among them, whatever else the batch holds (a key spelled with an
    escape never gets here: ``_EXACT_ONLY``). The batch before most often
    named the same ones: when no text names any other (``contains_any``, half
    the time of finding them), its attributes are asked for again, a superset.
    """
    global _last_named
    named = _last_named
    others = [key for key in _ATTRIBUTE_KEYS if key[1:-2] not in named]
    if not named or (others and texts.str.contains_any(others).any()):
        found = texts.str.extract_many(_ATTRIBUTE_KEYS, overlapping=True).explode().drop_nulls()
        named = _last_named = frozenset(key[1:-2] for key in found.unique().to_list())
    # A struct needs a field: with no attribute named, the first (which no item holds).
    used = named or {next(iter(_ATTRIBUTES))}
    return SCHEMA | {"attributes": pl.Struct({k: v for k, v in _ATTRIBUTES.items() if k in used})}


#: The attributes the last batch read named (``_schema``); shared by every thread that
#: reads, which is safe: whichever set a batch starts from, it is checked against its texts.
_last_named: frozenset[str] = frozenset()


#: Texts the gate never reads, each found by a literal-led pattern (one regex of them all
#: is four times slower): an escaped quote (the counts below take every ``"`` for a
#: delimiter), an escaped surrogate (lone ones are refused by the exact path), NaN and
#: Infinity, an exponent (Polars refuses a whole batch over ``1e400``), white space
#: before a colon (so that every key ends in ``":``), and an escape in a key (so that
#: every key is spelled as its name, which ``_schema`` looks for; a key's closing quote is
#: the only one a colon follows).
_EXACT_ONLY = (
    ('\\"', True),
    (r"\\u[dD][89a-fA-F]", False),
    ("NaN|Infinity", False),
    (r"[0-9][eE][-+]?[0-9]", False),
    (r"[ \t\r\n]:", False),
    (r'\\[^"]*":', False),
)
#: A key and the start of its value, for every value that is not text. Every key of the
#: spec is spelled with these characters; a key that is not is outside the spec, and its
#: item fails the key count anyway.
_NOT_TEXT = r'"[A-Za-z0-9_]+":\s*[^"\s,}\]]+'
#: Integers the exact path's int64 column writes back digit for digit (``-0`` is ``0``).
_INT = r"^(?:0|-?[1-9][0-9]{0,17})$"


def read(
    texts: pl.Series, raw: list[bytes] | None = None
) -> tuple[np.ndarray, Cells | None, pl.Series | None]:
    """Which items the gate vouches for, their cells and canonical texts, from their JSON texts.

    ``texts`` are the items' JSON texts, each one JSON object (as split from a
    file); ``raw``, the same as UTF-8 bytes, if the caller has them. The
    cells are those ``cells.from_frame`` gives the same items, rows in order;
    each canonical text is what ``parse.canonical_json`` writes for the item
    (null where a text value needs an escape: ``_canonical``). Both are None
    when no item is vouched for. A batch costs a fixed number of Polars
    calls, whatever its fields; a call is worth batches of thousands of items.
    """
    n = texts.len()
    sent = texts.to_frame("text").select(
        exact=pl.any_horizontal(
            [pl.col("text").str.contains(p, literal=literal) for p, literal in _EXACT_ONLY]
            + [pl.col("text").str.len_chars() > settings.MAX_ITEM_BYTES]
        ),
        lines=pl.col("text").str.contains("[\r\n]"),
    )
    rows = np.flatnonzero(~sent["exact"].to_numpy())
    if not len(rows):
        return np.zeros(n, bool), None, None
    chosen = texts.gather(rows) if len(rows) < n else texts
    if raw is None or sent["lines"].any():
        # A line break in an item's text is white space between tokens: a space for the reader.
        lines = chosen.str.replace_all("[\r\n]", " ") if sent["lines"].any() else chosen
        ndjson = lines.str.join("\n").item().encode("utf-8")
    else:
        ndjson = b"\n".join(raw if len(rows) == n else [raw[i] for i in rows.tolist()])
    try:
        frame = pl.read_ndjson(io.BytesIO(ndjson), schema=_schema(chosen), ignore_errors=True)
    except Exception:  # noqa: BLE001 - whatever Polars refuses, the exact path reads
        return np.zeros(n, bool), None, None
    if frame.height != len(rows):
        return np.zeros(n, bool), None, None
    containers = frame.select(pl.col(c).is_not_null().alias(f"{c}.") for c in CONTAINERS)
    frame = pl.concat(  # struct.field is ten times slower than unnest
        [frame.unnest(CONTAINERS, separator="."), containers], how="horizontal"
    )
    unnamed = [f for f in RULES_BY_SOURCE if f not in frame.columns]  # attributes no item named
    frame = frame.with_columns(pl.lit(None, pl.String).alias(f) for f in unnamed)
    ok, kinds = _judged(chosen, frame)
    keep = np.flatnonzero(ok)
    vouched = np.zeros(n, bool)
    vouched[rows[keep]] = True
    if not len(keep):
        return vouched, None, None
    if len(keep) < frame.height:
        position = np.full(frame.height, -1, np.int64)  # a read row's place among the kept
        position[keep] = np.arange(len(keep))
        frame, chosen = frame[keep], chosen.gather(keep)
        kinds = kinds.with_columns(row=position[kinds["row"].to_numpy()])
        kinds = kinds.filter(pl.col("row") >= 0)
    cells = _cells(frame, kinds)
    typed = frozenset(kinds["field"].unique().to_list())
    return vouched, cells, _canonical(cells, frame, ~chosen.str.contains(_ESCAPED), typed)


def _judged(texts: pl.Series, frame: pl.DataFrame) -> tuple[np.ndarray, pl.DataFrame]:
    """Each item's verdict, and the kinds of its values that are not text (row, field, kind).

    ``frame`` is what Polars read, objects unnested, with a ``container.``
    column saying whether each object was there.
    """
    found = frame.select(
        scalars=pl.sum_horizontal(pl.col(_SCALARS).is_not_null()),
        others=pl.sum_horizontal(
            pl.col(_LISTS).is_not_null(), pl.col([f"{c}." for c in CONTAINERS])
        ),
        elements=pl.sum_horizontal(pl.col(_LISTS).list.len().fill_null(0)),
    )
    sent = texts.to_frame("text").select(
        keys=pl.col("text").str.count_matches('":', literal=True),
        quotes=pl.col("text").str.count_matches('"', literal=True),
        values=pl.col("text").str.extract_all(_NOT_TEXT),
    )
    values = (
        sent.lazy()
        .select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("row"), "values")
        .explode("values")
        .drop_nulls("values")
        .select("row", parts=pl.col("values").str.split_exact('":', 1))
        .unnest("parts")
        .select(
            "row",
            key=pl.col("field_0").str.slice(1),
            token=pl.col("field_1").str.strip_chars_start(),
        )
        .with_columns(field=pl.col("key").replace_strict(_FIELD_OF_KEY, default=None))
        .with_columns(
            kind=pl.when(pl.col("key").is_in(CONTAINERS))
            .then(pl.when(pl.col("token").str.starts_with("{")).then(pl.lit("dict")))
            .when(pl.col("field").is_in(_LISTS))
            .then(pl.when(pl.col("token").str.starts_with("[")).then(pl.lit("list")))
            .when(pl.col("field").is_not_null())
            .then(
                pl.when(pl.col("token").is_in(["true", "false"]))
                .then(pl.lit("bool"))
                .when(pl.col("token").str.contains(_INT))
                .then(pl.lit("int"))
            )
        )
        .select("row", "field", "kind")
        .collect()
    )
    scalar = values.filter(pl.col("kind").is_in(["bool", "int"]))
    not_text = np.bincount(scalar["row"].to_numpy(), minlength=frame.height)
    keys = sent["keys"].to_numpy()
    scalars = found["scalars"].to_numpy()
    ok = (keys == scalars + found["others"].to_numpy()) & (
        sent["quotes"].to_numpy() == 2 * (keys + scalars - not_text + found["elements"].to_numpy())
    )
    ok[values.filter(pl.col("kind").is_null())["row"].to_numpy()] = False
    return ok, scalar


def _cells(frame: pl.DataFrame, kinds: pl.DataFrame) -> Cells:
    """The vouched rows' cells, as ``cells.from_frame`` lays them out.

    ``kinds`` (row, field, kind) holds the values sent as booleans or integers;
    every other value Polars found was sent as text (or, for a list, a list).
    """
    n = frame.height
    kinds = kinds.with_columns(pl.col("row").cast(pl.Int64))
    present = frame.select(pl.col(list(RULES_BY_SOURCE)).is_not_null().any()).row(0, named=True)
    fields = [f for f in RULES_BY_SOURCE if present[f] or f in _REQUIRED]
    scalars = [f for f in fields if f not in LIST_FIELDS]
    lists = [f for f in fields if f in LIST_FIELDS and present[f]]
    sent = (
        kinds.pivot(on="field", index="row", values="kind")
        .join(pl.DataFrame({"row": np.arange(n, dtype=np.int64)}), on="row", how="right")
        .sort("row")
    )
    wide = pl.concat([frame, sent.select(pl.all().name.prefix("\x00"))], how="horizontal")
    kind = wide.select(
        [
            pl.coalesce(
                *([pl.col(f"\x00{f}")] if f"\x00{f}" in wide.columns else []),
                pl.when(pl.col(f).is_not_null()).then(pl.lit("str")),
            )
            .cast(KIND)
            .alias(f)
            for f in scalars
        ]
        + [pl.when(pl.col(f).is_not_null()).then(pl.lit("list")).cast(KIND).alias(f) for f in lists]
    )
    text = frame.select(
        [pl.col(f) for f in scalars] + [pl.lit(None, pl.String).alias(f) for f in lists]
    )
    element_kinds = frame.select(
        pl.col(f).list.eval(
            pl.when(pl.element().is_null()).then(pl.lit(None, pl.String)).otherwise(pl.lit("str"))
        )
        for f in lists
    )
    return Cells(text, kind, {f: (frame[f], element_kinds[f]) for f in lists})


_REQUIRED = frozenset(r.source for r in REQUIRED)

#: An escape whose character ``orjson`` escapes again when it writes the text (a control
#: character, a quote, a backslash): ``_canonical`` leaves such an item to orjson.
_ESCAPED = r"\\[^u/]|\\u00[01][0-9a-fA-F]|\\u00(?:22|5[cC])"


def _canonical(
    cells: Cells, frame: pl.DataFrame, plain: pl.Series, typed: frozenset[str]
) -> pl.Series:
    """Each vouched item's canonical text, as ``parse.canonical_json`` writes it (orjson).

    That is compact JSON with the keys sorted at every level. A vouched item
    is made of known keys, texts, integers, booleans, lists of texts and the
    three objects, so its canonical text is a join of its fields, written in
    sorted order, with no object built per item. A text needs no escape where
    the item's JSON has none that orjson would write again (``plain``);
    elsewhere the result is null and orjson writes the item.

    ``typed``: the fields some item sent as a boolean or an integer. Every
    other field is text wherever it is present, and is written without
    looking at its kinds (a fifth less time). A field is absent exactly where
    its text is null, which leaves its member null: the join skips it.
    """
    kind, text = cells.kind, cells.text
    frame = pl.concat(
        [
            text.select(pl.all().name.prefix("t:")),
            kind.select(pl.col(sorted(typed)).cast(pl.String).name.prefix("k:")),
            frame.select(
                [pl.col(f"{c}.") for c in CONTAINERS] + [pl.col(f) for f in cells.elements]
            ),
        ],
        how="horizontal",
    )

    def value(field: str, key: str) -> pl.Expr:
        if field in cells.elements:
            quoted = pl.col(field).list.eval(pl.concat_str(pl.lit('"'), pl.element(), pl.lit('"')))
            body = pl.concat_str(pl.lit("["), quoted.list.join(","), pl.lit("]"))
        else:
            t, k = pl.col(f"t:{field}"), pl.col(f"k:{field}")
            if field not in typed:
                return pl.concat_str(pl.lit(f'"{key}":"'), t, pl.lit('"'))
            body = pl.when(k == "str").then(pl.concat_str(pl.lit('"'), t, pl.lit('"'))).otherwise(t)
        return pl.concat_str(pl.lit(f'"{key}":'), body)

    def joined(members: list[pl.Expr]) -> pl.Expr:
        if not members:
            return pl.lit("")
        return pl.concat_str(members, separator=",", ignore_nulls=True)

    top: list[tuple[str, pl.Expr]] = []
    for name in kind.columns:
        if "." not in name and name not in CONTAINERS:
            top.append((name, value(name, name)))
    for container in CONTAINERS:
        inner = sorted(
            (n.partition(".")[2], value(n, n.partition(".")[2]))
            for n in kind.columns
            if n.startswith(container + ".")
        )
        body = pl.concat_str(
            pl.lit(f'"{container}":{{'), joined([e for _, e in inner]), pl.lit("}")
        )
        top.append((container, pl.when(pl.col(f"{container}.")).then(body)))
    top.sort(key=lambda pair: pair[0])
    item = pl.concat_str(pl.lit("{"), joined([e for _, e in top]), pl.lit("}"))
    return frame.select(pl.when(pl.Series(plain)).then(item).alias("canonical")).to_series()


__all__ = ["SCHEMA", "read"]
