"""Items and records live in id blocks; an update rewrites only the blocks it touches."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Field, write_deltalake

from catalog_lake import Catalog, PushError, check, settings
from catalog_lake.blocks import changed_rows, upserted
from catalog_lake.errors import LakeError
from catalog_lake.feeds import ingest
from catalog_lake.lake import tables as lake_module
from catalog_lake.schemas import COMPRESSION, ITEMS, PLAIN_COLUMNS, STATS_COLUMNS
from tests.conftest import cli, make_item

T0 = datetime(2026, 11, 1, tzinfo=UTC)
SCHEMA = pa.schema(
    [
        ("client_item_id", pa.string()),
        ("object_id", pa.int64()),
        ("likes", pa.int64()),
        ("name", pa.string()),
        ("updated_at", pa.timestamp("us", tz="UTC")),
    ]
)


def _rows(*rows) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, row, strict=True)) for row in rows], schema=SCHEMA
    )


def _by_key(table: pa.Table) -> dict[str, dict]:
    return {row["client_item_id"]: row for row in table.to_pylist()}


def test_a_newer_row_replaces_the_stored_one_but_keeps_its_id_and_metrics():
    stored = _rows(("a", 1, 7, "old", T0), ("b", 2, 3, "bee", T0))
    incoming = _rows(("a", 1, 0, "new", T0 + timedelta(hours=1)))  # one item, one service id

    combined, counts = upserted(stored, incoming)

    assert counts.pop("kept_ids").to_pylist() == []
    assert counts == {"inserted": 0, "updated": 1, "kept": 0}
    assert _by_key(combined)["a"] == {
        "client_item_id": "a",
        "object_id": 1,
        "likes": 7,
        "name": "new",
        "updated_at": T0 + timedelta(hours=1),
    }
    assert _by_key(combined)["b"]["name"] == "bee"
    assert combined.num_rows == 2


def test_an_older_row_never_rolls_the_stored_one_back():
    stored = _rows(("a", 1, 0, "newer", T0 + timedelta(hours=1)))
    combined, counts = upserted(stored, _rows(("a", 1, 0, "older", T0)))
    assert counts.pop("kept_ids").to_pylist() == [1]  # by service id
    assert counts == {"inserted": 0, "updated": 0, "kept": 1}
    assert combined.to_pylist() == stored.to_pylist()


def test_an_equally_new_row_replaces_so_a_replay_or_a_reprice_lands():
    stored = _rows(("a", 1, 0, "before", T0))
    combined, _ = upserted(stored, _rows(("a", 1, 0, "after", T0)))
    assert combined["name"].to_pylist() == ["after"]


def test_unknown_rows_are_added_and_an_empty_block_takes_them_all():
    combined, counts = upserted(SCHEMA.empty_table(), _rows(("a", 1, 0, "x", T0)))
    assert counts.pop("kept_ids").to_pylist() == []
    assert counts == {"inserted": 1, "updated": 0, "kept": 0}
    assert combined["client_item_id"].to_pylist() == ["a"]


def test_a_change_is_found_by_value_whatever_the_digest_says():
    """``changed_rows`` joins digests, then compares values where digests differ: a value
    that moves to the next column is a change, and so is an empty list for a null; a
    -0.0 for a 0.0 or a wider type is none."""
    old = pa.table({"k": [1, 2, 3, 4, 5], "a": ["x", None, "y", "z", "w"], "b": [None, "x", "y", "z", "w"],
                    "l": [["t"], ["t"], None, ["t"], ["t"]], "f": [0.0, 1.0, 1.0, 1.0, 1.0]})  # fmt: skip
    new = pa.table({"k": [5, 4, 3, 2, 1, 6], "a": ["w", "z", "y", "x", "x", "v"],
                    "b": ["w", "z", "y", None, None, "v"],
                    "l": [["t"], ["t"], [], ["t"], ["t"], []], "f": [1.0, 1.0, 1.0, 1.0, -0.0, 1.0]})  # fmt: skip
    changed = changed_rows(new, old, "k", ["a", "b", "l", "f"])
    assert dict(zip(new["k"].to_pylist(), changed.tolist(), strict=True)) == {
        5: False, 4: False, 3: True, 2: True, 1: False, 6: True}  # fmt: skip
    wider = old.set_column(4, "f", old["f"].cast(pa.float32()))
    assert not changed_rows(old, wider, "k", ["a", "b", "l", "f"]).any()


def test_a_block_that_many_pushes_update_stays_one_file(catalog, clock):
    for version in range(5):
        clock.now += timedelta(minutes=1)
        catalog.push(
            {"items": [make_item(client_item_id=f"k{n}", name=f"v{version}") for n in range(3)]}
        )

    for name in ("items", "records"):
        table = catalog.lake.delta(name)
        assert len(table.file_uris()) == 1, name
    assert set(catalog.items()["name"]) == {"v4"}
    assert check(catalog)["ok"]


def test_a_table_is_checkpointed_and_opened_afresh_after_many_commits(catalog, clock, monkeypatch):
    # A table object's commits slow down with every commit it has seen, so a
    # long-lived catalog must not keep one forever.
    monkeypatch.setattr(lake_module, "REOPEN_AFTER_COMMITS", 3)
    catalog.push({"items": [make_item(client_item_id="k", name="v0")]})
    first = catalog.lake.delta("pushes")
    for version in range(1, 6):
        clock.now += timedelta(minutes=1)
        catalog.push({"items": [make_item(client_item_id="k", name=f"v{version}")]})

    assert catalog.lake.delta("pushes") is not first
    marker = Path(catalog.lake.path("pushes")) / "_delta_log" / "_last_checkpoint"
    assert json.loads(marker.read_text())["version"] >= 3
    assert len(catalog.pushes()) == 6
    assert catalog.items()["name"].tolist() == ["v5"]
    assert check(catalog)["ok"]


def test_an_upsert_holding_one_key_twice_is_refused(catalog):
    catalog.push({"items": [make_item(client_item_id="a")]})
    rows = catalog.lake.read("records")
    with pytest.raises(LakeError, match="twice"):
        catalog.lake.upsert("records", pa.concat_tables([rows, rows]))


def test_a_lake_given_as_a_relative_folder_updates_in_place(tmp_path, clock, monkeypatch):
    monkeypatch.chdir(tmp_path)
    catalog = Catalog("lake", clock=clock)
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    clock.now += timedelta(minutes=1)
    catalog.push({"items": [make_item(client_item_id="a", name="Renamed")]})

    items = catalog.items().set_index("client_item_id")
    assert items.loc["a", "name"] == "Renamed"
    assert list(items["object_id"]) == [1, 2]
    assert check(catalog)["ok"]


def test_items_keep_statistics_only_for_the_columns_readers_filter_on(catalog):
    catalog.push({"items": [make_item()]})
    configuration = catalog.lake.delta("items").metadata().configuration
    assert configuration["delta.dataSkippingStatsColumns"] == ",".join(STATS_COLUMNS["items"])
    assert (
        "delta.dataSkippingStatsColumns"
        not in catalog.lake.delta("records").metadata().configuration
    )


def _column_chunks(catalog, name: str) -> dict:
    """Each top-level column's chunk metadata in every file the table holds now."""
    chunks: dict = {}
    for uri in catalog.lake.delta(name).file_uris():
        row_group = pq.ParquetFile(uri.removeprefix("file://")).metadata.row_group(0)
        for i in range(row_group.num_columns):
            chunk = row_group.column(i)
            chunks.setdefault(chunk.path_in_schema, []).append(chunk)
    return chunks


def test_distinct_valued_columns_are_written_without_a_dictionary(catalog, clock):
    catalog.push({"items": [make_item(client_item_id=f"c{n}", name=f"Item {n}") for n in range(5)]})
    clock.now += timedelta(minutes=1)
    catalog.push({"items": [make_item(client_item_id="c1", name="Renamed")]})  # a block rewrite

    for name in ("items", "records", "raw"):
        chunks = _column_chunks(catalog, name)
        assert set(PLAIN_COLUMNS[name]) <= set(chunks)
        for column in chunks:
            codec = COMPRESSION.get(name, ("SNAPPY", None))[0]  # raw: zstd
            assert all(chunk.compression == codec for chunk in chunks[column])
        for column in PLAIN_COLUMNS[name]:
            assert not any("RLE_DICTIONARY" in c.encodings for c in chunks[column]), column
        repeated = "request_id" if name == "raw" else "lake_category"  # keeps its dictionary
        assert all("RLE_DICTIONARY" in c.encodings for c in chunks[repeated])


def test_items_keep_parquet_statistics_only_for_the_columns_readers_filter_on(catalog):
    catalog.push({"items": [make_item()]})
    chunks = _column_chunks(catalog, "items")
    flat = [f.name for f in ITEMS if not pa.types.is_nested(f.type) and f.name != "id_block"]
    assert set(flat) <= set(chunks)
    for column in flat:
        assert all(c.is_stats_set for c in chunks[column]) == (column in STATS_COLUMNS["items"])
    actions = pa.table(catalog.lake.delta("items").get_add_actions(flatten=True))
    assert sorted(n for n in actions.column_names if n.startswith("min.")) == sorted(
        f"min.{column}" for column in STATS_COLUMNS["items"]
    )


def test_a_lake_read_through_sql_as_on_an_object_store_updates_the_same(
    tmp_path, clock, monkeypatch
):
    """Object stores have no writer lock and no local Parquet paths: every read goes through SQL."""
    for module in ("catalog_lake.lake.tables", "catalog_lake.lake.writes", "catalog_lake.keys"):
        monkeypatch.setattr(f"{module}.is_local", lambda uri: False)
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    clock.now += timedelta(minutes=1)
    again = catalog.push({"items": [make_item(client_item_id="a", name="Renamed")]})

    assert again["items"] == [{"a": "1"}]
    items = catalog.items().set_index("client_item_id")
    assert items.loc["a", "name"] == "Renamed" and items.loc["b", "object_id"] == 2
    assert check(catalog)["ok"]


def test_string_attributes_are_one_map_in_the_items_table_and_typed_ones_keep_columns(catalog):
    catalog.push(
        {
            "items": [
                make_item(
                    client_item_id="a", attributes__colour=" Deep  Red ", attributes__size=42
                ),
                make_item(client_item_id="b", attributes__brand=None, attributes__is_veg=None),
            ]
        }
    )
    items = catalog.items().set_index("client_item_id")

    # SPEC 2.6 order (colour, size, brand, is_veg), cleaned text, numbers as their text
    assert list(items.loc["a", "attributes"].items()) == [
        ("colour", "Deep Red"),
        ("size", "42"),
        ("brand", "Aashirvaad"),
        ("is_veg", "yes"),
    ]
    assert items.loc["b", "attributes"] == {}
    assert not items.loc["a", "attr_returnable"]
    assert items.loc["a", "attr_return_window_seconds"] == 7 * 86400
    assert not [c for c in items.columns if c in ("attr_brand", "attr_colour", "attr_is_veg")]


def test_the_attributes_map_reads_back_as_the_columns_it_was_made_of():
    from catalog_lake.items import typed_items
    from catalog_lake.parse import parse_push
    from catalog_lake.records import pack_attributes, unpack_attributes
    from catalog_lake.validate import validate

    checked = validate(
        parse_push({"items": [make_item(attributes__colour="Red"), make_item(client_item_id="x")]})
    )
    typed = typed_items(checked.frame)
    assert {"attr_colour", "attr_brand", "attr_is_veg"} <= set(typed.columns)
    assert typed["attributes"].equals(pack_attributes(typed.columns, len(typed)))

    unpacked = unpack_attributes(typed["attributes"])
    for column, values in unpacked.items():
        sent = typed.get(column)
        assert values.to_pylist() == sent.to_pylist()


def test_an_ingest_run_leaves_a_checkpoint_so_the_next_push_replays_little(catalog, tmp_path):
    from catalog_lake.feeds import ingest

    feeds = tmp_path / "feeds"
    feeds.mkdir()
    for n in range(3):
        items = [make_item(client_item_id=f"{n}-{k}") for k in range(3)]
        (feeds / f"f{n}.json").write_text(json.dumps({"items": items}))
    ingest(catalog, feeds, group_items=3)

    for name in ("raw", "items", "records", "pushes"):
        table = catalog.lake.delta(name)
        marker = Path(table.table_uri.removeprefix("file://")) / "_delta_log" / "_last_checkpoint"
        assert json.loads(marker.read_text())["version"] == table.version(), name
    assert catalog.lake.checkpoint(["items"]) == []  # nothing new since
    catalog.push({"items": [make_item(client_item_id="late")]})
    assert catalog.lake.checkpoint(["items"]) == ["items"]
    assert len(catalog.records()) == 10


def _rewrites(actions) -> bool:
    from deltalake.transaction import RemoveAction

    return any(isinstance(action, RemoveAction) for action in actions)


def test_a_block_rewrite_that_loses_a_commit_race_reads_again_and_retries(
    catalog, clock, monkeypatch
):
    """Another writer's commit makes ours fail (CommitFailedError); nothing of it touched
    ours, so the same files are committed again (issue 45: ``store._committed``)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    catalog.push({"items": [make_item(client_item_id="a")]})
    real = DeltaTable.create_write_transaction
    calls = {"n": 0}

    def loses_once(self, actions, *args, **kwargs):
        if _rewrites(actions) and calls["n"] == 0:
            calls["n"] += 1
            raise CommitFailedError("another writer committed version 3 first")
        return real(self, actions, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", loses_once)
    clock.now += timedelta(minutes=1)
    catalog.push({"items": [make_item(client_item_id="a", name="Renamed")]})

    assert calls["n"] == 1
    assert catalog.items()["name"].tolist() == ["Renamed"]


def test_an_update_that_keeps_losing_its_commit_race_fails_as_a_lake_write(
    catalog, clock, monkeypatch
):
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    from catalog_lake import PushError

    catalog.push({"items": [make_item(client_item_id="a")]})
    real = DeltaTable.create_write_transaction
    lost = {"n": 0}

    def always_loses(self, actions, *args, **kwargs):
        if _rewrites(actions):
            lost["n"] += 1
            raise CommitFailedError("another writer keeps committing first")
        return real(self, actions, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", always_loses)
    monkeypatch.setattr(settings, "FENCE_ATTEMPTS", 3)  # items commits are fenced
    monkeypatch.setattr(settings, "RECOMMITS", 2)
    clock.now += timedelta(minutes=1)
    with pytest.raises(PushError, match="lake_write_failed"):
        catalog.push({"items": [make_item(client_item_id="a", name="Renamed")]})
    assert lost["n"] == 3 * 2  # each of 3 attempts commits its files twice


ROOT = Path(__file__).parents[1]
FEEDS = ROOT / "data" / "feeds"


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
