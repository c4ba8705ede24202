"""Synthetic product feeds shaped like SPEC 2.3-2.6, for benchmarks and tests.

Deterministic for a seed. Items span five domains, carry about twenty
attributes (~1.3 KB of JSON each) and, for a ``dirty`` share, one realistic
defect each (a bad boolean, a non-ISO duration, a price with a currency
symbol, a missing name, ...), so validation has real work to do.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DOMAINS = {
    "GROCERY": (
        ["Atta", "Basmati Rice", "Toor Dal", "Sunflower Oil", "Green Tea", "Biscuits", "Ghee"],
        ["Aashirvaad", "Tata Sampann", "Fortune", "Britannia", "Amul"],
    ),
    "FASHION": (
        ["Crew Neck T-Shirt", "Slim Fit Jeans", "Printed Kurta", "Running Sneakers", "Saree"],
        ["Roadster", "Libas", "Levis", "Puma", "Biba"],
    ),
    "ELECTRONICS": (
        ["Smartphone", "Bluetooth Earbuds", "Laptop", "Smart Watch", "LED TV"],
        ["Nova", "Boat", "Lenovo", "Noise", "Samsung"],
    ),
    "BEAUTY": (
        ["Matte Lipstick", "Face Wash", "Moisturiser", "Shampoo", "Kajal"],
        ["Lakme", "Himalaya", "Nivea", "Dove", "Maybelline"],
    ),
    "F&B": (
        ["Chicken Biryani", "Paneer Tikka", "Veg Pizza", "Masala Dosa", "Cold Coffee"],
        ["Behrouz", "Haldiram", "Dominos", "MTR", "Starbucks"],
    ),
}
COLOURS = ["Black", "White", "Red", "Blue", "Green", "Graphite", "Beige", "Maroon"]
SIZES = ["S", "M", "L", "XL", "500 g", "1 kg", "5 kg", "128 GB"]
BOOLEANS = [True, False, "true", "false", "yes", "no", "1", "0"]
#: One realistic defect per dirty item: (where, key, value, the code it must earn). The
#: second half are JSON-kind defects, which a parser that stringifies kinds would miss.
REPEAT = object()  # the key is sent twice (write_feed spells it out in the JSON text)
DEFECTS = (
    ("attributes", "returnable", "maybe", "invalid_boolean"),
    ("attributes", "return_window", "7 days", "invalid_duration"),
    ("attributes", "time_to_ship", "NA", "invalid_duration"),
    ("pricing_info", "mrp", "₹1,299", "invalid_price"),
    ("pricing_info", "sale_price", "12.345", "invalid_price"),
    ("inventory_info", "qty", "-3", "invalid_count"),
    ("item", "name", "", "missing_required_field"),
    ("item", "images", ["ftp://img.example.com/x.jpg"], "invalid_url"),
    ("pricing_info", "discount_start_date", "31/12/2026", "invalid_date"),
    ("item", "client_item_id", REPEAT, "duplicate_key"),
    ("attributes", "is_veg", True, "invalid_string"),
    ("attributes", "brand", ["Amul", "Britannia"], "invalid_string"),
    ("item", "description", {"text": "nested"}, "invalid_string"),
    ("pricing_info", "mrp", 12.345, "invalid_price"),
    ("pricing_info", "sale_price", float("nan"), "invalid_price"),
    ("inventory_info", "qty", 10**19, "invalid_count"),
    ("item", "images", "https://img.example.com/one.jpg", "invalid_list"),
    ("attributes", "returnable", [True], "invalid_boolean"),
    # what real seller feeds send, repaired rather than refused (issue 19)
    ("item", "images", ["https://img.example.com/front view.jpg"], "invalid_url"),
    ("attributes", "time_to_ship", "P3H", "invalid_duration"),
)


def item(
    number: int,
    rng: random.Random,
    dirty: bool = False,
    version: int = 0,
    dirty_fraction: float = 0.05,
) -> dict[str, Any]:
    """One synthetic item; ``version`` changes price and stock for update scenarios."""
    category = list(DOMAINS)[number % len(DOMAINS)]
    names, brands = DOMAINS[category]
    brand = brands[rng.randrange(len(brands))]
    name = names[rng.randrange(len(names))]
    mrp = rng.randrange(50, 50_000) + rng.choice([0.0, 0.5, 0.99])
    sale = round(mrp * rng.choice([1.0, 0.9, 0.75, 0.6]) - version, 2)
    discounted = round(sale * 0.9, 2) if number % 4 == 0 else None
    veg = category in ("GROCERY", "F&B")
    product = {
        "client_item_id": f"SKU-{number:09d}",
        "lake_category": category,
        "lake_category_id": str(1000 + list(DOMAINS).index(category)),
        "product_type": "simple",
        "name": f"{brand} {name} {SIZES[number % len(SIZES)]}",
        "description": f"<p>{brand} {name.lower()} — quality you can trust. Item {number}.</p>"
        + " Carefully packed and shipped from our nearest warehouse." * 2,
        "short_description": f"{brand} {name}",
        "category": name.split()[-1] + "s",
        "variant_group_id": f"VG-{number // 3:08d}",
        "variant": SIZES[number % len(SIZES)],
        "location_id": [f"LOC-{number % 17:02d}"],
        "inventory_info": {
            "qty": str(max(0, rng.randrange(-5, 500) - version)),
            "min_qty": "1",
            "max_qty": str(rng.randrange(1, 10)),
            "is_in_stock": rng.choice(["1", "0", "1", "1"]),
        },
        "pricing_info": {
            "mrp": f"{mrp:.2f}",
            "sale_price": f"{max(sale, 1):.2f}",
            "discount_start_date": "2026-11-01" if discounted else "",
            "discount_end_date": "2026-12-31" if discounted else "",
            "discounted_price": f"{discounted:.2f}" if discounted else "",
        },
        "images": [
            f"https://img.example.com/{category.lower()}/{number}/front.jpg",
            f"https://img.example.com/{category.lower()}/{number}/back.jpg",
        ],
        "attributes": {
            "brand": brand,
            "colour": COLOURS[number % len(COLOURS)],
            "size": SIZES[number % len(SIZES)],
            "gender": rng.choice(["Men", "Women", "Unisex"]),
            "material": rng.choice(["Cotton", "Steel", "Plastic", "Glass"]),
            "country_of_origin": "India",
            "manufacturer_name": f"{brand} Industries Ltd",
            "manufacturer_address": f"{number % 300} Industrial Area, Pune 4110{number % 90:02d}",
            "net_weight": f"{rng.randrange(100, 5000)} g",
            "model": f"M{number % 997}",
            "model_year": 2020 + number % 7,
            "is_veg": "yes" if veg else "no",
            "veg_nonveg_flag": "veg" if veg else "",
            "available_on_cod": rng.choice(BOOLEANS),
            "cancellable": rng.choice(BOOLEANS),
            "rateable": rng.choice(BOOLEANS),
            "return_pickup": rng.choice(BOOLEANS),
            "returnable": rng.choice(BOOLEANS),
            "return_window": rng.choice(["P0D", "P7D", "P15D", "P30D"]),
            "time_to_ship": rng.choice(["PT4H", "PT24H", "P1D", "P2D", "P3D"]),
            "fssai_number": f"100{number:011d}" if veg else "",
        },
    }
    if dirty:
        where, key, value, _ = defect_of(number, dirty_fraction)
        if value is not REPEAT:  # a dict cannot repeat a key: ``write_feed`` writes it twice
            (product if where == "item" else product[where])[key] = value
    return product


def defect_of(number: int, dirty_fraction: float = 0.05) -> tuple[str, str, object, str]:
    """The defect of dirty item ``number``: the dirty items take the defects in turn.

    Dirty items are every ``1 / dirty_fraction``-th; numbering the defects by the
    dirty item's rank (not by ``number`` itself, whose remainder is then always
    the same) makes every kind of defect appear.
    """
    step = int(1 / dirty_fraction) if dirty_fraction > 0 else 1
    return DEFECTS[(number // step) % len(DEFECTS)]


def to_json(item: dict[str, Any], repeated: str | None = None) -> str:
    """An item as JSON text, its key ``repeated`` (if any) spelled out twice."""
    text = json.dumps(item, ensure_ascii=False)
    if repeated is None:
        return text
    return "{" + json.dumps(repeated) + ": " + json.dumps(item[repeated]) + ", " + text[1:]


def repeated_key(number: int, dirty_fraction: float = 0.05) -> str | None:
    """The key item ``number`` sends twice, when that is its defect."""
    step = int(1 / dirty_fraction) if dirty_fraction > 0 else 0
    if not step or number % step != step - 1:
        return None
    _, key, value, _ = defect_of(number, dirty_fraction)
    return key if value is REPEAT else None


def items(
    count: int, *, start: int = 0, dirty_fraction: float = 0.05, seed: int = 7, version: int = 0
) -> Iterator[dict[str, Any]]:
    """``count`` items numbered from ``start``; about ``dirty_fraction`` of them defective."""
    rng = random.Random(seed * 1_000_003 + start + version)
    step = int(1 / dirty_fraction) if dirty_fraction > 0 else 0
    for number in range(start, start + count):
        dirty = bool(step) and number % step == step - 1
        yield item(number, rng, dirty=dirty, version=version, dirty_fraction=dirty_fraction)


def write_feed(
    folder: str | Path,
    count: int,
    *,
    start: int = 0,
    per_file: int = 1_000,
    dirty_fraction: float = 0.05,
    seed: int = 7,
    version: int = 0,
    prefix: str = "feed",
) -> list[Path]:
    """Write ``count`` items as product-object JSON files of ``per_file`` items each.

    Items that repeat a key go to a file of their own, ``{prefix}-repeated-keys.json``,
    written last: DuckDB refuses to read a file holding one, so the benchmark's
    baseline leaves that file out (``REPEATS_FILE``), about 1 item in 360.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    repeats: list[str] = []
    generated = items(count, start=start, dirty_fraction=dirty_fraction, seed=seed, version=version)
    for index in range(0, count, per_file):
        batch = []
        for number in range(start + index, start + index + min(per_file, count - index)):
            repeated = repeated_key(number, dirty_fraction)
            text = to_json(next(generated), repeated)
            (batch if repeated is None else repeats).append(text)
        paths.append(_write(folder / f"{prefix}-{start + index:09d}.json", batch))
    if repeats:
        paths.append(_write(folder / f"{prefix}-{REPEATS_FILE}", repeats))
    return paths


#: The name ending of the file that holds the items repeating a key.
REPEATS_FILE = "repeated-keys.json"


def _write(path: Path, texts: list[str]) -> Path:
    path.write_text('{"items": [' + ", ".join(texts) + "]}", encoding="utf-8")
    return path


def lake(folder: str | Path, count: int) -> str:
    """A lake in ``folder`` holding ``count`` clean synthetic items (a feed written, ingested)."""
    from catalog_lake.catalog import Catalog
    from catalog_lake.feeds import ingest

    feed, uri = Path(folder) / "feed", f"{folder}/lake"
    write_feed(feed, count, dirty_fraction=0.0)
    ingest(Catalog(uri), feed, group_items=50_000)
    return uri


def p95(values: list[float]) -> float:
    """The 95th percentile of some timings (the nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
