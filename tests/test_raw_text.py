"""An item's raw text is the same whichever encoder wrote it: digests and replays depend on it."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from catalog_lake.feeds import ingest
from catalog_lake.parse import _dump, parse_push
from tests.conftest import GOOD_ITEM, make_item


def _json(scalars):
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=12,
    )


INTEGERS = st.integers(min_value=-(2**70), max_value=2**70)  # past 64 bits too
WITHOUT_FLOATS = _json(st.none() | st.booleans() | INTEGERS | st.text())
WITH_FLOATS = _json(
    st.none()
    | st.booleans()
    | INTEGERS
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), WITHOUT_FLOATS, max_size=6))
def test_without_floats_orjson_writes_exactly_what_json_dumps_writes(item):
    assert _dump(item, 0, decoded=True) == _dump(item, 0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.text(), WITH_FLOATS, max_size=6), min_size=1, max_size=3))
def test_a_payload_sent_as_text_or_as_objects_has_the_same_raw_text(items):
    payload = {"items": items}
    assert parse_push(json.dumps(payload)).item_json == parse_push(payload).item_json


def test_control_characters_big_integers_and_lone_surrogates_take_the_same_text():
    item = make_item(
        name="tab\there \x01 \x7f \u2028 é 😀 \ud800",  # the surrogate makes orjson refuse
        attributes__length=2**65,
    )
    assert _dump(item, 0, decoded=True) == _dump(item, 0)
    assert _dump(make_item(name="\x1f é 😀"), 0, decoded=True) == _dump(
        make_item(name="\x1f é 😀"), 0
    )


def test_text_with_a_float_keeps_the_json_spelling_of_it():
    text = json.dumps({"items": [make_item(attributes__weight=1e-05)]})
    assert '"weight":1e-05' in parse_push(text).item_json[0]


def test_text_payloads_with_nan_keep_it_in_their_raw_text():
    text = json.dumps({"items": [dict(GOOD_ITEM, extra=float("nan"))]})
    assert '"extra":NaN' in parse_push(text).item_json[0]


def test_a_feed_file_with_a_float_is_stored_with_the_json_spelling(catalog, tmp_path):
    feed = tmp_path / "feeds"
    feed.mkdir()
    (feed / "a.json").write_text(json.dumps({"items": [make_item(attributes__weight=1e-05)]}))
    (feed / "b.jsonl").write_text(json.dumps(make_item(client_item_id="b")) + "\n")

    ingest(catalog, feed)

    raw = catalog.raw().set_index("client_item_id")["item_json"]
    # A feed file's items keep their text as sent, spacing included (issue 29).
    assert '"weight": 1e-05' in raw["SKU-1"]
    assert raw["b"] == json.dumps(make_item(client_item_id="b"))
