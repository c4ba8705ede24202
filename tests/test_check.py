"""check() verifies the invariants on real tables and names what is broken."""

from __future__ import annotations

import importlib
import json
import re
from datetime import timedelta

import pyarrow as pa
import pytest

from catalog_lake import Catalog, PushError, check
from tests.conftest import make_item
from tests.test_repair import CrashingLake


def rules(report):
    return [(v["invariant"], v["rule"]) for v in report["violations"]]


def test_a_healthy_lake_passes(catalog, clock):
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b", name="")]})
    clock.now += timedelta(seconds=1)
    catalog.push({"items": [make_item(client_item_id="a", name="renamed")]})
    report = check(catalog)
    assert report == {
        "ok": True,
        "pushes": 2,
        "raw_items": 3,
        "items": 1,
        "records": 1,
        "violations": [],
    }


def test_an_interrupted_push_is_reported_until_repaired(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="records")
    with pytest.raises(PushError):
        catalog.push({"items": [make_item()]})
    catalog = Catalog(tmp_path / "lake", clock=clock)
    report = check(catalog)
    assert not report["ok"]
    assert (1, "a push reached raw but never finished; run `catalog-lake repair`") in rules(report)
    catalog.repair()
    assert check(catalog)["ok"]


def test_a_second_row_for_one_item_is_caught(catalog):
    catalog.push({"items": [make_item()]})
    catalog.lake.append("items", catalog.lake.read("items"))  # a writer that bypassed the merge
    report = check(catalog, derive=False)
    assert (2, "client_item_id with more than one row in items") in rules(report)
    assert (2, "a service id is used by more than one client_item_id") in rules(report)


def test_a_record_that_drifted_from_raw_is_caught(catalog):
    catalog.push({"items": [make_item()]})
    records = catalog.lake.read("records")
    price = records.schema.get_field_index("price")
    catalog.lake.upsert("records", records.set_column(price, "price", pa.array([1.0])))
    report = check(catalog)
    (violation,) = report["violations"]
    assert violation["invariant"] == 3
    assert violation["examples"][0]["changes"]["price"] == {"old": 1.0, "new": 289.0}


def test_a_lost_reject_is_caught(catalog):
    catalog.push({"items": [make_item(pricing_info__mrp="bad")]})
    table = catalog.lake.delta("rejects")
    table.delete()
    report = check(catalog, derive=False)
    assert (1, "a failed raw item has no reject, or a reject has no failed raw item") in rules(
        report
    )


def test_an_invalid_url_or_duration_stored_behind_the_library_is_caught(catalog):
    """A lake written before warnings existed, or by another writer, is checked too."""
    catalog.push({"items": [make_item(client_item_id="a")]})
    items = catalog.lake.read("items")
    broken = items.set_column(
        items.schema.get_field_index("images"),
        "images",
        pa.array([["https://x.example/a b.jpg"]], items.schema.field("images").type),
    ).set_column(
        items.schema.get_field_index("attr_time_to_ship"),
        "attr_time_to_ship",
        pa.array(["P3H"], pa.string()),
    )
    catalog.lake.upsert("items", broken)
    report = check(catalog, derive=False)
    assert (5, "a stored image is not an http(s) URL") in rules(report)
    assert (5, "a stored time_to_ship is not an ISO 8601 duration") in rules(report)


def test_the_invariants_are_a_table_of_named_checks_each_saying_which_it_is():
    """``check.INVARIANTS``: each function's docstring opens with the invariant it checks,
    one of those the module's docstring lists, and together they cover all five."""
    module = importlib.import_module("catalog_lake.check")
    listed = {int(n) for n in re.findall(r"^(\d)\. ", module.__doc__, re.MULTILINE)}
    opened = {int(f.__doc__[0]) for f in module.INVARIANTS}
    assert listed == opened == {1, 2, 3, 4, 5}
    assert len({f.__name__ for f in module.INVARIANTS}) == len(module.INVARIANTS)


def test_check_right_after_the_tables_are_created_is_ok(tmp_path):
    catalog = Catalog(tmp_path / "lake")
    catalog.lake.ensure()  # what a kill right after the first ingest's ensure() leaves
    report = check(catalog)
    assert (report["ok"], report["items"], report["violations"]) == (True, 0, [])


def test_check_reports_a_batch_applied_twice(catalog):
    payload = {"items": [make_item(client_item_id="T")]}
    catalog.push(payload, idempotency_key="k")
    pushes = catalog.lake.read("pushes")
    catalog.lake.append("pushes", pushes.set_column(0, "request_id", [["other"]]))

    report = check(catalog, derive=False)

    rules = {v["rule"]: v for v in report["violations"]}
    twice = rules["an idempotency key was applied by more than one push (a batch stored twice)"]
    assert twice["examples"] == ["k"]


def test_check_on_a_lake_whose_tables_are_empty_is_ok(run, tmp_path):
    Catalog(tmp_path / "lake").lake.ensure()  # every table, no row
    result = run("check")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["ok"], report["items"], report["violations"]) == (True, 0, [])


def test_every_check_violation_names_an_example(catalog):
    catalog.push({"items": [make_item(client_item_id=f"E{n}") for n in range(2)]})
    catalog.lake.delta("records").delete("client_item_id = 'E1'")
    report = check(catalog)
    assert not report["ok"]
    assert all(v["examples"] for v in report["violations"])
    derived = [v for v in report["violations"] if v["invariant"] == 3]
    assert derived and derived[0]["examples"][0]["client_item_id"] == "E1"
