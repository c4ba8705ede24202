"""A push interrupted between table commits is finished by replay from the raw table."""

from __future__ import annotations

import pytest

from catalog_lake import Catalog, PushError, check
from catalog_lake.feeds import ingest
from catalog_lake.lake import Lake
from tests.conftest import make_item, write_feed


class CrashingLake(Lake):
    """A real lake whose writes to one table fail, as if the process died there."""

    def __init__(self, uri, fail_on: str) -> None:
        super().__init__(uri)
        self.fail_on = fail_on

    def _maybe_fail(self, name):
        if name == self.fail_on:
            raise OSError(f"simulated crash before committing {name}")

    def append(self, name, data, metadata=None, fence=None):
        self._maybe_fail(name)
        return super().append(name, data, metadata, fence)

    def upsert(self, name, data, metadata=None, **options):
        self._maybe_fail(name)
        return super().upsert(name, data, metadata, **options)

    def commit_files(self, name, staged, metadata, *, fence=None, claim=None):
        self._maybe_fail(name)
        return super().commit_files(name, staged, metadata, fence=fence, claim=claim)


PAYLOAD = {
    "items": [
        make_item(client_item_id="a"),
        make_item(client_item_id="b", pricing_info__mrp="bad"),
        make_item(client_item_id="c"),
    ]
}


@pytest.mark.parametrize("table", ["rejects", "items", "records", "pushes"])
def test_repair_finishes_a_push_that_died_after_raw(tmp_path, clock, table):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.push({"items": [make_item(client_item_id="before")]})
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on=table)
    with pytest.raises(PushError, match="catalog-lake repair") as caught:
        catalog.push(PAYLOAD)
    request_id = caught.value.request_id

    catalog.lake = Lake(catalog.lake.uri)
    assert catalog.interrupted() == [request_id]
    (response,) = catalog.repair()

    assert response["catalog_push_request_id"] == request_id
    assert response["items"] == [{"a": "2"}, {"c": "3"}]
    assert response["catalog_push_failed_product_count"] == "1"
    assert catalog.interrupted() == []
    assert catalog.repair() == []
    assert catalog.records()["client_item_id"].tolist() == ["before", "a", "c"]
    assert catalog.items()["object_id"].tolist() == [1, 2, 3]
    assert catalog.rejects()["client_item_id"].tolist() == ["b"]
    pushes = catalog.pushes()
    assert len(pushes) == 2
    assert pushes.set_index("request_id").loc[request_id, "source"] == "repair"


class FailingLookups(Lake):
    """A real lake whose items table cannot be read once raw was appended: ids cannot be found."""

    raw_written = False

    def append(self, name, data, *args, **kwargs):
        super().append(name, data, *args, **kwargs)
        self.raw_written |= name == "raw"

    def delta(self, name):
        if name == "items" and self.raw_written:
            raise OSError("simulated failure reading the key index")
        return super().delta(name)


def test_a_failure_finding_ids_after_raw_can_be_repaired(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = FailingLookups(catalog.lake.uri)
    with pytest.raises(PushError, match="catalog-lake repair") as caught:
        catalog.push(PAYLOAD)

    catalog.lake = Lake(catalog.lake.uri)
    assert catalog.interrupted() == [caught.value.request_id]
    (response,) = catalog.repair()
    assert response["items"] == [{"a": "1"}, {"c": "2"}]
    assert catalog.records()["client_item_id"].tolist() == ["a", "c"]


def test_a_crash_before_raw_leaves_nothing_to_repair(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="raw")
    with pytest.raises(PushError, match="nothing of this push was stored"):
        catalog.push(PAYLOAD)
    catalog.lake = Lake(catalog.lake.uri)
    assert catalog.interrupted() == []
    assert catalog.records().empty


def test_re_sending_after_repair_keeps_the_same_ids(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="records")
    with pytest.raises(PushError):
        catalog.push(PAYLOAD)
    catalog.lake = Lake(catalog.lake.uri)
    catalog.repair()
    again = catalog.push(PAYLOAD)
    assert again["items"] == [{"a": "1"}, {"c": "2"}]
    assert len(catalog.items()) == 2


def test_an_ingest_run_finishes_interrupted_pushes_first(tmp_path, clock):
    from catalog_lake.feeds import ingest

    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="pushes")
    with pytest.raises(PushError) as caught:
        catalog.push(PAYLOAD)
    catalog = Catalog(tmp_path / "lake", clock=clock)
    empty = tmp_path / "feeds"
    empty.mkdir()
    summary = ingest(catalog, empty)
    assert summary["repaired"] == [caught.value.request_id]
    assert check(catalog)["ok"]


def test_a_repaired_push_keeps_its_key_source_and_flow_run(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="pushes")
    payload = {"items": [make_item(client_item_id="R")]}
    with pytest.raises(PushError):
        catalog.push(payload, source="feed.json", flow_run_id="fr-1", idempotency_key="k-1")

    catalog.lake = Lake(catalog.lake.uri)
    catalog.repair()

    (row,) = catalog.pushes().to_dict(orient="records")
    assert (row["source"], row["flow_run_id"], row["idempotency_key"]) == (
        "feed.json",
        "fr-1",
        "k-1",
    )
    again = catalog.push(payload, idempotency_key="k-1")
    assert again["catalog_push_request_id"] == row["request_id"]
    assert len(catalog.pushes()) == 1 and len(catalog.raw()) == 1
    assert check(catalog)["ok"]


def test_an_ingest_after_a_killed_one_does_not_push_its_batches_twice(tmp_path, clock):
    feeds = tmp_path / "feeds"
    write_feed(feeds / "a.json", [make_item(client_item_id=f"A{i}") for i in range(3)])
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="pushes")
    ingest(catalog, feeds)  # the write fails after raw: the file is an error

    catalog = Catalog(tmp_path / "lake", clock=clock)
    summary = ingest(catalog, feeds)

    assert len(summary["repaired"]) == 1
    assert summary["totals"]["already_stored"] == 3
    assert len(catalog.pushes()) == 1 and len(catalog.raw()) == 3
    assert check(catalog)["ok"]


def test_repair_moves_the_id_counter_past_an_id_a_backfill_stored_under_it(tmp_path, clock):
    # What a backfill before 2026-12-05 left behind: an item new to the lake stored under a
    # stand-in id that the counter never gave (a dry run's), which a writer could be given again.
    import pandas as pd

    from catalog_lake.parse import parse_push
    from catalog_lake.schemas import ITEMS, RECORDS

    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.push({"items": [make_item(client_item_id="a")]})
    derived = catalog.derive(
        parse_push({"items": [make_item(client_item_id="b")]}),
        request_ids=pd.Series(["an-old-backfill"]),
        received_at=pd.Series([clock.now]),
    )
    catalog.lake.upsert("items", derived.items.table(ITEMS), known=[False])
    catalog.lake.upsert("records", derived.records.table(RECORDS), known=[False])
    behind = "a service id above the lake's id counter (a writer could be given it again); "
    behind += "run `catalog-lake repair`"
    found = {v["rule"]: v["examples"] for v in check(Catalog(tmp_path / "lake"))["violations"]}
    assert found[behind] == [2]
    assert Catalog(tmp_path / "lake").repair() == [{"repaired": "id_counter", "counter": "2"}]
    assert behind not in {v["rule"] for v in check(Catalog(tmp_path / "lake"))["violations"]}
    assert Catalog(tmp_path / "lake").repair() == []  # once
    response = Catalog(tmp_path / "lake").push({"items": [make_item(client_item_id="c")]})
    assert response["items"] == [{"c": "3"}]
