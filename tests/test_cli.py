"""The catalog-lake command line: exit codes and exact output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from catalog_lake.cli import app
from tests.conftest import FEEDS_TOTALS

FEEDS = Path(__file__).parents[1] / "data" / "feeds"


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setenv("CATALOG_LAKE_URI", str(tmp_path / "lake"))
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, list(args), catch_exceptions=False)

    return invoke


def test_push_prints_each_response_as_json(run):
    result = run("push", str(FEEDS / "grocery.json"))
    assert result.exit_code == 0
    response = json.loads(result.stdout)
    assert response["items"] == [{"GROC-ATTA-5KG": "1"}, {"GROC-DAL-1KG": "2"}]
    assert response["catalog_push_failed_product_count"] == "0"


def test_push_of_a_missing_file_is_one_line_and_exit_1(run):
    result = run("push", "no-such-feed.json")
    assert result.exit_code == 1
    assert result.stderr == "catalog-lake: error: no-such-feed.json: No such file or directory\n"


def test_push_of_broken_json_names_the_file_and_the_problem(run, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"items": [')
    result = run("push", str(broken))
    assert result.exit_code == 1
    assert result.stderr == (
        f"catalog-lake: error: {broken}: push refused (invalid_json): payload is not valid "
        "JSON: Expecting value at line 1 column 12\n"
    )


def test_strict_exits_3_when_items_failed(run):
    assert run("push", str(FEEDS / "bad_items.json")).exit_code == 0
    assert run("push", "--strict", str(FEEDS / "bad_items.json")).exit_code == 3


def test_records_as_json_lines(run):
    run("push", str(FEEDS / "electronics.json"))
    result = run("records", "--json", "--columns", "object_id,client_item_id,price,tags")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        '{"object_id": 1, "client_item_id": "ELEC-PHONE-8-128", "price": 21999.0, '
        '"tags": ["returnable", "cancellable", "fast-shipping", "on-sale", "in-stock", '
        '"brand:nova", "colour:graphite"]}'
    ]


def test_records_refuses_unknown_columns(run):
    result = run("records", "--columns", "object_id,nope")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "catalog-lake: error: unknown column(s) nope; known: object_id,"
    )


def test_lake_option_overrides_the_environment(run, tmp_path):
    other = tmp_path / "other"
    run("push", "--lake", str(other), str(FEEDS / "beauty.json"))
    assert (other / "records" / "_delta_log").is_dir()
    assert not (tmp_path / "lake").exists()


def test_rejects_lists_codes_and_messages(run):
    run("push", str(FEEDS / "bad_items.json"))
    result = run("rejects", "--json", "--code", "invalid_price")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["client_item_id"] for r in rows] == ["BAD-PRICE"]
    assert rows[0]["codes"] == ["invalid_price"]


def test_warnings_lists_each_value_dropped_or_repaired_as_sent(run):
    run("push", str(FEEDS / "bad_items.json"), str(FEEDS / "seller_quirks.json"))
    result = run("warnings", "--json", "--code", "invalid_duration")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["client_item_id"] for r in rows] == ["BAD-BOOL", "HOME-MUG-350", "GROC-GHEE-1L"]
    (repaired,) = [
        w
        for w in rows[1]["warnings"]
        if w["action"] == "repaired" and w["code"] == "invalid_duration"
    ]
    assert (repaired["value"], repaired["repaired_to"]) == ("P3H", "PT3H")
    table = run("warnings").stdout
    assert "items stored with warnings (5)" in table
    assert 'images "https://img.example.com/home/mug 350ml front.jpg" repaired to' in table


def test_strict_values_refuses_what_a_default_push_stores_with_warnings(run):
    strict = json.loads(run("push", "--strict-values", str(FEEDS / "seller_quirks.json")).stdout)
    assert strict["catalog_push_failed_product_count"] == "3"
    default = json.loads(run("push", str(FEEDS / "seller_quirks.json")).stdout)
    assert default["catalog_push_success_product_count"] == "3"


def test_dry_run_answers_like_a_push_and_writes_nothing(run, tmp_path):
    lake = tmp_path / "lake"
    first = json.loads(run("push", "--dry-run", str(FEEDS / "bad_items.json")).stdout)
    assert not lake.exists()
    assert first["catalog_push_dry_run"] is True
    assert first["items"] == [{"BAD-BOOL": None}, {"BAD-WINDOW": None}, {"GOOD-ONE": None}]
    real = json.loads(run("push", str(FEEDS / "bad_items.json")).stdout)
    again = json.loads(run("push", "--dry-run", str(FEEDS / "bad_items.json")).stdout)
    assert again["items"] == real["items"]  # known items show their service ids
    for key in ("catalog_push_failed_items", "catalog_push_warning_items"):
        assert again[key] == real[key] == first[key]
    pushes = [json.loads(line) for line in run("history", "--json").stdout.splitlines()]
    assert [p["request_id"] for p in pushes] == [real["catalog_push_request_id"]]


def test_history_shows_pushes(run):
    run("push", str(FEEDS / "food.json"), str(FEEDS / "bad_items.json"))
    result = run("history", "--json")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted((r["received"], r["success"], r["failed"]) for r in rows) == [
        (2, 2, 0),
        (5, 3, 2),
    ]


def test_repair_with_nothing_to_do(run):
    run("push", str(FEEDS / "food.json"))
    result = run("repair")
    assert (result.exit_code, result.stdout) == (0, "nothing to repair\n")


def test_ingest_prints_the_run_summary_and_skips_next_time(run):
    first = run("ingest", str(FEEDS), "--json")
    assert first.exit_code == 0
    summary = json.loads(first.stdout)
    assert summary["catalog_push_received_product_count"] == "16"
    assert summary["files"]["failed"] == []
    assert first.stderr.splitlines()[0] == "7 file(s) to ingest, 0 skipped"
    second = run("ingest", str(FEEDS), "--json")
    assert json.loads(second.stdout)["files"]["skipped"] == summary["files"]["ingested"]


def test_ingest_with_worker_processes_stores_the_same_feeds(run):
    # --group-items 1: every file is its own group, so the two workers have work.
    result = run("ingest", str(FEEDS), "--json", "--workers", "2", "--group-items", "1")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["totals"] == FEEDS_TOTALS
    assert len(summary["files"]["ingested"]) == 7


def test_ingest_exits_1_when_a_file_failed(run, tmp_path):
    (tmp_path / "bad.json").write_text("nope")
    result = run("ingest", str(tmp_path))
    assert result.exit_code == 1
    assert "| `bad.json` | invalid |" in result.stdout


def test_ingest_of_a_missing_source_is_one_line(run):
    result = run("ingest", "no/such/folder")
    assert (result.exit_code, result.stderr) == (
        1,
        "catalog-lake: error: source 'no/such/folder' is not a file or folder\n",
    )


def test_records_where_and_as_of(run):
    run("push", str(FEEDS / "food.json"))
    run("push", str(FEEDS / "grocery.json"))
    veg = run(
        "records", "--json", "--columns", "client_item_id", "--where", "array_contains(tags, 'veg')"
    )
    assert veg.stdout.splitlines() == [
        '{"client_item_id": "FOOD-PANEER-TIKKA"}',
        '{"client_item_id": "GROC-ATTA-5KG"}',
        '{"client_item_id": "GROC-DAL-1KG"}',
    ]
    first_version = run("records", "--json", "--columns", "client_item_id", "--as-of", "1")
    assert len(first_version.stdout.splitlines()) == 2


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (
            "1=1; DROP TABLE records",
            "--where '1=1; DROP TABLE records' is refused: Block (1 = 1; DROP TABLE records) "
            "is not allowed; a filter is one expression of comparisons (= != <> < <= > >=), "
            "AND, OR, NOT, IN (literals), BETWEEN, LIKE, ILIKE, IS [NOT] NULL, "
            "array_contains(list, value), lower(), upper(), length()",
        ),
        (
            "1=1) UNION ALL (SELECT * FROM records",
            "--where '1=1) UNION ALL (SELECT * FROM records' is not one SQL expression: "
            "Invalid expression / Unexpected token at column 4",
        ),
        (
            "price <",
            "--where 'price <' is not one SQL expression: an operator is missing what it "
            "compares at column 7",
        ),
        (
            "read_parquet('/etc/passwd') IS NULL",
            "--where \"read_parquet('/etc/passwd') IS NULL\" is refused: ReadParquet "
            "(READ_PARQUET('/etc/passwd')) is not allowed; a filter is one expression of "
            "comparisons (= != <> < <= > >=), AND, OR, NOT, IN (literals), BETWEEN, LIKE, ILIKE, "
            "IS [NOT] NULL, array_contains(list, value), lower(), upper(), length()",
        ),
        (
            "nope > 1",
            "unknown column 'nope' in --where 'nope > 1'; known: object_id, client_item_id, "
            "product_name, description, categories, price, mrp, on_sale, discount_pct, image, "
            "inventory, in_stock, likes, sales, tags, synonyms, brand, colour, size, gender, "
            "lake_category, variant_group_id, variant, updated_at, id_block, received_at",
        ),
    ],
    ids=[
        "two statements",
        "union injection",
        "syntax error",
        "table function",
        "unknown column",
    ],
)
def test_records_where_is_one_expression_and_errors_are_one_line(run, where, message):
    run("push", str(FEEDS / "food.json"))
    result = run("records", "--where", where)
    assert (result.exit_code, result.stderr) == (2, f"catalog-lake: error: {message}\n")


def test_backfill_dry_run_metrics_and_maintain(run, tmp_path):
    run("ingest", str(FEEDS))
    report = json.loads(run("backfill", "--dry-run").stdout)
    assert (report["dry_run"], report["records_unchanged"]) == (True, 14)
    metrics = tmp_path / "m.csv"
    metrics.write_text("client_item_id,likes\nGROC-DAL-1KG,4\nghost,1\n")
    applied = json.loads(run("metrics", str(metrics)).stdout)
    assert (applied["updated"], applied["unknown_ids"]) == (1, ["ghost"])
    maintained = run("maintain")
    assert maintained.exit_code == 0
    assert set(json.loads(maintained.stdout)["tables"]) >= {"raw", "items", "records"}


def test_history_versions(run):
    run("push", str(FEEDS / "food.json"))
    rows = [json.loads(line) for line in run("history", "--versions", "--json").stdout.splitlines()]
    assert {(r["table"], r["operation"]) for r in rows} >= {("raw", "WRITE"), ("items", "WRITE")}
