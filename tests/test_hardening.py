"""Issue 16, section 1: nothing sent is silently dropped, and no verdict is silently changed.

Each test is named for one case a hostile tester found; together with
``test_hostile.py`` they are the contract the core must keep.
"""

from __future__ import annotations

import json

import pytest

from catalog_lake import Catalog, LakeError, PushError, check
from catalog_lake.feeds import ingest
from catalog_lake.lake import Lake
from catalog_lake.summary import summary_markdown
from tests.conftest import make_item
from tests.test_repair import CrashingLake


def write_feed(path, items):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"items": items}))
    return path


def price_of(catalog, client_id):
    records = catalog.records()
    return float(records.loc[records["client_item_id"] == client_id, "price"].iloc[0])


# --- deliveries --------------------------------------------------------------


def test_a_later_file_with_the_same_bytes_is_a_new_delivery(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    day1 = [make_item(client_item_id="P", pricing_info__sale_price="100.00")]
    day2 = [make_item(client_item_id="P", pricing_info__sale_price="90.00")]
    write_feed(feeds / "day1.json", day1)
    ingest(catalog, feeds)
    write_feed(feeds / "day2.json", day2)
    ingest(catalog, feeds)
    assert price_of(catalog, "P") == 90.0

    (feeds / "day3.json").write_bytes((feeds / "day1.json").read_bytes())
    summary = ingest(catalog, feeds)

    assert summary["files"]["ingested"] == ["day3.json"]
    assert summary["totals"]["already_stored"] == 0
    assert price_of(catalog, "P") == 100.0
    assert len(catalog.pushes()) == 3


def test_the_same_unchanged_file_at_the_same_path_is_still_skipped(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    write_feed(feeds / "day1.json", [make_item(client_item_id="P")])
    ingest(catalog, feeds)

    summary = ingest(catalog, feeds)

    assert summary["files"]["skipped"] == ["day1.json"]
    assert summary["files"]["skipped_reasons"] == {"ingested before and unchanged": 1}
    assert len(catalog.pushes()) == 1


def test_a_forced_reingest_of_an_unchanged_file_is_pushed_again(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    write_feed(feeds / "day1.json", [make_item(client_item_id="P")])
    ingest(catalog, feeds)

    summary = ingest(catalog, feeds, force=True)

    assert summary["files"]["ingested"] == ["day1.json"]
    assert summary["totals"]["already_stored"] == 0
    assert len(catalog.pushes()) == 2


def test_a_run_resumed_after_a_kill_counts_stored_batches_as_already_stored(tmp_path, clock):
    feeds = tmp_path / "feeds"
    write_feed(feeds / "a.json", [make_item(client_item_id=f"A{i}") for i in range(4)])
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="files")
    # The disk fills up (or the run dies) after the pushes, before the files table.
    with pytest.raises(
        LakeError,
        match=r"^the run's 1 push\(es\) are in the lake, but it could not record the "
        r"files it read: .*; run the same command again once the lake can be written$",
    ):
        ingest(catalog, feeds)

    catalog = Catalog(tmp_path / "lake", clock=clock)
    resumed = ingest(catalog, feeds)

    assert resumed["files"]["ingested"] == ["a.json"]
    assert resumed["totals"]["received"] == 4
    assert resumed["totals"]["already_stored"] == 4
    assert len(catalog.pushes()) == 1
    assert "4 of the items received had been stored by an interrupted run" in summary_markdown(
        resumed
    )


# --- repeated keys -----------------------------------------------------------


def test_a_repeated_items_key_at_payload_level_is_refused(catalog):
    a = json.dumps(make_item(client_item_id="A"))
    b = json.dumps(make_item(client_item_id="B"))
    with pytest.raises(PushError) as caught:
        catalog.push(f'{{"items": [{a}], "items": [{b}]}}')
    assert caught.value.reason == "duplicate_key"
    assert "repeats the key 'items'" in str(caught.value)
    assert not catalog.lake.exists()


def test_a_feed_file_with_a_repeated_items_key_is_refused(catalog, tmp_path):
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    a = json.dumps(make_item(client_item_id="A"))
    (feeds / "twice.json").write_text(f'{{"items": [{a}], "items": [{a}]}}')

    summary = ingest(catalog, feeds)

    (failed,) = summary["files"]["failed"]
    assert failed["status"] == "invalid"
    assert "duplicate_key" in failed["error"]


@pytest.mark.parametrize(
    ("fragment", "field"),
    [
        ('"extra": {"k": 1, "k": 2}', "extra.k"),
        ('"extra": [{"k": 1, "k": 2}]', "extra[0].k"),
        ('"attributes": {"custom": {"k": "a", "k": "b"}}', "attributes.custom.k"),
        (
            '"pricing_info": {"mrp": "1", "sale_price": "1", "tax": {"k": 1, "k": 1}}',
            "pricing_info.tax.k",
        ),
    ],
    ids=["unknown object", "object in an unknown list", "unknown attribute", "unknown price field"],
)
def test_repeated_keys_inside_unknown_fields_are_refused(catalog, fragment, field):
    text = json.dumps(make_item(client_item_id="X"))[:-1] + ", " + fragment + "}"
    response = catalog.push('{"items": [' + text + "]}")
    (failed,) = response["catalog_push_failed_items"]
    assert (field, "duplicate_key") in [(e["field"], e["code"]) for e in failed["errors"]]


# --- numbers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fragment", "field", "value"),
    [
        ('"location_id": [NaN]', "location_id", ["NaN"]),
        ('"location_id": ["L1", Infinity]', "location_id", ["L1", "Infinity"]),
        ('"location_id": [1e400]', "location_id", ["1e400"]),
        ('"extra": NaN', "extra", "NaN"),
        ('"extra": {"deep": [1, -Infinity]}', "extra.deep[1]", "-Infinity"),
        ('"attributes": {"custom": NaN}', "attributes.custom", "NaN"),
        ('"pricing_info": {"mrp": "1", "sale_price": "1", "tax": Infinity}', "pricing_info.tax", "Infinity"),
    ],
    ids=["nan in location_id", "infinity in location_id", "overflow in location_id",
         "nan unknown field", "infinity deep in an unknown field", "nan unknown attribute",
         "infinity unknown price field"],
)  # fmt: skip
def test_nonfinite_numbers_are_refused_everywhere(catalog, fragment, field, value):
    text = json.dumps(make_item(client_item_id="X"))[:-1] + ", " + fragment + "}"
    response = catalog.push('{"items": [' + text + "]}", strict=True)
    assert response["catalog_push_success_product_count"] == "0"
    (failed,) = response["catalog_push_failed_items"]
    errors = {e["field"]: e for e in failed["errors"]}
    assert errors[field]["value"] == value
    assert errors[field]["code"] in ("invalid_list", "invalid_number")
    json.dumps(response, allow_nan=False)  # the response itself is strict JSON

    # A default push drops the field outside the spec that holds one, with a warning
    # (unless the fragment repeats one of make_item's own keys: ``duplicate_key``).
    response = catalog.push('{"items": [' + text + "]}")
    json.dumps(response, allow_nan=False)
    if fragment.split('"')[1] in make_item():
        assert response["catalog_push_failed_product_count"] == "1"
        return
    (warned,) = response["catalog_push_warning_items"]
    assert [(w["field"], w["value"], w["action"]) for w in warned["warnings"]] == [
        (field, value, "dropped")
    ]
    item = catalog.items().iloc[0]
    stored = [item["extra_fields"], item["extra_attributes"]]
    assert not any("NaN" in s or "Infinity" in s for s in stored if isinstance(s, str))


def pushed_with(catalog, raw_value: str, strict: bool = True, **where):
    """Push one item with ``raw_value`` (JSON text, e.g. ``4.9999999999999999``) at ``where``."""
    ((key, _),) = where.items()
    item = make_item(client_item_id="X", **{key: "__RAW__"})
    text = json.dumps({"items": [item]}).replace('"__RAW__"', raw_value)
    return catalog.push(text, strict=strict)


@pytest.mark.parametrize(
    ("raw_value", "field", "code"),
    [
        ("4.9999999999999999", "inventory_info.qty", "invalid_count"),
        ("5.0000000000000001", "inventory_info.qty", "invalid_count"),
        ("1e3", "inventory_info.qty", "invalid_count"),
        ("19.999999999999999", "pricing_info.mrp", "invalid_price"),
        ("1e2", "pricing_info.mrp", "invalid_price"),
    ],
    ids=["fraction below a whole", "fraction above a whole", "exponent count",
         "money rounded up by float", "exponent money"],
)  # fmt: skip
def test_numbers_are_judged_from_their_json_text(catalog, raw_value, field, code):
    response = pushed_with(catalog, raw_value, **{field.replace(".", "__"): None})
    (failed,) = response["catalog_push_failed_items"]
    assert [(e["field"], e["code"], e["value"]) for e in failed["errors"]] == [
        (field, code, raw_value if "e" in raw_value or len(raw_value) > 10 else float(raw_value))
    ]


def test_raw_keeps_a_number_as_sent_so_a_replay_judges_it_the_same(catalog):
    from catalog_lake.backfill import backfill

    pushed_with(catalog, "4.9999999999999999", inventory_info__qty=None)  # strict: refused

    (stored,) = catalog.raw()["item_json"]
    assert '"qty":4.9999999999999999' in stored
    report = backfill(catalog, dry_run=True)  # raw keeps the push's strictness too
    assert (report["items_rejected"], report["records_new"]) == (1, 0)


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_feed_file_keeps_numbers_as_sent_too(catalog, tmp_path, suffix):
    item = json.dumps(make_item(client_item_id="F", inventory_info__qty="__RAW__"))
    item = item.replace('"__RAW__"', "4.9999999999999999")
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    text = item if suffix == ".jsonl" else '{"items": [' + item + "]}"
    (feeds / f"f{suffix}").write_text(text)

    summary = ingest(catalog, feeds)

    # An optional count costs only itself: stored without it, with a warning.
    assert summary["top_warning_codes"] == [{"code": "invalid_count", "count": 1}]
    assert summary["totals"]["warned"] == 1
    (warned,) = summary["catalog_push_warning_items"]
    assert warned["warnings"][0]["value"] == "4.9999999999999999"
    assert '"qty": 4.9999999999999999' in catalog.raw()["item_json"][0]  # the text as sent


@pytest.mark.parametrize("raw_value", ["120", "120.0", "120.00"])
def test_whole_json_numbers_still_count(catalog, raw_value):
    response = pushed_with(catalog, raw_value, inventory_info__qty=None)
    assert response["catalog_push_failed_product_count"] == "0"
    assert catalog.items()["qty"].tolist() == [120]
    assert f'"qty":{raw_value}' in catalog.raw()["item_json"][0]


# --- dates -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "outcome"),
    [
        ("9999-12-31T23:00:00-05:00", "invalid_date"),
        ("0001-01-01T00:30:00+01:00", "invalid_date"),
        ("9999-12-31", "stored"),
        ("0001-01-01T00:00:00Z", "stored"),
    ],
    ids=["past 9999 in UTC", "before year 1 in UTC", "last day", "first instant"],
)
def test_dates_outside_years_1_to_9999_are_refused(catalog, value, outcome):
    item = make_item(client_item_id="D", pricing_info__discount_end_date=value)
    response = catalog.push({"items": [item]}, strict=True)
    if outcome == "stored":
        assert response["catalog_push_failed_product_count"] == "0"
        catalog.items()  # and the items read back
    else:
        (failed,) = response["catalog_push_failed_items"]
        assert [e["code"] for e in failed["errors"]] == [outcome]


# --- repairs keep their identity -----------------------------------------------


def test_a_repaired_push_keeps_its_key_source_and_flow_run(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="pushes")
    payload = {"items": [make_item(client_item_id="R")]}
    with pytest.raises(PushError):
        catalog.push(payload, source="feed.json", flow_run_id="fr-1", idempotency_key="k-1")

    catalog.lake = Lake(catalog.lake.uri)
    catalog.repair()

    (row,) = catalog.pushes().to_dict(orient="records")
    assert (row["source"], row["flow_run_id"], row["idempotency_key"]) == (
        "feed.json",
        "fr-1",
        "k-1",
    )
    again = catalog.push(payload, idempotency_key="k-1")
    assert again["catalog_push_request_id"] == row["request_id"]
    assert len(catalog.pushes()) == 1 and len(catalog.raw()) == 1
    assert check(catalog)["ok"]


def test_an_ingest_after_a_killed_one_does_not_push_its_batches_twice(tmp_path, clock):
    feeds = tmp_path / "feeds"
    write_feed(feeds / "a.json", [make_item(client_item_id=f"A{i}") for i in range(3)])
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="pushes")
    ingest(catalog, feeds)  # the write fails after raw: the file is an error

    catalog = Catalog(tmp_path / "lake", clock=clock)
    summary = ingest(catalog, feeds)

    assert len(summary["repaired"]) == 1
    assert summary["totals"]["already_stored"] == 3
    assert len(catalog.pushes()) == 1 and len(catalog.raw()) == 3
    assert check(catalog)["ok"]


def test_check_reports_a_batch_applied_twice(catalog):
    payload = {"items": [make_item(client_item_id="T")]}
    catalog.push(payload, idempotency_key="k")
    pushes = catalog.lake.read("pushes")
    catalog.lake.append("pushes", pushes.set_column(0, "request_id", [["other"]]))

    report = check(catalog, derive=False)

    rules = {v["rule"]: v for v in report["violations"]}
    twice = rules["an idempotency key was applied by more than one push (a batch stored twice)"]
    assert twice["examples"] == ["k"]


# --- ids that cleaning would merge ----------------------------------------------


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
