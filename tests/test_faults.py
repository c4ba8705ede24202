"""Faults injected for real: killed writers, concurrent writers, corrupted input.

These tests start real processes (spawned, never forked: deltalake must not
run after a fork) against a real lake in a temporary folder.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog_lake import Catalog, check
from tests.conftest import kill_after, make_item

KILL_ROUNDS = 4
WRITERS = 4


def payload(seed: int, size: int = 30) -> dict:
    """Overlapping items: every payload shares half its ids with the others."""
    rng = random.Random(seed)
    ids = [f"shared-{rng.randrange(40)}" for _ in range(size // 2)]
    ids += [f"own-{seed}-{k}" for k in range(size - size // 2)]
    return {
        "items": [
            make_item(
                client_item_id=i, name=f"v{seed}", pricing_info__sale_price=f"{100 + seed}.00"
            )
            for i in ids
        ]
    }


def _push_forever(lake: str, seed: int) -> None:
    catalog = Catalog(lake)
    while True:
        catalog.push(payload(seed))


def _push_once(lake: str, seed: int, rounds: int) -> list[dict]:
    catalog = Catalog(lake)
    return [catalog.push(payload(seed * 100 + r)) for r in range(rounds)]


def _maintain(lake: str) -> dict:
    from catalog_lake.maintain import maintain

    # Vacuum beside writers keeps an hour: a file written but not yet committed is younger.
    return maintain(Catalog(lake), retention_hours=1)


def _backfill(lake: str) -> dict:
    from catalog_lake.backfill import backfill

    return backfill(Catalog(lake))


def test_killed_writers_leave_a_lake_that_repair_makes_whole(lake):
    rng = random.Random(2026)
    remote = "://" in lake
    Catalog(lake).lake.ensure()
    for round_ in range(KILL_ROUNDS // 2 if remote else KILL_ROUNDS):
        # startup, then somewhere inside a push (an S3 push takes longer to get going)
        delay = rng.uniform(4.0, 8.0) if remote else rng.uniform(2.0, 5.0)
        kill_after(_push_forever, (lake, round_), delay)
    catalog = Catalog(lake)
    catalog.repair()
    report = check(catalog)
    assert report["ok"], report["violations"]
    ids = dict(zip(catalog.items()["client_item_id"], catalog.items()["object_id"], strict=True))
    again = catalog.push(payload(0))
    for entry in again["items"]:
        ((client_id, service_id),) = entry.items()
        assert ids.get(client_id, int(service_id)) == int(service_id)
    assert check(catalog, derive=False)["ok"]


def test_concurrent_writers_land_every_item_exactly_once(lake):
    Catalog(lake).push({"items": [make_item(client_item_id="seed")]})
    context = multiprocessing.get_context("spawn")
    with context.Pool(WRITERS + 2) as pool:
        writers = [pool.apply_async(_push_once, (lake, seed, 3)) for seed in range(WRITERS)]
        time.sleep(1.0)
        side = [pool.apply_async(_backfill, (lake,)), pool.apply_async(_maintain, (lake,))]
        responses = [r for w in writers for r in w.get(timeout=600)]
        for job in side:
            job.get(timeout=600)
    catalog = Catalog(lake)
    report = check(catalog)
    assert report["ok"], report["violations"]
    items = catalog.items()
    assert items["client_item_id"].is_unique and items["object_id"].is_unique
    stored = {cid for r in responses for entry in r["items"] for cid in entry}
    assert stored | {"seed"} == set(items["client_item_id"])
    # every returned id is the item's id now: one id per client_item_id for life
    current = dict(zip(items["client_item_id"], items["object_id"].astype(str), strict=True))
    assert all(current[c] == s for r in responses for e in r["items"] for c, s in e.items())


CORRUPTIONS = [
    ("client_item_id", st.sampled_from([None, "", "  ", 7, 1.5, True, ["x"]])),
    ("name", st.one_of(st.none(), st.text(max_size=30), st.integers(), st.booleans())),
    ("pricing_info__mrp", st.one_of(st.none(), st.text(max_size=12), st.floats(allow_nan=True), st.integers(-5, 10**6))),
    ("pricing_info__sale_price", st.one_of(st.text(max_size=12), st.floats(), st.integers(-5, 10**13))),
    ("inventory_info__qty", st.one_of(st.text(max_size=8), st.integers(-3, 10**14), st.floats(), st.booleans())),
    ("attributes__returnable", st.one_of(st.booleans(), st.text(max_size=6), st.integers(-1, 2), st.none())),
    ("attributes__time_to_ship", st.one_of(st.text(max_size=8), st.sampled_from(["P1D", "PT4H", "7 days", "P"]))),
    ("attributes__is_veg", st.one_of(st.text(max_size=6), st.booleans(), st.integers())),
    ("images", st.one_of(st.lists(st.text(max_size=20), max_size=3), st.text(max_size=10), st.none())),
    ("pricing_info__discount_end_date", st.one_of(st.text(max_size=12), st.sampled_from(["2020-01-01", "2099-01-01", ""]))),
]  # fmt: skip


@st.composite
def corrupted_items(draw):
    item = make_item(client_item_id=f"h{draw(st.integers(0, 5))}")
    for field, strategy in draw(st.lists(st.sampled_from(CORRUPTIONS), max_size=3)):
        item = _apply(item, field, draw(strategy))
    return item


def _apply(item: dict, field: str, value) -> dict:
    if "__" in field:
        outer, inner = field.split("__")
        item = {**item, outer: {**item.get(outer, {}), inner: value}}
    else:
        item = {**item, field: value}
    return item


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(corrupted_items(), min_size=1, max_size=6))
def test_any_corrupted_push_keeps_the_invariants(tmp_path_factory, batch):
    catalog = Catalog(Path(tmp_path_factory.mktemp("lake")))
    response = catalog.push({"items": batch})
    received = int(response["catalog_push_received_product_count"])
    success = int(response["catalog_push_success_product_count"])
    failed = int(response["catalog_push_failed_product_count"])
    assert received == len(batch) == success + failed
    assert len(response["items"]) == success
    assert len(response["catalog_push_failed_items"]) == failed
    report = check(catalog, derive=False)
    assert report["ok"], report["violations"]
