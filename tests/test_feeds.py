"""Ingest runs: feed files found, batched, skipped when unchanged, failed alone."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from catalog_lake import RESPONSE_KEYS
from catalog_lake.feeds import ingest
from catalog_lake.refresh import Refresh
from catalog_lake.runs import runs
from catalog_lake.sources import SKIP_DANGLING, discover
from catalog_lake.terminal import IngestProgress
from tests.conftest import FEEDS_TOTALS, cli, make_item

FEEDS = Path(__file__).parents[1] / "data" / "feeds"


@pytest.fixture
def source(tmp_path) -> Path:
    folder = tmp_path / "feeds"
    shutil.copytree(FEEDS, folder)
    return folder


def jsonl(*items: dict) -> bytes:
    return b"\n".join(json.dumps(i).encode() for i in items) + b"\n"


def test_a_run_pushes_every_feed_and_sums_up_like_a_push_response(catalog, source):
    summary = ingest(catalog, source)

    assert list(summary)[:5] == list(RESPONSE_KEYS)
    assert summary["catalog_push_received_product_count"] == "16"
    assert summary["catalog_push_success_product_count"] == "14"
    assert summary["catalog_push_failed_product_count"] == "2"
    assert len(summary["items"]) == 14
    assert summary["totals"] == FEEDS_TOTALS
    assert summary["top_failure_codes"][0] == {"code": "invalid_price", "count": 2}
    assert summary["files"]["ingested"] == [
        "bad_items.json", "beauty.json", "electronics.json", "fashion.json", "food.json",
        "grocery.json", "seller_quirks.json",
    ]  # fmt: skip
    assert [b["file"] for b in summary["batches"]] == summary["files"]["ingested"]
    assert {f["file"] for f in summary["catalog_push_failed_items"]} == {"bad_items.json"}
    assert {w["file"] for w in summary["catalog_push_warning_items"]} == {
        "bad_items.json",
        "seller_quirks.json",
    }
    assert summary["top_warning_codes"][0] == {"code": "invalid_duration", "count": 4}
    assert summary["items_per_second"] > 0
    assert len(catalog.records()) == 14
    assert runs(catalog)["run_id"].tolist() == [summary["catalog_push_request_id"]]


def test_unchanged_files_are_skipped_next_time_changed_ones_are_not(catalog, source, clock):
    ingest(catalog, source)
    again = ingest(catalog, source)
    assert again["files"]["ingested"] == []
    assert len(again["files"]["skipped"]) == 7
    assert again["catalog_push_received_product_count"] == "0"

    (source / "beauty.json").write_text(
        json.dumps({"items": [make_item(client_item_id="BEAU-LIP-RED", name="Lipstick v2")]})
    )
    changed = ingest(catalog, source)
    assert changed["files"]["ingested"] == ["beauty.json"]
    assert changed["items"] == [{"BEAU-LIP-RED": "4"}]  # same id as before
    assert ingest(catalog, source, force=True)["files"]["ingested"][0] == "bad_items.json"


def test_json_lines_and_gzip_are_read(catalog, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(
        jsonl(make_item(client_item_id="a"), make_item(client_item_id="b"))
    )
    (folder / "b.ndjson.gz").write_bytes(gzip.compress(jsonl(make_item(client_item_id="c"))))
    (folder / "c.json.gz").write_bytes(
        gzip.compress(json.dumps({"items": [make_item(client_item_id="d")]}).encode())
    )
    (folder / "notes.txt").write_text("not a feed")
    summary = ingest(catalog, folder)
    assert summary["files"]["ingested"] == ["a.jsonl", "b.ndjson.gz", "c.json.gz"]
    assert [list(i)[0] for i in summary["items"]] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("name", ["repeats.json", "repeats.jsonl"])
def test_a_key_sent_twice_in_a_file_rejects_that_item_and_raw_keeps_both(catalog, tmp_path, name):
    folder = tmp_path / "in"
    folder.mkdir()
    good = json.dumps(make_item(client_item_id="once"))
    twice = json.dumps(make_item(client_item_id="twice"))
    twice = twice.replace('"attributes": {', '"attributes": {"brand": "First", ', 1)
    assert twice.count('"brand"') == 2
    if name.endswith(".jsonl"):
        (folder / name).write_text(good + "\n" + twice + "\n")
    else:
        (folder / name).write_text('{"items": [' + good + ", " + twice + "]}")

    summary = ingest(catalog, folder)

    assert summary["items"] == [{"once": "1"}]
    (failure,) = summary["catalog_push_failed_items"]
    assert failure["client_item_id"] == "twice"
    assert [(e["field"], e["code"]) for e in failure["errors"]] == [
        ("attributes.brand", "duplicate_key")
    ]
    raw = catalog.raw().set_index("client_item_id")["item_json"]
    assert raw["twice"].count('"brand"') == 2  # kept exactly as sent, for a replay
    assert raw["once"].count('"brand"') == 1


def test_files_are_split_into_batches_each_a_push(catalog, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    items = [make_item(client_item_id=f"k{i}") for i in range(5)]
    (folder / "big.jsonl").write_bytes(jsonl(*items))
    summary = ingest(catalog, folder, batch_size=2)
    assert [b["catalog_push_received_product_count"] for b in summary["batches"]] == ["2", "2", "1"]
    assert len(catalog.pushes()) == 3


@pytest.mark.parametrize(
    ("name", "content", "error"),
    [
        (
            "broken.json",
            b'{"items": [',
            "payload is not valid JSON: Expecting value at column 12",
        ),
        (
            "list.json",
            b"[1, 2]",
            "a .json feed must be a JSON object with an 'items' list, got a list",
        ),
        ("lines.jsonl", b'{"client_item_id": "x"}\n[1]\n', "line 2: an item must be a JSON object"),
        (  # one line number: the line's, and a column in it
            "badline.jsonl",
            b'{"a": 1}\n{oops\n',
            "line 2: payload is not valid JSON: Expecting property name enclosed in double "
            "quotes at column 2",
        ),
        ("zipped.json.gz", b"not gzip", "not a readable gzip file"),
    ],
)
def test_a_file_that_cannot_be_parsed_fails_alone(catalog, source, name, content, error):
    (source / name).write_bytes(content)
    summary = ingest(catalog, source)
    (failed,) = summary["files"]["failed"]
    assert (failed["path"], failed["status"]) == (name, "invalid")
    assert error in failed["error"]
    assert len(summary["files"]["ingested"]) == 7
    # an invalid file is not retried until its content changes
    assert name in ingest(catalog, source)["files"]["skipped"]


def test_paths_cannot_escape_the_source_folder(catalog, tmp_path, source):
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps({"items": [make_item(client_item_id="leak")]}))
    os.symlink(outside, source / "link.json")
    summary = ingest(catalog, source)
    assert {
        "path": "link.json",
        "status": "invalid",
        "error": "resolves outside the source folder",
    } in summary["files"]["failed"]
    assert "leak" not in catalog.records()["client_item_id"].tolist()
    found, _, _ = discover(source, "../*.json")
    assert found == []


def test_files_table_remembers_each_file(catalog, source):
    ingest(catalog, source)
    files = catalog.lake.read("files").to_pandas()
    assert sorted(files["path"]) == sorted(p.name for p in FEEDS.glob("*.json"))
    assert set(files["status"]) == {"ingested"}
    assert files["checksum"].str.len().eq(64).all()


def test_a_big_run_counts_every_item_but_lists_only_the_first(catalog, source):
    """Memory must not grow with the feed: past ``detail_items`` a run keeps counts only."""
    full = ingest(catalog, source, force=True)
    brief = ingest(catalog, source, force=True, detail_items=3)

    assert brief["totals"] == full["totals"] == FEEDS_TOTALS
    assert brief["catalog_push_success_product_count"] == "14"
    assert (full["detail_complete"], brief["detail_complete"]) == (True, False)
    assert len(brief["items"]) + len(brief["catalog_push_failed_items"]) <= 3
    assert brief["top_failure_codes"] == full["top_failure_codes"]
    listed = [b for b in brief["batches"] if "detail" not in b]
    assert sum(int(b["catalog_push_received_product_count"]) for b in listed) <= 3
    # the same files and batches: the idempotency keys answered from the pushes table,
    # which holds every full response
    stored = catalog.pushes().set_index("request_id")["response_json"].map(json.loads)
    assert [stored[b["catalog_push_request_id"]] for b in full["batches"]] == [
        {k: v for k, v in b.items() if k != "file"} for b in full["batches"]
    ]


# --- a file is skipped only when the lake holds what it says now (issue 41) -------------


def _price_feed(folder: Path, name: str, *prices: int) -> None:
    items = [
        make_item(client_item_id=f"{name[0]}-{n}", pricing_info__mrp=f"{p}.00",
                  pricing_info__sale_price=f"{p}.00")
        for n, p in enumerate(prices)
    ]  # fmt: skip
    (folder / name).write_text(json.dumps({"items": items}))


def _prices(catalog) -> dict[str, float]:
    records = catalog.records()
    return dict(zip(records["client_item_id"], records["price"], strict=True))


def test_a_file_reverted_to_older_bytes_is_ingested_again(catalog, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for price in (100, 200, 100):
        _price_feed(folder, "a.json", price)
        summary = ingest(catalog, folder)
        assert summary["files"]["ingested"] == ["a.json"], price
        assert _prices(catalog) == {"a-0": price}
    # The same bytes as the lake holds now: skipped, without reading the file.
    assert ingest(catalog, folder)["files"]["skipped"] == ["a.json"]


def test_a_file_restored_after_a_truncation_is_ingested_again(catalog, tmp_path, clock):
    folder = tmp_path / "in"
    folder.mkdir()
    _price_feed(folder, "all.json", *range(100, 200))
    ingest(catalog, folder)
    clock.now += timedelta(minutes=1)
    _price_feed(folder, "all.json", *range(100, 110))
    cut = ingest(catalog, folder, refresh=Refresh(allow_mass_delete=True))
    assert cut["refresh"]["deleted"] == 90 and len(catalog.records()) == 10

    clock.now += timedelta(minutes=1)
    _price_feed(folder, "all.json", *range(100, 200))
    restored = ingest(catalog, folder)
    assert restored["files"]["ingested"] == ["all.json"]
    assert len(catalog.records()) == 100


def test_a_file_put_back_after_a_refresh_deleted_its_items_is_ingested_again(
    catalog, source, clock
):
    ingest(catalog, source)
    clock.now += timedelta(minutes=1)  # a delete wins over pushes received before it
    (source / "fashion.json").rename(source.parent / "fashion.json")
    refreshed = ingest(catalog, source, refresh=Refresh())
    assert refreshed["refresh"]["status"] == "deleted" and len(catalog.records()) == 12

    clock.now += timedelta(minutes=1)
    (source.parent / "fashion.json").rename(source / "fashion.json")
    back = ingest(catalog, source)
    assert back["files"]["ingested"] == ["fashion.json"]
    assert back["catalog_push_success_product_count"] == "2"
    assert len(catalog.records()) == 14
    assert len(ingest(catalog, source)["files"]["skipped"]) == 7


def test_a_removed_file_put_back_without_a_refresh_is_still_skipped(catalog, source):
    """Nothing deleted its items, so the lake still holds what it says."""
    ingest(catalog, source)
    (source / "fashion.json").rename(source.parent / "fashion.json")
    ingest(catalog, source)
    (source.parent / "fashion.json").rename(source / "fashion.json")
    assert ingest(catalog, source)["files"]["ingested"] == []
    assert len(catalog.records()) == 14


def test_a_refresh_stopped_by_the_guard_marks_nothing_removed(catalog, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    _price_feed(folder, "a.json", 100)
    _price_feed(folder, "b.json", 200, 300)
    ingest(catalog, folder)
    (folder / "a.json").rename(tmp_path / "a.json")
    stopped = ingest(catalog, folder, refresh=Refresh())  # 1 of 2 in scope: over 20%
    assert stopped["refresh"]["status"] == "stopped"
    (tmp_path / "a.json").rename(folder / "a.json")
    assert ingest(catalog, folder)["files"]["ingested"] == []


def test_a_source_records_its_files_in_order_when_the_clock_stands_still(catalog, tmp_path):
    """The catalog fixture's clock never moves; the last row of a path still comes last."""
    folder = tmp_path / "in"
    folder.mkdir()
    for price in (1, 2, 1, 2):
        _price_feed(folder, "a.json", price)
        assert ingest(catalog, folder)["files"]["ingested"] == ["a.json"]
    # Four rows at four times (a table's rows come back in no set order, so times decide).
    assert len(set(catalog.lake.read("files")["seen_at"].to_pylist())) == 4


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


def test_ingest_of_a_mistyped_source_creates_nothing(run, tmp_path):
    result = run("ingest", "feeds-typo", "--lake", "fresh")
    assert result.exit_code == 1
    assert result.stderr == "catalog-lake: error: source 'feeds-typo' is not a file or folder\n"
    assert not (tmp_path / "fresh").exists()


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
