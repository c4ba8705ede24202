"""Hardening, second round (issue 26): each fault class of the hostile campaign, as tests.

Each section names the issue's item. The issue's own example comes first,
then cases of our own for the same class. Item 3 (verdicts that depend on the
batch) is ``tests/test_neighbours.py``; item 7 (first writers of a new lake)
and item 13 (the rows of pushes that lost a race) are in
``tests/test_writers.py``, with the other concurrent writers.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Field

from catalog_lake import Catalog, PushError, check
from catalog_lake.errors import LakeError, UsageError
from catalog_lake.feeds import ingest
from catalog_lake.lake import Lake
from catalog_lake.metrics import apply_metrics
from catalog_lake.sources import SKIP_DANGLING, discover
from tests.conftest import make_item

ROOT = Path(__file__).parents[1]
FEEDS = ROOT / "data" / "feeds"
HUGE = "9" * 5_000


def cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real command in its own process: what a user's terminal shows, Rust's lines too."""
    return subprocess.run(
        [sys.executable, "-c", "from catalog_lake.cli import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "RUST_BACKTRACE": "0"},
    )


# --- 1. --where is one expression over the table's own columns ----------------------


@pytest.fixture
def listener():
    """A real HTTP server on loopback that counts the requests it gets."""
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"client_item_id\nSECRET-FROM-THE-NETWORK\n")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", hits
    server.shutdown()


HOSTILE_WHERE = [
    # The examples: a file's first line inside an error, network reads, size, depth.
    "client_item_id IN (SELECT nosuch FROM read_csv('{secret}'))",
    "client_item_id IN (SELECT * FROM read_csv('{url}/x.csv'))",
    "price > (SELECT max(price) FROM read_parquet('{url}/x.parquet'))",
    " OR ".join(f"client_item_id = 'x{i}'" for i in range(4_000)),
    "NOT (" * 60 + "price > 1" + ")" * 60,
    # Our own: other table functions and spellings, statements, settings, functions.
    "read_csv('{secret}') IS NOT NULL",
    "read_json_auto('{url}/x.json') IS NOT NULL",
    "EXISTS (SELECT 1 FROM read_text('{secret}'))",
    "client_item_id = 'a' UNION SELECT * FROM read_csv('{secret}')",
    "client_item_id = 'a'; COPY records TO '{secret}'",
    "client_item_id = getenv('HOME')",
    "client_item_id = current_setting('home_directory')",
    "client_item_id LIKE '%' || (SELECT content FROM read_blob('{secret}'))",
    "client_item_id IN (" + ", ".join(f"'x{i}'" for i in range(600)) + ")",
    "lower(" * 40 + "client_item_id" + ")" * 40 + " = 'a'",
    "price > 1 AND " * 300 + "price > 1",
    '"records"."client_item_id" = \'a\' OR 1 IN (SELECT 1 FROM records)',
]


@pytest.mark.parametrize("where", HOSTILE_WHERE, ids=range(len(HOSTILE_WHERE)))
def test_where_reads_no_file_and_reaches_no_network(run, tmp_path, listener, where):
    url, hits = listener
    secret = tmp_path / ".env"
    secret.write_text("client_item_id\nSECRET-TOKEN-123\n")
    where = where.replace("{secret}", str(secret)).replace("{url}", url)
    run("push", str(FEEDS / "food.json"))
    result = run("records", "--where", where)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert "SECRET" not in result.stdout + result.stderr
    assert hits == []
    with pytest.raises(UsageError) as refused:  # the library's door is the same one
        Catalog(tmp_path / "lake").query_records(where=where)
    assert "SECRET" not in str(refused.value) and hits == []


def test_where_on_an_odd_file_is_a_refusal_not_a_traceback(run, tmp_path):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(bytes(range(256)) * 40)
    run("push", str(FEEDS / "food.json"))
    result = run("records", "--where", f"client_item_id IN (SELECT * FROM read_csv('{odd}'))")
    assert result.exit_code == 2
    assert result.stderr.startswith("catalog-lake: error: --where")
    assert "Traceback" not in result.stderr


# --- 2. a field's identity is its path in the JSON -------------------------------------


@pytest.mark.parametrize("count", [1, 100], ids=["one item", "a frame built by pandas"])
@pytest.mark.parametrize("first", [False, True], ids=["object first", "dotted key first"])
def test_a_top_level_dotted_key_never_overrides_the_nested_price(catalog, count, first):
    items = []
    for number in range(count):
        item = make_item(client_item_id=f"SKU-{number}")
        item = (
            {"pricing_info.mrp": "1.00", **item} if first else {**item, "pricing_info.mrp": "1.00"}
        )
        items.append(item)
    response = catalog.push({"items": items})
    assert response["catalog_push_success_product_count"] == str(count)
    stored = catalog.items().iloc[0]
    assert str(stored["mrp"]) == "310.00"
    # Kept losslessly, under its own name, in either order.
    assert json.loads(stored["extra_fields"]) == {"pricing_info.mrp": "1.00"}
    assert catalog.records()["mrp"].tolist() == [310.0] * count


def test_a_dotted_attribute_key_never_overrides_the_brand(catalog):
    item = make_item()
    item["attributes.brand"] = "Counterfeit"
    catalog.push({"items": [item]})
    stored = catalog.items().iloc[0]
    assert dict(stored["attributes"])["brand"] == "Aashirvaad"
    assert json.loads(stored["extra_fields"]) == {"attributes.brand": "Counterfeit"}
    assert catalog.records()["brand"].tolist() == ["Aashirvaad"]


def test_dotted_keys_alone_do_not_satisfy_the_required_prices(catalog):
    item = make_item()
    del item["pricing_info"]
    item["pricing_info.mrp"], item["pricing_info.sale_price"] = "310.00", "289.00"
    response = catalog.push({"items": [item]})
    (failed,) = response["catalog_push_failed_items"]
    assert {(e["field"], e["code"]) for e in failed["errors"]} == {
        ("pricing_info.mrp", "missing_required_field"),
        ("pricing_info.sale_price", "missing_required_field"),
    }


def test_a_nested_unknown_field_and_its_dotted_spelling_are_two_fields(catalog):
    item = make_item()
    item["pricing_info"]["currency"] = "INR"
    item["pricing_info.currency"] = "USD"
    item["\x00pricing_info.currency"] = "EUR"  # the marker itself cannot be spoofed
    catalog.push({"items": [item]})
    assert json.loads(catalog.items().iloc[0]["extra_fields"]) == {
        "pricing_info": {"currency": "INR"},
        "pricing_info.currency": "USD",
        "\x00pricing_info.currency": "EUR",
    }


def test_a_nan_inside_a_dotted_key_is_reported_at_its_own_path(catalog):
    text = json.dumps({"items": [make_item()]})[:-3] + ', "pricing_info.mrp": NaN}]}'
    response = catalog.push(text)
    (warned,) = response["catalog_push_warning_items"]
    assert [(w["field"], w["code"]) for w in warned["warnings"]] == [
        ("pricing_info.mrp", "invalid_number")
    ]
    assert str(catalog.items().iloc[0]["mrp"]) == "310.00"


# --- 4. a number of more than 4,300 digits ------------------------------------------------


def test_a_huge_number_costs_its_item_only(catalog):
    items = [make_item(client_item_id=f"SKU-{n}") for n in range(4)]
    text = json.dumps({"items": items})
    text = text.replace('"mrp": "310.00"', f'"mrp": {HUGE}', 1)  # SKU-0: a price
    text = text.replace('"qty": "120"', f'"qty": -{HUGE}', 2)  # SKU-0 and SKU-1: a count
    text = text.replace('"client_item_id": "SKU-2"', f'"client_item_id": "SKU-2", "n": [{HUGE}]')
    response = catalog.push(text)
    assert response["catalog_push_success_product_count"] == "3"
    (failed,) = response["catalog_push_failed_items"]
    assert failed["client_item_id"] == "SKU-0"
    assert ("pricing_info.mrp", "invalid_price") in {
        (e["field"], e["code"]) for e in failed["errors"]
    }
    warned = {w["client_item_id"]: w["warnings"] for w in response["catalog_push_warning_items"]}
    (dropped,) = warned["SKU-2"]
    assert (dropped["field"], dropped["code"]) == ("n[0]", "invalid_number")
    assert "a number of 5,000 digits" in dropped["message"]
    assert len(dropped["value"]) <= 201  # the value a refusal carries is cut
    raw = catalog.raw()
    assert HUGE in raw[raw["client_item_id"] == "SKU-2"]["item_json"].iloc[0]  # kept exactly


def test_an_ingest_goes_on_past_a_file_with_a_huge_number(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    (feeds / "a.jsonl").write_text(
        json.dumps(make_item(client_item_id="A"))[:-1] + f', "n": {HUGE}}}\n'
    )
    (feeds / "b.json").write_text(json.dumps({"items": [make_item(client_item_id="B")]}))
    summary = ingest(catalog, feeds)
    assert summary["files"]["failed"] == []
    assert sorted(catalog.items()["client_item_id"]) == ["A", "B"]


def test_a_callers_huge_int_is_one_push_error_that_names_where(catalog):
    with pytest.raises(PushError) as refused:
        catalog.push({"items": [make_item(notes=[1, {"x": 10**5_000}])]})
    assert str(refused.value) == (
        "push refused (invalid_payload): items[0].notes[1].x: an integer of more than 4,300 "
        "digits cannot be written as JSON here; send it as text"
    )


# --- 5. no traceback from --as-of ------------------------------------------------------------


@pytest.mark.parametrize("as_of", ["²", "NaT", "nan", "-1", "٣", "1e3", "2026-11-25T25:00:00"])
def test_as_of_values_that_are_no_time_are_a_usage_error(run, as_of):
    run("push", str(FEEDS / "food.json"))
    result = run("records", "--as-of", as_of)
    assert result.exit_code == 2
    assert result.stderr == (
        "catalog-lake: error: --as-of takes a version number, a date (2026-11-25) or a "
        f"date-time (2026-11-25T18:00:00Z); got {as_of!r}\n"
    )


# --- 6. check on a lake whose tables a killed first ingest just created -------------------


def test_check_right_after_the_tables_are_created_is_ok(tmp_path):
    catalog = Catalog(tmp_path / "lake")
    catalog.lake.ensure()  # what a kill right after the first ingest's ensure() leaves
    report = check(catalog)
    assert (report["ok"], report["items"], report["violations"]) == (True, 0, [])


# --- 8. a lake written by a newer layout ----------------------------------------------------


def test_a_lake_of_a_newer_layout_is_refused_before_anything_is_written(catalog, tmp_path):
    catalog.push({"items": [make_item(client_item_id="A")]})
    DeltaTable(catalog.lake.path("items")).alter.add_columns(
        [Field.from_arrow(pa.field("future_column", pa.string()))]
    )
    versions = {n: catalog.lake.version(n) for n in ("raw", "items", "records", "pushes")}
    fresh = Catalog(catalog.lake.uri)
    with pytest.raises(PushError) as refused:
        fresh.push({"items": [make_item(client_item_id="B")]})
    assert "written by a newer catalog-lake (columns this version does not know: " in str(
        refused.value
    )
    assert "future_column" in str(refused.value) and "pip install -U catalog-lake" in str(
        refused.value
    )
    assert {n: fresh.lake.version(n) for n in versions} == versions  # not even raw
    assert fresh.repair() == []  # nothing was left for repair to finish
    with pytest.raises(LakeError, match="newer catalog-lake"):
        ingest(fresh, FEEDS)
    assert sorted(fresh.items()["client_item_id"]) == ["A"]  # reads still work


def test_a_table_a_newer_version_retyped_is_refused_too(catalog):
    from deltalake import write_deltalake

    from catalog_lake.schemas import TABLES

    ingest(catalog, FEEDS)
    files = TABLES["files"]
    retyped = pa.schema([f if f.name != "size" else pa.field("size", pa.string()) for f in files])
    write_deltalake(
        catalog.lake.path("files"), retyped.empty_table(), mode="overwrite", schema_mode="overwrite"
    )
    with pytest.raises(PushError, match=r"columns of another type: size\); nothing was written"):
        Catalog(catalog.lake.uri).push({"items": [make_item(client_item_id="NEW")]})
    assert "NEW" not in set(Catalog(catalog.lake.uri).raw()["client_item_id"])


# --- 9. a read-only lake ---------------------------------------------------------------------


@pytest.fixture
def read_only_lake(tmp_path):
    """A lake with data on a read-only file system (a real mount where the machine allows)."""
    folder = tmp_path / "mount"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(folder)], capture_output=True
    )
    lake = folder / "lake"
    if mounted.returncode != 0 and os.geteuid() == 0:
        pytest.skip("root without mount: no way to make a folder read-only here")
    ingest(Catalog(lake), FEEDS)
    if mounted.returncode == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
    else:
        for path in [lake, *lake.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
    yield lake
    if mounted.returncode == 0:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.mark.parametrize(
    "command",
    [
        ["push", str(FEEDS / "food.json")],
        ["ingest", str(FEEDS), "--force"],
        ["metrics", "{metrics}"],
        ["backfill"],
        ["maintain"],
    ],
    ids=["push", "ingest --force", "metrics", "backfill", "maintain"],
)
def test_a_read_only_lake_is_refused_in_one_line_before_anything_is_written(
    read_only_lake, tmp_path, command
):
    metrics = tmp_path / "m.csv"
    metrics.write_text("client_item_id,likes\nGROC-DAL-1KG,4\n")
    args = [a.replace("{metrics}", str(metrics)) for a in command]
    result = cli(*args, "--lake", str(read_only_lake), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr  # no panic line, no traceback
    assert "is read-only here" in result.stderr and "nothing was written" in result.stderr
    assert "stored its pushes" not in result.stderr
    shown = cli("records", "--lake", str(read_only_lake), "--json", cwd=tmp_path)
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 14  # JSON Lines


# --- 11. push of a FIFO ----------------------------------------------------------------------


def test_push_of_a_fifo_or_a_folder_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "feed.json"
    os.mkfifo(fifo)
    (tmp_path / "folder.json").mkdir()
    result = cli("push", str(fifo), "folder.json", "--lake", "lake", cwd=tmp_path, timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"catalog-lake: error: {fifo}: push refused (invalid_payload): not a regular file "
        "(a FIFO, socket or device); push reads regular files (or - for stdin)",
        "catalog-lake: error: folder.json: push refused (invalid_payload): a folder; push "
        "reads regular files (or - for stdin)",
    ]
    assert not (tmp_path / "lake").exists()


# --- 12. metrics killed between its two commits ---------------------------------------------


class RecordsFail(Lake):
    """A real lake whose records commit fails, as if metrics were killed between its commits."""

    def update_matched(self, name, data, columns, metadata=None):
        if name == "records":
            raise OSError("simulated kill before committing records")
        return super().update_matched(name, data, columns, metadata)


def test_metrics_killed_between_its_commits_is_seen_by_check_and_finished_by_repair(
    catalog, tmp_path
):
    ingest(catalog, FEEDS)
    metrics = tmp_path / "m.csv"
    metrics.write_text("client_item_id,likes,sales\nGROC-DAL-1KG,40,7\n")
    crashing = Catalog(catalog.lake.uri, clock=catalog.clock)
    crashing.lake = RecordsFail(catalog.lake.uri)
    with pytest.raises(LakeError, match="items were updated, records were not"):
        apply_metrics(crashing, metrics)
    report = check(Catalog(catalog.lake.uri), derive=False)
    (lagging,) = [v for v in report["violations"] if "likes or sales" in v["rule"]]
    assert lagging["examples"] == ["GROC-DAL-1KG"]
    repaired = Catalog(catalog.lake.uri).repair()
    assert repaired == [
        {"repaired": "metrics", "records_resynced": 1, "examples": ["GROC-DAL-1KG"]}
    ]
    records = Catalog(catalog.lake.uri).records().set_index("client_item_id")
    assert (records.at["GROC-DAL-1KG", "likes"], records.at["GROC-DAL-1KG", "sales"]) == (40, 7)
    assert check(Catalog(catalog.lake.uri))["ok"]
    assert Catalog(catalog.lake.uri).repair() == []


# --- 14. memory follows the group, not the file ------------------------------------------------


@pytest.mark.parametrize("name", ["big.jsonl", "big.json"])
def test_a_large_file_is_parsed_a_group_at_a_time(catalog, tmp_path, name):
    """Batches are written while later ones are still unparsed: the file is never held parsed.

    The peaks themselves are measured by ``bench/memory.py`` (issue 26's note).
    """
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    items = [make_item(client_item_id=f"SKU-{n}") for n in range(50)]
    text = (
        "\n".join(json.dumps(i) for i in items)
        if name.endswith(".jsonl")
        else json.dumps({"items": items})
    )
    (feeds / name).write_text(text)
    events = []
    summary = ingest(
        catalog,
        feeds,
        batch_size=10,
        group_items=10,
        progress=lambda event, **info: events.append((event, info.get("items"))),
    )
    assert summary["totals"]["received"] == 50
    # While one group is written, the next is checked and the one after it parsed
    # (issue 29, ``feeds._pipeline``), never more.
    parsed = written = 0
    for event, count in [e for e in events if e[0] in ("parsed", "batch")]:
        if event == "parsed":
            parsed = count
        else:
            written += count
        assert parsed - written <= 3 * 10
    assert parsed == written == 50
    assert [e for e in events if e[0] == "file"] == [("file", 50)]


def test_a_broken_line_late_in_a_file_still_stores_nothing_of_it(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    lines = [json.dumps(make_item(client_item_id=f"SKU-{n}")) for n in range(30)]
    lines[27] = lines[27][:-5]  # cut short
    (feeds / "late.jsonl").write_text("\n".join(lines))
    summary = ingest(catalog, feeds, batch_size=10, group_items=10)
    (failed,) = summary["files"]["failed"]
    assert failed["error"].startswith("push refused (invalid_json): line 28: payload is not valid")
    assert not catalog.lake.exists() or catalog.items().empty


# --- low: identifiers, prices above mrp, keys, digests, metrics reports, symlinks ----------


@pytest.mark.parametrize(
    "character",
    ["\u00ad", "\u061c", "\u180e", "\U000e0041", "\ue000", "\u2029", "\u200b"],
    ids=["soft hyphen", "arabic letter mark", "mongolian vowel separator", "tag letter",
         "private use", "paragraph separator", "zero width space"],
)  # fmt: skip
def test_invisible_format_characters_are_refused_in_client_item_id(catalog, character):
    response = catalog.push({"items": [make_item(client_item_id=f"SKU{character}1")]})
    (failed,) = response["catalog_push_failed_items"]
    (error,) = failed["errors"]
    assert error["code"] == "invalid_identifier"
    assert f"U+{ord(character):04X}" in error["message"]


@pytest.mark.parametrize(
    "field, value",
    [("sale_price", "400.00"), ("sale_price", 311), ("discounted_price", "310.01")],
)
def test_a_price_above_mrp_is_stored_with_a_warning_and_refused_when_strict(catalog, field, value):
    response = catalog.push({"items": [make_item(**{f"pricing_info__{field}": value})]})
    (warned,) = response["catalog_push_warning_items"]
    (warning,) = warned["warnings"]
    assert (warning["field"], warning["code"], warning["action"], warning["value"]) == (
        f"pricing_info.{field}",
        "price_above_mrp",
        "kept",
        value,
    )
    assert "is above pricing_info.mrp '310.00'" in warning["message"]
    strict = catalog.push(
        {"items": [make_item(client_item_id="S", **{f"pricing_info__{field}": value})]},
        strict=True,
    )
    assert strict["catalog_push_failed_items"][0]["errors"][0]["code"] == "price_above_mrp"


def test_a_price_equal_to_mrp_is_no_warning(catalog):
    response = catalog.push({"items": [make_item(pricing_info__sale_price="310.00")]})
    assert response["catalog_push_warning_items"] == []


def test_a_strict_retry_under_a_lenient_key_is_refused_not_answered_leniently(catalog):
    payload = {"items": [make_item(pricing_info__sale_price="400.00")]}
    catalog.push(payload, idempotency_key="delivery-7")
    with pytest.raises(PushError, match="another strict setting"):
        catalog.push(payload, idempotency_key="delivery-7", strict=True)
    assert (
        catalog.push(payload, idempotency_key="delivery-7")["catalog_push_success_product_count"]
        == "1"
    )


def test_a_strict_ingest_after_a_lenient_one_judges_the_files_again(catalog):
    ingest(catalog, FEEDS)
    strict = ingest(catalog, FEEDS, force=True, strict=True)
    assert strict["files"]["failed"] == []
    assert strict["totals"]["already_stored"] == 0


def test_nan_and_null_are_different_content_under_one_key(catalog):
    catalog.push({"items": [make_item(notes=float("nan"))]}, idempotency_key="k")
    with pytest.raises(PushError, match="idempotency_conflict"):
        catalog.push({"items": [make_item(notes=None)]}, idempotency_key="k")
    # The same NaN sent as JSON text is the same content.
    text = json.dumps({"items": [make_item(notes=float("nan"))]})
    assert catalog.push(text, idempotency_key="k")["catalog_push_success_product_count"] == "1"


def test_metrics_reports_speak_plainly_and_stay_small(catalog, tmp_path):
    ingest(catalog, FEEDS)
    metrics = tmp_path / "m.csv"
    rows = ["client_item_id,likes,sales", "GROC-DAL-1KG,4,", "BLANK,  ,1", "BIG,1e30,1"]
    rows += [f"ghost-{n},1,1" for n in range(5_000)]
    metrics.write_text("\n".join(rows) + "\n")
    report = apply_metrics(catalog, metrics)
    assert report["updated"] == 1
    assert (report["unknown_count"], len(report["unknown_ids"])) == (5_001, 100)
    assert report["invalid_count"] == 1
    (big,) = report["invalid_rows"]
    assert big == {"row": 4, "errors": ["likes: '1e30' is more than 1,000,000,000,000"]}
    assert "coerce_dtype" not in json.dumps(report) and "''" not in json.dumps(report)


def test_a_dangling_symlink_is_skipped_as_what_it_is(tmp_path):
    (tmp_path / "gone.json").symlink_to(tmp_path / "nowhere.json")
    (tmp_path / "ok.json").write_text(json.dumps({"items": [make_item()]}))
    found, refused, passed_over = discover(tmp_path)
    assert [f.path for f in found] == ["ok.json"] and refused == []
    assert passed_over == {"gone.json": SKIP_DANGLING}


@pytest.mark.parametrize("depth", [1_200, 950], ids=["past both decoders", "near their limits"])
def test_an_item_nested_too_deeply_fails_its_file_and_the_run_goes_on(catalog, tmp_path, depth):
    """Past msgspec's limit the file is refused whole. Near the limits (both count the
    caller's stack, so where they fall varies by a few levels), msgspec may pass what our
    decoder refuses: the batches before the item are then stored, and the file says which
    batch failed. Either way the run goes on to the next file."""
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    lines = [json.dumps(make_item(client_item_id=f"SKU-{n}")) for n in range(30)]
    lines[25] = lines[25][:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
    (feeds / "a.jsonl").write_text("\n".join(lines))
    (feeds / "b.json").write_text(json.dumps({"items": [make_item(client_item_id="B")]}))
    summary = ingest(catalog, feeds, batch_size=10, group_items=10)
    (failed,) = summary["files"]["failed"]
    assert failed["path"] == "a.jsonl"
    assert "nested too deeply" in failed["error"] or "cannot be represented" in failed["error"]
    stored = summary["totals"]["received"] - 1
    assert stored in ((0,) if depth > 1_000 else (0, 20))
    assert failed["error"].startswith("batch 3 of 3: ") == (stored == 20)
    assert "B" in set(catalog.items()["client_item_id"])
