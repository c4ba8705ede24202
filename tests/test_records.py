"""Flat records (SPEC 1, 2.1): the price rule, on_sale, tags, synonyms and the rest."""

from __future__ import annotations

import json
from datetime import timedelta

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from catalog_lake import Catalog
from catalog_lake.records import Synonyms
from tests.conftest import DELETE, NOW, make_item

#: Prices, windows and ages follow the clock: `make test` runs these a year ahead too.
pytestmark = pytest.mark.clock

DAY = timedelta(days=1)


def discounted(start, end, price="199.00"):
    return make_item(
        pricing_info={
            "mrp": "310.00",
            "sale_price": "289.00",
            "discounted_price": price,
            "discount_start_date": start,
            "discount_end_date": end,
        }
    )


@pytest.mark.parametrize(
    ("start", "end", "price", "discount_pct"),
    [
        ("2026-10-01", "2026-10-31", 289.0, 6.8),  # window in the past
        ("2026-11-20", "2026-11-22", 199.0, 35.8),  # window open now
        ("2026-12-01", "2026-12-31", 289.0, 6.8),  # window in the future
        ("2026-11-01", "2026-11-21", 199.0, 35.8),  # a bare end date covers its whole day
        ("2026-11-21T12:00:00Z", "", 199.0, 35.8),  # open end, started exactly now
        ("", "2026-11-21T11:59:59Z", 289.0, 6.8),  # open start, ended a second ago
        ("", "", 199.0, 35.8),  # a discounted price with no window applies
    ],
)
def test_price_is_discounted_only_inside_the_window(catalog, start, end, price, discount_pct):
    catalog.push({"items": [discounted(start, end)]})
    record = catalog.records().iloc[0]
    assert (record["price"], record["mrp"], record["on_sale"], record["discount_pct"]) == (
        price,
        310.0,
        True,
        discount_pct,
    )


def test_on_sale_means_price_below_mrp(catalog):
    catalog.push(
        {
            "items": [
                make_item(
                    client_item_id="full", pricing_info={"mrp": "100.00", "sale_price": "100.00"}
                ),
                make_item(
                    client_item_id="cut", pricing_info={"mrp": "100.00", "sale_price": "80.00"}
                ),
                make_item(
                    client_item_id="above", pricing_info={"mrp": "100.00", "sale_price": "120.00"}
                ),
            ]
        }
    )
    records = catalog.records().set_index("client_item_id")
    assert records["on_sale"].to_dict() == {"full": False, "cut": True, "above": False}
    assert records["discount_pct"].to_dict() == {"full": 0.0, "cut": 20.0, "above": 0.0}


def test_record_is_flat_and_complete(catalog):
    catalog.push(
        {
            "items": [
                make_item(
                    description="",
                    short_description="<i>Atta</i>, 5 kg",
                    images=["https://img.example.com/1.jpg", "https://img.example.com/2.jpg"],
                    attributes__colour="Brown",
                    attributes__size="5 kg",
                    attributes__gender="Unisex",
                )
            ]
        }
    )
    record = catalog.records().iloc[0]
    assert record.to_dict() | {
        "categories": list(record["categories"]),
        "tags": list(record["tags"]),
        "synonyms": list(record["synonyms"]),
    } == {
        "object_id": 1,
        "client_item_id": "SKU-1",
        "product_name": "Whole Wheat Atta 5 kg",
        "description": "Atta, 5 kg",
        "categories": ["GROCERY", "Staples"],
        "price": 289.0,
        "mrp": 310.0,
        "on_sale": True,
        "discount_pct": 6.8,
        "image": "https://img.example.com/1.jpg",
        "inventory": 120,
        "in_stock": True,
        "likes": 0,
        "sales": 0,
        "tags": [
            "veg", "cod", "cancellable", "fast-shipping", "on-sale", "in-stock",
            "brand:aashirvaad", "colour:brown", "gender:unisex",
        ],
        "synonyms": ["wheat flour", "groceries"],
        "brand": "Aashirvaad",
        "colour": "Brown",
        "size": "5 kg",
        "gender": "Unisex",
        "lake_category": "GROCERY",
        "variant_group_id": "ATTA",
        "variant": "5 kg",
        "updated_at": pd.Timestamp(NOW),
        "id_block": 0,  # the partition: object_id // 2048
        "received_at": pd.Timestamp(NOW),  # the push's time: the replay guard
        "seller": "default",  # pushed without a seller
    }  # fmt: skip


@pytest.mark.parametrize(
    ("attributes", "tags"),
    [
        ({"is_veg": "yes"}, ["veg", "in-stock"]),
        ({"is_veg": "Veg"}, ["veg", "in-stock"]),
        ({"is_veg": "no"}, ["non-veg", "in-stock"]),
        ({"veg_nonveg_flag": "non-veg"}, ["non-veg", "in-stock"]),
        ({"veg_nonveg_flag": "egg"}, ["egg", "in-stock"]),
        (
            {"available_on_cod": "yes", "returnable": "yes", "cancellable": "no"},
            ["cod", "returnable", "in-stock"],
        ),
        ({"time_to_ship": "PT24H"}, ["fast-shipping", "in-stock"]),
        ({"time_to_ship": "P2D"}, ["in-stock"]),
        ({"brand": "Tata Sampann"}, ["in-stock", "brand:tata-sampann"]),
        ({"colour_name": "Jet Black"}, ["in-stock", "colour:jet-black"]),
        ({"gender": "Women"}, ["in-stock", "gender:women"]),
        # Text outside ASCII keeps Python's lower case and word characters.
        ({"brand": "Café Noir"}, ["in-stock", "brand:café-noir"]),
        ({"brand": "ΣΊΣΥΦΟΣ"}, ["in-stock", "brand:σίσυφος"]),
        ({"brand": " -- "}, ["in-stock"]),
        ({"is_veg": " EGG", "veg_nonveg_flag": "veg"}, ["egg", "in-stock"]),
    ],
)
def test_tags_are_computed_from_attributes(catalog, attributes, tags):
    item = make_item(attributes=attributes, pricing_info={"mrp": "1.00", "sale_price": "1.00"})
    catalog.push({"items": [item]})
    assert list(catalog.records()["tags"][0]) == tags


def test_stock_decides_in_stock_and_out_of_stock_tags(catalog):
    catalog.push(
        {
            "items": [
                make_item(client_item_id="a", inventory_info={"qty": "0"}, attributes=DELETE),
                make_item(client_item_id="b", inventory_info={"qty": "3"}, attributes=DELETE),
                make_item(
                    client_item_id="c",
                    inventory_info={"qty": "3", "is_in_stock": "0"},
                    attributes=DELETE,
                ),
            ]
        }
    )
    records = catalog.records().set_index("client_item_id")
    assert records["in_stock"].to_dict() == {"a": False, "b": True, "c": False}
    assert [list(t)[-1] for t in records["tags"]] == ["out-of-stock", "in-stock", "out-of-stock"]


def test_synonyms_come_from_the_list_in_data(tmp_path, clock):
    synonyms = tmp_path / "synonyms.txt"
    synonyms.write_text("# groups\nt-shirt, tshirt, tee\nmobile, smartphone, cell phone\n")
    catalog = Catalog(tmp_path / "lake", synonyms=synonyms, clock=clock)
    catalog.push(
        {
            "items": [
                make_item(client_item_id="a", name="Crew Neck T-Shirt", category="Tees"),
                make_item(client_item_id="b", name="Nova Smartphone", category="Mobile phones"),
                make_item(client_item_id="c", name="Teapot", category="Kitchen"),
                make_item(client_item_id="a2", name="Crew Neck T-Shirt", category="Tees"),
                make_item(client_item_id="c2", name="Teapot", category="Kitchen"),
            ]
        }
    )
    records = catalog.records().set_index("client_item_id")
    assert {k: list(v) for k, v in records["synonyms"].items()} == {
        "a": ["tshirt", "tee"],
        "b": ["cell phone"],
        "c": [],
        "a2": ["tshirt", "tee"],  # the same text (variants): the same synonyms
        "c2": [],
    }


def test_synonym_file_format():
    groups = Synonyms.load().groups
    assert ("t-shirt", "tshirt", "tee") in groups
    assert all(len(g) > 1 and all(t == t.lower() for t in g) for g in groups)


def test_categories_drop_repeats(catalog):
    catalog.push({"items": [make_item(category="grocery")]})
    assert list(catalog.records()["categories"][0]) == ["GROCERY"]


def test_categories_compare_in_pythons_lower_case(catalog):
    catalog.push(
        {
            "items": [
                make_item(client_item_id="a", lake_category="ΣΊΣΥΦΟΣ", category="σίσυφος"),
                make_item(client_item_id="b", lake_category="Straße", category="STRASSE"),
            ]
        }
    )
    categories = catalog.records().set_index("client_item_id")["categories"]
    assert list(categories["a"]) == ["ΣΊΣΥΦΟΣ"]
    assert list(categories["b"]) == ["Straße", "STRASSE"]  # "straße" is not "strasse"


def test_the_fast_flat_frame_equals_the_value_by_value_one():
    """Big pushes are flattened by pandas from the dicts; the result must not change."""

    from bench import synth

    from catalog_lake.flat import flatten

    # Without NaN, which only the value-by-value path marks (the fast one is not used then).
    items = [i for i in synth.items(300, dirty_fraction=0.2) if "NaN" not in json.dumps(i)] + [
        {"client_item_id": "x", "inventory_info": "oops", "attributes": {"a": 1, "b": True}},
        {"client_item_id": "y", "inventory_info": None, "pricing_info": {"mrp": 5}, "z": [1]},
        {"client_item_id": "w", "attributes": {}, "pricing_info": {"mrp": 2**70}},
    ]
    slow = flatten(items, nonfinite=True)
    fast = flatten(items, nonfinite=False)
    assert sorted(fast.columns) == sorted(slow.columns)
    fast = fast[slow.columns]
    assert all(dtype == "object" for dtype in fast.dtypes)
    assert fast.map(repr).equals(slow.map(repr))


def test_records_and_items_agree_on_the_service_id_type(catalog):
    catalog.push({"items": [make_item(client_item_id=f"T{n}") for n in range(3)]})
    records = DeltaTable(catalog.lake.path("records")).schema().to_arrow()
    items = DeltaTable(catalog.lake.path("items")).schema().to_arrow()
    assert pa.schema(records).field("object_id").type == pa.schema(items).field("object_id").type
    assert catalog.query_records(where="object_id = 2")["client_item_id"].tolist() == ["T1"]
    assert catalog.query_records(where="object_id >= '2'")["client_item_id"].tolist() == [
        "T1",
        "T2",
    ]
