"""A corpus of hostile and broken input: each case has one expected outcome, never a crash.

Payload-level cases expect a ``PushError`` reason; item-level cases expect the
exact (field, code) errors of the item, or the exact normalized value stored.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from catalog_lake import Catalog, PushError, check, settings
from catalog_lake.feeds import ingest
from catalog_lake.rules import ERROR, RULES_BY_SOURCE
from tests.conftest import GOOD_ITEM, make_item


def nested(depth: int) -> dict:
    value: dict = {"leaf": "x"}
    for _ in range(depth):
        value = {"n": value}
    return value


PAYLOADS = [
    ("truncated", '{"items": [{"client_item_id": "a"', "invalid_json"),
    ("not json", "items: a, b", "invalid_json"),
    ("number", "42", "invalid_payload"),
    ("string", '"items"', "invalid_payload"),
    ("null", "null", "invalid_payload"),
    ("list", "[]", "invalid_payload"),
    ("items null", '{"items": null}', "invalid_payload"),
    ("items string", '{"items": "abc"}', "invalid_payload"),
    ("item null", '{"items": [null]}', "invalid_payload"),
    ("item number", '{"items": [1]}', "invalid_payload"),
    ("item list", '{"items": [[]]}', "invalid_payload"),
    ("nested too deep", "[" * 50_000 + "]" * 50_000, "invalid_json"),
    (
        "deep inside an item",
        '{"items": [' + '{"a":' * 50_000 + "1" + "}" * 50_000 + "]}",
        "invalid_json",
    ),
    ("not utf-8", b'{"items": [{"name": "\xff"}]}', "invalid_json"),
]


@pytest.mark.parametrize(("case", "payload", "reason"), PAYLOADS, ids=[p[0] for p in PAYLOADS])
def test_payload_level_refusals(catalog, case, payload, reason):
    with pytest.raises(PushError) as caught:
        catalog.push(payload)
    assert caught.value.reason == reason
    assert not catalog.lake.exists()


def test_a_huge_payload_is_refused_before_parsing(catalog, monkeypatch):
    monkeypatch.setattr(settings, "MAX_PAYLOAD_BYTES", 10_000)
    payload = json.dumps({"items": [make_item(description="d" * 20_000)]})
    with pytest.raises(PushError) as caught:
        catalog.push(payload)
    assert caught.value.reason == "payload_too_large"
    with pytest.raises(PushError, match="payload_too_large"):
        catalog.push({"items": [make_item(description="d" * 20_000)]})


ITEMS = [
    # (case, item as JSON text or dict, expected errors)
    ("nan price", '"pricing_info": {"mrp": NaN, "sale_price": "1"}', [("pricing_info.mrp", "invalid_price")]),
    ("infinite price", '"pricing_info": {"mrp": "1", "sale_price": Infinity}', [("pricing_info.sale_price", "invalid_price")]),
    ("-infinity count", '"inventory_info": {"qty": -Infinity}', [("inventory_info.qty", "invalid_count")]),
    ("overflowing number", '"pricing_info": {"mrp": 1e400, "sale_price": "1"}', [("pricing_info.mrp", "invalid_price")]),
    ("huge integer", '"inventory_info": {"qty": 1000000000000000000000000000000}', [("inventory_info.qty", "invalid_count")]),
    ("exponent price", '"pricing_info": {"mrp": "1e2", "sale_price": "1"}', [("pricing_info.mrp", "invalid_price")]),
    ("fullwidth digits", '"pricing_info": {"mrp": "\\uff11\\uff12.00", "sale_price": "1"}', [("pricing_info.mrp", "invalid_price")]),
    ("arabic-indic count", '"inventory_info": {"qty": "\\u0663"}', [("inventory_info.qty", "invalid_count")]),
    ("duplicate key", '"name": "a", "name": "b"', [("name", "duplicate_key")]),
    ("duplicate nested key", '"attributes": {"brand": "a", "brand": "b"}', [("attributes.brand", "duplicate_key")]),
    ("lone surrogate", '"name": "bad \\udc00"', [("name", "invalid_text")]),
    ("surrogate in an attribute", '"attributes": {"colour": "\\ud83d"}', [("attributes.colour", "invalid_text")]),
    ("surrogate in a key", '"attributes": {"\\ud800": "x"}', [("attributes.\\ud800", "invalid_text")]),
    ("deep nesting in a string attribute", '"attributes": {"size_chart": ' + json.dumps(nested(40)) + "}", [("attributes.size_chart", "invalid_string")]),
    ("object for a boolean", '"attributes": {"returnable": {"value": true}}', [("attributes.returnable", "invalid_boolean")]),
    ("list for a duration", '"attributes": {"time_to_ship": ["P1D"]}', [("attributes.time_to_ship", "invalid_duration")]),
    ("text for a count", '"inventory_info": {"qty": "ten"}', [("inventory_info.qty", "invalid_count")]),
    ("javascript url", '"images": ["javascript:alert(1)"]', [("images", "invalid_url")]),
    ("url with spaces", '"images": ["https://img.example.com/a b.jpg"]', [("images", "invalid_url")]),
    ("very long name", '"name": "' + "n" * 5_000 + '"', [("name", "text_too_long")]),
    ("very long description", '"description": "' + "d" * 70_000 + '"', [("description", "text_too_long")]),
    ("null everywhere", None, [
        ("client_item_id", "missing_required_field"), ("lake_category", "missing_required_field"),
        ("name", "missing_required_field"), ("pricing_info.mrp", "missing_required_field"),
        ("pricing_info.sale_price", "missing_required_field"),
    ]),
    ("inventory_info is a list", '"inventory_info": [1, 2]', [("inventory_info", "invalid_type")]),
    ("attributes is a string", '"attributes": "brand=x"', [("attributes", "invalid_type")]),
]  # fmt: skip


def item_text(override: str | None) -> str:
    """GOOD_ITEM as JSON with some keys replaced by raw JSON text."""
    if override is None:
        return json.dumps({key: None for key in GOOD_ITEM})
    base = {k: v for k, v in GOOD_ITEM.items() if f'"{k}"' not in override}
    text = json.dumps(base)
    return text[:-1] + ", " + override + "}"


@pytest.mark.parametrize(("case", "override", "expected"), ITEMS, ids=[i[0] for i in ITEMS])
def test_item_level_rejections(catalog, case, override, expected):
    payload = '{"items": [' + item_text(override) + "]}"
    response = catalog.push(payload, strict=True)
    assert response["catalog_push_failed_product_count"] == "1", response
    (failure,) = response["catalog_push_failed_items"]
    assert [(e["field"], e["code"]) for e in failure["errors"]] == expected
    json.dumps(response)  # every error value is plain JSON, surrogates included

    # A default push refuses the item for an error field only; a warning field
    # costs its value, reported under the same field and code.
    response = catalog.push(payload)
    errors = [(f, c) for f, c in expected if _severity(f, c) == ERROR]
    if errors:
        (failure,) = response["catalog_push_failed_items"]
        assert [(e["field"], e["code"]) for e in failure["errors"]] == errors
    else:
        (warned,) = response["catalog_push_warning_items"]
        assert {(w["field"], w["code"]) for w in warned["warnings"]} == set(expected)
        action = "repaired" if case == "url with spaces" else "dropped"
        assert {w["action"] for w in warned["warnings"]} == {action}
    json.dumps(response)
    assert check(catalog, derive=False)["ok"]


def _severity(field: str, code: str) -> str:
    """An error for an error field, and for what breaks the item's JSON itself."""
    rule = RULES_BY_SOURCE.get(field)
    structural = code in ("duplicate_key", "invalid_text", "invalid_number", "item_too_large")
    return ERROR if rule is None or structural else rule.severity


NORMALIZED = [
    ("number for a name", {"name": 12345}, "name", "12345"),
    ("float client id", {"client_item_id": 1.5}, "client_item_id", "1.5"),
    ("control characters", {"name": "Tea\x00\x1b[31m Bags\u200b"}, "name", "Tea[31m Bags"),
    ("html and entities", {"name": "<script>x</script>Tea &lt;3"}, "name", "xTea <3"),
    ("crlf and tabs", {"description": "a\r\n\tb"}, "description", "a b"),
    ("look-alike hyphen kept", {"client_item_id": "SKU\u20101"}, "client_item_id", "SKU\u20101"),
    (
        "unknown field kept",
        {"seller": {"id": [1, {"x": None}]}},
        "extra_fields",
        '{"seller": {"id": [1, {"x": null}]}}',
    ),
    (
        "unknown attribute kept",
        {"attributes": {"warranty": 2}},
        "extra_attributes",
        '{"warranty": 2}',
    ),
]


@pytest.mark.parametrize(
    ("case", "changes", "column", "stored"), NORMALIZED, ids=[n[0] for n in NORMALIZED]
)
def test_normalizations(catalog, case, changes, column, stored):
    response = catalog.push({"items": [make_item(**changes)]})
    assert response["catalog_push_failed_product_count"] == "0", response
    assert catalog.items()[column].tolist() == [stored]


def test_look_alike_ids_are_different_items(catalog):
    catalog.push(
        {"items": [make_item(client_item_id="SKU-1"), make_item(client_item_id="SKU\u20101")]}
    )
    assert catalog.items()["object_id"].tolist() == [1, 2]


def test_corpus_size():
    assert len(PAYLOADS) + 1 + len(ITEMS) + len(NORMALIZED) + 1 >= 45


def test_schema_drift_loses_nothing_and_never_changes_the_tables(catalog, clock):
    from datetime import timedelta

    from catalog_lake.schemas import ITEMS, RECORDS

    catalog.push({"items": [make_item(attributes__warranty="1 year")]})
    clock.now += timedelta(seconds=1)
    # a new attribute name, then a known attribute arriving with another type
    drifted = {
        "items": [make_item(attributes__warranty={"years": 2}, attributes__brand=["A", "B"])]
    }
    catalog.push(drifted, strict=True)
    item = catalog.items().iloc[0]
    assert (item["attributes"]["brand"], json.loads(item["extra_attributes"])) == (
        "Aashirvaad",
        {"warranty": "1 year"},
    )
    assert catalog.rejects()["codes"].map(list).tolist() == [["invalid_string"]]
    assert json.loads(catalog.raw()["item_json"][1])["attributes"]["warranty"] == {"years": 2}
    # A default push stores it: the list costs only the brand, and the new shape is kept.
    clock.now += timedelta(seconds=1)
    (warned,) = catalog.push(drifted)["catalog_push_warning_items"]
    assert [(w["field"], w["value"]) for w in warned["warnings"]] == [
        ("attributes.brand", ["A", "B"])
    ]
    item = catalog.items().iloc[0]
    assert "brand" not in item["attributes"]
    assert json.loads(item["extra_attributes"]) == {"warranty": {"years": 2}}
    for name, schema in (("items", ITEMS), ("records", RECORDS)):
        stored = catalog.lake.delta(name).schema().to_arrow()
        assert pa.schema(stored).names == schema.names


def test_storage_credentials_never_reach_tables_logs_or_reprs(tmp_path, capsys):
    from catalog_lake.feeds import ingest

    secret = "s3cr3t-key-value"
    catalog = Catalog(tmp_path / "lake", storage_options={"AWS_SECRET_ACCESS_KEY": secret})
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    (feeds / "a.json").write_text(json.dumps({"items": [make_item()]}))
    summary = ingest(catalog, feeds)
    assert secret not in repr(catalog) + repr(catalog.lake) + json.dumps(summary, default=str)
    assert secret not in capsys.readouterr().out
    for path in (tmp_path / "lake").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes()


HUGE = "9" * 5_000


def test_a_huge_number_costs_its_item_only(catalog):
    items = [make_item(client_item_id=f"SKU-{n}") for n in range(4)]
    text = json.dumps({"items": items})
    text = text.replace('"mrp": "310.00"', f'"mrp": {HUGE}', 1)  # SKU-0: a price
    text = text.replace('"qty": "120"', f'"qty": -{HUGE}', 2)  # SKU-0 and SKU-1: a count
    text = text.replace('"client_item_id": "SKU-2"', f'"client_item_id": "SKU-2", "n": [{HUGE}]')
    response = catalog.push(text)
    assert response["catalog_push_success_product_count"] == "3"
    (failed,) = response["catalog_push_failed_items"]
    assert failed["client_item_id"] == "SKU-0"
    assert ("pricing_info.mrp", "invalid_price") in {
        (e["field"], e["code"]) for e in failed["errors"]
    }
    warned = {w["client_item_id"]: w["warnings"] for w in response["catalog_push_warning_items"]}
    (dropped,) = warned["SKU-2"]
    assert (dropped["field"], dropped["code"]) == ("n[0]", "invalid_number")
    assert "a number of 5,000 digits" in dropped["message"]
    assert len(dropped["value"]) <= 201  # the value a refusal carries is cut
    raw = catalog.raw()
    assert HUGE in raw[raw["client_item_id"] == "SKU-2"]["item_json"].iloc[0]  # kept exactly


def test_an_ingest_goes_on_past_a_file_with_a_huge_number(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    (feeds / "a.jsonl").write_text(
        json.dumps(make_item(client_item_id="A"))[:-1] + f', "n": {HUGE}}}\n'
    )
    (feeds / "b.json").write_text(json.dumps({"items": [make_item(client_item_id="B")]}))
    summary = ingest(catalog, feeds)
    assert summary["files"]["failed"] == []
    assert sorted(catalog.items()["client_item_id"]) == ["A", "B"]


def test_a_callers_huge_int_is_one_push_error_that_names_where(catalog):
    with pytest.raises(PushError) as refused:
        catalog.push({"items": [make_item(notes=[1, {"x": 10**5_000}])]})
    assert str(refused.value) == (
        "push refused (invalid_payload): items[0].notes[1].x: an integer of more than 4,300 "
        "digits cannot be written as JSON here; send it as text"
    )


def test_a_repeated_items_key_at_payload_level_is_refused(catalog):
    a = json.dumps(make_item(client_item_id="A"))
    b = json.dumps(make_item(client_item_id="B"))
    with pytest.raises(PushError) as caught:
        catalog.push(f'{{"items": [{a}], "items": [{b}]}}')
    assert caught.value.reason == "duplicate_key"
    assert "repeats the key 'items'" in str(caught.value)
    assert not catalog.lake.exists()


def test_a_feed_file_with_a_repeated_items_key_is_refused(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    a = json.dumps(make_item(client_item_id="A"))
    (feeds / "twice.json").write_text(f'{{"items": [{a}], "items": [{a}]}}')

    summary = ingest(catalog, feeds)

    (failed,) = summary["files"]["failed"]
    assert failed["status"] == "invalid"
    assert "duplicate_key" in failed["error"]


@pytest.mark.parametrize(
    ("fragment", "field"),
    [
        ('"extra": {"k": 1, "k": 2}', "extra.k"),
        ('"extra": [{"k": 1, "k": 2}]', "extra[0].k"),
        ('"attributes": {"custom": {"k": "a", "k": "b"}}', "attributes.custom.k"),
        (
            '"pricing_info": {"mrp": "1", "sale_price": "1", "tax": {"k": 1, "k": 1}}',
            "pricing_info.tax.k",
        ),
    ],
    ids=["unknown object", "object in an unknown list", "unknown attribute", "unknown price field"],
)
def test_repeated_keys_inside_unknown_fields_are_refused(catalog, fragment, field):
    text = json.dumps(make_item(client_item_id="X"))[:-1] + ", " + fragment + "}"
    response = catalog.push('{"items": [' + text + "]}")
    (failed,) = response["catalog_push_failed_items"]
    assert (field, "duplicate_key") in [(e["field"], e["code"]) for e in failed["errors"]]
