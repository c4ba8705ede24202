"""The ingest flow as a real Prefect run: tables written, artifact published, files skipped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from catalog_lake import RESPONSE_KEYS, Catalog, IngestError
from tests.conftest import FEEDS_TOTALS, make_item

FEEDS = Path(__file__).parents[2] / "data" / "feeds"

pytestmark = pytest.mark.flow


def _artifacts(key: str) -> list[dict]:
    """The artifacts under ``key``, newest first.

    Artifact.get() sends null offset/flow_runs, which 3.8.8's server refuses
    with fastapi 0.154 (422); the same filter with explicit values works.
    """
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        response = client._client.post(
            "/artifacts/filter",
            json={
                "artifacts": {"key": {"any_": [key]}},
                "limit": 5,
                "offset": 0,
                "sort": "CREATED_DESC",
            },
        )
    return response.json()


def test_ingest_flow_writes_tables_publishes_summary_and_skips_seen_files(prefect_server, tmp_path):
    from flows.catalog_flows import ingest

    source = tmp_path / "feeds"
    shutil.copytree(FEEDS, source)
    (source / "broken.json").write_text('{"items": [')
    lake = str(tmp_path / "lake")

    state = ingest(source=str(source), lake=lake, batch_size=1, return_state=True)

    # A bad file fails the run, so a scheduled deployment alerts; all else is stored.
    assert state.is_failed()
    assert "1 feed file(s) failed: broken.json (invalid)" in state.message
    error = state.result(raise_on_failure=False)
    assert isinstance(error, IngestError)
    summary = error.summary
    assert list(summary)[:5] == list(RESPONSE_KEYS)
    assert summary["totals"] == FEEDS_TOTALS
    assert [f["path"] for f in summary["files"]["failed"]] == ["broken.json"]
    assert summary["flow_run_id"]
    catalog = Catalog(lake)
    assert len(catalog.records()) == 14
    pushes = catalog.pushes()
    assert len(pushes) == 16  # batch_size=1: one push per item
    assert set(pushes["flow_run_id"]) == {summary["flow_run_id"]}
    runs = catalog.lake.read("runs").to_pandas()
    assert runs["flow_run_id"].tolist() == [summary["flow_run_id"]]

    (artifact,) = _artifacts("ingest-summary")
    assert artifact["type"] == "markdown"
    assert f"# Ingest run `{summary['catalog_push_request_id']}`" in artifact["data"]
    assert "| `broken.json` | invalid |" in artifact["data"]
    assert "## Top warning codes" in artifact["data"]
    (warnings,) = _artifacts("ingest-warnings")
    assert warnings["type"] == "table"
    assert "PT3H" in warnings["data"]  # the time_to_ship sent as P3H, repaired

    again = ingest(source=str(source), lake=lake, fail_on_bad_files=False, return_state=True)
    assert again.is_completed()
    again = again.result()
    assert again["files"]["ingested"] == []
    assert sorted(again["files"]["skipped"]) == sorted(p.name for p in source.glob("*.json"))
    assert again["files"]["skipped_reasons"] == {
        "ingested before and unchanged": 7,
        "failed before and unchanged (fix it, or use --force)": 1,
    }
    assert len(Catalog(lake).pushes()) == 16


def test_the_ingest_flow_dry_run_writes_nothing_and_strict_values_refuses_warnings(
    prefect_server, tmp_path
):
    from flows.catalog_flows import ingest

    lake = tmp_path / "lake"
    dry = ingest(source=str(FEEDS), lake=str(lake), dry_run=True)
    assert dry["catalog_push_dry_run"] is True
    assert (dry["totals"]["success"], dry["totals"]["warned"]) == (14, 5)
    assert all(v is None for entry in dry["items"] for v in entry.values())  # all new
    assert not lake.exists()

    strict = ingest(source=str(FEEDS), lake=str(lake), strict_values=True)
    assert (strict["totals"]["failed"], strict["totals"]["warned"]) == (7, 0)
    assert len(Catalog(str(lake)).records()) == 9


def test_the_ingest_flow_runs_on_a_dask_cluster_and_stores_what_one_process_stores(
    prefect_server, tmp_path
):
    """``workers=2``: a DaskTaskRunner's LocalCluster (two one-thread workers) checks groups.

    The session's one Prefect server serves the flow and its subflow; the Dask
    workers run plain functions and never talk to Prefect.
    """
    from flows.catalog_flows import ingest

    source = tmp_path / "feeds"
    shutil.copytree(FEEDS, source)
    alone = ingest(source=str(source), lake=str(tmp_path / "alone"), batch_size=2, group_items=1)
    state = ingest(
        source=str(source),
        lake=str(tmp_path / "dask"),
        batch_size=2,
        group_items=1,  # one file per group: every file is checked on a worker
        workers=2,
        return_state=True,
    )

    assert state.is_completed()
    summary = state.result()
    assert summary["totals"] == alone["totals"]
    assert summary["files"]["ingested"] == alone["files"]["ingested"]
    by_id = ["object_id", "client_item_id", "price", "on_sale", "tags"]
    got = Catalog(str(tmp_path / "dask")).records()[by_id]
    expected = Catalog(str(tmp_path / "alone")).records()[by_id]
    assert got.astype(str).values.tolist() == expected.astype(str).values.tolist()
    warned = ["client_item_id", "codes"]
    got = Catalog(str(tmp_path / "dask")).warnings()[warned].astype(str)
    expected = Catalog(str(tmp_path / "alone")).warnings()[warned].astype(str)
    assert got.values.tolist() == expected.values.tolist()


def test_a_full_refresh_flow_deletes_what_the_feed_dropped_and_lists_it(prefect_server, tmp_path):
    from flows.catalog_flows import ingest

    source = tmp_path / "feeds"
    shutil.copytree(FEEDS, source)
    lake = str(tmp_path / "lake")
    ingest(source=str(source), lake=lake, fail_on_bad_files=False)
    (source / "beauty.json").unlink()  # one item of 14 (7%): under the 20% threshold

    summary = ingest(source=str(source), lake=lake, full_refresh=True)

    assert summary["refresh"]["status"] == "deleted"
    assert summary["refresh"]["ids"] == ["BEAU-LIP-RED"]
    assert "BEAU-LIP-RED" not in set(Catalog(lake).records()["client_item_id"])
    (deleted,) = _artifacts("ingest-deleted")
    assert "BEAU-LIP-RED" in deleted["data"]
    # a refresh that would delete most of the catalog stops, and the run fails
    for path in source.glob("*.json"):
        if path.name != "food.json":
            path.unlink()
    state = ingest(source=str(source), lake=lake, full_refresh=True, return_state=True)
    assert state.is_failed()
    assert len(Catalog(lake).records()) == 13


def test_the_sync_flow_exports_the_changes_since_its_cursor(prefect_server, tmp_path):
    from flows.catalog_flows import sync

    lake = str(tmp_path / "lake")
    catalog = Catalog(lake)
    catalog.push({"items": [make_item(client_item_id="a")]})
    target = str(tmp_path / "search")
    first = sync(target=target, format="elasticsearch", lake=lake)
    assert first["upserts"] == 1 and first["from_version"] is None
    catalog.delete(["a"])
    second = sync(target=target, format="elasticsearch", lake=lake)
    assert (second["upserts"], second["deletes"]) == (0, 1)
    assert Path(second["file"]).read_text() == '{"delete":{"_id":"1"}}\n'
    (report,) = _artifacts("sync-report")[:1]
    assert '"deletes": 1' in report["data"]


def test_one_ingest_deployment_per_seller_keeps_their_items_and_index_apart(
    prefect_server, tmp_path, monkeypatch
):
    """Two sellers' feeds hold the same ids; each has its ingest run and its sync target.

    acme's run names its seller; zeta's comes from the worker, as a source does.
    """
    from flows.catalog_flows import ingest, metrics, sync

    lake = str(tmp_path / "lake")
    for seller in ("acme", "zeta"):
        shutil.copytree(FEEDS, tmp_path / seller)
    first = ingest(source=str(tmp_path / "acme"), lake=lake, seller="acme")
    monkeypatch.setenv("CATALOG_LAKE_SELLER", "zeta")
    second = ingest(source=str(tmp_path / "zeta"), lake=lake)
    for summary, seller in ((first, "acme"), (second, "zeta")):
        assert (summary["seller"], summary["totals"]) == (seller, FEEDS_TOTALS)
    (artifact,) = _artifacts("ingest-summary")[:1]
    assert "for seller `zeta`" in artifact["data"]
    catalog = Catalog(lake)
    assert catalog.records().groupby("seller").size().to_dict() == {"acme": 14, "zeta": 14}

    (tmp_path / "m.csv").write_text("client_item_id,likes,sales\nGROC-ATTA-5KG,9,3\n")
    assert metrics(path=str(tmp_path / "m.csv"), lake=lake)["updated"] == 1  # zeta's
    likes = catalog.records().set_index(["seller", "client_item_id"])["likes"]
    assert (likes["zeta", "GROC-ATTA-5KG"], likes["acme", "GROC-ATTA-5KG"]) == (9, 0)

    exported = sync(target=str(tmp_path / "acme-index"), lake=lake, seller="acme")
    assert exported["upserts"] == 14

    state = ingest(source=str(tmp_path / "acme"), lake=lake, seller="acme/eu", return_state=True)
    assert state.is_failed()
    assert "seller 'acme/eu' is not a seller's name" in state.message
