"""Business metrics update likes and sales only, and only for known items."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from catalog_lake import Catalog, CatalogLakeError, check
from catalog_lake.errors import LakeError
from catalog_lake.feeds import ingest
from catalog_lake.lake import Lake
from catalog_lake.metrics import apply_metrics
from tests.conftest import make_item

#: Prices, windows and ages follow the clock: `make test` runs these a year ahead too.
pytestmark = pytest.mark.clock


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


ROOT = Path(__file__).parents[1]
FEEDS = ROOT / "data" / "feeds"


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
    report = check(Catalog(catalog.lake.uri, clock=catalog.clock), derive=False)
    (lagging,) = [v for v in report["violations"] if "likes or sales" in v["rule"]]
    assert lagging["examples"] == ["GROC-DAL-1KG"]
    repaired = Catalog(catalog.lake.uri, clock=catalog.clock).repair()
    assert repaired == [
        {"repaired": "metrics", "records_resynced": 1, "examples": ["GROC-DAL-1KG"]}
    ]
    records = Catalog(catalog.lake.uri, clock=catalog.clock).records().set_index("client_item_id")
    assert (records.at["GROC-DAL-1KG", "likes"], records.at["GROC-DAL-1KG", "sales"]) == (40, 7)
    assert check(Catalog(catalog.lake.uri, clock=catalog.clock))["ok"]
    assert Catalog(catalog.lake.uri, clock=catalog.clock).repair() == []


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
