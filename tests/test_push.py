"""The push (SPEC 4.1) and its response (SPEC 2.7), as the library contract states them."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pandas as pd
import pyarrow as pa
import pytest

from catalog_lake import (
    FAILED_ITEMS_KEY,
    RESPONSE_KEYS,
    WARNING_ITEMS_KEY,
    Catalog,
    NoLakeError,
    PushError,
    settings,
)
from tests.conftest import DELETE, make_item


def test_response_has_exactly_the_spec_keys_and_types(catalog):
    response = catalog.push({"items": [make_item(), make_item(client_item_id="SKU-2", name=None)]})

    assert list(response) == [*RESPONSE_KEYS, FAILED_ITEMS_KEY, WARNING_ITEMS_KEY]
    assert uuid.UUID(response["catalog_push_request_id"]).version == 4
    assert response["catalog_push_received_product_count"] == "2"
    assert response["catalog_push_success_product_count"] == "1"
    assert response["catalog_push_failed_product_count"] == "1"
    assert response["items"] == [{"SKU-1": "1"}]
    assert response[FAILED_ITEMS_KEY] == [
        {
            "index": 1,
            "client_item_id": "SKU-2",
            "errors": [
                {
                    "field": "name",
                    "code": "missing_required_field",
                    "message": "name is required and was missing or blank",
                    "value": None,
                }
            ],
        }
    ]
    json.dumps(response)  # the whole response is plain JSON


def test_push_accepts_json_text_and_bytes(catalog):
    text = json.dumps({"items": [make_item()]})
    assert catalog.push(text)["items"] == [{"SKU-1": "1"}]
    assert catalog.push(text.encode())["items"] == [{"SKU-1": "1"}]


def test_items_map_in_input_order(catalog):
    ids = ["c", "a", "b"]
    response = catalog.push({"items": [make_item(client_item_id=i) for i in ids]})
    assert response["items"] == [{"c": "1"}, {"a": "2"}, {"b": "3"}]


@pytest.mark.parametrize(
    ("payload", "reason", "message"),
    [
        ([], "invalid_payload", "must be a JSON object with an 'items' list, got a list"),
        ("[1, 2]", "invalid_payload", "got a list"),
        ({"products": []}, "invalid_payload", "has no 'items' list"),
        ({"items": {"a": 1}}, "invalid_payload", "'items' must be a list, got an object"),
        ({"items": []}, "invalid_payload", "'items' is empty"),
        (
            {"items": [{"client_item_id": "x"}, "oops"]},
            "invalid_payload",
            "items[1] must be an object, got text",
        ),
        ('{"items": [', "invalid_json", "payload is not valid JSON"),
        (b"\xff\xfe", "invalid_json", "payload is not UTF-8 text"),
        ("[" * 100_000 + "]" * 100_000, "invalid_json", "nested too deeply"),
    ],
)
def test_unusable_payload_raises_push_error_and_writes_nothing(catalog, payload, reason, message):
    with pytest.raises(PushError, match=None) as caught:
        catalog.push(payload)
    assert caught.value.reason == reason
    assert message in str(caught.value)
    assert not catalog.lake.exists()  # a refused first push creates no lake


def test_too_many_items_is_refused_before_any_write(catalog, monkeypatch):
    monkeypatch.setattr(settings, "MAX_ITEMS_PER_PUSH", 3)
    with pytest.raises(PushError, match="4 items in one push, over the limit of 3"):
        catalog.push({"items": [make_item(client_item_id=str(i)) for i in range(4)]})
    assert not catalog.lake.exists()


def test_a_lake_path_that_is_a_file_is_refused_in_one_line(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the lake should be")
    with pytest.raises(NoLakeError, match=r"not-a-folder is a file, not a lake folder$"):
        Catalog(blocker)


def test_lake_that_cannot_be_written_raises_push_error(catalog):
    from tests.test_repair import CrashingLake

    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="raw")
    with pytest.raises(PushError) as caught:
        catalog.push({"items": [make_item()]})
    assert caught.value.reason == "lake_write_failed"
    assert "nothing of this push was stored" in str(caught.value)


def test_ids_are_stable_across_re_pushes_and_never_reused(catalog, clock):
    first = catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    clock.now += timedelta(minutes=1)
    second = catalog.push({"items": [make_item(client_item_id="b"), make_item(client_item_id="c")]})

    assert first["items"] == [{"a": "1"}, {"b": "2"}]
    assert second["items"] == [{"b": "2"}, {"c": "3"}]
    records = catalog.records()
    assert records["object_id"].tolist() == [1, 2, 3]
    assert records["client_item_id"].tolist() == ["a", "b", "c"]


def test_re_push_replaces_the_stored_item(catalog, clock):
    catalog.push({"items": [make_item()]})
    clock.now += timedelta(hours=1)
    catalog.push(
        {
            "items": [
                make_item(
                    name="Atta 10 kg",
                    pricing_info={"mrp": "600.00", "sale_price": "600.00"},
                    inventory_info={"qty": "0", "is_in_stock": "0"},
                )
            ]
        }
    )
    items = catalog.items()
    assert len(items) == 1
    row = items.iloc[0]
    assert row["name"] == "Atta 10 kg"
    assert str(row["mrp"]) == "600.00"
    assert row["qty"] == 0
    assert row["first_seen_at"] < row["updated_at"]
    record = catalog.records().iloc[0]
    assert (record["price"], record["on_sale"], record["inventory"], record["in_stock"]) == (
        600.0,
        False,
        0,
        False,
    )


def test_duplicate_in_push_last_occurrence_wins(catalog):
    response = catalog.push(
        {
            "items": [
                make_item(name="first"),
                make_item(client_item_id="other"),
                make_item(name="second", client_item_id="  SKU-1 "),
            ]
        }
    )
    assert response["items"] == [{"other": "1"}, {"SKU-1": "2"}]
    assert response["catalog_push_failed_product_count"] == "1"
    failure = response[FAILED_ITEMS_KEY][0]
    assert failure["index"] == 0
    assert [e["code"] for e in failure["errors"]] == ["duplicate_in_push"]
    assert catalog.items().set_index("client_item_id").loc["SKU-1", "name"] == "second"


def test_every_received_item_is_in_raw_and_in_exactly_one_of_items_or_rejects(catalog):
    response = catalog.push(
        {"items": [make_item(), make_item(client_item_id="bad", pricing_info__mrp="abc")]}
    )
    raw = catalog.raw()
    assert raw["index"].tolist() == [0, 1]
    assert raw["passed"].tolist() == [True, False]
    assert json.loads(raw["item_json"][1])["pricing_info"]["mrp"] == "abc"
    assert catalog.items()["client_item_id"].tolist() == ["SKU-1"]
    rejects = catalog.rejects()
    assert rejects["client_item_id"].tolist() == ["bad"]
    assert list(rejects["codes"][0]) == ["invalid_price"]
    push = catalog.pushes().iloc[0]
    assert (push["received"], push["success"], push["failed"]) == (2, 1, 1)
    assert json.loads(push["response_json"]) == response


def test_raw_keeps_duplicate_keys_exactly_as_sent(catalog):
    text = '{"items": [{"client_item_id": "d", "name": "a", "name": "b"}]}'
    response = catalog.push(text)
    assert response[FAILED_ITEMS_KEY][0]["errors"][0]["code"] == "duplicate_key"
    assert catalog.raw()["item_json"][0] == '{"client_item_id":"d","name":"a","name":"b"}'


def test_metrics_survive_a_re_push(catalog, clock):
    """likes and sales belong to the metrics feed; a product re-push keeps them."""
    catalog.push({"items": [make_item()]})
    metrics = pa.table(
        {
            "object_id": pa.array([1], pa.int64()),
            "id_block": [0],
            "likes": pa.array([7], pa.int64()),
        }
    )
    for table in ("items", "records"):  # what the metrics feed does
        catalog.lake.update_matched(table, metrics, ["likes"])
    clock.now += timedelta(minutes=1)
    catalog.push({"items": [make_item(name="renamed")]})
    assert catalog.items()["likes"].tolist() == [7]
    assert catalog.records()["likes"].tolist() == [7]


def test_unknown_fields_and_attributes_are_kept_losslessly(catalog):
    item = make_item(seller={"id": 9}, attributes__warranty="1 year", attributes__ratings=[4, 5])
    item["pricing_info"]["currency"] = "INR"
    catalog.push({"items": [item]})
    row = catalog.items().iloc[0]
    assert json.loads(row["extra_attributes"]) == {"warranty": "1 year", "ratings": [4, 5]}
    # Each field at its own path: a top-level key "pricing_info.currency" would be another one.
    assert json.loads(row["extra_fields"]) == {
        "seller": {"id": 9},
        "pricing_info": {"currency": "INR"},
    }


def test_missing_nested_objects_are_fine_when_nothing_required_is_inside(catalog):
    item = make_item(inventory_info=DELETE, attributes=DELETE, images=DELETE)
    response = catalog.push({"items": [item]})
    assert response["catalog_push_failed_product_count"] == "0"
    record = catalog.records().iloc[0]
    assert pd.isna(record["image"])
    assert not record["in_stock"]
    assert pd.isna(record["inventory"])


def test_decimal_and_date_values_in_a_payload_are_taken_exactly(catalog):
    response = catalog.push(
        {
            "items": [
                make_item(
                    pricing_info__mrp=Decimal("310.00"),
                    pricing_info__sale_price=Decimal("289.5"),
                    pricing_info__discounted_price=Decimal("250.00"),
                    pricing_info__discount_start_date=date(2026, 11, 1),
                    pricing_info__discount_end_date=datetime(2026, 12, 1, tzinfo=UTC),
                )
            ]
        }
    )
    assert response["catalog_push_success_product_count"] == "1"
    assert response["catalog_push_warning_items"] == []
    raw = json.loads(catalog.raw()["item_json"][0])["pricing_info"]
    assert raw["discount_start_date"] == "2026-11-01"
    assert raw["discount_end_date"] == "2026-12-01T00:00:00Z"
    text = catalog.raw()["item_json"][0]
    assert '"mrp":310.00' in text and '"sale_price":289.5' in text  # the exact numbers
    items = catalog.items()
    assert str(items["mrp"][0]) == "310.00"


def test_values_json_cannot_carry_are_still_refused_by_name(catalog):
    with pytest.raises(PushError, match=r"items\[0\]\.tags: a set cannot be represented as JSON"):
        catalog.push({"items": [make_item(tags={"a"}, pricing_info__mrp=Decimal("1.00"))]})
