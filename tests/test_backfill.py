"""Backfills replay raw items with today's code and land where a fresh push would."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from catalog_lake import Catalog, PushError, check
from catalog_lake.backfill import backfill
from catalog_lake.lake import Lake
from tests.conftest import make_item
from tests.test_repair import CrashingLake

#: Prices, windows and ages follow the clock: `make test` runs these a year ahead too.
pytestmark = pytest.mark.clock

FEEDS = sorted((Path(__file__).parents[1] / "data" / "feeds").glob("*.json"))


@pytest.fixture
def synonyms(tmp_path) -> Path:
    path = tmp_path / "new-synonyms.txt"
    path.write_text("atta, flour, wheat flour\nkurta, kameez\n")
    return path


def push_feeds(catalog: Catalog, clock) -> None:
    for feed in FEEDS:
        catalog.push(feed.read_bytes())
        clock.now += timedelta(minutes=1)


def comparable(records: pd.DataFrame) -> list[dict]:
    return [
        {k: (list(v) if hasattr(v, "tolist") else v) for k, v in row.items()}
        for row in records.to_dict(orient="records")
    ]


def test_backfill_equals_a_fresh_push_with_the_new_rules(tmp_path, clock, synonyms):
    old = Catalog(tmp_path / "old", clock=clock)
    push_feeds(old, clock)
    end = clock.now

    clock.now = end - timedelta(minutes=len(FEEDS))
    fresh = Catalog(tmp_path / "fresh", synonyms=synonyms, clock=clock)
    push_feeds(fresh, clock)

    clock.now = end
    report = backfill(Catalog(tmp_path / "old", synonyms=synonyms, clock=clock))
    assert report["records_changed"] > 0
    after = Catalog(tmp_path / "old", clock=clock)
    assert comparable(after.records()) == comparable(fresh.records())
    assert after.items()["object_id"].tolist() == fresh.items()["object_id"].tolist()


def test_dry_run_reports_changes_with_examples_and_writes_nothing(tmp_path, clock, synonyms):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    push_feeds(catalog, clock)
    before = catalog.lake.version("records")

    catalog_now = Catalog(tmp_path / "lake", synonyms=synonyms, clock=clock)
    report = backfill(catalog_now, dry_run=True, examples=20)

    assert report["dry_run"] is True
    assert (report["pushes"], report["items_replayed"]) == (7, 16)
    assert (report["records_new"], report["records_changed"], report["records_unchanged"]) == (
        0,
        11,
        3,  # the seller_quirks items: no term of the new list in their names
    )
    assert report["items_rejected"] == 2
    example = next(e for e in report["examples"] if e["client_item_id"] == "GROC-ATTA-5KG")
    assert example["changes"] == {
        "synonyms": {"old": ["wheat flour", "groceries"], "new": ["flour", "wheat flour"]}
    }
    assert catalog.lake.version("records") == before


def test_backfill_twice_changes_nothing_the_second_time(tmp_path, clock, synonyms):
    catalog = Catalog(tmp_path / "lake", synonyms=synonyms, clock=clock)
    push_feeds(catalog, clock)
    backfill(catalog)
    again = backfill(catalog, dry_run=True)
    assert (again["records_changed"], again["records_unchanged"]) == (0, 14)


def test_scope_by_request_id_and_time(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    first = catalog.push({"items": [make_item(client_item_id="a")]})
    clock.now += timedelta(hours=1)
    catalog.push({"items": [make_item(client_item_id="b")]})
    by_id = backfill(
        catalog, request_ids=[first["catalog_push_request_id"], "no-such-push"], dry_run=True
    )
    assert (by_id["pushes"], by_id["items_replayed"]) == (1, 1)
    assert by_id["unknown_request_ids"] == ["no-such-push"]
    by_time = backfill(catalog, since=clock.now - timedelta(minutes=1), dry_run=True)
    assert (by_time["pushes"], by_time["items_replayed"]) == (1, 1)
    assert backfill(catalog, until=clock.now - timedelta(hours=2), dry_run=True)["pushes"] == 0


def test_a_replay_never_rolls_back_a_later_push(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    first = catalog.push({"items": [make_item(name="old name")]})
    clock.now += timedelta(hours=1)
    catalog.push({"items": [make_item(name="new name")]})
    backfill(catalog, request_ids=[first["catalog_push_request_id"]])
    assert catalog.records()["product_name"].tolist() == ["new name"]


def test_duplicates_are_judged_within_each_push(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.push({"items": [make_item(name="one"), make_item(name="two")]})
    clock.now += timedelta(hours=1)
    catalog.push({"items": [make_item(name="three", pricing_info__mrp="bad")]})
    report = backfill(catalog, dry_run=True)
    assert report["items_rejected"] == 2  # "one" (duplicate in its push) and "three" (bad price)
    assert report["records_unchanged"] == 1
    backfill(catalog)
    assert catalog.records()["product_name"].tolist() == ["two"]


class BackfilledUnder(Lake):
    """A real lake whose first items commit waits while a backfill runs (the race, made certain)."""

    def __init__(self, uri, clock) -> None:
        super().__init__(uri)
        self.clock, self.raced = clock, False

    def commit_files(self, name, staged, metadata, *, fence=None, claim=None):
        if name == "items" and not self.raced:
            self.raced = True
            backfill(Catalog(self.uri, clock=self.clock))
        return super().commit_files(name, staged, metadata, fence=fence, claim=claim)


def test_an_item_a_backfill_stores_takes_an_id_no_writer_is_given_again(tmp_path, clock):
    # A push that died after its raw commit leaves items a backfill is the first to store.
    lake = tmp_path / "lake"
    Catalog(lake, clock=clock).push({"items": [make_item(client_item_id="a")]})
    dying = Catalog(lake, clock=clock)
    dying.lake = CrashingLake(dying.lake.uri, fail_on="items")
    with pytest.raises(PushError):
        dying.push({"items": [make_item(client_item_id="b")]})
    # A writer counts an id for its new item; a backfill stores "b" before the writer commits.
    writer = Catalog(lake, clock=clock)
    writer.lake = BackfilledUnder(writer.lake.uri, clock)
    response = writer.push({"items": [make_item(client_item_id="c")]})
    items = Catalog(lake).items().set_index("client_item_id")["object_id"]
    assert sorted(items.index) == ["a", "b", "c"]
    assert items.is_unique, items.to_dict()
    assert response["items"] == [{"c": str(items["c"])}]
    assert Catalog(lake).lake.id_counter() >= items.max()
    Catalog(lake).repair()  # the push that died gets its response row
    assert check(Catalog(lake), derive=False)["ok"]
