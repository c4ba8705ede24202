"""Many sellers in one lake (issue 52): ids collide across sellers, items never mix.

An item is the pair (seller, ``client_item_id``). Every test runs on a real
lake; the concurrent and S3 cases at the end start real processes and a real
S3-compatible server.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest

from catalog_lake import Catalog, check
from catalog_lake.backfill import backfill
from catalog_lake.errors import LakeError, NoLakeError, UsageError
from catalog_lake.feeds import ingest
from catalog_lake.metrics import apply_metrics
from catalog_lake.refresh import Refresh
from tests.conftest import CASES, cli, make_item, write_feed

#: A lake that catalog-lake 0.4 (commit 90541a3, before sellers) wrote: `ingest
#: data/feeds`, `delete SKU-1002` (refused: unknown), `delete HOME-MUG-350`, `metrics
#: data/metrics.csv`. Its object ids run 1 to 14 in the order of data/feeds' files.
BEFORE_SELLERS = CASES / "lake-0.4-before-sellers.tar.gz"


def _push(catalog: Catalog, seller: str | None, *ids: str, **changes) -> dict:
    items = [make_item(client_item_id=i, **changes) for i in ids]
    return catalog.push({"items": items}, seller=seller)


def _ids(response: dict) -> dict[str, str]:
    return {k: v for entry in response["items"] for k, v in entry.items()}


def _by_seller(frame) -> dict[tuple[str, str], object]:
    return {
        (s, c): o
        for s, c, o in zip(
            frame["seller"], frame["client_item_id"], frame["object_id"], strict=True
        )
    }


# --- one id, two sellers -------------------------------------------------------------


def test_two_sellers_sending_the_same_client_item_id_get_two_items_and_two_service_ids(catalog):
    acme = _push(catalog, "acme", "SKU-1", name="Acme atta")
    zeta = _push(catalog, "zeta", "SKU-1", name="Zeta atta")

    assert _ids(acme)["SKU-1"] != _ids(zeta)["SKU-1"]
    records = catalog.records()
    assert _by_seller(records) == {
        ("acme", "SKU-1"): int(_ids(acme)["SKU-1"]),
        ("zeta", "SKU-1"): int(_ids(zeta)["SKU-1"]),
    }
    names = dict(zip(records["seller"], records["product_name"], strict=True))
    assert names == {"acme": "Acme atta", "zeta": "Zeta atta"}
    assert check(catalog)["ok"]


def test_a_sellers_update_changes_its_own_item_and_keeps_its_id(catalog, clock):
    first = _ids(_push(catalog, "acme", "SKU-1", name="before"))
    _push(catalog, "zeta", "SKU-1", name="zeta's")
    clock.now += timedelta(minutes=1)

    again = _ids(_push(catalog, "acme", "SKU-1", name="after"))

    assert again == first
    names = dict(zip(catalog.records()["seller"], catalog.records()["product_name"], strict=True))
    assert names == {"acme": "after", "zeta": "zeta's"}


def test_items_without_a_seller_are_the_default_sellers(catalog):
    plain = _ids(catalog.push({"items": [make_item(client_item_id="SKU-1")]}))
    named = _ids(_push(catalog, "default", "SKU-1"))

    assert plain == named
    assert list(catalog.records()["seller"]) == ["default"]


@pytest.mark.parametrize(
    "name", ["", "a b", "acme/eu", "a" * 65, "ácme", "acme\x1f", "acme;drop", "../x"]
)
def test_a_seller_name_outside_the_allow_list_is_refused_and_nothing_is_written(tmp_path, name):
    catalog = Catalog(tmp_path / "lake")
    with pytest.raises(UsageError, match="is not a seller's name"):
        catalog.push({"items": [make_item()]}, seller=name)
    assert not (tmp_path / "lake").exists()


def test_the_cli_refuses_a_bad_seller_with_exit_2_before_reading_a_file(tmp_path):
    feed = write_feed(tmp_path / "feeds" / "a.json", [make_item()])
    for command in (["push", str(feed)], ["ingest", str(feed.parent)]):
        done = cli(*command, "--lake", "lake", "--seller", "acme/eu", cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            "catalog-lake: error: --seller 'acme/eu' is not a seller's name: 1 to 64 letters, "
            "digits, '.', '-' or '_'"
        ]
    assert not (tmp_path / "lake").exists()


def test_one_idempotency_key_from_two_sellers_is_two_pushes(catalog):
    payload = {"items": [make_item(client_item_id="SKU-1")]}
    acme = catalog.push(payload, idempotency_key="k-1", seller="acme")
    zeta = catalog.push(payload, idempotency_key="k-1", seller="zeta")
    retried = catalog.push(payload, idempotency_key="k-1", seller="acme")

    assert acme["catalog_push_request_id"] != zeta["catalog_push_request_id"]
    assert retried == acme  # a seller's retry is answered, not written again
    assert len(catalog.pushes()) == 2
    assert sorted(catalog.pushes()["seller"]) == ["acme", "zeta"]


def test_a_batch_verdict_is_the_same_whichever_seller_sends_it(catalog):
    items = [make_item(client_item_id="ok"), make_item(client_item_id="bad", pricing_info__mrp="x")]
    acme = catalog.push({"items": items}, seller="acme")
    zeta = catalog.push({"items": items}, seller="zeta")

    for answer in (acme, zeta):
        assert answer["catalog_push_success_product_count"] == "1"
        assert [f["client_item_id"] for f in answer["catalog_push_failed_items"]] == ["bad"]
    assert sorted(catalog.rejects()["seller"]) == ["acme", "zeta"]
    assert list(catalog.rejects(seller="acme")["request_id"]) == [acme["catalog_push_request_id"]]


# --- reading one seller ----------------------------------------------------------------


def test_every_read_takes_one_seller_or_all(catalog):
    _push(catalog, "acme", "SKU-1", "SKU-2")
    _push(catalog, "zeta", "SKU-1", attributes__time_to_ship="P3H")  # a warning

    assert sorted(catalog.records(seller="acme")["client_item_id"]) == ["SKU-1", "SKU-2"]
    assert list(catalog.items(seller="zeta")["client_item_id"]) == ["SKU-1"]
    assert len(catalog.records()) == 3
    assert list(catalog.query_records(seller="zeta")["seller"]) == ["zeta"]
    assert set(catalog.query_records(where="seller = 'acme'")["client_item_id"]) == {
        "SKU-1",
        "SKU-2",
    }
    assert set(catalog.warnings()["seller"]) == {"zeta"}
    assert catalog.warnings(seller="acme").empty
    assert list(catalog.pushes(seller="zeta")["received"]) == [1]
    assert catalog.records(seller="nobody").empty  # an unknown seller has nothing to read


def test_search_and_export_of_one_seller_hold_its_records_alone(catalog):
    _push(catalog, "acme", "SKU-1", name="Acme kurta")
    _push(catalog, "zeta", "SKU-1", name="Zeta kurta")

    found = catalog.search("kurta", seller="zeta")
    everyone = catalog.search("kurta")
    assert [h["product_name"] for h in found["hits"]] == ["Zeta kurta"]
    assert everyone["nb_hits"] == 2
    assert catalog.search("kurta", facets=["seller"])["facets"]["seller"] == {"acme": 1, "zeta": 1}

    out = io.StringIO()
    catalog.export("jsonl", out, seller="acme")
    exported = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["record"]["seller"] for r in exported] == ["acme"]


def test_two_sellers_variant_groups_of_one_id_are_two_products(catalog):
    _push(catalog, None, "SKU-1", variant_group_id="ATTA")
    _push(catalog, "acme", "SKU-1", variant_group_id="ATTA")

    assert catalog.search("atta")["nb_hits"] == 2  # one hit per group: two groups
    out = io.StringIO()
    catalog.export("meilisearch", out)
    keys = sorted(json.loads(line)["group_key"] for line in out.getvalue().splitlines())
    # the default seller's keys are those of a lake before sellers: no index reload
    assert keys == ["group:ATTA", "seller:acme:group:ATTA"]


def test_changes_of_one_seller_carry_its_upserts_and_deletes_alone(catalog, clock):
    _push(catalog, "acme", "SKU-1", "SKU-2")
    _push(catalog, "zeta", "SKU-1", "SKU-2")
    since = catalog.lake.version("records")
    clock.now += timedelta(minutes=1)
    _push(catalog, "acme", "SKU-1", name="new name")
    catalog.delete(["SKU-2"], seller="zeta")

    acme = catalog.changes(since, seller="acme")
    zeta = catalog.changes(since, seller="zeta")
    ids = _by_seller(catalog.items())

    assert acme.upserts["client_item_id"].to_pylist() == ["SKU-1"]
    assert acme.deletes.to_pylist() == []
    assert zeta.upserts.num_rows == 0
    assert zeta.deletes.to_pylist() == [ids[("zeta", "SKU-2")]]


def test_a_sync_target_holds_one_seller_and_refuses_another(catalog, tmp_path):
    _push(catalog, "acme", "SKU-1")
    _push(catalog, "zeta", "SKU-1")
    target = str(tmp_path / "acme-index")

    first = catalog.sync(target, seller="acme")

    assert first["upserts"] == 1
    with pytest.raises(UsageError, match="every seller"):
        catalog.sync(target)
    with pytest.raises(UsageError, match="zeta"):
        catalog.sync(target, seller="zeta")
    written = Path(first["file"]).read_text().splitlines()
    assert [json.loads(line)["record"]["seller"] for line in written] == ["acme"]


# --- deletes, refreshes, metrics, backfill -------------------------------------------


def test_a_delete_of_one_sellers_id_leaves_the_other_sellers_item(catalog):
    _push(catalog, "acme", "SKU-1")
    _push(catalog, "zeta", "SKU-1")

    answer = catalog.delete(["SKU-1"], seller="acme")

    assert [e["status"] for e in answer["items"]] == ["deleted"]
    assert _by_seller(catalog.records()).keys() == {("zeta", "SKU-1")}
    assert check(catalog)["ok"]


def test_a_delete_for_a_seller_with_no_items_is_one_line_and_deletes_nothing(catalog, run):
    _push(catalog, "acme", "SKU-1")
    with pytest.raises(LakeError, match="seller 'acme-typo' has no items in this lake"):
        catalog.delete(["SKU-1"], seller="acme-typo")
    with pytest.raises(LakeError, match="has no items"):
        catalog.delete(["SKU-1"], seller="acme-typo", dry_run=True)  # as the real one would
    assert len(catalog.records()) == 1
    with pytest.raises(NoLakeError):
        Catalog(catalog.lake.uri + "-none").delete(["SKU-1"], seller="acme")


def test_a_full_refresh_of_one_seller_never_deletes_another_sellers_items(catalog, tmp_path):
    write_feed(
        tmp_path / "acme" / "catalog.json", [make_item(client_item_id=f"a-{n}") for n in range(6)]
    )
    write_feed(
        tmp_path / "zeta" / "catalog.json", [make_item(client_item_id=f"a-{n}") for n in range(6)]
    )
    ingest(catalog, tmp_path / "acme", seller="acme")
    ingest(catalog, tmp_path / "zeta", seller="zeta")
    write_feed(
        tmp_path / "acme" / "catalog.json", [make_item(client_item_id=f"a-{n}") for n in range(5)]
    )

    summary = ingest(catalog, tmp_path / "acme", seller="acme", refresh=Refresh())

    assert summary["seller"] == "acme"
    assert (summary["refresh"]["in_scope"], summary["refresh"]["ids"]) == (6, ["a-5"])
    assert len(catalog.records(seller="zeta")) == 6
    assert len(catalog.records(seller="acme")) == 5


def test_one_folder_ingested_for_two_sellers_is_read_for_each(catalog, tmp_path):
    write_feed(tmp_path / "feeds" / "a.json", [make_item(client_item_id="SKU-1")])
    first = ingest(catalog, tmp_path / "feeds", seller="acme")
    second = ingest(catalog, tmp_path / "feeds", seller="zeta")
    again = ingest(catalog, tmp_path / "feeds", seller="acme")

    assert len(first["files"]["ingested"]) == len(second["files"]["ingested"]) == 1
    assert again["files"]["ingested"] == []  # unchanged for acme: skipped
    assert len(catalog.records()) == 2


def test_metrics_reach_the_seller_a_row_names_or_the_runs(catalog, tmp_path):
    _push(catalog, "acme", "SKU-1")
    _push(catalog, "zeta", "SKU-1")
    file = tmp_path / "metrics.csv"
    file.write_text("client_item_id,likes,sales,seller\nSKU-1,5,1,zeta\nSKU-1,7,2,\n")

    report = apply_metrics(catalog, str(file), "acme")

    assert report["updated"] == 2
    likes = dict(zip(catalog.records()["seller"], catalog.records()["likes"], strict=True))
    assert likes == {"acme": 7, "zeta": 5}


def test_backfill_replays_each_push_as_its_own_sellers(catalog, clock):
    _push(catalog, "acme", "SKU-1")
    _push(catalog, "zeta", "SKU-1")
    before = _by_seller(catalog.records())
    clock.now += timedelta(minutes=1)

    report = backfill(catalog)
    only_zeta = backfill(catalog, seller="zeta", dry_run=True)

    assert report["items_replayed"] == 2
    assert report["by_seller"] == {
        "acme": {"pushes": 1, "items_replayed": 1},
        "zeta": {"pushes": 1, "items_replayed": 1},
    }
    assert only_zeta["items_replayed"] == 1
    assert "by_seller" not in only_zeta  # one seller: nothing to break down
    assert _by_seller(catalog.records()) == before
    assert check(catalog)["ok"]


# --- the command line ---------------------------------------------------------------


def test_the_cli_keeps_sellers_apart_from_push_to_search(run, tmp_path):
    feed = write_feed(tmp_path / "a.json", [make_item(client_item_id="SKU-1", name="Red kurta")])

    acme = json.loads(run("push", str(feed), "--seller", "acme").stdout)
    zeta = json.loads(run("push", str(feed), "--seller", "zeta").stdout)
    assert acme["items"] != zeta["items"]

    shown = run("records", "--seller", "zeta", "--columns", "object_id,seller", "--json")
    assert [json.loads(line) for line in shown.stdout.splitlines()] == [
        {"object_id": int(zeta["items"][0]["SKU-1"]), "seller": "zeta"}
    ]
    found = json.loads(run("search", "kurta", "--seller", "acme", "--json").stdout)
    assert [h["seller"] for h in found["hits"]] == ["acme"]
    history = run("history", "--seller", "acme", "--json").stdout.splitlines()
    assert [json.loads(line)["seller"] for line in history] == ["acme"]
    deleted = run("delete", "SKU-1", "--seller", "zeta")
    assert deleted.exit_code == 0, deleted.output
    assert json.loads(run("search", "kurta", "--json").stdout)["nb_hits"] == 1
    missing = run("delete", "SKU-1", "--seller", "nobody")
    assert missing.exit_code == 1
    assert "seller 'nobody' has no items in this lake" in missing.output


def test_a_command_naming_a_seller_with_no_items_says_so(run, tmp_path):
    """A read answers empty and says why; a command that would write exits 1, writing nothing."""
    feed = write_feed(tmp_path / "a.json", [make_item(client_item_id="SKU-1")])
    run("push", str(feed), "--seller", "acme")
    (tmp_path / "m.csv").write_text("client_item_id,likes,sales\nSKU-1,3,1\n")
    said = "catalog-lake: seller 'acmee' has no items in this lake"

    for read in (
        ["records", "--json"],
        ["rejects", "--json"],
        ["warnings", "--json"],
        ["history", "--json"],
        ["search", "", "--json"],
        ["export", "--format", "jsonl"],
        ["changes", "--since", "0"],
    ):
        done = cli(*read, "--seller", "acmee", cwd=tmp_path)
        assert done.returncode == 0, (read, done.stderr)
        assert said in done.stderr.splitlines()
        assert done.stdout.strip() in ("", "[]") or json.loads(done.stdout)["nb_hits"] == 0
    versions = Catalog(tmp_path / "lake").lake.version("records")
    for write in (["metrics", str(tmp_path / "m.csv")], ["sync", str(tmp_path / "index")]):
        done = cli(*write, "--seller", "acmee", cwd=tmp_path)
        assert done.returncode == 1, (write, done.stderr)
        assert done.stderr.startswith("catalog-lake: error: seller 'acmee' has no items")
    assert Catalog(tmp_path / "lake").lake.version("records") == versions
    assert not (tmp_path / "index").exists()


# --- a lake written before sellers -------------------------------------------------------


@pytest.fixture
def older_lake(tmp_path) -> Path:
    with tarfile.open(BEFORE_SELLERS) as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "lake"


def test_a_lake_written_before_sellers_reads_as_the_default_sellers(older_lake):
    catalog = Catalog(older_lake)
    versions = {name: catalog.lake.version(name) for name in ("raw", "items", "records")}
    records = catalog.records()

    assert set(records["seller"]) == {"default"}
    assert records["object_id"].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14]
    assert set(catalog.pushes()["seller"]) == {"default"}
    assert catalog.search("", seller="default")["nb_hits"] == 13
    assert len(catalog.query_records(where="seller = 'default'")) == 13
    assert check(catalog)["ok"]
    # reading changed no table: the seller columns come with the first write
    assert {name: catalog.lake.version(name) for name in versions} == versions
    assert "seller" not in catalog.lake.delta("records").schema().to_arrow().names


def test_a_lake_written_before_sellers_keeps_every_id_and_takes_new_sellers(older_lake):
    catalog = Catalog(older_lake)
    kept = dict(zip(catalog.items()["client_item_id"], catalog.items()["object_id"], strict=True))

    again = _ids(_push(catalog, None, "GROC-ATTA-5KG"))
    back = _ids(_push(catalog, None, "HOME-MUG-350"))  # deleted before the upgrade
    other = _ids(_push(catalog, "acme", "GROC-ATTA-5KG"))

    assert again == {"GROC-ATTA-5KG": str(kept["GROC-ATTA-5KG"])}
    assert back == {"HOME-MUG-350": "12"}
    assert int(other["GROC-ATTA-5KG"]) == 15  # the next id: none reused
    assert len(catalog.records(seller="default")) == 14
    assert catalog.delete(["GROC-ATTA-5KG"], seller="acme")["items"][0]["status"] == "deleted"
    assert "GROC-ATTA-5KG" in set(catalog.records(seller="default")["client_item_id"])
    assert check(catalog)["ok"]


def test_a_lake_written_before_sellers_is_refreshed_and_backfilled_in_place(older_lake, tmp_path):
    catalog = Catalog(older_lake)
    report = backfill(catalog, dry_run=True)
    assert report["items_replayed"] > 0 and report["records_changed"] == 0

    write_feed(tmp_path / "acme" / "a.json", [make_item(client_item_id="GROC-ATTA-5KG")])
    ingest(catalog, tmp_path / "acme", seller="acme")
    assert len(catalog.records()) == 14
    assert check(catalog)["ok"]


# --- sellers at once -------------------------------------------------------------------


def _ingest_as(lake: str, folder: str, seller: str, workers: int = 0) -> None:
    ingest(Catalog(lake), folder, seller=seller, batch_size=50, group_items=100, workers=workers)


def _shared_feeds(tmp_path: Path, sellers: list[str], count: int) -> dict[str, Path]:
    """The same ids for every seller: their items collide on every ``client_item_id``."""
    items = [make_item(client_item_id=f"SKU-{n}") for n in range(count)]
    return {s: write_feed(tmp_path / s / "catalog.json", items).parent for s in sellers}


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_sellers_ingesting_at_once_keep_their_own_items_and_ids(tmp_path, where, request):
    """Three sellers, the same 200 ids each, at once; acme's run on two Dask workers."""
    lake = str(tmp_path / "lake") if where == "local" else request.getfixturevalue("s3_lake")
    sellers = ["acme", "zeta", "default"]
    feeds = _shared_feeds(tmp_path, sellers, 200)
    context = multiprocessing.get_context("spawn")
    writers = [
        context.Process(target=_ingest_as, args=(lake, str(feeds[s]), s, 2 if s == "acme" else 0))
        for s in sellers
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=300)
    assert [w.exitcode for w in writers] == [0, 0, 0]

    catalog = Catalog(lake)
    records = catalog.records()
    assert len(records) == 600
    assert records.groupby("seller").size().to_dict() == {"acme": 200, "default": 200, "zeta": 200}
    assert records["object_id"].is_unique
    assert sorted(records["object_id"]) == list(range(1, 601))
    assert check(catalog)["ok"]


@pytest.mark.slow
def test_a_seller_ingested_on_two_workers_is_the_lake_one_process_makes(tmp_path):
    feeds = _shared_feeds(tmp_path, ["acme"], 300)
    one, two = Catalog(tmp_path / "one"), Catalog(tmp_path / "two")
    ingest(one, feeds["acme"], seller="default", batch_size=50)
    ingest(two, feeds["acme"], seller="default", batch_size=50)

    alone = ingest(one, feeds["acme"], seller="acme", batch_size=50, group_items=100)
    spread = ingest(two, feeds["acme"], seller="acme", batch_size=50, group_items=100, workers=2)

    assert alone["totals"] == spread["totals"]
    mapped = [_by_seller(c.records()) for c in (one, two)]
    assert mapped[0] == mapped[1]
    assert len(mapped[0]) == 600
    assert check(two)["ok"]
