"""Several pushes written together answer and store exactly as if made one by one."""

from __future__ import annotations

import json
import threading

import pandas as pd
import pytest

from catalog_lake import Catalog, PushError, PushRequest, check
from catalog_lake.feeds import ingest
from catalog_lake.lake import Lake
from tests.conftest import Ticking, make_item
from tests.test_repair import CrashingLake

FIRST = {
    "items": [
        make_item(client_item_id="a", name="Alpha v1"),
        make_item(client_item_id="b", pricing_info__mrp="₹12"),
        make_item(client_item_id="c"),
    ]
}
SECOND = {
    "items": [
        make_item(client_item_id="a", name="Alpha v2"),
        make_item(client_item_id="d"),
        make_item(client_item_id="d", name="Delta again"),
    ]
}


def _comparable(response: dict) -> dict:
    return {k: v for k, v in response.items() if k != "catalog_push_request_id"}


def test_a_group_answers_and_stores_like_the_same_pushes_one_by_one(tmp_path, clock):
    one_by_one = Catalog(tmp_path / "one", clock=Ticking(clock))
    grouped = Catalog(tmp_path / "group", clock=Ticking(clock))

    expected = [one_by_one.push(FIRST), one_by_one.push(SECOND)]
    got = grouped.push_many([PushRequest(FIRST), PushRequest(SECOND)])

    assert [_comparable(r) for r in got] == [_comparable(r) for r in expected]
    assert got[0]["items"] == [{"a": "1"}, {"c": "2"}]
    assert got[1]["items"] == [{"a": "1"}, {"d": "3"}]
    assert got[1]["catalog_push_failed_items"][0]["errors"][0]["code"] == "duplicate_in_push"
    # Only the clock readings differ: a group reads it once per push, not twice.
    times = ["request_id", "updated_at", "first_seen_at", "received_at"]
    for table in ("items", "records"):
        mine = getattr(grouped, table)().drop(columns=times, errors="ignore")
        theirs = getattr(one_by_one, table)().drop(columns=times, errors="ignore")
        pd.testing.assert_frame_equal(mine, theirs)
    records = grouped.records().set_index("client_item_id")
    assert records.loc["a", "product_name"] == "Alpha v2"
    items = grouped.items().set_index("client_item_id")
    # "a" was first seen by the first push, and last updated by the second.
    assert items.loc["a", "first_seen_at"] < items.loc["a", "updated_at"]
    assert sorted(grouped.rejects()["client_item_id"]) == ["b", "d"]


def test_a_group_shares_one_commit_per_table_and_keeps_a_row_per_push(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    seed = catalog.push({"items": [make_item(client_item_id="seed")]})
    versions = {name: catalog.lake.version(name) for name in ("raw", "items", "pushes")}

    responses = catalog.push_many([PushRequest(FIRST, source="f1"), PushRequest(SECOND)])

    assert {name: catalog.lake.version(name) for name in versions} == {
        name: version + 1 for name, version in versions.items()
    }
    pushes = catalog.pushes().set_index("request_id")
    for response in responses:
        row = pushes.loc[response["catalog_push_request_id"]]
        assert json.loads(row["response_json"]) == response
    assert pushes.loc[responses[0]["catalog_push_request_id"], "source"] == "f1"
    numbered = catalog.raw().groupby("request_id")["index"].apply(lambda i: sorted(map(int, i)))
    assert numbered.to_dict() == {r["catalog_push_request_id"]: [0, 1, 2] for r in responses} | {
        seed["catalog_push_request_id"]: [0]
    }


def test_an_unusable_payload_in_a_group_is_named_and_nothing_is_written(catalog):
    with pytest.raises(PushError, match="push 1: 'items' is empty") as caught:
        catalog.push_many([PushRequest(FIRST), PushRequest({"items": []})])
    assert caught.value.reason == "invalid_payload"
    assert not catalog.lake.exists()


def test_a_key_repeated_in_a_group_is_one_push_unless_the_payloads_differ(catalog):
    same = catalog.push_many([PushRequest(FIRST, idempotency_key="k")] * 2)
    assert same[0] == same[1]
    assert len(catalog.pushes()) == 1
    with pytest.raises(PushError) as caught:
        catalog.push_many(
            [PushRequest(FIRST, idempotency_key="k2"), PushRequest(SECOND, idempotency_key="k2")]
        )
    assert caught.value.reason == "idempotency_conflict"


def test_repair_finishes_every_push_of_a_group_that_died_mid_way(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)  # pinned: the group still orders its pushes
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="records")
    with pytest.raises(PushError, match="catalog-lake repair"):
        catalog.push_many([PushRequest(FIRST), PushRequest(SECOND)])

    catalog.lake = Lake(catalog.lake.uri)
    assert len(catalog.interrupted()) == 2
    responses = catalog.repair()

    assert [r["items"] for r in responses] == [[{"a": "1"}, {"c": "2"}], [{"a": "1"}, {"d": "3"}]]
    assert catalog.interrupted() == []
    assert catalog.records().set_index("client_item_id").loc["a", "product_name"] == "Alpha v2"
    assert check(catalog)["ok"]


def _feed(folder, name: str, *ids: str) -> None:
    items = [make_item(client_item_id=i) for i in ids]
    (folder / name).write_text(json.dumps({"items": items}))


def test_feed_files_are_grouped_into_shared_commits_but_answered_per_file(catalog, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for number in range(6):
        _feed(folder, f"f{number}.json", f"k{number}a", f"k{number}b")

    summary = ingest(catalog, folder, batch_size=1, group_items=4)

    assert summary["totals"] == {
        "received": 12,
        "success": 12,
        "failed": 0,
        "warned": 0,
        "already_stored": 0,
    }
    assert len(summary["batches"]) == 12  # batch_size=1: a push per item
    assert [b["file"] for b in summary["batches"]][:4] == ["f0.json"] * 2 + ["f1.json"] * 2
    # 12 pushes in 3 groups of 4 items: three commits to the items table after its creation.
    assert catalog.lake.version("items") == 3
    files = catalog.lake.read("files").to_pandas().set_index("path")
    assert files.loc["f3.json", "items"] == 2
    assert len(files.loc["f3.json", "request_ids"]) == 2


def test_each_group_is_checked_ahead_and_committed_on_its_own_thread_without_its_cells(
    tmp_path, clock, monkeypatch
):
    folder = tmp_path / "in"
    folder.mkdir()
    for number in range(6):
        _feed(folder, f"f{number}.json", f"k{number}a", f"k{number}b", "shared")
    (folder / "f6.json").write_text(
        json.dumps({"items": [make_item(client_item_id="bad", name="")]})
    )
    commits = []
    push_many = Catalog.push_many

    def watched(self, requests, **options):
        commits.append(
            (
                threading.current_thread().name,
                options["checked"] is not None,
                {request.payload.cells is None for request in requests},
            )
        )
        return push_many(self, requests, **options)

    monkeypatch.setattr(Catalog, "push_many", watched)
    piped = ingest(Catalog(tmp_path / "piped", clock=clock), folder, group_items=4)
    monkeypatch.undo()
    whole = ingest(Catalog(tmp_path / "whole", clock=clock), folder, group_items=1_000)

    assert len(commits) == 4  # 19 items in groups of about 4
    assert all(name.startswith("catalog-lake-commit") for name, _, _ in commits)
    assert all(checked and cells == {True} for _, checked, cells in commits)
    assert piped["totals"] == whole["totals"] == {
        "received": 19, "success": 18, "failed": 1, "warned": 0, "already_stored": 0,
    }  # fmt: skip
    stored = [
        Catalog(tmp_path / lake).records().drop(columns=["received_at", "updated_at"])
        for lake in ("piped", "whole")
    ]
    pd.testing.assert_frame_equal(stored[0], stored[1])
    answered = [[_comparable(batch) for batch in summary["batches"]] for summary in (piped, whole)]
    assert answered[0] == answered[1]
    assert answered[0][-1]["catalog_push_failed_items"][0]["client_item_id"] == "bad"


def test_a_lake_failure_marks_every_file_of_its_group_and_a_rerun_finishes(tmp_path, clock):
    folder = tmp_path / "in"
    folder.mkdir()
    for number in range(4):
        _feed(folder, f"f{number}.json", f"k{number}")
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake.ensure()
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="items")

    summary = ingest(catalog, folder, group_items=2)

    failed = summary["files"]["failed"]
    assert [(f["path"], f["status"]) for f in failed] == [(f"f{n}.json", "error") for n in range(4)]
    catalog.lake = Lake(catalog.lake.uri)
    again = ingest(catalog, folder, group_items=2)
    assert again["files"]["failed"] == []
    assert sorted(catalog.records()["client_item_id"]) == ["k0", "k1", "k2", "k3"]
    assert check(catalog)["ok"]


def test_a_lake_written_with_another_block_size_is_refused_not_corrupted(
    tmp_path, clock, monkeypatch
):
    Catalog(tmp_path / "lake", clock=clock).push(FIRST)
    monkeypatch.setattr("catalog_lake.settings.ID_BLOCK_SIZE", 4096)
    with pytest.raises(PushError, match="another id_block size") as caught:
        Catalog(tmp_path / "lake", clock=clock).push(SECOND)
    assert caught.value.reason == "lake_write_failed"


def test_a_catalog_sees_ids_another_writer_gave_since_its_last_push(tmp_path, clock):
    """The key index is a cache: another writer's commit must make it read the table again."""
    first = Catalog(tmp_path / "lake", clock=clock)
    second = Catalog(tmp_path / "lake", clock=clock)
    assert first.push({"items": [make_item(client_item_id="x")]})["items"] == [{"x": "1"}]
    assert second.push({"items": [make_item(client_item_id="y")]})["items"] == [{"y": "2"}]
    again = first.push({"items": [make_item(client_item_id="y"), make_item(client_item_id="z")]})
    assert again["items"] == [{"y": "2"}, {"z": "3"}]
    assert second.push({"items": [make_item(client_item_id="z")]})["items"] == [{"z": "3"}]
    assert sorted(first.items()["object_id"]) == [1, 2, 3]
    assert check(first)["ok"]
