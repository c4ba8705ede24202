"""Maintenance re-prices records as discount windows open and close, compacts and vacuums."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from catalog_lake.maintain import maintain
from tests.conftest import make_item

#: Prices, windows and ages follow the clock: `make test` runs these a year ahead too.
pytestmark = pytest.mark.clock


def windowed(client_item_id: str, start: str, end: str) -> dict:
    return make_item(
        client_item_id=client_item_id,
        pricing_info={
            "mrp": "310.00",
            "sale_price": "289.00",
            "discounted_price": "199.00",
            "discount_start_date": start,
            "discount_end_date": end,
        },
    )


def test_records_follow_discount_windows_that_open_and_close(catalog, clock):
    catalog.push(
        {
            "items": [
                windowed("opens", "2026-11-22", "2026-11-30"),
                windowed("closes", "2026-11-01", "2026-11-21"),
                windowed("later", "2026-12-10", "2026-12-20"),
            ]
        }
    )
    prices = lambda: catalog.records().set_index("client_item_id")["price"].to_dict()  # noqa: E731
    assert prices() == {"opens": 289.0, "closes": 199.0, "later": 289.0}

    clock.now += timedelta(days=1)
    report = maintain(catalog)
    assert report["repriced"] == 2
    assert prices() == {"opens": 199.0, "closes": 289.0, "later": 289.0}
    assert maintain(catalog)["repriced"] == 0  # nothing crossed since the last run
    assert catalog.records().set_index("client_item_id").loc["opens", "on_sale"]


def test_compaction_merges_small_files_and_vacuum_keeps_recent_ones(catalog, clock):
    for i in range(4):
        catalog.push({"items": [make_item(client_item_id=f"k{i}")]})
    report = maintain(catalog)
    assert report["tables"]["raw"]["files_removed"] == 4
    assert report["tables"]["raw"]["files_vacuumed"] == 0  # within the 7-day retention
    assert len(catalog.raw()) == 4
    vacuumed = maintain(catalog, retention_hours=0)["tables"]["raw"]["files_vacuumed"]
    assert vacuumed == 4
    assert len(catalog.records()) == 4


def test_maintain_counts_only_records_it_changed(catalog, clock):
    from catalog_lake.maintain import maintain

    start = (clock.now - timedelta(days=1)).isoformat()
    end = (clock.now + timedelta(days=10)).isoformat()
    catalog.push(
        {
            "items": [
                make_item(
                    pricing_info__discount_start_date=start,
                    pricing_info__discount_end_date=end,
                    pricing_info__discounted_price="199.00",
                )
            ]
        }
    )
    report = maintain(catalog, compact=False, vacuum=False)
    assert report["repriced"] == 0  # the record was written inside its window already
    clock.now += timedelta(days=11)
    assert maintain(catalog, compact=False, vacuum=False)["repriced"] == 1


@pytest.mark.skipif(
    bool(os.environ.get("FAKETIME")),
    reason="a file's age is its time stamp, which the kernel keeps on the real clock",
)
def test_data_files_no_commit_names_are_vacuumed_once_past_the_retention(run, tmp_path):
    """What a killed writer leaves: files written for a group whose commit never came."""
    import json

    from catalog_lake import Catalog
    from catalog_lake.lake.files import write_files

    feed = tmp_path / "feed.json"
    feed.write_text(json.dumps({"items": [make_item(client_item_id=f"o{i}") for i in range(3)]}))
    assert run("push", str(feed)).exit_code == 0
    lake = Catalog(tmp_path / "lake").lake
    orphans = []
    for name in ("items", "records"):
        filesystem, root = lake.filesystem(name)
        rows = lake.read(name)
        orphans += [
            tmp_path / "lake" / name / f.path for f in write_files(filesystem, root, name, rows)
        ]
    assert all(p.exists() for p in orphans)

    kept = run("maintain", "--json")  # the default retention: a writer may still commit them
    assert kept.exit_code == 0 and all(p.exists() for p in orphans)
    done = run("maintain", "--retention-hours", "0", "--json")
    assert done.exit_code == 0, done.output
    assert not any(p.exists() for p in orphans)
    tables = json.loads(done.output)["tables"]
    assert tables["items"]["files_vacuumed"] >= 1 and tables["records"]["files_vacuumed"] >= 1
    assert run("records", "--json").exit_code == 0
    assert len(Catalog(tmp_path / "lake").records()) == 3
