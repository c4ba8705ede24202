"""The catalog-lake command line: exit codes and exact output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from catalog_lake.cli import app
from tests.conftest import FEEDS_TOTALS, cli

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
        "JSON: Expecting value at column 12\n"
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


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("changes", "--since", "1", "--until", "0"),
         "--until (version 0) is before --since (version 1)"),
        (("changes", "--since", "yesterday"),
         "--since takes a version number, a date (2026-11-25) or a date-time "
         "(2026-11-25T18:00:00Z); got 'yesterday'"),
        (("changes", "--since", "1", "--format", "typesense"),
         "typesense takes deletions in a request of its own; give --deletes-output a file to "
         "write them to"),
        (("records", "--where", "nope > 1"),
         "unknown column 'nope' in --where 'nope > 1'; known: object_id, client_item_id, "),
        (("records", "--where", "nope > 'where'"),  # the value is quoted as given
         "unknown column 'nope' in --where \"nope > 'where'\"; known: object_id, "),
    ],
)  # fmt: skip
def test_the_library_names_its_parameters_and_the_cli_prints_its_flags(run, args, said):
    """A ``UsageError`` says which parameter; the class, not the text, makes it exit 2."""
    run("push", str(FEEDS / "grocery.json"))
    run("delete", "GROC-DAL-1KG")
    result = run(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"catalog-lake: error: {said}")
    assert len(result.stderr.splitlines()) == 1


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
            "lake_category, variant_group_id, variant, updated_at, id_block, received_at, seller",
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


# --- what a newcomer meets first (issue 41) ---------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["records", "--limit", "abc"], "Invalid value for '--limit': Input should be a valid "
         "integer, unable to parse string as an integer (see 'catalog-lake records --help')"),
        (["ingest", "x", "--max-delete-share", "1.5"], "Invalid value for '--max-delete-share': "
         "Input should be less than or equal to 1 (see 'catalog-lake ingest --help')"),
        (["records", "--colums", "x"], "No such option: --colums (Possible options: --columns) "
         "(see 'catalog-lake records --help')"),
        (["injest"], "No such command 'injest'. Did you mean 'ingest'? (see 'catalog-lake --help')"),
        (["records", "--limit", "0"], "Invalid value for '--limit': Input should be greater than "
         "or equal to 1 (see 'catalog-lake records --help')"),
    ],
)  # fmt: skip
def test_every_usage_error_is_one_line_and_exit_2_the_frameworks_own_too(tmp_path, argv, message):
    """Through the console script itself, as a user types it."""
    import subprocess
    import sys

    ran = subprocess.run(
        [str(Path(sys.executable).with_name("catalog-lake")), *argv],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert (ran.returncode, ran.stdout, ran.stderr) == (2, "", f"catalog-lake: error: {message}\n")
    assert not (tmp_path / "lake").exists()


def test_a_bare_command_still_shows_the_help(run):
    result = run()
    assert result.exit_code == 2 and "Usage: catalog-lake" in result.output


@pytest.mark.parametrize("command", ["export", "changes", "index-settings"])
def test_json_prints_the_summary_and_the_data_goes_to_output(run, tmp_path, command):
    assert run("ingest", str(FEEDS)).exit_code == 0
    data = tmp_path / "data.out"
    argv = {
        "export": ["export", "--format", "algolia"],
        "changes": ["changes", "--since", "0"],
        "index-settings": ["index-settings", "--format", "meilisearch"],
    }[command]
    result = run(*argv, "--json", "--output", str(data))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["output"] == str(data) and data.stat().st_size > 0
    if command == "export":
        assert summary["records"] == 14 and len(json.loads(data.read_text())["requests"]) == 14
    if command == "changes":
        assert (summary["upserts"], summary["deletes"]) == (14, 0)
        assert len(data.read_text().splitlines()) == 14
    if command == "index-settings":
        assert "rankingRules" in json.loads(data.read_text())

    no_file = run(*argv, "--json")
    assert no_file.exit_code == 2 and no_file.stdout == ""
    assert no_file.stderr == (
        "catalog-lake: error: --json prints a summary on standard output: name the data's "
        "file with --output\n"
    )


def test_an_empty_source_says_0_files_and_creates_no_lake(run, tmp_path):
    (tmp_path / "empty").mkdir()
    result = run("ingest", str(tmp_path / "empty"))
    assert result.exit_code == 0
    assert (
        f"0 files: nothing under {tmp_path / 'empty'} matches '**/*'; no lake was created"
        in result.stdout
    )
    assert not (tmp_path / "lake").exists()


def test_a_source_of_only_other_files_is_as_an_empty_one_and_creates_no_lake(run, tmp_path):
    others = tmp_path / "others"
    (others / "sub").mkdir(parents=True)
    (others / "README.txt").write_text("not a feed")
    (others / "sub" / "photo.jpg").write_bytes(b"\xff\xd8")
    result = run("ingest", str(others))
    assert result.exit_code == 0
    assert f"0 feed files under {others}; no lake was created" in result.stdout
    assert not (tmp_path / "lake").exists()


def test_a_jsonl_feed_of_whole_pushes_is_told_it_holds_one_item_per_line(run, tmp_path):
    feed = tmp_path / "pushes.jsonl"
    item = json.loads((FEEDS / "food.json").read_text())["items"][0]
    feed.write_text(json.dumps({"items": [item]}) + "\n" + json.dumps({"items": [item]}) + "\n")
    pushed = run("push", str(feed))
    assert pushed.exit_code == 1
    assert "line 1 is a whole push" in pushed.stderr and "one item per line" in pushed.stderr
    assert "missing_required_field" not in pushed.output
    ingested = run("ingest", str(tmp_path), "--pattern", "*.jsonl", "--json")
    assert ingested.exit_code == 1
    (failed,) = json.loads(ingested.stdout)["files"]["failed"]
    assert "one item per line" in failed["error"]


def test_row_listings_print_json_lines_and_every_other_command_one_document(run):
    run("ingest", str(FEEDS))
    for listing in ("records", "rejects", "warnings", "history"):
        rows = run(listing, "--json").stdout.splitlines()
        assert rows and all(isinstance(json.loads(row), dict) for row in rows), listing
        assert "(JSON Lines)" in run(listing, "--help").stdout
    for command in (("check",), ("search", ""), ("repair",)):
        done = run(*command, "--json")
        assert isinstance(json.loads(done.stdout), dict | list), command
        assert "JSON Lines" not in run(command[0], "--help").stdout


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--refresh-scope", "all"], "--refresh-scope"),
        (["--refresh-category", "FASHION"], "--refresh-category"),
        (["--max-delete-share", "0.5", "--allow-mass-delete"],
         "--max-delete-share, --allow-mass-delete"),
    ],
)  # fmt: skip
def test_refresh_options_without_a_full_refresh_are_refused(run, tmp_path, options, named):
    result = run("ingest", str(FEEDS), *options)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"catalog-lake: error: {named} only apply to a refresh: add --full-refresh\n"
    )
    assert not (tmp_path / "lake").exists()


def test_the_flow_refuses_refresh_options_without_a_full_refresh(tmp_path):
    from flows.catalog_flows import ingest

    from catalog_lake import UsageError

    with pytest.raises(UsageError, match="only apply to a refresh: set full_refresh=true"):
        ingest.fn(source=str(FEEDS), lake=str(tmp_path / "lake"), allow_mass_delete=True)
    assert not (tmp_path / "lake").exists()


def test_the_flow_names_its_own_parameters_in_a_refused_refresh(tmp_path):
    from flows.catalog_flows import ingest

    from catalog_lake import UsageError

    with pytest.raises(UsageError) as refused:
        ingest.fn(source=str(FEEDS), lake=str(tmp_path / "lake"), full_refresh=True,
                  max_delete_share=1.5)  # fmt: skip
    assert str(refused.value) == "max_delete_share is a share from 0 to 1; got 1.5"
    assert refused.value.parameter == "max_delete_share"
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize("engine", ["jsonl", "algolia", "elasticsearch", "opensearch"])
def test_deletes_output_is_refused_where_deletes_go_inline(run, tmp_path, engine):
    run("push", str(FEEDS / "grocery.json"))
    result = run("changes", "--since", "0", "--format", engine, "--deletes-output",
                 str(tmp_path / "deletes.json"), "--output", str(tmp_path / "out"))  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == (
        "catalog-lake: error: --deletes-output is for meilisearch and typesense, whose "
        f"deletions go in a request of their own; {engine} writes them in --output with the "
        "upserts\n"
    )
    assert not (tmp_path / "deletes.json").exists() and not (tmp_path / "out").exists()


def test_help_shows_no_value_on_flags_and_says_what_it_means(run, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    records = run("records", "--help").output
    assert "<bool>" not in records and "<bool>" not in run("--help").output
    assert "--limit N " in records  # options that take a value still show it
    assert "(default: a readable set in a table, all of them with --json)" in " ".join(
        records.split()
    )
    assert ".json, .jsonl, .ndjson, .gz of any of" in run("ingest", "--help").output


@pytest.mark.parametrize("command", ["ingest", "push", "search", "sync", "records", "delete"])
def test_help_reads_as_click_writes_it_and_fits_100_columns(tmp_path, monkeypatch, command):
    monkeypatch.setenv("COLUMNS", "100")  # a terminal 100 columns wide
    shown = cli(command, "--help", cwd=tmp_path).stdout
    usage = shown.splitlines()[0]
    assert "{" not in usage  # SOURCE, not {source}
    assert not re.search(r"<(str|int|float|bool|path)", shown)  # --batch-size N, not <int range>
    assert {"ingest": "SOURCE", "push": "FILES...", "search": "[QUERY]", "sync": "TARGET",
            "records": "[OPTIONS]", "delete": "IDS..."}[command] in usage  # fmt: skip
    assert max(len(line) for line in shown.splitlines()) <= 100
    options = shown.split("Options:\n", 1)[1]
    entries = re.split(r"\n(?=  -)", options)  # one entry per option, its wrapped lines with it
    assert max(len(e.splitlines()) for e in entries) <= 3, max(entries, key=len)


def test_listing_titles_count_the_rows_shown_of_the_total(run):
    run("ingest", str(FEEDS))
    assert run("rejects", "--limit", "1").stdout.startswith("rejects (1 of 2)")
    assert run("rejects").stdout.startswith("rejects (2)")
    assert run("warnings", "--limit", "2").stdout.startswith("items stored with warnings (2 of ")
    assert run("history", "--limit", "3").stdout.startswith("pushes and deletes (3 of 7)")


@pytest.mark.parametrize("command", ["rejects", "warnings"])
def test_an_unknown_code_is_refused_with_the_known_codes(run, command):
    run("ingest", str(FEEDS))
    result = run(command, "--code", "nosuchcode")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(
        "catalog-lake: error: --code 'nosuchcode' is no error code; the codes are: "
        "missing_required_field, invalid_type,"
    )
    assert "invalid_price" in result.stderr and result.stderr.count("\n") == 1


def test_a_file_line_counts_one_item_as_one(run):
    from catalog_lake.terminal import file_line

    assert file_line({"file": "a.json", "status": "ingested", "items": 1}) == (
        "a.json: ingested, 1 item"
    )
    assert file_line({"file": "b.json", "status": "ingested", "items": 2,
                      "already_stored": 1}) == (
        "b.json: ingested, 2 items, 1 already stored by an interrupted run"
    )  # fmt: skip


def test_the_progress_bar_counts_items_read_before_the_first_commit(monkeypatch):
    import sys

    from catalog_lake.terminal import IngestProgress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with IngestProgress() as progress:
        progress("plan", files=1, skipped=0, reasons={}, bytes=28_000_000)
        for done in (10_000, 20_000):
            progress("parsed", file="big.json", items=done, total=20_000, bytes=28_000_000)
        (task,) = progress.bar.tasks
        assert (task.fields["read"], task.fields["items"]) == ("20,000", "0")
        progress("batch", file="big.json", items=1_000, bytes=28_000_000, batches=20)
        (task,) = progress.bar.tasks
        assert (task.fields["read"], task.fields["items"]) == ("20,000", "1,000")


def test_make_setup_says_what_it_installs_and_shows_pip_at_work(tmp_path):
    import subprocess

    shown = subprocess.run(
        ["make", "-n", "setup", f"VENV={tmp_path / 'venv'}"],
        cwd=Path(__file__).parents[1], capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "Installing the pinned working set into" in shown
    (install,) = [line for line in shown.splitlines() if '-e ".[dev]"' in line]
    assert "--quiet" not in install and "-c constraints.txt" in install
