"""What a user sees: every failure in one line, skipped files explained, memory bounded
on hostile files, the same file read alike by push and ingest, tables any standard reader
filters, and a terminal that tells a newcomer what happened.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tracemalloc
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from catalog_lake import Catalog, LakeError, PushError, check, settings
from catalog_lake.backfill import backfill
from catalog_lake.errors import one_line
from catalog_lake.feeds import ingest
from catalog_lake.maintain import maintain
from catalog_lake.metrics import apply_metrics, load_metrics
from catalog_lake.schemas import RECORDS
from catalog_lake.sources import read_push
from tests.conftest import make_item

FEEDS = Path(__file__).parents[1] / "data" / "feeds"


# --- 2. a lake that does not exist, or a file where the lake should be ----------

NO_LAKE = (
    "catalog-lake: error: no lake at missing; push or ingest a feed to create one, "
    "or point --lake at an existing lake\n"
)
READERS = [
    ["records"],
    ["rejects"],
    ["history"],
    ["history", "--versions"],
    ["check"],
    ["check", "--fast"],
    ["backfill", "--dry-run"],
    ["backfill"],
    ["repair"],
    ["maintain"],
    ["metrics", "m.csv"],
]


@pytest.mark.parametrize("command", READERS, ids=[" ".join(c) for c in READERS])
def test_a_lake_that_does_not_exist_is_one_line_and_is_not_created(run, tmp_path, command):
    (tmp_path / "m.csv").write_text("client_item_id,likes\nA,1\n")
    result = run(*command, "--lake", "missing")
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", NO_LAKE)
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize(
    "command",
    [["records"], ["push", "feed.json"], ["ingest", "feeds"], ["repair"], ["maintain"], ["check"]],
    ids=["records", "push", "ingest", "repair", "maintain", "check"],
)
def test_a_lake_path_that_is_a_file_is_one_line(run, tmp_path, command):
    (tmp_path / "lake.txt").write_text("not a lake")
    (tmp_path / "feeds").mkdir()
    (tmp_path / "feed.json").write_text(json.dumps({"items": [make_item()]}))
    result = run(*command, "--lake", "lake.txt")
    assert result.exit_code == 1
    assert result.stderr == "catalog-lake: error: lake.txt is a file, not a lake folder\n"


def test_a_folder_without_a_lake_is_refused_and_left_as_it_was(run, tmp_path):
    (tmp_path / "empty").mkdir()
    result = run("repair", "--lake", "empty")
    assert result.stderr == (
        "catalog-lake: error: no lake at empty (the folder holds no catalog-lake tables); "
        "push or ingest a feed to create one, or point --lake at an existing lake\n"
    )
    assert list((tmp_path / "empty").iterdir()) == []


# --- 2. a full disk while a run is recorded -------------------------------------


def test_a_full_disk_while_recording_a_run_is_one_line_and_a_rerun_finishes(
    run, tmp_path, monkeypatch
):
    from catalog_lake.lake import Lake

    feeds = tmp_path / "feeds"
    feeds.mkdir()
    (feeds / "a.json").write_text(json.dumps({"items": [make_item(client_item_id="A")]}))
    real_append = Lake.append

    def full(self, name, data, metadata=None, fence=None):
        if name == "files":
            raise OSError(28, "No space left on device")
        return real_append(self, name, data, metadata, fence)

    monkeypatch.setattr(Lake, "append", full)
    result = run("ingest", "feeds")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        "catalog-lake: error: the run's 1 push(es) are in the lake, but it could not record "
        "the files it read: [Errno 28] No space left on device; run the same command again "
        "once the lake can be written"
    )

    monkeypatch.setattr(Lake, "append", real_append)  # space freed
    again = run("ingest", "feeds", "--json")
    summary = json.loads(again.stdout)
    assert again.exit_code == 0
    assert summary["totals"]["already_stored"] == 1
    assert len(Catalog("lake").pushes()) == 1
    assert check(Catalog("lake"))["ok"]


# --- 2. skipped files are explained -------------------------------------------


def test_skipped_files_say_why(run, tmp_path):
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    (feeds / "good.json").write_text(json.dumps({"items": [make_item()]}))
    (feeds / "bad.json").write_text('{"items": [')
    (feeds / "folder.json").mkdir()
    os.mkfifo(feeds / "pipe.jsonl")
    first = run("ingest", "feeds")
    assert first.exit_code == 1
    assert first.stderr.splitlines()[0] == (
        "2 file(s) to ingest, 2 skipped: 1 a folder, not a file; "
        "1 not a regular file (a FIFO, socket or device)"
    )

    again = run("ingest", "feeds")
    assert again.stderr.splitlines()[0] == (
        "0 file(s) to ingest, 4 skipped: 1 failed before and unchanged (fix it, or use --force); "
        "1 ingested before and unchanged; 1 a folder, not a file; "
        "1 not a regular file (a FIFO, socket or device)"
    )
    assert "4 skipped: 1 failed before and unchanged" in again.stdout
    # The broken file is still broken: the run says so and fails (schedules stay red).
    assert "1 file(s) still failing, unchanged since they failed" in again.stdout
    assert again.exit_code == 1


# --- 2. messages speak the project's language ----------------------------------


def test_metrics_rows_are_explained_without_pandera_names(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("client_item_id,likes,sales\nA,-1,2\n,3,4\nB,1.5,x\n")
    _, invalid = load_metrics(path)
    assert invalid == [
        {"row": 2, "errors": ["likes: is negative (-1)"]},
        {"row": 3, "errors": ["client_item_id: is missing"]},
        {
            "row": 4,
            "errors": ["likes: not a whole number (1.5)", "sales: not a whole number ('x')"],
        },
    ]


# --- 3. bounded memory on hostile files --------------------------------------------


def test_a_gzip_bomb_is_refused_while_it_is_decompressed(catalog, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "MAX_PAYLOAD_BYTES", 1024 * 1024)
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    with gzip.open(feeds / "bomb.json.gz", "wb", compresslevel=9) as handle:
        chunk = b" " * (1024 * 1024)
        for _ in range(64):  # 64 MiB of output from about 64 KB of file
            handle.write(chunk)

    tracemalloc.start()
    summary = ingest(catalog, feeds)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    (failed,) = summary["files"]["failed"]
    assert failed["error"] == (
        "push refused (payload_too_large): the feed decompresses to more than 1,048,576 bytes "
        "of JSON; split it into smaller files"
    )
    assert peak < 8 * 1024 * 1024  # never the 64 MiB


def test_a_huge_value_is_not_stored_twice(catalog, tmp_path):
    value = os.urandom(1_500_000).hex()  # 3 MB of text that does not compress away
    response = catalog.push({"items": [make_item(client_item_id="HUGE", description=value)]})
    assert response["catalog_push_failed_items"][0]["errors"][0]["code"] == "item_too_large"

    files = list(Path(catalog.lake.path("raw")).rglob("*.parquet"))
    stored = sum(f.stat().st_size for f in files)
    assert stored < 1.2 * len(value)  # once (compressed a little), not twice


# --- 4. the same file works everywhere ------------------------------------------


def items_of(name):
    return json.loads((FEEDS / name).read_text())["items"]


@pytest.mark.parametrize("form", ["json", "jsonl", "ndjson", "json.gz", "jsonl.gz"])
def test_push_reads_what_ingest_reads(run, tmp_path, form):
    items = items_of("grocery.json")
    text = (
        json.dumps({"items": items})
        if form.startswith("json") and not form.startswith("jsonl")
        else "\n".join(json.dumps(i) for i in items) + "\n"
    )
    data = gzip.compress(text.encode()) if form.endswith(".gz") else text.encode()
    (tmp_path / f"feed.{form}").write_bytes(data)
    result = run("push", f"feed.{form}")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["catalog_push_success_product_count"] == "2"


@pytest.mark.parametrize("form", ["object", "lines", "gzipped lines", "one item"])
def test_push_reads_standard_input(run, form):
    items = items_of("grocery.json")
    if form == "object":
        data = json.dumps({"items": items}).encode()
    elif form == "one item":
        data = json.dumps(items[0]).encode()
    else:
        data = ("\n".join(json.dumps(i) for i in items) + "\n").encode()
        data = gzip.compress(data) if form.startswith("gzipped") else data
    result = run("push", "-", stdin=data)
    assert result.exit_code == 0, result.stderr
    expected = "1" if form == "one item" else "2"
    assert json.loads(result.stdout)["catalog_push_received_product_count"] == expected


def test_read_push_sniffs_gzip_on_a_stream():
    items = items_of("food.json")
    stream = io.BufferedReader(io.BytesIO(gzip.compress(json.dumps({"items": items}).encode())))
    assert len(read_push("-", stream).item_json) == 2


def test_an_empty_item_list_gets_the_same_answer_from_push_and_ingest(run, tmp_path):
    (tmp_path / "feeds").mkdir()
    (tmp_path / "feeds" / "empty.json").write_text('{"items": []}')
    message = "push refused (invalid_payload): 'items' is empty; a push carries one or more items"

    pushed = run("push", "feeds/empty.json")
    ingested = run("ingest", "feeds", "--json")

    assert pushed.stderr == f"catalog-lake: error: feeds/empty.json: {message}\n"
    assert json.loads(ingested.stdout)["files"]["failed"] == [
        {"path": "empty.json", "status": "invalid", "error": message}
    ]


def test_an_empty_json_lines_file_is_an_empty_push_too(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    (feeds / "blank.jsonl").write_text("\n\n")
    (failed,) = ingest(catalog, feeds)["files"]["failed"]
    assert "'items' is empty" in failed["error"]


def test_an_idempotency_key_is_bound_to_content_not_spelling(catalog):
    item = make_item(client_item_id="K")
    reordered = dict(reversed(list(item.items())))
    reordered["pricing_info"] = dict(reversed(list(item["pricing_info"].items())))

    first = catalog.push({"items": [item]}, idempotency_key="k")
    again = catalog.push(json.dumps({"items": [reordered]}, indent=2), idempotency_key="k")

    assert again == first
    assert len(catalog.pushes()) == 1
    with pytest.raises(PushError, match="idempotency_conflict"):
        catalog.push({"items": [make_item(client_item_id="K", name="other")]}, idempotency_key="k")


# --- 5. tables every standard reader can filter -----------------------------------


def readable_by_pyarrow_and_pandas(lake_uri):
    for name in ("items", "records"):
        table = DeltaTable(f"{lake_uri}/{name}")
        dataset = table.to_pyarrow_dataset()
        found = dataset.to_table(filter=pc.field("client_item_id") == "GROC-DAL-1KG")
        assert found.num_rows == 1, name
        frame = table.to_pandas(filters=[("client_item_id", "=", "GROC-DAL-1KG")])
        assert len(frame) == 1, name
        assert "string_view" not in str(dataset.schema), name


def test_tables_stay_plain_strings_after_every_command(catalog, tmp_path):
    ingest(catalog, FEEDS)
    readable_by_pyarrow_and_pandas(catalog.lake.uri)
    metrics = tmp_path / "m.csv"
    metrics.write_text("client_item_id,likes,sales\nGROC-DAL-1KG,4,2\n")
    assert apply_metrics(catalog, metrics)["updated"] == 1
    readable_by_pyarrow_and_pandas(catalog.lake.uri)
    backfill(catalog)
    readable_by_pyarrow_and_pandas(catalog.lake.uri)
    maintain(catalog)
    readable_by_pyarrow_and_pandas(catalog.lake.uri)
    records = catalog.records()
    assert records.loc[records["client_item_id"] == "GROC-DAL-1KG", "likes"].tolist() == [4]


# --- 6. the terminal ---------------------------------------------------------


def test_records_shows_a_readable_default_set_and_star_shows_all(run):
    run("push", str(FEEDS / "grocery.json"))
    default = run("records")
    header = default.stdout.splitlines()[2]
    assert [c.strip() for c in header.strip("┃").split("┃")] == [
        "object_id",
        "client_item_id",
        "product_name",
        "price",
        "mrp",
        "on_sale",
        "inventory",
        "brand",
    ]
    every = run("records", "--columns", "*", "--json")
    assert len(json.loads(every.stdout.splitlines()[0])) == len(
        RECORDS.names
    )  # every column, the replay guard too


def test_rejects_json_writes_each_value_as_sent(run):
    run("push", str(FEEDS / "bad_items.json"))
    rows = [json.loads(line) for line in run("rejects", "--json").stdout.splitlines()]
    values = {e["field"]: e["value"] for row in rows for e in row["errors"]}
    assert values["pricing_info.mrp"] == "₹1,299"


def test_history_versions_json_writes_metrics_as_an_object(run):
    run("push", str(FEEDS / "food.json"))
    rows = [json.loads(line) for line in run("history", "--versions", "--json").stdout.splitlines()]
    assert all(isinstance(row["metrics"], dict) for row in rows)
    assert any(row["metrics"].get("num_added_rows") == 2 for row in rows)


def test_ctrl_c_says_how_to_resume_and_exits_130(run, monkeypatch):
    import catalog_lake.feeds as feeds

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(feeds, "ingest", interrupted)
    result = run("ingest", str(FEEDS))
    assert (result.exit_code, result.stderr) == (
        130,
        "interrupted: run the same command again to resume\n",
    )


def test_progress_lines_use_thousands_separators(run, tmp_path):
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    items = [make_item(client_item_id=f"P{i}") for i in range(1_200)]
    (feeds / "big.json").write_text(json.dumps({"items": items}))
    result = run("ingest", "feeds")
    assert "big.json: ingested, 1,200 items (" in result.stderr


# --- 7. small things a newcomer hit -----------------------------------------------


@pytest.mark.parametrize("command", [["push", "f.json"], ["check"]], ids=["push", "check"])
def test_push_and_check_accept_json(run, tmp_path, command):
    (tmp_path / "f.json").write_text(json.dumps({"items": [make_item()]}))
    run("push", "f.json")
    result = run(*command, "--json")
    assert result.exit_code == 0
    json.loads(result.stdout.split("\n}\n")[0] + "\n}")


def test_help_texts_have_no_stray_space_and_every_option_is_described(run, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    lake_help = " ".join(run("records", "--help").stdout.split())  # as one line of words
    assert "URI ." not in lake_help
    assert "Lake folder or URI (default: $CATALOG_LAKE_URI, else ./lake)." in lake_help
    assert "At most this many rejected items." in run("rejects", "--help").stdout


def test_package_metadata_uses_an_spdx_license():
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"


def test_catalog_on_a_file_is_refused_by_the_library_too(tmp_path):
    from catalog_lake import NoLakeError

    (tmp_path / "f").write_text("x")
    with pytest.raises(NoLakeError, match="is a file, not a lake folder"):
        Catalog(tmp_path / "f")


# --- 2. --as-of -----------------------------------------------------------------


def test_as_of_takes_a_version_a_date_or_a_date_time(run):
    run("push", str(FEEDS / "food.json"))
    run("push", str(FEEDS / "grocery.json"))
    by_version = run("records", "--json", "--columns", "client_item_id", "--as-of", "1")
    assert len(by_version.stdout.splitlines()) == 2
    # Times after both pushes, whatever the hour: a date is midnight UTC, so tomorrow's
    # is always ahead; a date-time in +05:30 is taken at its offset (an hour ahead).
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    by_date = run("records", "--json", "--columns", "client_item_id", "--as-of", tomorrow)
    assert len(by_date.stdout.splitlines()) == 4
    india = timezone(timedelta(hours=5, minutes=30))
    in_an_hour = (datetime.now(UTC) + timedelta(hours=1)).astimezone(india).isoformat()
    assert in_an_hour.endswith("+05:30")
    by_time = run("records", "--json", "--as-of", in_an_hour)
    assert len(by_time.stdout.splitlines()) == 4


@pytest.mark.parametrize(
    ("as_of", "message"),
    [
        ("2020-01-01", "the lake did not exist yet at 2020-01-01T00:00:00+00:00: its records "
                       "table was created at "),
        ("2020-01-01T10:00:00+05:30", "the lake did not exist yet at 2020-01-01T04:30:00+00:00"),
        ("9", "records has versions 0 to 1; there is no version 9 yet"),
        ("last tuesday", "--as-of takes a version number, a date (2026-11-25) or a date-time "
                         "(2026-11-25T18:00:00Z); got 'last tuesday'"),
    ],
    ids=["date before the lake", "date-time before the lake", "version not yet", "not a time"],
)  # fmt: skip
def test_as_of_says_clearly_what_the_lake_held_then(run, as_of, message):
    run("push", str(FEEDS / "food.json"))
    result = run("records", "--as-of", as_of)
    assert result.exit_code in (1, 2)
    assert result.stderr.startswith(f"catalog-lake: error: {message}")
    assert len(result.stderr.splitlines()) == 1


@pytest.fixture
def small_disk(tmp_path):
    """A real 3 MB tmpfs, where the machine lets the tests mount one (root, CAP_SYS_ADMIN)."""

    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=False)


def test_a_real_full_disk_stops_the_run_in_one_line_and_a_rerun_finishes(small_disk, tmp_path):

    feeds = tmp_path / "feeds"
    feeds.mkdir()
    for number in range(12):  # about 4 MB of feed, incompressible descriptions
        items = [
            make_item(client_item_id=f"F{number}-{i}", description=os.urandom(200).hex())
            for i in range(300)
        ]
        (feeds / f"f{number:02d}.json").write_text(json.dumps({"items": items}))
    lake = small_disk / "lake"

    with pytest.raises(LakeError) as caught:
        ingest(Catalog(lake), feeds)
    assert str(caught.value) == (
        f"the lake's disk is full ({lake}): the pushes that landed are kept; "
        "free some space and run the same command again"
    )

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    catalog = Catalog(lake)
    summary = ingest(catalog, feeds)
    assert summary["totals"]["received"] == 3_600  # no file was recorded: all are read again
    assert len(catalog.items()) == 3_600
    assert check(catalog, derive=False)["ok"]


# --- one line at the new edges (issue 42) -----------------------------------------------

TOO_BIG = "99999999999999999999999"


@pytest.mark.parametrize(
    "where",
    [
        f"object_id = {TOO_BIG}",
        f"object_id = -{TOO_BIG}",
        f"inventory > {TOO_BIG}",
        f"length(product_name) = {TOO_BIG}",
        f"object_id IN (1, {TOO_BIG})",
        f"inventory BETWEEN 0 AND {TOO_BIG}",
        f"NOT (likes < {TOO_BIG})",
        "sales >= 1e30",
    ],
)
def test_a_whole_number_past_64_bits_in_where_is_refused_in_one_line(run, where):
    run("push", str(Path(__file__).parents[1] / "data" / "feeds" / "grocery.json"))
    result = run("records", "--where", where)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"catalog-lake: error: --where {where!r} is refused: ")
    assert (
        "is out of range: a whole number here lies between -9,223,372,036,854,775,808 and "
        "9,223,372,036,854,775,807" in result.stderr
    )
    assert result.stderr.count("\n") == 1


def test_the_largest_64_bit_number_is_still_a_number(run):
    run("push", str(Path(__file__).parents[1] / "data" / "feeds" / "grocery.json"))
    result = run("records", "--where", "object_id < 9223372036854775807", "--json")
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"where": 5}, "where must be SQL text, not int"),
        ({"where": ["price > 1"]}, "where must be SQL text, not list"),
        ({"columns": "price"}, "columns must be a list of column names"),
        ({"columns": [1]}, "columns must be a list of column names"),
        ({"limit": "3"}, "limit must be a whole number of rows, 0 or more; got '3'"),
        ({"limit": -1}, "limit must be a whole number of rows, 0 or more; got -1"),
        ({"limit": True}, "limit must be a whole number of rows, 0 or more; got True"),
        ({"as_of": 1.5}, "as_of must be a version number or an ISO date or date-time, not 1.5"),
    ],
)
def test_query_records_refuses_arguments_of_the_wrong_type_as_a_usage_error(
    catalog, arguments, message
):
    from catalog_lake import CatalogLakeError, UsageError

    catalog.push({"items": [make_item()]})
    with pytest.raises(UsageError) as refused:
        catalog.query_records(**arguments)
    assert str(refused.value) == message
    assert isinstance(refused.value, CatalogLakeError)


@pytest.mark.parametrize("how", ["--from", "stdin"])
def test_a_list_of_ids_that_is_not_utf8_is_one_line(run, tmp_path, how):
    listed = tmp_path / "ids.txt"
    listed.write_bytes(b"FOOD-1\n\xff\xfe bad\n")
    if how == "--from":
        result = run("delete", "--from", str(listed))
        name = str(listed)
    else:
        result = run("delete", "-", stdin=listed.read_bytes())
        name = "standard input"
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        f"catalog-lake: error: {name}: not UTF-8 text (byte 0xff at offset 7); a list of ids "
        "is one UTF-8 id per line\n"
    )


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("", "the sync target is empty; name a folder or an s3:// prefix"),
        ("ftp://example/x", "sync target 'ftp://example/x': ftp:// is not a storage this can "
         "write (use a folder, or one of file://, s3://, gs://, abfs://, az://)"),
    ],
)  # fmt: skip
def test_a_sync_target_that_names_nowhere_is_a_usage_error(run, tmp_path, target, message):
    run("push", str(Path(__file__).parents[1] / "data" / "feeds" / "grocery.json"))
    result = run("sync", target)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"catalog-lake: error: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lake"]


def test_a_full_disk_is_one_line_on_the_terminal_without_a_native_panic(small_disk, tmp_path):
    """object_store panics on ENOSPC ("Already shut down") and Rust prints the panic, and
    with RUST_BACKTRACE a backtrace, to descriptor 2: the console script keeps it off the
    terminal and logs it at debug level."""
    import shutil

    feeds = tmp_path / "feeds"
    feeds.mkdir()
    for number in range(12):
        items = [
            make_item(client_item_id=f"F{number}-{i}", description=os.urandom(200).hex())
            for i in range(300)
        ]
        (feeds / f"f{number:02d}.json").write_text(json.dumps({"items": items}))
    lake = small_disk / "lake"
    command = [str(Path(sys.executable).with_name("catalog-lake")), "ingest", str(feeds),
               "--lake", str(lake)]  # fmt: skip
    env = {**os.environ, "RUST_BACKTRACE": "1"}
    env.pop("CATALOG_LAKE_LOG_LEVEL", None)
    ran = subprocess.run(command, capture_output=True, text=True, env=env)
    assert ran.returncode == 1
    assert ran.stderr.splitlines()[-1] == (
        f"catalog-lake: error: the lake's disk is full ({lake}): the pushes that landed are "
        "kept; free some space and run the same command again"
    )
    assert "panicked" not in ran.stderr and "backtrace" not in ran.stderr

    shutil.rmtree(lake)
    logged = subprocess.run(
        command, capture_output=True, text=True, env={**env, "CATALOG_LAKE_LOG_LEVEL": "debug"}
    )
    assert logged.returncode == 1
    if "panicked" in logged.stderr:  # where the panic happened this time, it is in the log
        assert "DEBUG catalog_lake.native: native libraries wrote:" in logged.stderr


def test_store_errors_become_one_plain_line():
    chained = "Generic S3 error\n   \x1b[31m↳\x1b[0m builder error\n   URL scheme is not allowed"
    assert one_line(chained) == (
        "Generic S3 error ↳ builder error URL scheme is not allowed; the object store's "
        "endpoint is plain http://, which needs AWS_ALLOW_HTTP=true in the environment "
        "(or --storage-option AWS_ALLOW_HTTP=true)"
    )
