"""Items and records live in id blocks; an update rewrites only the blocks it touches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from catalog_lake import Catalog
from catalog_lake.errors import LakeError
from catalog_lake.lake import upserted
from catalog_lake.schemas import STATS_COLUMNS
from tests.conftest import make_item

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
    incoming = _rows(("a", 99, 0, "new", T0 + timedelta(hours=1)))

    combined, counts = upserted(stored, incoming)

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
    assert counts == {"inserted": 0, "updated": 0, "kept": 1}
    assert combined.to_pylist() == stored.to_pylist()


def test_an_equally_new_row_replaces_so_a_replay_or_a_reprice_lands():
    stored = _rows(("a", 1, 0, "before", T0))
    combined, _ = upserted(stored, _rows(("a", 1, 0, "after", T0)))
    assert combined["name"].to_pylist() == ["after"]


def test_unknown_rows_are_added_and_an_empty_block_takes_them_all():
    combined, counts = upserted(SCHEMA.empty_table(), _rows(("a", 1, 0, "x", T0)))
    assert counts == {"inserted": 1, "updated": 0, "kept": 0}
    assert combined["client_item_id"].to_pylist() == ["a"]


def test_a_block_that_many_pushes_update_stays_one_file(catalog, clock):
    for version in range(5):
        clock.now += timedelta(minutes=1)
        catalog.push(
            {"items": [make_item(client_item_id=f"k{n}", name=f"v{version}") for n in range(3)]}
        )

    for name in ("items", "records"):
        table = catalog.lake.table(name)
        assert len(table.file_uris()) == 1, name
    assert set(catalog.items()["name"]) == {"v4"}
    assert catalog.check()["ok"]


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
    assert catalog.check()["ok"]


def test_items_keep_statistics_only_for_the_columns_readers_filter_on(catalog):
    catalog.push({"items": [make_item()]})
    configuration = catalog.lake.table("items").metadata().configuration
    assert configuration["delta.dataSkippingStatsColumns"] == ",".join(STATS_COLUMNS["items"])
    assert (
        "delta.dataSkippingStatsColumns"
        not in catalog.lake.table("records").metadata().configuration
    )


def test_blocks_read_ahead_are_read_again_when_the_table_moved_since(catalog, clock):
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    ahead = catalog.lake.prefetch("records", [0])
    ahead.result()
    catalog.push({"items": [make_item(client_item_id="c")]})  # lands in block 0 after the read

    stored = catalog.lake.read("records")
    renamed = stored.filter(pc.equal(stored["client_item_id"], "a"))
    renamed = renamed.set_column(
        renamed.schema.get_field_index("product_name"), "product_name", pa.array(["Renamed"])
    )
    catalog.lake.upsert("records", renamed, prefetched=ahead)

    records = catalog.records().set_index("client_item_id")
    assert sorted(records.index) == ["a", "b", "c"]
    assert records.loc["a", "product_name"] == "Renamed"


def test_a_lake_read_through_sql_as_on_an_object_store_updates_the_same(
    tmp_path, clock, monkeypatch
):
    """Object stores have no writer lock and no local Parquet paths: every read goes through SQL."""
    for module in ("catalog_lake.lake", "catalog_lake.catalog"):
        monkeypatch.setattr(f"{module}.is_local", lambda uri: False)
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    clock.now += timedelta(minutes=1)
    again = catalog.push({"items": [make_item(client_item_id="a", name="Renamed")]})

    assert again["items"] == [{"a": "1"}]
    items = catalog.items().set_index("client_item_id")
    assert items.loc["a", "name"] == "Renamed" and items.loc["b", "object_id"] == 2
    assert catalog.check()["ok"]
