"""Products leave (issue 27): deletes, full-catalog refreshes and deletions files.

Every test runs on a real lake in a temporary folder; the change feed and
sync have their own file (``test_changes.py``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from catalog_lake import Catalog, check
from catalog_lake.backfill import backfill
from catalog_lake.errors import CatalogLakeError, NoLakeError, PushError
from catalog_lake.feeds import ingest
from catalog_lake.metrics import apply_metrics
from catalog_lake.refresh import Refresh
from tests.conftest import Ticking, kill_after, make_item

#: Prices, windows and ages follow the clock: `make test` runs these a year ahead too.
pytestmark = pytest.mark.clock


def _push(catalog: Catalog, *ids: str, **changes) -> dict:
    return catalog.push({"items": [make_item(client_item_id=i, **changes) for i in ids]})


def _statuses(response: dict) -> dict[str, str]:
    return {e["client_item_id"]: e["status"] for e in response["items"]}


# --- 1. delete -----------------------------------------------------------------------


def test_a_deleted_item_leaves_records_keeps_its_id_and_comes_back_with_it(catalog, clock):
    _push(catalog, "a", "b")
    ids = dict(zip(catalog.items()["client_item_id"], catalog.items()["object_id"], strict=True))
    clock.now += timedelta(seconds=1)

    answer = catalog.delete(["a"])

    assert answer["items"] == [
        {"client_item_id": "a", "object_id": str(ids["a"]), "status": "deleted"}
    ]
    assert answer["catalog_delete_received_count"] == "1"
    assert answer["catalog_delete_success_count"] == "1"
    assert answer["catalog_delete_failed_count"] == "0"
    assert list(catalog.records()["client_item_id"]) == ["b"]
    tombstone = catalog.items().set_index("client_item_id").loc["a"]
    assert tombstone["deleted_at"] == clock.now
    assert tombstone["deleted_by"] == answer["catalog_delete_request_id"]
    assert check(catalog)["ok"]

    clock.now += timedelta(seconds=1)
    back = _push(catalog, "a", name="Atta, again")
    assert back["items"] == [{"a": str(ids["a"])}]  # the same service id
    record = catalog.records().set_index("client_item_id").loc["a"]
    assert record["product_name"] == "Atta, again"
    assert (
        catalog.items().set_index("client_item_id").loc["a"]["deleted_at"] is None
        or (catalog.items().set_index("client_item_id")["deleted_at"].isna()["a"])
    )
    assert check(catalog)["ok"]


def test_refusals_are_per_id_each_with_its_own_code_and_never_an_exception(catalog):
    _push(catalog, "a")
    answer = catalog.delete(["a", "never-stored", "", 7, None, "x" * 300, "bad\u200bid"])
    statuses = [(e["status"], e.get("code")) for e in answer["items"]]
    assert statuses == [
        ("deleted", None),
        ("refused", "unknown_item"),
        ("refused", "missing_required_field"),
        ("refused", "unknown_item"),  # a whole number is an id, as in a push: never stored
        ("refused", "invalid_type"),
        ("refused", "text_too_long"),
        ("refused", "invalid_identifier"),
    ]
    assert answer["catalog_delete_success_count"] == "1"
    assert answer["catalog_delete_failed_count"] == "6"
    failed = answer["catalog_delete_failed_items"]
    assert [f["index"] for f in failed] == [1, 2, 3, 4, 5, 6]
    assert failed[0]["errors"][0] == {
        "field": "client_item_id",
        "code": "unknown_item",
        "message": "the lake never stored this client_item_id; nothing to delete",
        "value": "never-stored",
    }
    # every refusal is kept, as a push's are
    rejected = catalog.rejects()
    assert len(rejected) == 6
    assert check(catalog)["ok"]


def test_deleting_twice_is_harmless(catalog, clock):
    _push(catalog, "a")
    catalog.delete(["a"])
    clock.now += timedelta(seconds=1)
    again = catalog.delete(["a", "a"])
    assert _statuses(again) == {"a": "already_deleted"}
    assert again["catalog_delete_failed_count"] == "0"
    assert check(catalog)["ok"]


def test_an_idempotency_key_answers_a_retry_and_refuses_other_ids(catalog):
    _push(catalog, "a", "b")
    first = catalog.delete(["a"], idempotency_key="nightly-1")
    assert catalog.delete(["a"], idempotency_key="nightly-1") == first
    with pytest.raises(PushError, match="already used"):
        catalog.delete(["b"], idempotency_key="nightly-1")
    assert list(catalog.records()["client_item_id"]) == ["b"]


def test_a_dry_run_says_what_would_happen_and_writes_nothing(catalog):
    _push(catalog, "a")
    before = catalog.lake.version("items"), catalog.lake.version("raw")
    answer = catalog.delete(["a", "zz"], dry_run=True)
    assert answer["catalog_delete_dry_run"] is True
    assert _statuses(answer) == {"a": "deleted", "zz": "refused"}
    assert (catalog.lake.version("items"), catalog.lake.version("raw")) == before
    assert list(catalog.records()["client_item_id"]) == ["a"]


def test_a_delete_needs_a_list_and_a_lake(tmp_path):
    with pytest.raises(NoLakeError):
        Catalog(tmp_path / "none").delete(["a"])
    dry = Catalog(tmp_path / "none").delete(["a"], dry_run=True)  # what an ingest's dry run asks
    assert [e["code"] for e in dry["items"]] == ["unknown_item"]
    assert not (tmp_path / "none").exists()
    with pytest.raises(CatalogLakeError, match="list of ids"):
        Catalog(tmp_path / "none").delete("abc")


def test_as_of_still_shows_the_item_as_it_was_before(catalog, clock):
    _push(catalog, "a")
    version = catalog.lake.version("records")
    catalog.delete(["a"])
    assert catalog.query_records(as_of=version)["client_item_id"].tolist() == ["a"]
    assert catalog.query_records()["client_item_id"].tolist() == []


def test_backfill_never_resurrects_and_metrics_never_recreate(catalog, clock, tmp_path):
    _push(catalog, "a", "b")
    clock.now += timedelta(seconds=1)
    catalog.delete(["a"])

    dry = backfill(catalog, dry_run=True)
    assert dry["records_new"] == 0 and dry["records_changed"] == 0
    backfill(catalog)
    assert list(catalog.records()["client_item_id"]) == ["b"]

    path = tmp_path / "m.csv"
    path.write_text("client_item_id,likes\na,5\nb,6\n")
    report = apply_metrics(catalog, path)
    assert report["updated"] == 1
    assert report["deleted_count"] == 1 and report["deleted_ids"] == ["a"]
    assert list(catalog.records()["client_item_id"]) == ["b"]
    assert check(catalog)["ok"]


def test_an_older_push_replayed_after_a_delete_does_not_bring_the_item_back(catalog, clock):
    """A push interrupted before its items commit and repaired after a delete stays deleted."""
    from catalog_lake import store

    _push(catalog, "a")
    clock.now += timedelta(seconds=1)
    real = store._commit_items

    def killed(*args, **kwargs):
        raise OSError("killed")

    store._commit_items = killed
    try:
        with pytest.raises(PushError, match="repair"):
            _push(catalog, "a", name="interrupted")
    finally:
        store._commit_items = real
    clock.now += timedelta(seconds=1)
    catalog.delete(["a"])
    catalog.repair()
    assert catalog.records().empty
    assert check(catalog)["ok"]


def test_check_reports_a_deleted_item_that_kept_its_record(catalog):
    _push(catalog, "a")
    records = catalog.lake.read("records")
    catalog.delete(["a"])
    catalog.lake.append("records", records)  # what a broken writer would leave
    report = check(catalog, derive=False)
    rules = [v["rule"] for v in report["violations"]]
    assert any("deleted item still has a record" in r for r in rules)


# --- an interrupted delete ----------------------------------------------------------


def _delete_forever(lake: str, ids: list[str]) -> None:
    catalog = Catalog(lake)
    while True:
        catalog.delete(ids)
        catalog.push({"items": [make_item(client_item_id=i) for i in ids]})


def test_a_delete_killed_anywhere_is_finished_by_repair(tmp_path):
    lake = str(tmp_path / "lake")
    ids = [f"sku-{n}" for n in range(40)]
    Catalog(lake).push({"items": [make_item(client_item_id=i) for i in ids]})
    for delay in (2.5, 3.5, 4.5):
        kill_after(_delete_forever, (lake, ids[::2]), delay)
        catalog = Catalog(lake)
        catalog.repair()
        report = check(catalog)
        assert report["ok"], report["violations"]


def _refresh_forever(lake: str, folder: str) -> None:
    catalog = Catalog(lake)
    number = 0
    while True:
        number += 1
        keep = [f"r-{n}" for n in range(30) if n % 3 or number % 2]  # alternately all, 2/3
        _feed(Path(folder), "catalog.json", keep, name=f"round {number}")
        ingest(catalog, folder, refresh=Refresh(allow_mass_delete=True))


def test_a_refresh_killed_anywhere_is_finished_by_repair(tmp_path):
    lake, folder = str(tmp_path / "lake"), str(tmp_path / "feeds")
    for delay in (3.0, 4.0, 5.5):
        kill_after(_refresh_forever, (lake, folder), delay)
        catalog = Catalog(lake)
        if not catalog.lake.exists():
            continue
        catalog.repair()
        report = check(catalog)
        assert report["ok"], report["violations"]
    # and a refresh run afterwards still converges on the feed
    _feed(Path(folder), "catalog.json", [f"r-{n}" for n in range(10)])
    ingest(Catalog(lake), folder, refresh=Refresh(allow_mass_delete=True))
    assert sorted(Catalog(lake).records()["client_item_id"]) == sorted(f"r-{n}" for n in range(10))


# --- 2. full-catalog refresh -------------------------------------------------------------


def _feed(folder: Path, file_name: str, ids: list[str], **changes) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    items = [make_item(client_item_id=i, **changes) for i in ids]
    (folder / file_name).write_text(json.dumps({"items": items}))


def test_a_full_refresh_deletes_what_the_feed_no_longer_carries(catalog, tmp_path, clock):
    feeds = tmp_path / "seller-a"
    _feed(feeds, "catalog.json", [f"a-{n}" for n in range(10)])
    ingest(catalog, feeds)
    clock.now += timedelta(minutes=1)
    _feed(feeds, "catalog.json", [f"a-{n}" for n in range(9)])

    summary = ingest(catalog, feeds, refresh=Refresh())

    assert summary["refresh"]["status"] == "deleted"
    assert summary["refresh"]["deleted"] == 1
    assert summary["refresh"]["ids"] == ["a-9"]
    assert "a-9" not in set(catalog.records()["client_item_id"])
    assert check(catalog)["ok"]


def test_a_refresh_of_one_source_never_deletes_another_sources_items(catalog, tmp_path):
    _feed(tmp_path / "seller-a", "a.json", ["a-1", "a-2"])
    _feed(tmp_path / "seller-b", "b.json", ["b-1", "b-2", "b-3", "b-4", "b-5", "b-6"])
    ingest(catalog, tmp_path / "seller-a")
    ingest(catalog, tmp_path / "seller-b")
    _feed(tmp_path / "seller-b", "b.json", ["b-1", "b-2", "b-3", "b-4", "b-5"])
    summary = ingest(catalog, tmp_path / "seller-b", refresh=Refresh())
    assert summary["refresh"]["in_scope"] == 6
    assert summary["refresh"]["ids"] == ["b-6"]
    assert {"a-1", "a-2"} <= set(catalog.records()["client_item_id"])


def test_a_refresh_that_would_delete_too_much_stops_and_deletes_nothing(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    _feed(feeds, "catalog.json", [f"s-{n}" for n in range(10)])
    ingest(catalog, feeds)
    _feed(feeds, "catalog.json", ["s-0", "s-1"])  # a truncated feed

    summary = ingest(catalog, feeds, refresh=Refresh())

    assert summary["refresh"]["status"] == "stopped"
    assert "8 of the 10 items" in summary["refresh"]["reason"]
    assert "--allow-mass-delete" in summary["refresh"]["reason"]
    assert len(catalog.records()) == 10
    # the caller says so explicitly: then it goes ahead
    again = ingest(catalog, feeds, refresh=Refresh(allow_mass_delete=True))
    assert again["refresh"]["deleted"] == 8
    assert len(catalog.records()) == 2


def test_a_refresh_with_a_failed_file_deletes_nothing(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    _feed(feeds, "1.json", ["x-1", "x-2"])
    ingest(catalog, feeds)
    (feeds / "1.json").write_text(json.dumps({"items": [make_item(client_item_id="x-1")]}))
    (feeds / "2.json").write_text("{not json")
    summary = ingest(catalog, feeds, refresh=Refresh(allow_mass_delete=True))
    assert summary["refresh"]["status"] == "stopped"
    assert "failed" in summary["refresh"]["reason"]
    assert set(catalog.records()["client_item_id"]) == {"x-1", "x-2"}


def test_a_refresh_dry_run_lists_what_would_go(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    _feed(feeds, "c.json", ["d-1", "d-2", "d-3", "d-4", "d-5", "d-6"])
    ingest(catalog, feeds)
    _feed(feeds, "c.json", ["d-1", "d-2", "d-3", "d-4", "d-5"])
    summary = ingest(catalog, feeds, refresh=Refresh(), dry_run=True)
    assert summary["refresh"]["status"] == "dry_run"
    assert summary["refresh"]["ids"] == ["d-6"]
    assert len(catalog.records()) == 6


def test_unchanged_files_a_refresh_skips_still_count_as_carried(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    _feed(feeds, "1.json", ["k-1", "k-2"])
    _feed(feeds, "2.json", ["k-3", "k-4"])
    ingest(catalog, feeds)
    summary = ingest(catalog, feeds, refresh=Refresh())  # both files skipped, unchanged
    assert summary["refresh"]["status"] == "nothing_to_delete"
    assert len(catalog.records()) == 4


def test_a_refresh_scope_can_be_one_category(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    _feed(feeds, "g.json", ["g-1", "g-2"], lake_category="GROCERY")
    _feed(feeds, "f.json", ["f-1", "f-2"], lake_category="FASHION")
    ingest(catalog, feeds)
    (feeds / "f.json").unlink()
    (feeds / "g.json").unlink()
    _feed(feeds, "g2.json", ["g-1", "g-2"], lake_category="GROCERY")
    summary = ingest(
        catalog, feeds, refresh=Refresh(scope="all", category="GROCERY", allow_mass_delete=True)
    )
    assert summary["refresh"]["status"] == "nothing_to_delete"
    assert {"f-1", "f-2"} <= set(catalog.records()["client_item_id"])


# --- deletions files ------------------------------------------------------------------


def test_a_deletions_file_applies_in_feed_order(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=Ticking(clock))  # one push after another
    feeds = tmp_path / "feeds"
    _feed(feeds, "1-items.json", ["p-1", "p-2", "p-3"])
    (feeds / "2-gone.delete.jsonl").write_text(
        '{"client_item_id": "p-1"}\n{"client_item_id": "p-3"}\n{"sku": "no id"}\n'
    )
    _feed(feeds, "3-back.json", ["p-3"], name="p-3 is back")

    summary = ingest(catalog, feeds)

    assert summary["deletions"]["requests"] == 1
    assert summary["deletions"]["deleted"] == 2
    assert summary["deletions"]["refused"] == 1
    records = catalog.records().set_index("client_item_id")
    assert sorted(records.index) == ["p-2", "p-3"]  # p-3 came back after its delete
    assert records.loc["p-3", "product_name"] == "p-3 is back"
    assert check(catalog)["ok"]
    # a second run skips the unchanged deletions file as it skips item files
    assert ingest(catalog, feeds)["deletions"]["requests"] == 0


def test_the_cli_deletes_from_arguments_a_file_and_standard_input(run, tmp_path):
    _push(Catalog("lake"), "a", "b", "c")
    done = run("delete", "a", "zz")
    assert done.exit_code == 3  # an id was refused
    assert done.stdout.splitlines() == ["a [1]: deleted", "zz: refused (unknown_item)"]
    (tmp_path / "ids.txt").write_text("b\n\n")
    assert run("delete", "--from", str(tmp_path / "ids.txt"), "--json").exit_code == 0
    piped = run("delete", "-", "--dry-run", "--json", stdin=b"c\n")
    assert json.loads(piped.stdout)["catalog_delete_dry_run"] is True
    assert list(Catalog("lake").records()["client_item_id"]) == ["c"]
    assert run("delete").exit_code == 2


def test_items_of_a_run_killed_before_it_recorded_its_files_stay_in_scope(
    catalog, tmp_path, monkeypatch
):
    """Their pushes landed (or were repaired) but no files row names them: batch keys do."""
    from catalog_lake import feeds
    from catalog_lake.errors import LakeError

    folder = tmp_path / "feeds"
    _feed(folder, "catalog.json", ["k-1", "k-2", "k-3", "k-4", "k-5", "k-6"])

    def killed(*args, **kwargs):
        raise OSError("killed before the files were recorded")

    monkeypatch.setattr(feeds, "record_files", killed)
    with pytest.raises(LakeError, match="could not record"):
        ingest(catalog, folder)
    monkeypatch.undo()
    _feed(folder, "catalog.json", ["k-1", "k-2", "k-3", "k-4", "k-5"])
    summary = ingest(catalog, folder, refresh=Refresh())
    assert summary["refresh"]["ids"] == ["k-6"]


def test_two_full_refreshes_of_one_shrunk_folder_at_once_delete_what_it_lost(tmp_path):
    """Issue 42: the run that loses a batch's key to the other has written the batch's items
    under its own request id; those items stay in both runs' scope, so neither stops with a
    truncated feed's 100% and the 100 items the feed lost are deleted once."""
    import subprocess
    import sys

    feeds = tmp_path / "feeds"
    _feed(feeds, "a.json", [f"a-{n}" for n in range(2000)])
    lake = tmp_path / "lake"
    ingest(Catalog(lake), feeds)
    _feed(feeds, "a.json", [f"a-{n}" for n in range(1900)])
    command = [str(Path(sys.executable).with_name("catalog-lake")), "ingest", str(feeds),
               "--lake", str(lake), "--full-refresh", "--json"]  # fmt: skip
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]  # fmt: skip
    refreshed = [json.loads(run.communicate(timeout=300)[0])["refresh"] for run in runs]
    # Whichever way the two interleave: neither stops, and the hundred go once.
    assert {r["status"] for r in refreshed} <= {"deleted", "nothing_to_delete"}, refreshed
    assert all(r["in_scope"] in (1900, 2000) for r in refreshed), refreshed
    assert sum(r["deleted"] for r in refreshed) == 100
    catalog = Catalog(lake)
    assert sorted(catalog.records()["client_item_id"]) == sorted(f"a-{n}" for n in range(1900))
    assert check(catalog)["ok"]


def test_runs_add_up_under_the_per_run_guard_and_the_daily_guard_stops_them(
    catalog, tmp_path, clock
):
    """Issue 42: five refreshes that each drop 19% pass a 20% guard one by one; a share per
    day bounds what they delete together, and a day later the window has moved on."""
    feeds = tmp_path / "feeds"
    live = [f"a-{n}" for n in range(100)]
    _feed(feeds, "a.json", live)
    ingest(catalog, feeds)
    daily = Refresh(max_daily_share=0.5)
    deleted, stopped = 0, None
    for _ in range(5):
        clock.now += timedelta(minutes=10)
        live = live[: len(live) - len(live) * 19 // 100]
        _feed(feeds, "a.json", live)
        report = ingest(catalog, feeds, refresh=daily)["refresh"]
        if report["status"] == "stopped":
            stopped = report
            break
        deleted += report["deleted"]
    assert deleted == 19 + 15 + 12  # 100 -> 81 -> 66 -> 54; then 44 is 56% of the day
    assert stopped is not None and stopped["deleted_last_24h"] == 46
    assert stopped["reason"].startswith(
        "with the 46 items that refreshes of this source deleted in the last 24 hours, the "
        "refresh would delete 56 of 100 in a day (56%), more than the 50% allowed per day"
    )
    assert len(catalog.records()) == 54

    clock.now += timedelta(hours=25)  # the window moved on: the same step is allowed now
    assert ingest(catalog, feeds, refresh=daily)["refresh"]["deleted"] == 10
    assert len(catalog.records()) == 44
