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
        ("bad_items.json", 5, 1, 4),
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


def test_bad_feed_explains_every_rejection(catalog):
    response = catalog.push((FEEDS / "bad_items.json").read_bytes())
    failures = {
        (f["index"], f["client_item_id"]): [(e["field"], e["code"]) for e in f["errors"]]
        for f in response["catalog_push_failed_items"]
    }
    assert failures == {
        (0, "BAD-BOOL"): [
            ("attributes.returnable", "invalid_boolean"),
            ("attributes.return_window", "invalid_duration"),
        ],
        (1, "BAD-PRICE"): [
            ("inventory_info.qty", "invalid_count"),
            ("pricing_info.mrp", "invalid_price"),
            ("pricing_info.sale_price", "invalid_price"),
        ],
        (2, None): [("client_item_id", "missing_required_field")],
        (3, "BAD-WINDOW"): [
            ("images", "invalid_url"),
            ("attributes.is_veg", "invalid_string"),
            ("pricing_info.discount_end_date", "invalid_discount_window"),
        ],
    }
