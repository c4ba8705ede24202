"""What a new user trips over in the first hour, each a command that must behave (issue 25, section 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from catalog_lake import Catalog, PushError, check
from catalog_lake.errors import one_line
from catalog_lake.settings import lake_limit_name, resolved_lake_uri
from catalog_lake.summary import SKIP_FAILED, run_summary
from catalog_lake.terminal import IngestProgress
from tests.conftest import make_item

ROOT = Path(__file__).parents[1]
FEEDS = ROOT / "data" / "feeds"


def test_check_on_a_lake_whose_tables_are_empty_is_ok(run, tmp_path):
    Catalog(tmp_path / "lake").lake.ensure()  # every table, no row
    result = run("check")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["ok"], report["items"], report["violations"]) == (True, 0, [])


def test_ingest_of_a_mistyped_source_creates_nothing(run, tmp_path):
    result = run("ingest", "feeds-typo", "--lake", "fresh")
    assert result.exit_code == 1
    assert result.stderr == "catalog-lake: error: source 'feeds-typo' is not a file or folder\n"
    assert not (tmp_path / "fresh").exists()


def test_an_object_store_over_plain_http_without_allow_http_is_one_line_that_names_the_fix():
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") or k == "AWS_REGION"} | {
        "AWS_ACCESS_KEY_ID": "catalog-lake-test",
        "AWS_SECRET_ACCESS_KEY": "catalog-lake-test-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",  # loopback: refused at once, nothing leaves
        "AWS_METADATA_ENDPOINT": "http://127.0.0.1:9",
    }
    done = subprocess.run(
        [str(Path(sys.executable).with_name("catalog-lake")), "records", "--lake", "s3://b/lake"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1
    assert "\x1b" not in done.stderr
    assert done.stderr.startswith("catalog-lake: error: ")
    assert "needs AWS_ALLOW_HTTP=true in the environment" in done.stderr


def test_store_errors_become_one_plain_line():
    chained = "Generic S3 error\n   \x1b[31m↳\x1b[0m builder error\n   URL scheme is not allowed"
    assert one_line(chained) == (
        "Generic S3 error ↳ builder error URL scheme is not allowed; the object store's "
        "endpoint is plain http://, which needs AWS_ALLOW_HTTP=true in the environment "
        "(or --storage-option AWS_ALLOW_HTTP=true)"
    )


@pytest.mark.parametrize(
    "command",
    [["maintain"], ["metrics", "metrics.csv"], ["repair"], ["backfill"], ["backfill", "--dry-run"]],
    ids=lambda c: " ".join(c),
)
def test_every_command_takes_json(run, tmp_path, command):
    run("push", str(FEEDS / "food.json"))
    (tmp_path / "metrics.csv").write_text("client_item_id,likes,sales\nFOOD-BIRYANI-01,3,4\n")
    result = run(*command, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) is not None


def test_repair_json_is_a_list_of_what_it_finished(run):
    run("push", str(FEEDS / "food.json"))
    result = run("repair", "--json")
    assert result.stdout == "[]\n"


def test_a_version_flag(run):
    from importlib.metadata import version

    result = run("--version")
    assert (result.exit_code, result.stdout) == (0, f"catalog-lake {version('catalog-lake')}\n")


def test_global_options_are_accepted_after_the_command_as_well(run):
    run("push", str(FEEDS / "food.json"))
    before = run("--storage-option", "AWS_REGION=us-east-1", "records", "--json")
    after = run("records", "--json", "--storage-option", "AWS_REGION=us-east-1")
    assert after.exit_code == 0, after.output
    assert after.stdout == before.stdout
    bad = run("records", "--storage-option", "secret-without-key")
    assert bad.exit_code == 1
    assert "secret" not in bad.stderr


def test_an_empty_lake_path_is_a_usage_error_that_creates_nothing(run, tmp_path):
    result = run("push", str(FEEDS / "food.json"), "--lake", "")
    assert result.exit_code == 2
    assert (
        result.stderr
        == "catalog-lake: error: --lake is empty; name a lake folder or an s3:// URI\n"
    )
    with pytest.raises(Exception, match="the lake path is empty"):
        Catalog("")


def test_files_that_are_not_feeds_are_counted_among_the_skipped(run, tmp_path):
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    for n in range(2):
        (feeds / f"f{n}.json").write_text(
            json.dumps({"items": [make_item(client_item_id=f"S{n}")]})
        )
    (feeds / "data.csv").write_text("a,b\n")
    (feeds / "feed.json.bak").write_text("{}")
    (feeds / "nested").mkdir()
    result = run("ingest", "feeds")
    assert result.exit_code == 0
    assert result.stderr.splitlines()[0] == (
        "2 file(s) to ingest, 2 skipped: 2 not a feed file (.json, .jsonl, .ndjson, or .gz of one)"
    )


def test_a_scheduled_run_over_files_that_failed_before_and_are_unchanged_fails_too(run, tmp_path):
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    (feeds / "good.json").write_text(json.dumps({"items": [make_item()]}))
    (feeds / "broken.json").write_text('{"items": [')
    assert run("ingest", "feeds").exit_code == 1
    again = run("ingest", "feeds", "--json")
    assert again.exit_code == 1
    summary = json.loads(again.stdout)
    assert summary["files"]["failed"] == []
    assert summary["files"]["still_failing"] == ["broken.json"]
    (feeds / "broken.json").unlink()  # removed (or fixed): the next run is green
    assert run("ingest", "feeds").exit_code == 0


def test_the_still_failing_rule_names_each_file():
    from catalog_lake.errors import IngestError
    from catalog_lake.sources import FeedFile

    skipped = [FeedFile("/f", "broken.json", "x", 1)]
    summary = run_summary(
        "r", [], skipped, duration_s=1.0, skipped_reasons={"broken.json": SKIP_FAILED}
    )
    assert str(IngestError(summary)) == (
        "1 feed file(s) failed: broken.json (failed before and unchanged)"
    )


def test_records_and_items_agree_on_the_service_id_type(catalog):
    catalog.push({"items": [make_item(client_item_id=f"T{n}") for n in range(3)]})
    records = DeltaTable(catalog.lake.path("records")).schema().to_arrow()
    items = DeltaTable(catalog.lake.path("items")).schema().to_arrow()
    assert pa.schema(records).field("object_id").type == pa.schema(items).field("object_id").type
    assert catalog.query_records(where="object_id = 2")["client_item_id"].tolist() == ["T1"]
    assert catalog.query_records(where="object_id >= '2'")["client_item_id"].tolist() == [
        "T1",
        "T2",
    ]


@pytest.mark.parametrize(
    ("where", "found"),
    [
        ("updated_at >= '2020-01-01'", 1),
        ("updated_at > '2999-01-01'", 0),
        ("updated_at < '2999-12-31T23:59:59+05:30'", 1),
        ("updated_at BETWEEN '2000-01-01' AND '2999-01-01T00:00:00Z'", 1),
    ],
)
def test_timestamps_compare_with_the_literals_users_type(catalog, where, found):
    catalog.push({"items": [make_item()]})
    assert len(catalog.query_records(where=where)) == found


def test_a_lake_written_with_text_service_ids_in_records_is_upgraded_in_place(catalog):
    catalog.push({"items": [make_item(client_item_id=f"T{n}") for n in range(3)]})
    path = catalog.lake.path("records")
    old = DeltaTable(path).to_pyarrow_table()
    old = old.set_column(0, "object_id", old["object_id"].cast(pa.string()))
    write_deltalake(path, old, mode="overwrite", schema_mode="overwrite", partition_by=["id_block"])

    fresh = Catalog(catalog.lake.uri, clock=catalog.clock)
    fresh.push({"items": [make_item(client_item_id="T3")]})

    stored = pa.schema(DeltaTable(path).schema().to_arrow())
    assert stored.field("object_id").type == pa.int64()
    assert fresh.records()["object_id"].tolist() == [1, 2, 3, 4]
    assert check(fresh)["ok"]


def test_maintain_counts_only_records_it_changed(catalog, clock):
    from catalog_lake.maintain import maintain

    start = (clock.now - timedelta(days=1)).isoformat()
    end = (clock.now + timedelta(days=10)).isoformat()
    catalog.push(
        {
            "items": [
                make_item(
                    pricing_info__discount_start_date=start,
                    pricing_info__discount_end_date=end,
                    pricing_info__discounted_price="199.00",
                )
            ]
        }
    )
    report = maintain(catalog, compact=False, vacuum=False)
    assert report["repriced"] == 0  # the record was written inside its window already
    clock.now += timedelta(days=11)
    assert maintain(catalog, compact=False, vacuum=False)["repriced"] == 1


def test_every_check_violation_names_an_example(catalog):
    catalog.push({"items": [make_item(client_item_id=f"E{n}") for n in range(2)]})
    catalog.lake.table("records").delete("client_item_id = 'E1'")
    report = check(catalog)
    assert not report["ok"]
    assert all(v["examples"] for v in report["violations"])
    derived = [v for v in report["violations"] if v["invariant"] == 3]
    assert derived and derived[0]["examples"][0]["client_item_id"] == "E1"


def test_the_progress_bar_moves_once_per_batch_at_least(catalog, tmp_path, monkeypatch):
    from catalog_lake.feeds import ingest

    feed = tmp_path / "one.jsonl"
    feed.write_text(
        "\n".join(json.dumps(make_item(client_item_id=f"P{n}")) for n in range(40)) + "\n"
    )
    moves: list[float] = []
    progress = IngestProgress()
    progress.shown, progress.items, progress.started = {}, 0, 0.0

    class Bar:  # records what rich's Progress is told, call by call
        def add_task(self, description, total=None, **fields):
            return 1

        def update(self, task, advance=0.0, **fields):
            if advance:
                moves.append(advance)

    progress.bar, progress.task = Bar(), None
    ingest(catalog, feed, batch_size=5, progress=progress)  # one file, one group, 8 batches
    assert len(moves) >= 8
    assert sum(moves) == pytest.approx(feed.stat().st_size)


def test_decimal_and_date_values_in_a_payload_are_taken_exactly(catalog):
    response = catalog.push(
        {
            "items": [
                make_item(
                    pricing_info__mrp=Decimal("310.00"),
                    pricing_info__sale_price=Decimal("289.5"),
                    pricing_info__discounted_price=Decimal("250.00"),
                    pricing_info__discount_start_date=date(2026, 11, 1),
                    pricing_info__discount_end_date=datetime(2026, 12, 1, tzinfo=UTC),
                )
            ]
        }
    )
    assert response["catalog_push_success_product_count"] == "1"
    assert response["catalog_push_warning_items"] == []
    raw = json.loads(catalog.raw()["item_json"][0])["pricing_info"]
    assert raw["discount_start_date"] == "2026-11-01"
    assert raw["discount_end_date"] == "2026-12-01T00:00:00Z"
    text = catalog.raw()["item_json"][0]
    assert '"mrp":310.00' in text and '"sale_price":289.5' in text  # the exact numbers
    items = catalog.items()
    assert str(items["mrp"][0]) == "310.00"


def test_values_json_cannot_carry_are_still_refused_by_name(catalog):
    with pytest.raises(PushError, match=r"items\[0\]\.tags: a set cannot be represented as JSON"):
        catalog.push({"items": [make_item(tags={"a"}, pricing_info__mrp=Decimal("1.00"))]})


def test_every_spelling_of_a_lake_is_one_concurrency_limit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = {lake_limit_name(x) for x in ("lake", "./lake", str(tmp_path / "lake"), "lake/")}
    assert len(names) == 1
    (name,) = names
    assert name.startswith("catalog-lake:lake-") and "/" not in name
    assert resolved_lake_uri("s3://bucket/lake/") == "s3://bucket/lake"
    assert lake_limit_name("s3://bucket/lake") != lake_limit_name(tmp_path / "other" / "lake")


def test_a_deployment_run_refuses_a_relative_lake(monkeypatch):
    from flows.catalog_flows import lake_of_run

    from catalog_lake import LakeError

    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", "00000000-0000-0000-0000-000000000001")
    with pytest.raises(LakeError, match="relative path, which a deployment's run would write"):
        lake_of_run("lake")
    assert lake_of_run("/srv/lake") == "/srv/lake"
    assert lake_of_run("s3://bucket/lake") == "s3://bucket/lake"
