"""Groups checked on Dask workers are stored and answered exactly as in one process.

Real ``distributed.LocalCluster``s: one started by ``ingest(workers=N)`` for
the run, or one already running, given by its scheduler's address.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from catalog_lake import Catalog, PushRequest, check
from catalog_lake.feeds import ingest
from catalog_lake.runs import plan
from catalog_lake.sources import FeedFile, discover, read_items
from catalog_lake.staged import check_files
from catalog_lake.workers import LOCAL_HTTP
from tests.conftest import Ticking, make_item

FEEDS = Path(__file__).parents[1] / "data" / "feeds"
# The default feeds, plus a later file that updates an item of an earlier one and
# a file that cannot be parsed: each its own group when groups are this small.
EXTRA = {
    "zz_update.json": json.dumps(
        {
            "items": [
                make_item(client_item_id="BEAU-LIP-RED", name="Lipstick v2"),
                make_item(client_item_id="NEW-1"),
                make_item(client_item_id="NEW-1", name="Again"),
                make_item(client_item_id="NEW-2", pricing_info__mrp="free"),
            ]
        }
    ),
    "zz_broken.json": '{"items": [',
}
ONE_FILE_PER_GROUP = 1  # group_items=1: groups are cut at 1,400 bytes, one file each


@pytest.fixture
def source(tmp_path) -> Path:
    folder = tmp_path / "feeds"
    shutil.copytree(FEEDS, folder)
    for name, text in EXTRA.items():
        (folder / name).write_text(text)
    return folder


def _run(tmp_path, clock, source, name, workers, **options):
    # Groups are pushed one after another: their received_at must not tie.
    catalog = Catalog(tmp_path / name, clock=Ticking(clock))
    summary = ingest(
        catalog, source, batch_size=2, group_items=ONE_FILE_PER_GROUP, workers=workers, **options
    )
    return catalog, summary


def _without_request_ids(summary: dict) -> dict:
    volatile = {"catalog_push_request_id", "request_id", "duration_s", "items_per_second"}

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in volatile}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(summary)


def _table(frame: pd.DataFrame) -> pd.DataFrame:
    # Times follow the groups (a ticking clock per group): in this process a group is cut at
    # a batch once it holds group_items items, on workers at a file once it holds its bytes.
    volatile = ("request_id", "updated_at", "first_seen_at", "received_at")
    frame = frame.drop(columns=[c for c in volatile if c in frame.columns])
    return frame.sort_values("client_item_id", ignore_index=True)


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_store_and_answer_exactly_as_one_process(tmp_path, clock, source, workers):
    alone, expected = _run(tmp_path, clock, source, "alone", workers=0)
    helped, got = _run(tmp_path, clock, source, "helped", workers=workers)

    assert _without_request_ids(got) == _without_request_ids(expected)
    assert got["files"]["failed"] == [
        {"path": "zz_broken.json", "status": "invalid", "error": got["files"]["failed"][0]["error"]}
    ]
    pd.testing.assert_frame_equal(_table(helped.records()), _table(alone.records()))
    pd.testing.assert_frame_equal(_table(helped.items()), _table(alone.items()))
    rejects = ["client_item_id", "index", "codes"]
    assert helped.rejects()[rejects].astype(str).values.tolist() == (
        alone.rejects()[rejects].astype(str).values.tolist()
    )
    assert check(helped)["ok"]


def test_workers_answer_in_full_and_in_brief_and_store_each_response_as_one_process(
    tmp_path, clock, source
):
    # A worker sends each response as its stored text and in brief; the summary still
    # lists the first items' pushes in full, and the pushes table holds every one whole.
    alone, expected = _run(tmp_path, clock, source, "alone", workers=0, detail_items=5)
    helped, got = _run(tmp_path, clock, source, "helped", workers=2, detail_items=5)

    assert not got["detail_complete"]
    assert any("detail" in b for b in got["batches"]) and any(b["items"] for b in got["batches"])
    assert _without_request_ids(got) == _without_request_ids(expected)

    def stored(catalog):
        pushes = catalog.pushes().sort_values("idempotency_key")
        return [_without_request_ids(json.loads(t)) for t in pushes["response_json"]]

    assert stored(helped) == stored(alone)
    assert all(r["items"] or r["catalog_push_failed_items"] for r in stored(helped))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_new_file_is_hashed_by_its_reader_and_recorded_with_its_checksum(
    tmp_path, clock, source, workers, monkeypatch
):
    # A path the lake never took needs no checksum to be planned: whoever reads the file
    # hashes it, a worker when there are some, so the coordinator never reads its bytes.
    # A gzipped file's checksum is of its own (compressed) bytes.
    (source / "zz_packed.json.gz").write_bytes(
        gzip.compress(json.dumps({"items": [make_item(client_item_id="GZ-1")]}).encode())
    )
    catalog = Catalog(tmp_path / "lake", clock=Ticking(clock))
    assert {f.checksum for f in plan(catalog, source).to_ingest} == {""}
    opened = Counter()  # in this process; workers are processes of their own
    read = FeedFile.open
    monkeypatch.setattr(FeedFile, "open", lambda f: opened.update([f.path]) or read(f))

    ingest(catalog, source, batch_size=2, group_items=ONE_FILE_PER_GROUP, workers=workers)

    if workers:
        assert opened == {}  # the coordinator reads no file
    else:  # read once and hashed from those bytes; again only where they are not its own
        again = {p: n for p, n in opened.items() if n != 1}
        assert again == {"zz_broken.json": 2, "zz_packed.json.gz": 2}
        assert len(opened) == len(list(source.iterdir()))
    files = catalog.lake.read("files").to_pandas()
    assert dict(zip(files["path"], files["checksum"], strict=True)) == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.iterdir()
    }
    replanned = plan(catalog, source)  # now hashed up front: unchanged, or broken as before
    assert replanned.to_ingest == [] and all(f.checksum for f in replanned.skipped)


def test_a_group_whose_batches_partly_landed_is_checked_again_and_stored_once(
    tmp_path, clock, source
):
    catalog = Catalog(tmp_path / "lake", clock=Ticking(clock))
    update = next(f for f in discover(source)[0] if f.path == "zz_update.json")
    # Batch 0 of the file landed in an earlier, interrupted run (same idempotency key).
    early = {"items": read_items(update)[:2]}
    first = catalog.push_many([PushRequest(early, update.path, update.batch_key(2, 0))])

    summary = ingest(catalog, source, batch_size=2, group_items=ONE_FILE_PER_GROUP, workers=2)

    (result,) = [b for b in summary["batches"] if b["file"] == "zz_update.json"][:1]
    assert result["catalog_push_request_id"] == first[0]["catalog_push_request_id"]
    records = catalog.records()
    assert records["client_item_id"].is_unique
    assert set(records["client_item_id"]) >= {"BEAU-LIP-RED", "NEW-1"}
    assert check(catalog)["ok"]


def test_a_worker_hands_back_what_was_received_not_the_decoded_items(source):
    files = [f for f in discover(source)[0] if f.path in ("food.json", "zz_broken.json")]
    checked = check_files(files, batch_size=2)

    assert checked.pushes[0] == len(checked.requests) and isinstance(checked.pushes[1], str)
    for request in checked.requests:
        assert request.payload.items == [] and request.payload.item_json
    assert len(checked.checked.client_ids) == sum(
        len(r.payload.item_json) for r in checked.requests
    )


def test_a_running_dask_cluster_is_used_by_its_address_and_groups_land_in_feed_order(
    tmp_path, clock, source
):
    from distributed import LocalCluster

    alone, expected = _run(tmp_path, clock, source, "alone", workers=0)
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=LOCAL_HTTP) as cluster:
        catalog = Catalog(tmp_path / "lake", clock=Ticking(clock))
        summary = ingest(
            catalog,
            source,
            batch_size=2,
            group_items=ONE_FILE_PER_GROUP,
            dask_address=cluster.scheduler_address,
        )
        assert cluster.scheduler.tasks == {}  # every group's result was taken and released

    assert _without_request_ids(summary) == _without_request_ids(expected)
    paths = sorted(f.path for f in discover(source)[0])
    assert summary["files"]["ingested"] == [p for p in paths if p != "zz_broken.json"]
    # The later file's update of an earlier item won.
    records = catalog.records().set_index("client_item_id")
    assert records.loc["BEAU-LIP-RED", "product_name"] == "Lipstick v2"
    assert check(catalog)["ok"]


def test_a_dry_run_on_workers_answers_as_one_process_and_writes_nothing(tmp_path):
    """``ingest --force --dry-run --workers 2``: known items by their ids, new ones null."""
    from catalog_lake.summary import DRY_RUN_KEY

    source = tmp_path / "feeds"
    source.mkdir()
    for name in ("a", "b", "c", "d"):  # about 1.2 kB each: two files per group
        item = make_item(client_item_id=f"{name}-1", images=["x y"], description="d" * 400)
        (source / f"{name}.json").write_text(json.dumps({"items": [item]}))
    catalog = Catalog(tmp_path / "lake")
    ingest(catalog, source, pattern="a.json")
    # Groups [a, b] and [c, d], each checked on a worker; a-1 is known to the lake.
    dry = ingest(catalog, source, force=True, dry_run=True, group_items=2, workers=2)
    assert dry[DRY_RUN_KEY] is True
    assert (dry["totals"]["received"], dry["totals"]["warned"]) == (4, 4)
    ids = {k: v for entry in dry["items"] for k, v in entry.items()}
    assert ids == {"a-1": "1", "b-1": None, "c-1": None, "d-1": None}
    assert len(catalog.pushes()) == 1  # nothing written


def _scheduler_settings(dask_scheduler) -> dict:
    return {
        "work_stealing": "stealing" in dask_scheduler.extensions,
        "disk_counters": dask_scheduler.monitor.monitor_disk_io,
        "monitor_every_ms": dask_scheduler.periodic_callbacks["monitor"].callback_time,
    }


def test_a_runs_own_cluster_keeps_its_scheduler_off_the_committers_cpu():
    # The scheduler of a run's LocalCluster runs in the process that commits.
    from catalog_lake.workers import dask_client

    with dask_client(workers=1) as client:
        settings = client.run_on_scheduler(_scheduler_settings)
    assert settings == {"work_stealing": False, "disk_counters": False, "monitor_every_ms": 2000}
