"""Every command works on an ``s3://`` lake, and feeds can come from an ``s3://`` prefix.

The store is a real S3-compatible server (SeaweedFS) on 127.0.0.1; credentials
come from the standard AWS_* variables or ``--storage-option``, and never show
up in what the commands print or in the lake's tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.fs as pafs
from typer.testing import CliRunner

from catalog_lake import Catalog, check
from catalog_lake.cli import app
from catalog_lake.sources import discover, read_items
from tests.conftest import FEEDS_TOTALS, make_item

FEEDS = Path(__file__).parents[1] / "data" / "feeds"


def _store(endpoint: str) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        access_key=os.environ["AWS_ACCESS_KEY_ID"],
        secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        region=os.environ["AWS_REGION"],
        endpoint_override=endpoint.removeprefix("http://"),
        scheme="http",
    )


def _upload(endpoint: str, bucket_prefix: str) -> None:
    store = _store(endpoint)
    for path in sorted(FEEDS.glob("*.json")):
        with store.open_output_stream(f"{bucket_prefix}/{path.name}") as out:
            out.write(path.read_bytes())


def test_the_cli_ingests_an_s3_prefix_into_an_s3_lake_and_reads_it_back(s3_lake, s3_endpoint):
    bucket = s3_lake.removeprefix("s3://").removesuffix("/lake")  # bucket/prefix
    _upload(s3_endpoint, f"{bucket}/incoming")
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    runner = CliRunner()
    # Credentials as options, not only the environment: they must never be printed.
    options = [
        "--storage-option",
        f"AWS_SECRET_ACCESS_KEY={secret}",
        "--storage-option",
        f"AWS_ACCESS_KEY_ID={os.environ['AWS_ACCESS_KEY_ID']}",
        "--storage-option",
        f"AWS_ENDPOINT_URL={s3_endpoint}",
        "--storage-option",
        "AWS_ALLOW_HTTP=true",
        "--storage-option",
        "AWS_REGION=us-east-1",
    ]

    ingested = runner.invoke(
        app, [*options, "ingest", f"s3://{bucket}/incoming", "--lake", s3_lake, "--json"]
    )
    assert ingested.exit_code == 0, ingested.output
    summary = json.loads(ingested.stdout)
    assert summary["totals"] == FEEDS_TOTALS
    assert len(summary["files"]["ingested"]) == 7

    again = runner.invoke(app, [*options, "ingest", f"s3://{bucket}/incoming", "--lake", s3_lake])
    assert again.exit_code == 0
    assert "7 ingested before and unchanged" in again.stdout

    records = runner.invoke(app, [*options, "records", "--lake", s3_lake, "--json"])
    assert records.exit_code == 0
    assert len([json.loads(line) for line in records.stdout.splitlines()]) == 14  # JSON lines
    checked = runner.invoke(app, [*options, "check", "--lake", s3_lake])
    assert checked.exit_code == 0, checked.stdout
    for result in (ingested, again, records, checked):
        assert secret not in result.output

    catalog = Catalog(s3_lake)
    assert check(catalog)["ok"]
    for name in ("raw", "pushes", "files", "runs"):
        assert secret not in catalog.lake.read(name).to_pandas().to_json(date_format="iso")
    assert set(catalog.lake.read("files").to_pandas()["source"]) == {f"s3://{bucket}/incoming"}


def test_a_storage_option_without_a_value_is_refused_without_echoing_it(s3_lake):
    result = CliRunner().invoke(app, ["--storage-option", "hunter2", "records", "--lake", s3_lake])
    assert result.exit_code == 1
    assert "hunter2" not in result.output
    assert "--storage-option takes KEY=VALUE" in result.output


def _ingest(lake: str, source: str, env: dict[str, str]) -> dict:
    os.environ.update(env)
    from catalog_lake.feeds import ingest

    return ingest(Catalog(lake), source, batch_size=2)


def test_concurrent_ingests_of_one_folder_store_each_batch_once(s3_lake):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    Catalog(s3_lake).lake.ensure()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(3, mp_context=context) as pool:
        runs = [pool.submit(_ingest, s3_lake, str(FEEDS), env) for _ in range(3)]
        summaries = [run.result() for run in runs]

    catalog = Catalog(s3_lake)
    files = {p.name for p in FEEDS.glob("*.json")}
    for summary in summaries:  # a run that planned after another recorded a file skips it
        assert set(summary["files"]["ingested"]) | set(summary["files"]["skipped"]) == files
    pushes = catalog.pushes()
    assert pushes["idempotency_key"].is_unique  # each batch stored once, whoever won it
    batches = sum(-(-len(read_items(f)) // 2) for f in discover(FEEDS)[0])  # batch_size=2
    assert len(pushes) == batches  # each batch once, no more
    assert len(catalog.records()) == 14
    report = check(catalog)
    assert report["ok"], report["violations"]


def test_metrics_backfill_and_maintain_work_on_an_s3_lake(s3_lake, tmp_path):
    from catalog_lake.backfill import backfill
    from catalog_lake.maintain import maintain
    from catalog_lake.metrics import apply_metrics

    catalog = Catalog(s3_lake)
    for path in sorted(FEEDS.glob("*.json")):
        catalog.push(path.read_bytes())
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("client_item_id,likes,sales\nGROC-ATTA-5KG,12,3\nNOPE,1,1\n")

    applied = apply_metrics(catalog, metrics)
    assert applied["updated"] == 1 and applied["unknown_ids"] == ["NOPE"]
    dry = backfill(catalog, dry_run=True)
    assert dry["records_changed"] == 0 and dry["items_replayed"] == 16
    assert backfill(catalog)["records_unchanged"] == 14
    report = maintain(catalog)
    assert {"raw", "items", "records", "pushes"} <= set(report["tables"])

    records = Catalog(s3_lake).records().set_index("client_item_id")
    assert records.loc["GROC-ATTA-5KG", "likes"] == 12
    assert check(Catalog(s3_lake))["ok"]


def test_an_s3_lake_made_again_at_its_uri_is_never_searched_through_the_cached_index(
    s3_endpoint, s3_lake, tmp_path, monkeypatch
):
    """Issue 42: an s3:// lake's index sits in the user's cache, named by the URI alone."""

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CATALOG_LAKE_SEARCH_DIR", raising=False)

    def lamp(client_id: str, name: str) -> dict:
        return make_item(client_item_id=client_id, name=name, description=name,
                         short_description=None, variant_group_id=client_id)  # fmt: skip

    Catalog(s3_lake).push({"items": [lamp("old", "Oldlake Lamp")]})
    assert Catalog(s3_lake).search("oldlake")["nb_hits"] == 1
    assert list((tmp_path / "cache" / "catalog-lake" / "search").iterdir())
    _store(s3_endpoint).delete_dir(s3_lake.removeprefix("s3://"))
    Catalog(s3_lake).push({"items": [lamp("new", "Newlake Lamp")]})
    assert Catalog(s3_lake).search("oldlake")["nb_hits"] == 0
    assert Catalog(s3_lake).search("newlake")["nb_hits"] == 1


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
