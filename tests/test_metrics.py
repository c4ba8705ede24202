"""Business metrics update likes and sales only, and only for known items."""

from __future__ import annotations

import pandas as pd
import pytest

from catalog_lake import CatalogLakeError
from catalog_lake.metrics import apply_metrics
from tests.conftest import make_item


@pytest.fixture
def pushed(catalog):
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    return catalog


def test_metrics_update_items_and_records(pushed, tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("client_item_id,likes,sales\na,10,3\nb,,7\n")
    report = apply_metrics(pushed, path)
    assert report == {
        "file": str(path),
        "rows": 2,
        "updated": 2,
        "unknown_count": 0,
        "unknown_ids": [],
        "deleted_count": 0,
        "deleted_ids": [],
        "invalid_count": 0,
        "invalid_rows": [],
    }
    for frame in (pushed.records(), pushed.items()):
        assert frame[["client_item_id", "likes", "sales"]].values.tolist() == [
            ["a", 10, 3],
            ["b", 0, 7],
        ]


def test_unknown_ids_are_reported_not_invented(pushed, tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("client_item_id,likes\nghost,4\na,1\n")
    report = apply_metrics(pushed, path)
    assert (report["updated"], report["unknown_ids"]) == (1, ["ghost"])
    assert "ghost" not in pushed.records()["client_item_id"].tolist()


def test_invalid_rows_are_reported_with_their_line(pushed, tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("client_item_id,likes,sales\na,-1,2\nb,x,1\n,3,3\n")
    report = apply_metrics(pushed, path)
    assert [r["row"] for r in report["invalid_rows"]] == [2, 3, 4]
    assert report["updated"] == 0


def test_parquet_is_read_too(pushed, tmp_path):
    path = tmp_path / "m.parquet"
    pd.DataFrame({"client_item_id": ["b"], "sales": [5]}).to_parquet(path)
    assert apply_metrics(pushed, path)["updated"] == 1
    assert pushed.records().set_index("client_item_id").loc["b", "sales"] == 5


def test_a_file_without_the_columns_is_refused(pushed, tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("sku,likes\na,1\n")
    with pytest.raises(CatalogLakeError, match="needs a client_item_id column"):
        apply_metrics(pushed, path)
