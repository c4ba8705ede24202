"""The catalog-lake command line: exit codes and exact output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from catalog_lake.cli import app

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
        '{"object_id": "1", "client_item_id": "ELEC-PHONE-8-128", "price": 21999.0, '
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
    result = run("rejects", "--json", "--code", "invalid_duration")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["client_item_id"] for r in rows] == ["BAD-BOOL"]
    assert rows[0]["codes"] == ["invalid_boolean", "invalid_duration"]


def test_history_shows_pushes(run):
    run("push", str(FEEDS / "food.json"), str(FEEDS / "bad_items.json"))
    result = run("history", "--json")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted((r["received"], r["success"], r["failed"]) for r in rows) == [
        (2, 2, 0),
        (5, 1, 4),
    ]


def test_repair_with_nothing_to_do(run):
    run("push", str(FEEDS / "food.json"))
    result = run("repair")
    assert (result.exit_code, result.stdout) == (0, "nothing to repair\n")
