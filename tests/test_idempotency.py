"""Retrying a push with its idempotency key is safe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog_lake import Catalog, LakeError, PushError
from catalog_lake.feeds import ingest
from catalog_lake.summary import summary_markdown
from tests.conftest import make_item, write_feed
from tests.test_repair import CrashingLake

PAYLOAD = {"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]}


def test_same_key_same_payload_returns_the_original_response_and_writes_nothing(catalog):
    first = catalog.push(PAYLOAD, idempotency_key="order-42")
    versions = {t: catalog.lake.version(t) for t in ("raw", "items", "records", "pushes")}
    again = catalog.push(json.dumps(PAYLOAD), idempotency_key="order-42")  # text or dict alike
    assert again == first
    assert {t: catalog.lake.version(t) for t in versions} == versions


def test_same_key_different_payload_is_refused(catalog):
    catalog.push(PAYLOAD, idempotency_key="order-42")
    with pytest.raises(PushError, match="already used for a different payload") as caught:
        catalog.push({"items": [make_item(client_item_id="c")]}, idempotency_key="order-42")
    assert caught.value.reason == "idempotency_conflict"
    assert len(catalog.pushes()) == 1


def test_without_a_key_a_repeat_is_a_new_push_with_the_same_ids(catalog):
    first = catalog.push(PAYLOAD)
    second = catalog.push(PAYLOAD)
    assert second["catalog_push_request_id"] != first["catalog_push_request_id"]
    assert second["items"] == first["items"]
    assert len(catalog.items()) == 2


@pytest.mark.parametrize("key", ["", "   ", "k" * 257])
def test_key_must_be_sensible(catalog, key):
    with pytest.raises(PushError, match="idempotency_key must be 1 to 256 characters"):
        catalog.push(PAYLOAD, idempotency_key=key)


ROOT = Path(__file__).parents[1]
FEEDS = ROOT / "data" / "feeds"


def price_of(catalog, client_id):
    records = catalog.records()
    return float(records.loc[records["client_item_id"] == client_id, "price"].iloc[0])


def test_a_strict_retry_under_a_lenient_key_is_refused_not_answered_leniently(catalog):
    payload = {"items": [make_item(pricing_info__sale_price="400.00")]}
    catalog.push(payload, idempotency_key="delivery-7")
    with pytest.raises(PushError, match="another strict setting"):
        catalog.push(payload, idempotency_key="delivery-7", strict=True)
    assert (
        catalog.push(payload, idempotency_key="delivery-7")["catalog_push_success_product_count"]
        == "1"
    )


def test_a_strict_ingest_after_a_lenient_one_judges_the_files_again(catalog):
    ingest(catalog, FEEDS)
    strict = ingest(catalog, FEEDS, force=True, strict=True)
    assert strict["files"]["failed"] == []
    assert strict["totals"]["already_stored"] == 0


def test_nan_and_null_are_different_content_under_one_key(catalog):
    catalog.push({"items": [make_item(notes=float("nan"))]}, idempotency_key="k")
    with pytest.raises(PushError, match="idempotency_conflict"):
        catalog.push({"items": [make_item(notes=None)]}, idempotency_key="k")
    # The same NaN sent as JSON text is the same content.
    text = json.dumps({"items": [make_item(notes=float("nan"))]})
    assert catalog.push(text, idempotency_key="k")["catalog_push_success_product_count"] == "1"


def test_a_later_file_with_the_same_bytes_is_a_new_delivery(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    day1 = [make_item(client_item_id="P", pricing_info__sale_price="100.00")]
    day2 = [make_item(client_item_id="P", pricing_info__sale_price="90.00")]
    write_feed(feeds / "day1.json", day1)
    ingest(catalog, feeds)
    write_feed(feeds / "day2.json", day2)
    ingest(catalog, feeds)
    assert price_of(catalog, "P") == 90.0

    (feeds / "day3.json").write_bytes((feeds / "day1.json").read_bytes())
    summary = ingest(catalog, feeds)

    assert summary["files"]["ingested"] == ["day3.json"]
    assert summary["totals"]["already_stored"] == 0
    assert price_of(catalog, "P") == 100.0
    assert len(catalog.pushes()) == 3


def test_the_same_unchanged_file_at_the_same_path_is_still_skipped(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    write_feed(feeds / "day1.json", [make_item(client_item_id="P")])
    ingest(catalog, feeds)

    summary = ingest(catalog, feeds)

    assert summary["files"]["skipped"] == ["day1.json"]
    assert summary["files"]["skipped_reasons"] == {"ingested before and unchanged": 1}
    assert len(catalog.pushes()) == 1


def test_a_forced_reingest_of_an_unchanged_file_is_pushed_again(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    write_feed(feeds / "day1.json", [make_item(client_item_id="P")])
    ingest(catalog, feeds)

    summary = ingest(catalog, feeds, force=True)

    assert summary["files"]["ingested"] == ["day1.json"]
    assert summary["totals"]["already_stored"] == 0
    assert len(catalog.pushes()) == 2


def test_a_run_resumed_after_a_kill_counts_stored_batches_as_already_stored(tmp_path, clock):
    feeds = tmp_path / "feeds"
    write_feed(feeds / "a.json", [make_item(client_item_id=f"A{i}") for i in range(4)])
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="files")
    # The disk fills up (or the run dies) after the pushes, before the files table.
    with pytest.raises(
        LakeError,
        match=r"^the run's 1 push\(es\) are in the lake, but it could not record the "
        r"files it read: .*; run the same command again once the lake can be written$",
    ):
        ingest(catalog, feeds)

    catalog = Catalog(tmp_path / "lake", clock=clock)
    resumed = ingest(catalog, feeds)

    assert resumed["files"]["ingested"] == ["a.json"]
    assert resumed["totals"]["received"] == 4
    assert resumed["totals"]["already_stored"] == 4
    assert len(catalog.pushes()) == 1
    assert "4 of the items received had been stored by an interrupted run" in summary_markdown(
        resumed
    )
