"""The gated fast path judges every item exactly as the exact path does (issue 29).

A feed file's items are split into texts; the gate reads the ones it can vouch
for as columns, and sends the rest to the exact path (``parse.parse_texts``).
Whichever path an item takes, what is stored, every error and every warning
are byte for byte what ``parse_push`` gives for the same payload, and so is the
push's content digest.
"""

from __future__ import annotations

import json
import pickle
import random

import msgspec
import numpy as np
import pandas as pd
import polars as pl
import pytest
from bench import synth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog_lake import gate, sources, split
from catalog_lake.errors import PushError
from catalog_lake.parse import ParsedPush, canonical_json, decode_payload, parse_push, parse_texts
from catalog_lake.push import check_group
from catalog_lake.sources import discover, file_batches, parse_together
from catalog_lake.split import split_items
from tests.conftest import GOOD_ITEM
from tests.mutations import corpus
from tests.test_hostile import ITEMS, item_text


def judged(parsed, strict: bool) -> dict:
    """Everything a push of ``parsed`` decides, as bytes where it can be compared so."""
    checked = check_group(parsed, pd.Series(np.zeros(len(parsed.item_json), int)), strict)
    typed = checked.typed
    return {
        "errors": json.dumps(checked.checked.errors, ensure_ascii=False, default=repr),
        "warnings": json.dumps(checked.checked.warnings, ensure_ascii=False, default=repr),
        "keep": checked.keep.tolist(),
        "client_ids": checked.client_ids.tolist(),
        "typed": typed.as_table(),
        "digest": parsed.digest(),
    }


def agree(got: dict, want: dict) -> None:
    """Two ``judged`` answers are the same: stored rows equal as Arrow, the rest as values."""
    assert got.pop("typed").equals(want.pop("typed")), "stored rows differ"
    assert got == want


def both_paths(texts: list[str], *, strict: bool = False) -> np.ndarray:
    """Judge ``texts`` by both paths, assert they agree, and say which items the gate took."""
    raw = [text.encode("utf-8") for text in texts]
    exact = parse_push(b'{"items":[' + b",".join(raw) + b"]}")
    fast = parse_texts(raw)
    assert fast.item_json == texts  # the raw rows are the texts as split, never re-encoded
    agree(judged(fast, strict), judged(exact, strict))
    vouched, _, written = gate.read(pl.Series(texts, dtype=pl.String))
    for text, canonical in zip(
        np.array(texts)[vouched], [] if written is None else written, strict=True
    ):
        if canonical is not None:  # the canonical text the gate wrote is orjson's, byte for byte
            assert canonical.encode() == canonical_json(decode_payload(text))
    return vouched


def test_the_gate_reads_almost_every_clean_item_of_a_synthetic_feed():
    texts = [synth.to_json(item) for item in synth.items(600, dirty_fraction=0)]
    vouched = both_paths(texts)
    assert vouched.mean() > 0.95
    _, _, written = gate.read(pl.Series(texts))
    assert written.null_count() == 0  # and writes every canonical text itself


def test_a_dirty_synthetic_feed_is_judged_alike_by_both_paths():
    texts = [
        synth.to_json(item, synth.repeated_key(number, 0.2))
        for number, item in enumerate(synth.items(600, dirty_fraction=0.2))
    ]
    for strict in (False, True):
        vouched = both_paths(texts, strict=strict)
    assert 0.6 < vouched.mean() < 0.95  # the defects of kind go to the exact path


@pytest.mark.parametrize("strict", [False, True])
def test_the_mutation_corpus_is_judged_alike_by_both_paths(strict):
    texts = [json.dumps(item, ensure_ascii=False) for item in corpus()]
    vouched = both_paths(texts, strict=strict)
    assert vouched.any() and not vouched.all()


#: Hostile items whose JSON itself needs the exact path; the others hold bad values of
#: plain kinds, which the gate may read (the rules refuse them either way).
EXACT_ONLY = {
    "nan price", "infinite price", "-infinity count", "overflowing number", "huge integer",
    "exponent price",  # text, but the gate takes any digit-e-digit for an exponent
    "duplicate key", "duplicate nested key", "lone surrogate", "surrogate in an attribute",
    "surrogate in a key", "deep nesting in a string attribute", "object for a boolean",
    "list for a duration", "null everywhere", "inventory_info is a list", "attributes is a string",
}  # fmt: skip


def test_each_hostile_item_is_judged_alike_alone_and_among_clean_items():
    hostile = [item_text(override) for _, override, _ in ITEMS]
    for text in hostile:
        both_paths([text])
    clean = [json.dumps(dict(GOOD_ITEM, client_item_id=f"c{n}")) for n in range(len(hostile))]
    mixed = [text for pair in zip(clean, hostile, strict=True) for text in pair]
    vouched = both_paths(mixed)
    assert vouched[0::2].all()
    assert [case for (case, _, _), took in zip(ITEMS, vouched[1::2], strict=True) if not took] == [
        case for case, _, _ in ITEMS if case in EXACT_ONLY
    ]


def test_an_item_reads_alike_whatever_attributes_the_rest_of_its_batch_names():
    """Polars is asked only for the attributes a batch names (``gate._schema``).

    An item naming an attribute no other item names, one naming none, and one
    whose attributes are a text are each read alone, and among the others,
    exactly as the exact path reads them.
    """
    rare = dict(GOOD_ITEM, client_item_id="rare")
    rare["attributes"] = dict(GOOD_ITEM["attributes"], scent="rose", model_year=2020)
    bare = {k: v for k, v in GOOD_ITEM.items() if k != "attributes"} | {"client_item_id": "bare"}
    texts = [json.dumps(rare), json.dumps(bare), json.dumps(dict(GOOD_ITEM, attributes="x"))]
    alone = [both_paths([text])[0] for text in texts]
    assert alone == [True, True, False]  # a text for the attributes object: the exact path
    assert both_paths(texts).tolist() == alone
    assert both_paths(texts[1:]).tolist() == alone[1:]  # no item names an attribute
    # A key spelled with an escape is not found by its name: it takes the exact path,
    # alone or beside an item that names the attribute plainly.
    escaped = json.dumps(dict(bare, client_item_id="escaped", attributes={"brand": "Tata"}))
    escaped = escaped.replace('"brand"', '"br\\u0061nd"')
    assert both_paths([escaped]).tolist() == [False]
    assert both_paths([escaped, json.dumps(rare)]).tolist() == [False, True]
    # A batch that names no attribute the batch before did not is asked for that batch's
    # attributes again: it reads alike after a batch naming more, fewer or others.
    for before in ([texts[0]], [texts[1]], [json.dumps(GOOD_ITEM)], [escaped]):
        both_paths(before)
        assert both_paths(texts).tolist() == alone
        assert both_paths([texts[1]]).tolist() == alone[1:2]
        assert both_paths([texts[0], escaped]).tolist() == [True, False]
    both_paths([texts[0]])
    both_paths([json.dumps(GOOD_ITEM)])
    assert {"scent", "model_year"} <= gate._last_named  # the rare batch's, asked for again


# --- a property: clean and hostile items, spelled every way JSON allows ------------------

#: Values a field may be sent as, as JSON text: the kinds the gate must place or refuse.
VALUE_TEXTS = [
    '"x"', '"1299.00"', '"0"', '"true"', '"yes"', '""', '" "', "true", "false", "null",
    "0", "-0", "7", "-3", "2020", "123456789012345678", "1234567890123456789", "1.5",
    "5.0", "1e2", "1E400", "NaN", "-Infinity", "[]", '["a"]', '["https://a.b/c.jpg"]',
    "[1, 2]", "[null]", '[true, "a"]', '{"a": 1}', "{}", '"a\\"b"', '"\\u00e9t\\u00e9"',
    '"caf\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"', '"tab\\there"', '"a\\\\"', '"\\/x"',
    '": starts with a colon"', '"a\\":1"', '"x\\u0022: 1"', '"\\u003a"', '"P7D"', '"PT24H"',
    '"2026-11-30"', '"₹1,299"', '"a\\u0000b"', '"multi\\nline"',
]  # fmt: skip
KEYS = [
    "client_item_id", "name", "lake_category", "description", "images", "location_id",
    "mrp", "sale_price", "discounted_price", "qty", "max_qty", "is_in_stock", "brand",
    "returnable", "return_window", "model_year", "is_veg", "size_chart", "unknown",
    "pricing_info", "attributes", "inventory_info", "a",
]  # fmt: skip
WHERE = ["item", "pricing_info", "inventory_info", "attributes"]
SPACING = [(", ", ": "), (",", ":"), (" ,\n  ", " : "), (",\n", ":\t")]


def spelled(rng: random.Random) -> str:
    """A synthetic item, perhaps with values replaced, keys repeated or moved, and respaced."""
    number = rng.randint(0, 400)
    item = next(synth.items(1, start=number, dirty_fraction=rng.choice([0, 0.5])))
    pairs = {w: list((item if w == "item" else item.get(w, {})).items()) for w in WHERE}
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        where, key = rng.choice(WHERE), rng.choice(KEYS)
        value, how = _Raw(rng.choice(VALUE_TEXTS)), rng.choice(["set", "add", "repeat", "drop"])
        found = [i for i, (k, _) in enumerate(pairs[where]) if k == key]
        if how == "drop" and found:
            del pairs[where][found[0]]
        elif how == "set" and found:
            pairs[where][found[0]] = (key, value)
        else:
            at = rng.randint(0, len(pairs[where]))
            pairs[where].insert(at, (key, value))
            if how == "repeat":
                pairs[where].insert(at, (key, _Raw(rng.choice(VALUE_TEXTS))))
    comma, colon = rng.choice(SPACING)
    ascii = rng.random() < 0.5

    def dump(value) -> str:
        return value.text if isinstance(value, _Raw) else json.dumps(value, ensure_ascii=ascii)

    def obj(fields) -> str:
        inner = comma.join(f"{json.dumps(k, ensure_ascii=ascii)}{colon}{v}" for k, v in fields)
        return "{" + inner + "}"

    top = []
    for key, value in pairs["item"]:
        if key in WHERE[1:] and isinstance(value, dict):
            top.append((key, obj((k, dump(v)) for k, v in pairs[key])))
        else:
            top.append((key, dump(value)))
    return obj(top)


class _Raw:
    """A value given as its JSON text."""

    def __init__(self, text: str) -> None:
        self.text = text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.builds(spelled, st.randoms(use_true_random=False)), min_size=1, max_size=8),
    strict=st.booleans(),
)
def test_clean_and_hostile_items_are_judged_alike_by_both_paths(texts, strict):
    both_paths(texts, strict=strict)


def test_the_property_reaches_both_paths():
    """The items the property draws go down both paths, or it would prove nothing."""
    rng = random.Random(3)
    vouched = both_paths([spelled(rng) for _ in range(60)])
    assert 0.05 < vouched.mean() < 0.95


# --- files: split into texts, NaN included, and parsed several at a time ------------------


def test_a_file_holding_nan_is_split_into_the_texts_as_sent(tmp_path):
    """msgspec refuses NaN; the split masks it, and each item keeps its text as sent."""
    texts = [
        synth.to_json(item) for item in synth.items(400, dirty_fraction=0.2)
    ]  # 1 dirty item in 15 sends a NaN price
    texts.append(json.dumps(dict(GOOD_ITEM, name="NaN and Infinity, in words")))
    data = ('{"items": [\n' + ",\n ".join(texts) + "\n]}").encode()
    assert b"NaN," in data

    split = split_items(data, "feed.json")

    assert [bytes(text).decode() for text in split] == texts
    agree(judged(parse_texts(split), False), judged(parse_push(data), False))


def test_a_file_holding_nan_only_in_words_is_split_into_the_texts_as_sent():
    texts = [json.dumps(dict(GOOD_ITEM, client_item_id=f"SKU-{n}", name=f"NaN bread {n}"))
             for n in range(3)]  # fmt: skip
    texts.append(json.dumps(dict(GOOD_ITEM, client_item_id="SKU-9", description="Infinity")))
    data = ('{"items": [' + ", ".join(texts) + "]}").encode()

    split = split_items(data, "feed.json")

    assert [bytes(text).decode() for text in split] == texts
    agree(judged(parse_texts(split), False), judged(parse_push(data), False))


@pytest.mark.parametrize("broken", ["NaN1", "-NaN", "Infinity2", "NaNa"])
def test_a_word_that_only_masking_makes_valid_json_gets_the_exact_error(tmp_path, broken):
    data = ('{"items": [' + json.dumps(GOOD_ITEM)[:-1] + f', "x": {broken}' + "}]}").encode()
    path = tmp_path / "feeds" / "f.json"
    path.parent.mkdir()
    path.write_bytes(data)

    assert split_items(data, "f.json") is None  # decoded whole, as before
    with pytest.raises(PushError) as refused:
        file_batches(discover(str(path.parent))[0][0], 1_000)
    with pytest.raises(PushError) as exact:
        decode_payload(data)
    assert str(refused.value) == str(exact.value)


def test_small_files_parsed_together_push_what_each_parsed_alone_would(tmp_path):
    folder = tmp_path / "feeds"
    synth.write_feed(folder, 2_500, per_file=300, dirty_fraction=0.2)
    files = discover(str(folder))[0]

    together = [file_batches(feed, 100) for feed in files]
    parse_together(together, 20_000)
    assert all(one.parsed_ahead for one in together if one.texts is not None)

    for one, feed in zip(together, files, strict=True):
        alone = file_batches(feed, 100)
        for pushed, single in zip(one.pushes(), alone.pushes(), strict=True):
            assert pushed.idempotency_key == single.idempotency_key
            agree(judged(pushed.payload, False), judged(single.payload, False))


def test_a_file_that_would_overflow_a_part_opens_the_next_one_not_a_part_of_its_own(
    catalog, tmp_path, monkeypatch
):
    # Files of about 97 items, parts of 500: five files fill a part and the sixth,
    # which would take it past 500, opens the next part. It used to be parsed alone,
    # paying the gate's cost per call for a part of one file.
    from catalog_lake.feeds import ingest

    folder = tmp_path / "feeds"
    synth.write_feed(folder, 1_000, per_file=97, dirty_fraction=0.2)
    sizes: list[int] = []
    real = sources.parse_split

    def counted(raw):
        sizes.append(len(raw))
        return real(raw)

    monkeypatch.setattr(sources, "parse_split", counted)
    summary = ingest(catalog, folder, batch_size=50, group_items=500)

    parts, part = [], 0  # files as they fill parts of at most 500 items, in order
    for feed in discover(str(folder))[0]:
        total = file_batches(feed, 50).total
        if part and part + total > 500:
            parts.append(part)
            part = 0
        part += total
    assert sizes == [*parts, part]
    assert len(sizes) == 3
    assert summary["totals"]["received"] == 1_000


def test_a_push_kept_without_its_decoded_items_digests_as_it_did_with_them():
    # What a worker sends back, or any push whose items are only texts: the digest
    # reads each item again from its text, never an empty object in its place.
    texts = [json.dumps(dict(GOOD_ITEM, client_item_id=f"d-{n}")) for n in range(3)]
    full = parse_push(b'{"items":[' + ",".join(texts).encode() + b"]}")
    bare = ParsedPush(items=[], item_json=full.item_json, cells=None)

    assert bare.digest() == full.digest()
    assert bare.item(1) == full.items[1]


@pytest.mark.parametrize(
    "text",
    [
        '{"items": [{"a": 1}], "meta": {}}',  # another top-level key, after
        '{"meta": {}, "items": [{"a": 1}]}',  # or before
        '{"items": [{"a": 1}], "items": [{"a": 1}]}',  # "items" twice
        '{"items": [{"a": 1}], "items": [], "items": [{"a": 1}]}',  # or three times
        '{"\\u0069tems": [{"a": 1}]}',  # spelled with an escape
        '{"items": [{"a": 1}, 5]}',  # an item that is not an object
        '{"items": []}',
        '["items"]',
        '{"items": [{"a": NaN}], "meta": 1}',  # the same when the file holds NaN
    ],
)
def test_a_file_is_split_only_when_items_is_its_one_key_and_every_item_an_object(text):
    # Anything else is decoded whole, by the path that says exactly what is wrong with it.
    assert split_items(text.encode(), "feed.json") is None


def test_a_span_is_placed_in_its_file_only_when_it_is_a_view_of_it():
    # The repeated-"items" check searches only outside the items kept, found by address.
    data = b'{"items": [{"a": 1}, {"b": 2}]}'
    spans = split_items(data, "feed.json")
    assert [split._offset(span, data) for span in spans] == [11, 21]
    assert split._offset(msgspec.Raw(b'{"a": 1}'), data) is None  # a copy: the whole file


def test_a_file_that_is_items_alone_is_split_whatever_its_spacing():
    text = ' {"items" : [ {"a": 1} ,{"b": [2]} ] } '
    assert [bytes(t) for t in split_items(text.encode(), "feed.json")] == [
        b'{"a": 1}',
        b'{"b": [2]}',
    ]


def test_a_push_cut_from_a_part_travels_to_the_committer_with_its_own_texts_only():
    texts = [json.dumps(dict(GOOD_ITEM, client_item_id=f"SKU-{n}")).encode() for n in range(50)]
    cut = parse_texts(texts).sliced(10, 20).received_only()  # what a Dask worker sends back
    alone = parse_texts(texts[10:20]).received_only()

    shipped = pickle.loads(pickle.dumps(cut))
    assert list(shipped.item_json) == [text.decode() for text in texts[10:20]]
    assert shipped.digest() == alone.digest()
    assert len(pickle.dumps(cut)) < 1.5 * len(pickle.dumps(alone))  # not the part's 50 texts


def test_a_group_of_pushes_reads_its_texts_across_the_pushes_as_one_sequence():
    from catalog_lake.parse import Texts, combine

    texts = [json.dumps(dict(GOOD_ITEM, client_item_id=f"SKU-{n}")).encode() for n in range(30)]
    part = parse_texts(texts)
    group = combine([part.sliced(0, 10), part.sliced(10, 25), part.sliced(25, 30)])

    assert isinstance(group.item_json, Texts)
    assert list(group.item_json) == [text.decode() for text in texts]
    assert group.item_json[9] == texts[9].decode() and group.item_json[10] == texts[10].decode()
    assert list(group.item_json[8:12]) == [text.decode() for text in texts[8:12]]
    assert pickle.loads(pickle.dumps(group.item_json)) == group.item_json

    # A push of a caller's objects (its texts a list) joins a group of split texts alike.
    pushed = parse_push({"items": [dict(GOOD_ITEM, client_item_id="SKU-api")]})
    mixed = combine([part.sliced(0, 2), pushed])
    assert list(mixed.item_json) == [texts[0].decode(), texts[1].decode(), *pushed.item_json]
