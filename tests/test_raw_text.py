"""An item's raw text is the same whichever encoder wrote it: digests and replays depend on it."""

from __future__ import annotations

import json

import pytest
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


def pushed_with(catalog, raw_value: str, strict: bool = True, **where):
    """Push one item with ``raw_value`` (JSON text, e.g. ``4.9999999999999999``) at ``where``."""
    ((key, _),) = where.items()
    item = make_item(client_item_id="X", **{key: "__RAW__"})
    text = json.dumps({"items": [item]}).replace('"__RAW__"', raw_value)
    return catalog.push(text, strict=strict)


@pytest.mark.parametrize(
    ("fragment", "field", "value"),
    [
        ('"location_id": [NaN]', "location_id", ["NaN"]),
        ('"location_id": ["L1", Infinity]', "location_id", ["L1", "Infinity"]),
        ('"location_id": [1e400]', "location_id", ["1e400"]),
        ('"extra": NaN', "extra", "NaN"),
        ('"extra": {"deep": [1, -Infinity]}', "extra.deep[1]", "-Infinity"),
        ('"attributes": {"custom": NaN}', "attributes.custom", "NaN"),
        ('"pricing_info": {"mrp": "1", "sale_price": "1", "tax": Infinity}', "pricing_info.tax", "Infinity"),
    ],
    ids=["nan in location_id", "infinity in location_id", "overflow in location_id",
         "nan unknown field", "infinity deep in an unknown field", "nan unknown attribute",
         "infinity unknown price field"],
)  # fmt: skip
def test_nonfinite_numbers_are_refused_everywhere(catalog, fragment, field, value):
    text = json.dumps(make_item(client_item_id="X"))[:-1] + ", " + fragment + "}"
    response = catalog.push('{"items": [' + text + "]}", strict=True)
    assert response["catalog_push_success_product_count"] == "0"
    (failed,) = response["catalog_push_failed_items"]
    errors = {e["field"]: e for e in failed["errors"]}
    assert errors[field]["value"] == value
    assert errors[field]["code"] in ("invalid_list", "invalid_number")
    json.dumps(response, allow_nan=False)  # the response itself is strict JSON

    # A default push drops the field outside the spec that holds one, with a warning
    # (unless the fragment repeats one of make_item's own keys: ``duplicate_key``).
    response = catalog.push('{"items": [' + text + "]}")
    json.dumps(response, allow_nan=False)
    if fragment.split('"')[1] in make_item():
        assert response["catalog_push_failed_product_count"] == "1"
        return
    (warned,) = response["catalog_push_warning_items"]
    assert [(w["field"], w["value"], w["action"]) for w in warned["warnings"]] == [
        (field, value, "dropped")
    ]
    item = catalog.items().iloc[0]
    stored = [item["extra_fields"], item["extra_attributes"]]
    assert not any("NaN" in s or "Infinity" in s for s in stored if isinstance(s, str))


@pytest.mark.parametrize(
    ("raw_value", "field", "code"),
    [
        ("4.9999999999999999", "inventory_info.qty", "invalid_count"),
        ("5.0000000000000001", "inventory_info.qty", "invalid_count"),
        ("1e3", "inventory_info.qty", "invalid_count"),
        ("19.999999999999999", "pricing_info.mrp", "invalid_price"),
        ("1e2", "pricing_info.mrp", "invalid_price"),
    ],
    ids=["fraction below a whole", "fraction above a whole", "exponent count",
         "money rounded up by float", "exponent money"],
)  # fmt: skip
def test_numbers_are_judged_from_their_json_text(catalog, raw_value, field, code):
    response = pushed_with(catalog, raw_value, **{field.replace(".", "__"): None})
    (failed,) = response["catalog_push_failed_items"]
    assert [(e["field"], e["code"], e["value"]) for e in failed["errors"]] == [
        (field, code, raw_value if "e" in raw_value or len(raw_value) > 10 else float(raw_value))
    ]


def test_raw_keeps_a_number_as_sent_so_a_replay_judges_it_the_same(catalog):
    from catalog_lake.backfill import backfill

    pushed_with(catalog, "4.9999999999999999", inventory_info__qty=None)  # strict: refused

    (stored,) = catalog.raw()["item_json"]
    assert '"qty":4.9999999999999999' in stored
    report = backfill(catalog, dry_run=True)  # raw keeps the push's strictness too
    assert (report["items_rejected"], report["records_new"]) == (1, 0)


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_feed_file_keeps_numbers_as_sent_too(catalog, tmp_path, suffix):
    item = json.dumps(make_item(client_item_id="F", inventory_info__qty="__RAW__"))
    item = item.replace('"__RAW__"', "4.9999999999999999")
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    text = item if suffix == ".jsonl" else '{"items": [' + item + "]}"
    (feeds / f"f{suffix}").write_text(text)

    summary = ingest(catalog, feeds)

    # An optional count costs only itself: stored without it, with a warning.
    assert summary["top_warning_codes"] == [{"code": "invalid_count", "count": 1}]
    assert summary["totals"]["warned"] == 1
    (warned,) = summary["catalog_push_warning_items"]
    assert warned["warnings"][0]["value"] == "4.9999999999999999"
    assert '"qty": 4.9999999999999999' in catalog.raw()["item_json"][0]  # the text as sent


@pytest.mark.parametrize("raw_value", ["120", "120.0", "120.00"])
def test_whole_json_numbers_still_count(catalog, raw_value):
    response = pushed_with(catalog, raw_value, inventory_info__qty=None)
    assert response["catalog_push_failed_product_count"] == "0"
    assert catalog.items()["qty"].tolist() == [120]
    assert f'"qty":{raw_value}' in catalog.raw()["item_json"][0]
