"""A new process finds stored ids from the lake's key snapshot plus the blocks changed since."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from catalog_lake import Catalog, check
from catalog_lake.feeds import ingest
from catalog_lake.keys import KEYS_FILE, KeySnapshot, load_snapshot, save_snapshot
from catalog_lake.lake import reads
from catalog_lake.maintain import maintain
from tests.conftest import Ticking, make_item

FEEDS = Path(__file__).parents[1] / "data" / "feeds"


@pytest.fixture
def ticking(clock):
    # Pushes one second apart, so a backfill from raw replays them in one order.
    return Ticking(clock)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    # Blocks of two ids: a handful of items spans several blocks, as a big lake does.
    monkeypatch.setattr("catalog_lake.settings.ID_BLOCK_SIZE", 2)


def _items(*ids: str, name: str = "v1") -> dict:
    return {"items": [make_item(client_item_id=i, name=f"{i} {name}") for i in ids]}


def _stored_keys(catalog: Catalog) -> list[tuple[str, int]]:
    items = catalog.items()
    return sorted(zip(items["client_item_id"], items["object_id"].astype(int), strict=True))


def _keys_of(table: pa.Table) -> list[tuple[str, int]]:
    ids = table["object_id"].to_pylist()
    return sorted(zip(table["client_item_id"].to_pylist(), ids, strict=True))


def _index_keys(catalog: Catalog) -> list[tuple[str, int]]:
    return _keys_of(catalog.keys.index().table)


def test_an_ingest_run_leaves_a_snapshot_of_every_stored_key(tmp_path, ticking):
    catalog = Catalog(tmp_path / "lake", clock=ticking)
    ingest(catalog, FEEDS)

    snapshot = load_snapshot(catalog.lake)
    assert snapshot is not None
    assert snapshot.version == catalog.lake.version("items")
    assert _keys_of(snapshot.table) == _stored_keys(catalog)
    assert snapshot.table["id_block"].to_pylist() == [
        i // 2 for i in snapshot.table["object_id"].to_pylist()
    ]


def test_a_new_process_keeps_ids_of_items_stored_before_and_after_the_snapshot(tmp_path, ticking):
    lake = tmp_path / "lake"
    first = Catalog(lake, clock=ticking)
    first.push(_items("a", "b", "c", "d", "e"))
    first.save_key_index()
    # Another writer, after the snapshot: an update in one block, new items in new blocks.
    other = Catalog(lake, clock=ticking)
    other.push(_items("b", "f", "g", name="v2"))

    fresh = Catalog(lake, clock=ticking)
    response = fresh.push(_items("a", "g", "h", name="v3"))

    assert response["items"] == [{"a": "1"}, {"g": "7"}, {"h": "8"}]
    assert _index_keys(fresh) == _stored_keys(fresh)
    assert fresh.records()["client_item_id"].is_unique
    assert check(fresh)["violations"] == []


def test_only_the_blocks_changed_since_the_snapshot_are_read(tmp_path, ticking):
    lake = tmp_path / "lake"
    catalog = Catalog(lake, clock=ticking)
    for n in range(5):
        catalog.push(_items(f"x{2 * n}", f"x{2 * n + 1}"))  # one block per push
    catalog.save_key_index()
    Catalog(lake, clock=ticking).push(_items("x0", name="v2"))  # block 0 rewritten

    snapshot = load_snapshot(catalog.lake)
    scan = reads.blocks_scan(catalog.lake, "items", ["client_item_id", "object_id"], snapshot.files)

    assert scan.touched == {0}
    assert scan.files_read == 1 and len(scan.files) >= 5
    assert sorted(scan.rows["client_item_id"].to_pylist()) == ["x0"]
    fresh = Catalog(lake, clock=ticking)
    assert _index_keys(fresh) == _stored_keys(fresh)


def test_after_a_compaction_every_block_is_read_again_and_ids_hold(tmp_path, ticking):
    lake = tmp_path / "lake"
    catalog = Catalog(lake, clock=ticking)
    for n in range(4):
        catalog.push(_items(f"k{n}"))
        catalog.push(_items(f"k{n}", name="again"))
    catalog.save_key_index()
    maintain(catalog, vacuum=False)

    fresh = Catalog(lake, clock=ticking)
    response = fresh.push(_items("k3", "new"))

    assert response["items"] == [{"k3": "4"}, {"new": "5"}]
    assert _index_keys(fresh) == _stored_keys(fresh)


def test_a_damaged_snapshot_is_ignored_with_a_warning(tmp_path, ticking, caplog):
    lake = tmp_path / "lake"
    catalog = Catalog(lake, clock=ticking)
    catalog.push(_items("a", "b", "c"))
    (lake / KEYS_FILE).write_bytes(b"not an Arrow file")

    fresh = Catalog(lake, clock=ticking)
    with caplog.at_level(logging.WARNING, logger="catalog_lake.lake"):
        response = fresh.push(_items("c", "d"))

    assert response["items"] == [{"c": "3"}, {"d": "4"}]
    assert "ignoring the key snapshot" in caplog.text


def test_an_arrow_file_of_other_columns_is_not_taken_for_a_snapshot(tmp_path, ticking, caplog):
    lake = tmp_path / "lake"
    Catalog(lake, clock=ticking).push(_items("a", "b"))
    other = pa.table({"sku": ["a"]}).replace_schema_metadata({"files": "{}", "version": "1"})
    with pa.OSFile(str(lake / KEYS_FILE), "wb") as sink, pa.ipc.new_file(sink, other.schema) as out:
        out.write_table(other)

    with caplog.at_level(logging.WARNING, logger="catalog_lake.lake"):
        response = Catalog(lake, clock=ticking).push(_items("b", "c"))

    assert response["items"] == [{"b": "2"}, {"c": "3"}]
    assert "ignoring the key snapshot" in caplog.text


def test_a_snapshot_from_another_lake_is_not_trusted(tmp_path, ticking):
    elsewhere = Catalog(tmp_path / "elsewhere", clock=ticking)
    elsewhere.push(_items("p", "q", "r", "s"))
    elsewhere.save_key_index()
    lake = tmp_path / "lake"
    Catalog(lake, clock=ticking).push(_items("s", "t"))
    (lake / KEYS_FILE).write_bytes((tmp_path / "elsewhere" / KEYS_FILE).read_bytes())

    fresh = Catalog(lake, clock=ticking)
    response = fresh.push(_items("t", "u"))

    # Its files are none of this lake's: every block it names is dropped.
    assert response["items"] == [{"t": "2"}, {"u": "3"}]
    assert _index_keys(fresh) == _stored_keys(fresh)


def test_a_cold_lookup_that_reads_many_files_saves_a_new_snapshot(tmp_path, ticking, monkeypatch):
    monkeypatch.setattr("catalog_lake.keys.KEYS_RESAVE_FILES", 2)
    lake = tmp_path / "lake"
    catalog = Catalog(lake, clock=ticking)
    for n in range(4):
        catalog.push(_items(f"y{2 * n}", f"y{2 * n + 1}"))
    assert load_snapshot(catalog.lake) is None

    Catalog(lake, clock=ticking).push(_items("y9"))

    snapshot = load_snapshot(catalog.lake)
    assert snapshot is not None
    assert sorted(snapshot.table["client_item_id"].to_pylist()) == [f"y{n}" for n in range(8)]


def test_check_reports_a_snapshot_that_disagrees_with_the_items_table(tmp_path, ticking):
    lake = tmp_path / "lake"
    catalog = Catalog(lake, clock=ticking)
    catalog.push(_items("a", "b"))
    catalog.save_key_index()
    assert check(catalog)["violations"] == []
    snapshot = load_snapshot(catalog.lake)
    wrong = snapshot.table.set_column(
        1, "object_id", pa.array([9, 10], pa.int64()).cast(snapshot.table.schema.field(1).type)
    )
    save_snapshot(catalog.lake, KeySnapshot(snapshot.version, snapshot.files, wrong))

    (found,) = check(catalog)["violations"]

    assert found["invariant"] == 2 and found["examples"] == ["a", "b"]
    assert "_catalog_lake.keys.arrow" in found["rule"]


@pytest.mark.parametrize(
    ("sent", "outcome"),
    [
        ("A\nB", "invalid_identifier"),
        ("A\tB", "invalid_identifier"),
        ("A\u0000B", "invalid_identifier"),
        ("A\u200bB", "invalid_identifier"),
        ("A\u00adB", "invalid_identifier"),  # invisible where a line does not break (issue 26)
        ("  A  B  ", "A  B"),
        ("A B", "A B"),
        ("AB", "AB"),
        ("A&amp;B", "A&amp;B"),
    ],
    ids=["line break", "tab", "nul", "zero-width space", "soft hyphen", "padded with two inner spaces",
         "one inner space", "plain", "entity not unescaped"],
)  # fmt: skip
def test_ids_that_cleaning_would_merge_stay_apart(catalog, sent, outcome):
    response = catalog.push({"items": [make_item(client_item_id=sent)]})
    if outcome == "invalid_identifier":
        (failed,) = response["catalog_push_failed_items"]
        assert [e["code"] for e in failed["errors"]] == ["invalid_identifier"]
        assert "U+" in failed["errors"][0]["message"]
    else:
        assert response["items"] == [{outcome: "1"}]


def test_ids_differing_only_in_inner_whitespace_are_two_items(catalog):
    response = catalog.push(
        {"items": [make_item(client_item_id="A  B"), make_item(client_item_id="A B")]}
    )
    assert response["items"] == [{"A  B": "1"}, {"A B": "2"}]
