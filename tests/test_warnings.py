"""A broken optional value costs the value, not the product (issue 19).

Each field has a severity in the rule table. An error refuses the item; a
warning drops the value, or repairs it where it has exactly one reading, and
the item is stored. Every dropped or repaired value is reported with the
value as sent, in the response, the ``warnings`` table and run summaries.
The quirks here are what sellers really send: placeholders for "no value"
(Google Merchant Center and Meta's catalog batch API warn on the same kinds
of attribute values), image URLs typed with spaces, durations without the
``T`` of their time part, and PHP's ``[]`` for an empty object.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog_lake import Catalog, PushError, check, clean
from catalog_lake.feeds import ingest
from catalog_lake.items import typed_items
from catalog_lake.lake import Lake
from catalog_lake.parse import parse_push
from catalog_lake.rules import ERROR, RULES, WARNING
from catalog_lake.summary import summary_markdown
from catalog_lake.validate import validate
from tests.conftest import make_item
from tests.test_repair import CrashingLake


def pushed(catalog, strict=False, **changes) -> dict:
    return catalog.push({"items": [make_item(**changes)]}, strict=strict)


def warnings_of(response) -> list[tuple]:
    """(field, code, action, repaired_to) of the one item's warnings."""
    (item,) = response["catalog_push_warning_items"]
    return [(w["field"], w["code"], w["action"], w["repaired_to"]) for w in item["warnings"]]


class Judged:
    """One item validated and typed as a push would, without a lake (fast)."""

    def __init__(self, strict: bool = False, **changes) -> None:
        checked = validate(parse_push({"items": [make_item(**changes)]}), strict=strict)
        self.errors = checked.errors.get(0, [])
        self.warnings = checked.warnings.get(0, [])
        typed = typed_items(checked.frame) if not self.errors else None
        self.row = None if typed is None else {k: v[0].as_py() for k, v in typed.columns.items()}
        self.lists = self.row

    @property
    def said(self) -> list[tuple]:
        return [(w["field"], w["code"], w["action"], w["repaired_to"]) for w in self.warnings]


# --- severities -------------------------------------------------------------------------


def test_errors_are_what_identifies_names_files_and_prices_the_product():
    errors = {r.source for r in RULES if r.severity == ERROR}
    assert errors == {
        "client_item_id",
        "name",
        "lake_category",
        "pricing_info.mrp",
        "pricing_info.sale_price",
        "pricing_info.discounted_price",
    }
    assert {r.severity for r in RULES} == {ERROR, WARNING}


@pytest.mark.parametrize(
    ("change", "field", "code"),
    [
        ({"attributes__returnable": "maybe"}, "attributes.returnable", "invalid_boolean"),
        ({"attributes__brand": ["A", "B"]}, "attributes.brand", "invalid_string"),
        ({"inventory_info__qty": "-3"}, "inventory_info.qty", "invalid_count"),
        ({"description": "d" * 70_000}, "description", "text_too_long"),
        ({"images": "https://img.example.com/one.jpg"}, "images", "invalid_list"),
        ({"location_id": [{"id": 1}]}, "location_id", "invalid_list"),
        ({"pricing_info__discount_start_date": "tomorrow"}, "pricing_info.discount_start_date",
         "invalid_date"),
    ],
)  # fmt: skip
def test_a_broken_optional_value_is_dropped_and_the_item_stored(change, field, code):
    judged = Judged(**change)
    assert (judged.errors, judged.said) == ([], [(field, code, "dropped", None)])
    (warning,) = judged.warnings
    sent = next(iter(change.values()))
    cut = isinstance(sent, str) and len(sent) > 200  # long values are cut, as in rejects
    assert warning["value"] == (sent[:200] + "…" if cut else sent)
    assert warning["message"].endswith("the value was dropped and the item stored")
    # strict: the same field and code refuse the item, as before warnings existed
    strict = Judged(strict=True, **change)
    assert [(e["field"], e["code"]) for e in strict.errors] == [(field, code)]
    assert strict.warnings == []


def test_a_warning_rides_in_the_response_beside_the_spec_keys(catalog):
    response = pushed(catalog, attributes__returnable="maybe")
    assert response["catalog_push_success_product_count"] == "1"
    (entry,) = response["catalog_push_warning_items"]
    assert (entry["index"], entry["client_item_id"]) == (0, "SKU-1")
    assert entry["warnings"] == [
        {
            "field": "attributes.returnable",
            "code": "invalid_boolean",
            "message": "attributes.returnable must be a boolean: true/false, yes/no, y/n, t/f, "
            "on/off or 1/0; got 'maybe'; the value was dropped and the item stored",
            "value": "maybe",
            "action": "dropped",
            "repaired_to": None,
        }
    ]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"pricing_info__mrp": "₹1,299"}, "pricing_info.mrp"),
        ({"pricing_info__discounted_price": "12.345"}, "pricing_info.discounted_price"),
        ({"name": ["Tea"]}, "name"),
        ({"lake_category": ""}, "lake_category"),
        ({"pricing_info": "100"}, "pricing_info"),
    ],
)
def test_an_error_field_still_refuses_the_item(change, field):
    judged = Judged(**change)
    assert field in [e["field"] for e in judged.errors]
    assert judged.warnings == []


def test_a_repeated_key_refuses_the_item_wherever_it_is(catalog):
    text = json.dumps(make_item())[:-1] + ', "attributes": {"brand": "A", "brand": "B"}}'
    response = catalog.push('{"items": [' + text + "]}")
    (failed,) = response["catalog_push_failed_items"]
    assert "duplicate_key" in [e["code"] for e in failed["errors"]]


# --- placeholders -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "placeholder", ["NA", "N/A", "n/a", "-", "null", "None", " na ", "undefined"]
)
@pytest.mark.parametrize(
    ("key", "field", "column"),
    [
        ("attributes__return_window", "attributes.return_window", "attr_return_window"),
        ("attributes__returnable", "attributes.returnable", "attr_returnable"),
        ("inventory_info__qty", "inventory_info.qty", "qty"),
        ("pricing_info__discounted_price", "pricing_info.discounted_price", "discounted_price"),
        ("pricing_info__discount_end_date", "pricing_info.discount_end_date", "discount_end_date"),
    ],
)
def test_placeholders_of_optional_values_are_absent(placeholder, key, field, column):
    judged = Judged(**{key: placeholder})
    ((got_field, _, action, _),) = judged.said
    assert (got_field, action) == (field, "dropped")
    assert judged.warnings[0]["message"] == (
        f"{field} {placeholder!r} is a placeholder for no value; stored as absent"
    )
    assert pd.isna(judged.row[column])


def test_a_placeholder_in_free_text_is_text(catalog):
    """ "None" is a true answer to additives_info; only shaped values have placeholders."""
    response = pushed(catalog, attributes__additives_info="None", description="NA")
    assert response["catalog_push_warning_items"] == []
    item = catalog.items().iloc[0]
    assert (item["attributes"]["additives_info"], item["description"]) == ("None", "NA")


def test_a_placeholder_window_date_leaves_that_side_open(catalog, clock):
    response = pushed(
        catalog,
        pricing_info__discounted_price="79.00",
        pricing_info__discount_start_date="2020-01-01",
        pricing_info__discount_end_date="N/A",
    )
    assert [w[0] for w in warnings_of(response)] == ["pricing_info.discount_end_date"]
    assert catalog.records()["price"].tolist() == [79.0]


# --- repairs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ("P3H", "PT3H"),
        ("p3h", "PT3H"),
        ("P1D12H", "P1DT12H"),
        ("P1H30M", "PT1H30M"),  # minutes: after the hours
        ("P1M2D3H", "P1M2DT3H"),  # months: before the days
        ("PT2D", "P2D"),
        ("P1DT", "P1D"),
        ("P45S", "PT45S"),
        ("P2M30S", None),  # two minutes or two months: left alone
        ("P1M4H", None),
        ("7 days", None),
        ("1D", None),
        ("P", None),
        ("P1D2D", None),
    ],
)
def test_a_duration_is_rewritten_only_when_it_has_one_reading(sent, stored):
    judged = Judged(attributes__time_to_ship=sent)
    action = "dropped" if stored is None else "repaired"
    assert judged.said == [("attributes.time_to_ship", "invalid_duration", action, stored)]
    kept = judged.row["attr_time_to_ship"]
    assert (kept if isinstance(kept, str) else None) == stored


@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ("https://cdn.example.com/p/mug front.jpg", "https://cdn.example.com/p/mug%20front.jpg"),
        (" https://cdn.example.com/p/a.jpg\n", "https://cdn.example.com/p/a.jpg"),
        ("https://cdn.example.com/p/a\n.jpg", "https://cdn.example.com/p/a.jpg"),
        ('https://cdn.example.com/p/"a".jpg', "https://cdn.example.com/p/%22a%22.jpg"),
        ("https://cdn.example.com/p/a\x01.jpg", "https://cdn.example.com/p/a%01.jpg"),
        ("https://cdn.example.com/p/a.jpg?w=1 2#x y", "https://cdn.example.com/p/a.jpg?w=1%202#x%20y"),
        ("https://cdn .example.com/a.jpg", None),  # a space in the host: no URL to repair
        ("ftp://cdn.example.com/a.jpg", None),
        ("uploads/a.jpg", None),
        ("www.example.com/a.jpg", None),  # no scheme: never guessed
    ],
)  # fmt: skip
def test_an_image_url_is_repaired_as_the_url_standard_reads_it(sent, stored):
    good = "https://cdn.example.com/p/next.jpg"
    judged = Judged(images=[sent, good])
    action = "dropped" if stored is None else "repaired"
    assert judged.said == [("images", "invalid_url", action, stored)]
    assert judged.warnings[0]["value"] == sent
    assert judged.warnings[0]["message"].startswith(f"images[0] {sent!r}")
    assert judged.lists["images"] == ([good] if stored is None else [stored, good])


@pytest.mark.parametrize(
    ("sent", "stored"),
    [("42.000000", "42"), ("42.500", "42.5"), ("42.990", "42.99"), ("12.345", None),
     ("42.9900001", None)],
)  # fmt: skip
def test_a_price_whose_extra_decimals_are_zeros_is_repaired_and_no_other(sent, stored):
    """Seen in live seller catalogs: "42.000000". A price is an error field: 12.345 refuses."""
    judged = Judged(pricing_info__mrp=sent, pricing_info__sale_price=sent)
    if stored is None:
        assert [(e["field"], e["code"]) for e in judged.errors] == [
            ("pricing_info.mrp", "invalid_price"),
            ("pricing_info.sale_price", "invalid_price"),
        ]
    else:
        assert judged.said == [
            ("pricing_info.mrp", "invalid_price", "repaired", stored),
            ("pricing_info.sale_price", "invalid_price", "repaired", stored),
        ]
        assert float(judged.row["mrp"]) == float(stored)
    assert Judged(strict=True, pricing_info__mrp=sent).errors  # strict: refused either way


def test_a_dropped_first_image_leaves_the_next_valid_one_to_the_record(catalog):
    pushed(catalog, images=["uploads/a.jpg", "https://cdn.example.com/b c.jpg"])
    assert catalog.records()["image"].tolist() == ["https://cdn.example.com/b%20c.jpg"]


def test_an_item_whose_every_image_is_broken_has_none(catalog):
    response = pushed(catalog, images=["NA", 5, "file:///a.jpg"])
    assert [w[2] for w in warnings_of(response)] == ["dropped", "dropped", "dropped"]
    assert catalog.records()["image"].isna().all()


_URLISH = st.text(st.sampled_from(list('ab/:. "<>\t\n%?#')) | st.characters(), max_size=30)


def _judged_many(items: list[dict]):
    checked = validate(parse_push({"items": items}))
    return checked, typed_items(checked.frame)


@given(
    st.lists(
        st.lists(_URLISH.map(lambda tail: "https://img.example.com/" + tail) | st.text(max_size=20),
                 max_size=5),
        min_size=1,
        max_size=40,
    )
)  # fmt: skip
@settings(max_examples=25, deadline=None)
def test_every_image_stored_is_a_valid_url_and_every_other_is_reported(lists):
    items = [make_item(client_item_id=str(n), images=images) for n, images in enumerate(lists)]
    checked, typed = _judged_many(items)
    kept = [n for n in range(len(lists)) if n not in checked.errors]
    for n in set(range(len(lists))) - set(kept):  # only what JSON text cannot carry refuses
        assert {e["code"] for e in checked.errors[n]} == {"invalid_text"}
    for n in kept:
        images = lists[n]
        stored = typed["images"][n].as_py()
        assert clean.urls_ok(pa.array(stored, pa.string())).all()
        reported = [w for w in checked.warnings.get(n, []) if w["field"] == "images"]
        dropped = sum(w["action"] == "dropped" for w in reported)
        assert len(stored) + dropped == len(images)


@given(
    st.lists(st.text(alphabet="PTYMWDHS0123456789.,- ptd", max_size=12), min_size=1, max_size=60)
)
@settings(max_examples=25, deadline=None)
def test_every_duration_stored_is_iso_8601(values):
    items = [
        make_item(client_item_id=str(n), attributes__time_to_ship=v) for n, v in enumerate(values)
    ]
    checked, typed = _judged_many(items)
    for n, value in enumerate(values):
        stored = typed["attr_time_to_ship"][n].as_py()
        if isinstance(stored, str):
            assert clean.durations(pa.array([stored]))[0][0].is_valid
            repaired = [w["repaired_to"] for w in checked.warnings.get(n, [])]
            assert stored == value.strip().upper() or repaired == [stored]


# --- what a warning takes with it --------------------------------------------------------


def test_a_discount_whose_window_is_broken_is_not_applied(catalog):
    """A discount without its end would never end: the item sells at sale_price."""
    response = pushed(
        catalog,
        pricing_info__discounted_price="79.00",
        pricing_info__discount_start_date="2020-01-01",
        pricing_info__discount_end_date="31/12/2099",
    )
    assert warnings_of(response) == [
        ("pricing_info.discounted_price", "invalid_discount_window", "dropped", None),
        ("pricing_info.discount_end_date", "invalid_date", "dropped", None),
    ]
    record = catalog.records().iloc[0]
    assert record["price"] == float(make_item()["pricing_info"]["sale_price"])


def test_a_window_that_ends_before_it_starts_is_dropped_with_its_discount(catalog):
    response = pushed(
        catalog,
        pricing_info__discounted_price="79.00",
        pricing_info__discount_start_date="2026-12-01",
        pricing_info__discount_end_date="2026-11-01",
    )
    assert [w[:3] for w in warnings_of(response)] == [
        ("pricing_info.discounted_price", "invalid_discount_window", "dropped"),
        ("pricing_info.discount_end_date", "invalid_discount_window", "dropped"),
    ]
    assert catalog.items()["discounted_price"].isna().all()


@pytest.mark.parametrize("name", ["attributes", "inventory_info"])
def test_an_empty_list_for_an_object_is_no_object(catalog, name):
    """PHP's json_encode writes an empty array for an empty object."""
    response = pushed(catalog, **{name: []})
    assert warnings_of(response) == [(name, "invalid_type", "dropped", None)]
    assert pushed(catalog, **{name: ["x"]})["catalog_push_failed_product_count"] == "1"


# --- where warnings go ---------------------------------------------------------------------


def test_warnings_are_kept_in_the_lake_as_sent(catalog):
    response = pushed(catalog, images=["https://x.example/a b.jpg"], attributes__return_window="NA")
    frame = catalog.warnings()
    assert frame["request_id"].tolist() == [response["catalog_push_request_id"]]
    assert frame["codes"].map(list).tolist() == [["invalid_url", "invalid_duration"]]
    (stored,) = frame["warnings"].tolist()
    assert [(w["field"], w["value"], w["action"], w["repaired_to"]) for w in stored] == [
        ("images", "https://x.example/a b.jpg", "repaired", "https://x.example/a%20b.jpg"),
        ("attributes.return_window", "NA", "dropped", None),
    ]
    assert (response["catalog_push_success_product_count"], len(catalog.rejects())) == ("1", 0)


def test_a_replayed_push_keeps_its_warnings_and_its_strictness(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.lake = CrashingLake(catalog.lake.uri, fail_on="items")
    quirky = {"items": [make_item(client_item_id="w", attributes__time_to_ship="P3H")]}
    with pytest.raises(PushError):
        catalog.push(quirky)
    clock.now += timedelta(seconds=1)
    with pytest.raises(PushError):
        strict = [make_item(client_item_id="s", attributes__returnable="NA"), make_item()]
        catalog.push({"items": strict}, strict=True)
    catalog.lake = Lake(catalog.lake.uri)

    lenient, strict = catalog.repair()

    assert warnings_of(lenient) == [
        ("attributes.time_to_ship", "invalid_duration", "repaired", "PT3H")
    ]
    assert strict["catalog_push_failed_product_count"] == "1"  # judged strictly again
    assert catalog.warnings()["client_item_id"].tolist() == ["w"]
    stored = catalog.items().set_index("client_item_id")["attr_time_to_ship"]
    assert stored.to_dict() == {"w": "PT3H", "SKU-1": "P1D"}


# --- dry runs --------------------------------------------------------------------------------


def test_a_dry_run_answers_as_the_push_would_and_writes_nothing(tmp_path, clock):
    catalog = Catalog(tmp_path / "lake", clock=clock)
    payload = {
        "items": [
            make_item(client_item_id="a", attributes__time_to_ship="P3H"),
            make_item(client_item_id="b", pricing_info__mrp="bad"),
        ]
    }
    first = catalog.push(payload, dry_run=True)
    assert not (tmp_path / "lake").exists()  # not even created
    assert first["items"] == [{"a": None}]  # new: no service id yet
    assert first["catalog_push_dry_run"] is True

    real = catalog.push(payload)
    versions = {t: catalog.lake.version(t) for t in ("raw", "items", "records", "pushes")}
    again = catalog.push({"items": [*payload["items"], make_item(client_item_id="c")]},
                         dry_run=True)  # fmt: skip

    assert again["items"] == [{"a": real["items"][0]["a"]}, {"c": None}]
    for key in ("catalog_push_failed_items", "catalog_push_warning_items"):
        assert first[key] == real[key]
    assert "catalog_push_dry_run" not in real
    assert {t: catalog.lake.version(t) for t in versions} == versions
    assert again["catalog_push_request_id"] not in set(catalog.pushes()["request_id"])


def test_a_dry_run_honours_idempotency_keys_as_a_push_does(catalog):
    payload = {"items": [make_item()]}
    stored = catalog.push(payload, idempotency_key="k1")
    assert catalog.push(payload, idempotency_key="k1", dry_run=True) == stored
    with pytest.raises(PushError, match="idempotency_conflict"):
        catalog.push({"items": [make_item(name="Other")]}, idempotency_key="k1", dry_run=True)


def test_an_ingest_dry_run_records_nothing_so_the_real_run_reads_every_file(catalog, tmp_path):

    folder = tmp_path / "feeds"
    folder.mkdir()
    (folder / "a.json").write_text(
        json.dumps({"items": [make_item(images=["https://x.example/a b.jpg"])]})
    )
    dry = ingest(catalog, folder, dry_run=True)
    assert (dry["catalog_push_dry_run"], dry["totals"]["warned"]) == (True, 1)
    assert "(dry run: nothing was written)" in summary_markdown(dry)
    real = ingest(catalog, folder)
    assert real["files"]["ingested"] == ["a.json"]
    assert [r["kind"] for r in catalog.lake.read("runs").to_pylist()] == ["ingest"]


def test_a_lake_from_before_warnings_is_checked_strictly_and_upgraded_by_the_next_push(tmp_path):
    """Its raw rows have no ``strict`` column and it has no ``warnings`` table."""
    import shutil

    from deltalake import write_deltalake

    lake = tmp_path / "lake"
    Catalog(lake).push({"items": [make_item(client_item_id="old", attributes__returnable="NA")]},
                       strict=True)  # fmt: skip
    raw = Catalog(lake).lake.read("raw")
    write_deltalake(str(lake / "raw"), raw.drop_columns(["strict"]), mode="overwrite",
                    schema_mode="overwrite", partition_by=["received_date"])  # fmt: skip
    shutil.rmtree(lake / "warnings")

    catalog = Catalog(lake)
    assert check(catalog)["ok"]  # the old push is replayed strictly: still refused
    assert catalog.warnings().empty
    response = catalog.push(
        {"items": [make_item(client_item_id="new", attributes__returnable="NA")]}
    )
    assert response["catalog_push_success_product_count"] == "1"
    assert catalog.warnings()["client_item_id"].tolist() == ["new"]
    assert catalog.raw()["strict"].tolist() == [None, False]
    assert check(catalog)["ok"]


# --- quirks found in live seller catalogs (bench/ondc.py, ONDC's verification logs) ---------

LIVE_QUIRKS = [
    ('"inventory_info": {"qty": "undefined", "max_qty": "NA"}', "inventory_info.qty", "dropped"),
    ('"images": ["OI", "https://cdn.example.com/a.png"]', "images", "dropped"),
    ('"images": ["https://cdn.example.com/Loafer CHOCO MELANCHE-Grey.jpg"]', "images", "repaired"),
    ('"attributes": {"time_to_ship": "P23H"}', "attributes.time_to_ship", "repaired"),
    ('"attributes": {"dimension_unit": NaN, "dimension_length": NaN}',
     "attributes.dimension_unit", "dropped"),
    ('"pricing_info": {"mrp": "42.000000", "sale_price": "42.000000"}', "pricing_info.mrp",
     "repaired"),
]  # fmt: skip


@pytest.mark.parametrize(("fragment", "field", "action"), LIVE_QUIRKS)
def test_what_live_seller_apps_send_costs_a_value_not_the_product(catalog, fragment, field, action):
    base = {k: v for k, v in make_item().items() if f'"{k}"' not in fragment}
    text = json.dumps(base)[:-1] + ", " + fragment + "}"
    response = catalog.push('{"items": [' + text + "]}")
    assert response["catalog_push_success_product_count"] == "1", response
    (warned,) = response["catalog_push_warning_items"]
    assert (field, action) in [(w["field"], w["action"]) for w in warned["warnings"]]
    assert check(catalog, derive=False)["ok"]


@pytest.mark.parametrize(
    "field, value",
    [("sale_price", "400.00"), ("sale_price", 311), ("discounted_price", "310.01")],
)
def test_a_price_above_mrp_is_stored_with_a_warning_and_refused_when_strict(catalog, field, value):
    response = catalog.push({"items": [make_item(**{f"pricing_info__{field}": value})]})
    (warned,) = response["catalog_push_warning_items"]
    (warning,) = warned["warnings"]
    assert (warning["field"], warning["code"], warning["action"], warning["value"]) == (
        f"pricing_info.{field}",
        "price_above_mrp",
        "kept",
        value,
    )
    assert "is above pricing_info.mrp '310.00'" in warning["message"]
    strict = catalog.push(
        {"items": [make_item(client_item_id="S", **{f"pricing_info__{field}": value})]},
        strict=True,
    )
    assert strict["catalog_push_failed_items"][0]["errors"][0]["code"] == "price_above_mrp"


def test_a_price_equal_to_mrp_is_no_warning(catalog):
    response = catalog.push({"items": [make_item(pricing_info__sale_price="310.00")]})
    assert response["catalog_push_warning_items"] == []
