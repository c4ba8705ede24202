"""A seeded corpus of items with one to three fields set to awkward values (booleans, lists,
blanks, NaN-free floats, look-alike prices, bad dates and URLs, invisible characters)."""

from __future__ import annotations

import random

from tests.conftest import make_item

VALUES = [
    True, False, None, 0, 1, 2, -1, 1.5, 5.0, "5.0", "", " ", "yes", "NA", "P3H", "PT3H", "P7D",
    "7 days", [], ["a"], [1, 2], {"a": 1}, "https://x.y/z.jpg", "ftp://x", "12.345", "1,299",
    "₹10", "2026-11-30", "31/12/2026", "9999-12-31", "<b>bold</b> &amp; x", "a\u200bb", "\x00",
    "x" * 1200, 10**20, "  padded  ", "2026-11-30T10:00:00+05:30", [None], ["https://a.b/c d.jpg"],
    "0", "1", "TRUE", "off",
]  # fmt: skip
FIELDS = [
    "client_item_id", "name", "lake_category", "lake_category_id", "description", "category",
    "variant_group_id", "location_id", "images", "inventory_info__qty", "inventory_info__is_in_stock",
    "pricing_info__mrp", "pricing_info__sale_price", "pricing_info__discounted_price",
    "pricing_info__discount_start_date", "pricing_info__discount_end_date",
    "attributes__returnable", "attributes__return_window", "attributes__brand", "attributes__is_veg",
    "attributes__model_year", "extra", "attributes__custom", "inventory_info", "attributes",
]  # fmt: skip


def corpus(count: int = 1_000, seed: int = 42) -> list[dict]:
    """``count`` items, each a copy of the good item with a few fields changed, ids repeating."""
    rng = random.Random(seed)
    items = []
    for number in range(count):
        changes = {f: rng.choice(VALUES) for f in rng.sample(FIELDS, rng.randint(1, 3))}
        changes.setdefault("client_item_id", f"id-{number % 900}")
        try:
            items.append(make_item(**changes))
        except (AttributeError, TypeError):  # a nested change under a container set to a scalar
            continue
    return items
