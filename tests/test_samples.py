"""The sample feeds in data/ push as documented in the README."""

from __future__ import annotations

from pathlib import Path

import pytest

FEEDS = Path(__file__).parents[1] / "data" / "feeds"


@pytest.mark.parametrize(
    ("feed", "received", "success", "failed"),
    [
        ("grocery.json", 2, 2, 0),
        ("fashion.json", 2, 2, 0),
        ("electronics.json", 1, 1, 0),
        ("beauty.json", 1, 1, 0),
        ("food.json", 2, 2, 0),
        ("bad_items.json", 5, 3, 2),
        ("seller_quirks.json", 3, 3, 0),
    ],
)
def test_sample_feed(catalog, feed, received, success, failed):
    response = catalog.push((FEEDS / feed).read_bytes(), source=feed)
    counts = [
        response["catalog_push_received_product_count"],
        response["catalog_push_success_product_count"],
        response["catalog_push_failed_product_count"],
    ]
    assert counts == [str(received), str(success), str(failed)]


def test_bad_feed_explains_every_rejection_and_every_warning(catalog):
    response = catalog.push((FEEDS / "bad_items.json").read_bytes())
    failures = {
        (f["index"], f["client_item_id"]): [(e["field"], e["code"]) for e in f["errors"]]
        for f in response["catalog_push_failed_items"]
    }
    assert failures == {
        (1, "BAD-PRICE"): [
            ("pricing_info.mrp", "invalid_price"),
            ("pricing_info.sale_price", "invalid_price"),
        ],
        (2, None): [("client_item_id", "missing_required_field")],
    }
    warnings = {
        (w["index"], w["client_item_id"]): [
            (e["field"], e["code"], e["action"]) for e in w["warnings"]
        ]
        for w in response["catalog_push_warning_items"]
    }
    assert warnings == {
        (0, "BAD-BOOL"): [
            ("attributes.returnable", "invalid_boolean", "dropped"),
            ("attributes.return_window", "invalid_duration", "dropped"),
        ],
        (3, "BAD-WINDOW"): [
            ("images", "invalid_url", "dropped"),
            ("pricing_info.discounted_price", "invalid_discount_window", "dropped"),
            ("pricing_info.discount_end_date", "invalid_discount_window", "dropped"),
            ("attributes.is_veg", "invalid_string", "dropped"),
        ],
    }


def test_the_quirks_of_real_seller_feeds_cost_values_not_products(catalog):
    response = catalog.push((FEEDS / "seller_quirks.json").read_bytes())
    warnings = {
        w["client_item_id"]: [(e["field"], e["action"], e["repaired_to"]) for e in w["warnings"]]
        for w in response["catalog_push_warning_items"]
    }
    assert warnings == {
        "HOME-MUG-350": [
            ("images", "repaired", "https://img.example.com/home/mug%20350ml%20front.jpg"),
            ("attributes.return_window", "dropped", None),  # "NA": a placeholder
            ("attributes.time_to_ship", "repaired", "PT3H"),
        ],
        "GROC-GHEE-1L": [
            ("images", "dropped", None),  # a relative path: not a URL
            ("inventory_info.qty", "dropped", None),  # "N/A"
            ("pricing_info.discounted_price", "dropped", None),  # its window lost its end
            ("pricing_info.discount_end_date", "dropped", None),  # "30-11-2026"
            ("attributes.returnable", "dropped", None),  # "-"
            ("attributes.time_to_ship", "dropped", None),  # "1 day": never guessed
        ],
        "FNB-SAMOSA-2": [("attributes", "dropped", None)],  # [] for an empty object
    }
    records = catalog.records().set_index("client_item_id")
    assert records.loc["HOME-MUG-350", "image"].endswith("mug%20350ml%20front.jpg")
    assert records.loc["GROC-GHEE-1L", "image"] == "https://img.example.com/grocery/ghee-1l.png"
    assert records.loc["GROC-GHEE-1L", "price"] == 615.0  # sale_price: no discount applied
    items = catalog.items().set_index("client_item_id")
    assert items.loc["HOME-MUG-350", "attr_time_to_ship_seconds"] == 3 * 3600
