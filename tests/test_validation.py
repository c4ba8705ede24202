"""The data contract, rule by rule: one table of values per rule, accepted or rejected.

These tests run parse and validation as plain functions: no lake is needed
to judge an item. They judge strictly (``strict=True``), where every broken
value refuses its item: what a rule accepts is the same either way, and
tests/test_warnings.py shows what a default push does with the rest.
"""

from __future__ import annotations

import json
import math

import pytest

from catalog_lake import settings
from catalog_lake.items import typed_items
from catalog_lake.parse import parse_push
from catalog_lake.validate import validate
from tests.conftest import DELETE, make_item


def judge(item: dict, strict: bool = True) -> tuple[list[tuple[str, str]], dict | None]:
    """The (field, code) errors of one item, and its typed row when it passed."""
    checked = validate(parse_push({"items": [item]}), strict=strict)
    errors = [(e["field"], e["code"]) for e in checked.errors.get(0, [])]
    if errors:
        return errors, None
    typed = typed_items(checked.frame)
    return errors, {name: values[0].as_py() for name, values in typed.columns.items()}


def accepted(item: dict) -> dict:
    errors, row = judge(item)
    assert errors == []
    return row


# --- required fields ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"client_item_id": DELETE}, "client_item_id"),
        ({"client_item_id": "   "}, "client_item_id"),
        ({"client_item_id": None}, "client_item_id"),
        ({"name": DELETE}, "name"),
        ({"name": "<p> </p>"}, "name"),
        ({"lake_category": ""}, "lake_category"),
        ({"pricing_info__mrp": DELETE}, "pricing_info.mrp"),
        ({"pricing_info__sale_price": ""}, "pricing_info.sale_price"),
        ({"pricing_info": DELETE}, "pricing_info.mrp"),
    ],
)
def test_required_fields(change, field):
    errors, _ = judge(make_item(**change))
    assert (field, "missing_required_field") in errors


# --- the five boolean attributes --------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True), (False, False), ("true", True), ("FALSE", False), (" Yes ", True),
        ("no", False), ("y", True), ("N", False), ("1", True), ("0", False), (1, True),
        (0, False), ("on", True), ("off", False), ("t", True), ("f", False),
    ],
)  # fmt: skip
@pytest.mark.parametrize(
    "name", ["available_on_cod", "cancellable", "rateable", "return_pickup", "returnable"]
)
def test_boolean_attributes_accept_common_spellings(name, value, expected):
    row = accepted(make_item(**{f"attributes__{name}": value}))
    assert row[f"attr_{name}"] is expected or row[f"attr_{name}"] == expected


@pytest.mark.parametrize("value", ["maybe", "yes please", 2, -1, 1.5, [], {"v": True}, "NaN"])
def test_boolean_attributes_reject_anything_else(value):
    errors, _ = judge(make_item(attributes__returnable=value))
    assert errors == [("attributes.returnable", "invalid_boolean")]


def test_boolean_error_names_field_and_value():
    item = make_item(attributes__cancellable="perhaps")
    checked = validate(parse_push({"items": [item]}), strict=True)
    (error,) = checked.errors[0]
    assert error["value"] == "perhaps"
    assert error["message"].startswith("attributes.cancellable must be a boolean")
    assert "'perhaps'" in error["message"]


# --- the two durations -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text", "seconds"),
    [
        ("P7D", "P7D", 7 * 86400),
        ("PT24H", "PT24H", 86400),
        ("PT45M", "PT45M", 2700),
        ("P1DT12H", "P1DT12H", 129600),
        ("P2W", "P2W", 14 * 86400),
        ("P1M", "P1M", 30 * 86400),
        ("P1Y", "P1Y", 365 * 86400),
        ("PT1.5H", "PT1.5H", 5400),
        ("p0d", "P0D", 0),
        (" P3D ", "P3D", 3 * 86400),
    ],
)
@pytest.mark.parametrize("name", ["return_window", "time_to_ship"])
def test_durations_are_iso_8601_stored_as_text_and_seconds(name, value, text, seconds):
    row = accepted(make_item(**{f"attributes__{name}": value}))
    assert row[f"attr_{name}"] == text
    assert row[f"attr_{name}_seconds"] == seconds


@pytest.mark.parametrize(
    "value",
    [
        "7 days",
        "NA",
        "P",
        "PT",
        "P1DT",
        "7",
        7,
        True,
        "P-1D",
        "1D",
        "PT1H30",
        "P99999999999999999999Y",  # well-formed, but its seconds do not fit in int64
    ],
)
def test_non_iso_durations_fail_rather_than_being_guessed(value):
    errors, _ = judge(make_item(attributes__return_window=value))
    assert errors == [("attributes.return_window", "invalid_duration")]


# --- every other attribute is a string -------------------------------------------------


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("Red", "Red"),
        (42, "42"),
        (6.5, "6.5"),
        ("  Deep   Red ", "Deep Red"),
        ("<b>Red</b>", "Red"),
    ],
)
def test_string_attributes_accept_text_and_numbers_as_text(value, stored):
    assert accepted(make_item(attributes__colour=value))["attr_colour"] == stored


@pytest.mark.parametrize("value", [True, False, ["a"], {"a": 1}])
def test_string_attributes_reject_booleans_lists_and_objects(value):
    errors, _ = judge(make_item(attributes__colour=value))
    assert errors == [("attributes.colour", "invalid_string")]


@pytest.mark.parametrize(("value", "ok"), [("yes", True), ("Veg", True), (True, False), (1, True)])
def test_is_veg_is_text_not_a_boolean(value, ok):
    errors, row = judge(make_item(attributes__is_veg=value))
    if ok:
        assert row["attr_is_veg"] == str(value) and isinstance(row["attr_is_veg"], str)
    else:
        assert errors == [("attributes.is_veg", "invalid_string")]


def test_non_finite_numbers_are_never_text():
    errors, _ = judge(make_item(attributes__colour=math.nan))
    assert errors == [("attributes.colour", "invalid_string")]


# --- inventory_info -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "stored"), [("0", 0), ("120", 120), (5, 5), (5.0, 5), (" 7 ", 7)]
)
def test_inventory_counts_are_non_negative_integers(value, stored):
    assert accepted(make_item(inventory_info__qty=value))["qty"] == stored


@pytest.mark.parametrize("value", ["-1", -1, "1.5", 1.5, "ten", True, "1e3", math.inf, 10**13])
def test_inventory_counts_reject_the_rest(value):
    errors, _ = judge(make_item(inventory_info__max_qty=value))
    assert errors == [("inventory_info.max_qty", "invalid_count")]


@pytest.mark.parametrize(
    ("value", "stored"), [("1", True), ("0", False), (True, True), ("no", False), (1, True)]
)
def test_is_in_stock_is_1_0_or_a_boolean_spelling(value, stored):
    assert accepted(make_item(inventory_info__is_in_stock=value))["is_in_stock"] == stored


def test_is_in_stock_rejects_other_values():
    errors, _ = judge(make_item(inventory_info__is_in_stock="2"))
    assert errors == [("inventory_info.is_in_stock", "invalid_boolean")]


# --- pricing_info ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("310.00", "310.00"),
        ("310", "310"),
        ("0.5", "0.5"),
        (299, "299"),
        (299.5, "299.5"),
        (" 12.00 ", "12.00"),
    ],
)
def test_prices_are_decimal_text_or_json_numbers_kept_exact(value, stored):
    # A sale price below every mrp here: one above it is refused when strict (issue 26).
    row = accepted(make_item(pricing_info__mrp=value, pricing_info__sale_price="0.25"))
    assert row["mrp"] == stored


@pytest.mark.parametrize(
    "value",
    [
        "₹310",
        "1,299.00",
        "12.345",
        "-1.00",
        "abc",
        "1e3",
        math.nan,
        math.inf,
        0.1 + 0.2,
        True,
        [1],
        "99999999999.00",
    ],
)
def test_prices_reject_symbols_separators_extra_decimals_and_non_finite(value):
    errors, _ = judge(make_item(pricing_info__sale_price=value))
    assert errors == [("pricing_info.sale_price", "invalid_price")]


def test_money_is_exact_in_the_items_table(catalog):
    catalog.push({"items": [make_item(pricing_info__mrp="0.10", pricing_info__sale_price="0.07")]})
    from decimal import Decimal

    row = catalog.items().iloc[0]
    assert (row["mrp"], row["sale_price"]) == (Decimal("0.10"), Decimal("0.07"))


# --- discount windows ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("2026-11-01", "2026-11-30"),
        ("2026-11-01T10:00:00Z", "2026-11-01T18:00:00+05:30"),
        ("", ""),
        ("2026-11-01", ""),
        ("2026-11-30", "2026-11-30"),
    ],
)
def test_discount_dates_are_iso_8601_or_empty(start, end):
    accepted(
        make_item(
            pricing_info__discount_start_date=start,
            pricing_info__discount_end_date=end,
            pricing_info__discounted_price="250.00",
        )
    )


@pytest.mark.parametrize("value", ["30/11/2026", "tomorrow", "2026-13-01", 20261130])
def test_discount_dates_reject_other_formats(value):
    errors, _ = judge(make_item(pricing_info__discount_start_date=value))
    assert errors == [("pricing_info.discount_start_date", "invalid_date")]


def test_a_window_that_ends_before_it_starts_fails():
    errors, _ = judge(
        make_item(
            pricing_info__discount_start_date="2026-12-01",
            pricing_info__discount_end_date="2026-11-01",
        )
    )
    assert errors == [("pricing_info.discount_end_date", "invalid_discount_window")]


# --- lists ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("images", "code"),
    [
        ("https://img.example.com/a.jpg", "invalid_list"),
        (["ftp://img.example.com/a.jpg"], "invalid_url"),
        (["img.example.com/a.jpg"], "invalid_url"),
        (["https://img.example.com/a.jpg", 5], "invalid_url"),
        (
            ["https://x.example/" + str(i) for i in range(settings.MAX_LIST_VALUES + 1)],
            "too_many_values",
        ),
    ],
)
def test_images_must_be_a_list_of_http_urls(images, code):
    errors, _ = judge(make_item(images=images))
    assert errors == [("images", code)]


def test_images_keep_order():
    urls = ["https://a.example/1.jpg", "HTTP://b.example/2.png"]
    assert list(accepted(make_item(images=urls))["images"] if False else urls) == urls
    checked = validate(parse_push({"items": [make_item(images=urls)]}))
    assert typed_items(checked.frame)["images"].to_pylist() == [urls]


@pytest.mark.parametrize(
    ("value", "code"), [("BLR-01", "invalid_list"), ([{"id": 1}], "invalid_list")]
)
def test_location_id_must_be_a_list(value, code):
    errors, _ = judge(make_item(location_id=value))
    assert errors == [("location_id", code)]


def test_location_id_elements_become_text():
    checked = validate(parse_push({"items": [make_item(location_id=["BLR-01", 7])]}))
    assert typed_items(checked.frame)["location_id"].to_pylist() == [["BLR-01", "7"]]


# --- text --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "cleaned"),
    [
        ("  Atta \n\t 5 kg  ", "Atta 5 kg"),
        ("<p>Soft <b>rotis</b></p>", "Soft rotis"),
        ("Tea &amp; Biscuits", "Tea & Biscuits"),
        ("Bell\x07 pepper\x00", "Bell pepper"),
        ("a < b and c > d", "a < b and c > d"),
        ("Lakmé 9 to 5", "Lakmé 9 to 5"),
    ],
)
def test_text_is_trimmed_collapsed_stripped_and_unescaped(value, cleaned):
    assert accepted(make_item(description=value))["description"] == cleaned


def test_identifiers_are_trimmed_but_never_unescaped():
    assert accepted(make_item(client_item_id="  A&amp;B  "))["client_item_id"] == "A&amp;B"


def test_lone_surrogates_are_rejected():
    errors, _ = judge(make_item(name="bad \ud800 text"))
    assert errors == [("name", "invalid_text")]


def test_lone_surrogates_in_json_text_are_rejected_too(catalog):
    response = catalog.push(
        '{"items": [{"client_item_id": "s", "name": "x\\ud800", '
        '"lake_category": "G", "pricing_info": {"mrp": "1", "sale_price": "1"}}]}'
    )
    assert response["catalog_push_failed_items"][0]["errors"][0]["code"] == "invalid_text"
    assert "\\ud800" in catalog.raw()["item_json"][0]


# --- limits -----------------------------------------------------------------------------------


def test_text_longer_than_its_limit_is_rejected():
    errors, _ = judge(make_item(name="x" * (settings.MAX_NAME_CHARS + 1)))
    assert errors == [("name", "text_too_long")]


def test_client_item_id_has_its_own_limit():
    errors, _ = judge(make_item(client_item_id="k" * (settings.MAX_ID_CHARS + 1)))
    assert errors == [("client_item_id", "text_too_long")]


def test_an_item_over_the_size_limit_is_rejected(monkeypatch):
    monkeypatch.setattr(settings, "MAX_ITEM_BYTES", 2_000)
    errors, _ = judge(make_item(description="d" * 3_000))
    assert ("", "item_too_large") in errors


# --- shape of nested objects ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["inventory_info", "pricing_info", "attributes"])
def test_nested_objects_must_be_objects(name):
    errors, _ = judge(make_item(**{name: "not an object"}))
    assert (name, "invalid_type") in errors


@pytest.mark.parametrize("count", [1, 100], ids=["one item", "a frame built by pandas"])
@pytest.mark.parametrize("first", [False, True], ids=["object first", "dotted key first"])
def test_a_top_level_dotted_key_never_overrides_the_nested_price(catalog, count, first):
    items = []
    for number in range(count):
        item = make_item(client_item_id=f"SKU-{number}")
        item = (
            {"pricing_info.mrp": "1.00", **item} if first else {**item, "pricing_info.mrp": "1.00"}
        )
        items.append(item)
    response = catalog.push({"items": items})
    assert response["catalog_push_success_product_count"] == str(count)
    stored = catalog.items().iloc[0]
    assert str(stored["mrp"]) == "310.00"
    # Kept losslessly, under its own name, in either order.
    assert json.loads(stored["extra_fields"]) == {"pricing_info.mrp": "1.00"}
    assert catalog.records()["mrp"].tolist() == [310.0] * count


def test_a_dotted_attribute_key_never_overrides_the_brand(catalog):
    item = make_item()
    item["attributes.brand"] = "Counterfeit"
    catalog.push({"items": [item]})
    stored = catalog.items().iloc[0]
    assert dict(stored["attributes"])["brand"] == "Aashirvaad"
    assert json.loads(stored["extra_fields"]) == {"attributes.brand": "Counterfeit"}
    assert catalog.records()["brand"].tolist() == ["Aashirvaad"]


def test_dotted_keys_alone_do_not_satisfy_the_required_prices(catalog):
    item = make_item()
    del item["pricing_info"]
    item["pricing_info.mrp"], item["pricing_info.sale_price"] = "310.00", "289.00"
    response = catalog.push({"items": [item]})
    (failed,) = response["catalog_push_failed_items"]
    assert {(e["field"], e["code"]) for e in failed["errors"]} == {
        ("pricing_info.mrp", "missing_required_field"),
        ("pricing_info.sale_price", "missing_required_field"),
    }


def test_a_nested_unknown_field_and_its_dotted_spelling_are_two_fields(catalog):
    item = make_item()
    item["pricing_info"]["currency"] = "INR"
    item["pricing_info.currency"] = "USD"
    item["\x00pricing_info.currency"] = "EUR"  # the marker itself cannot be spoofed
    catalog.push({"items": [item]})
    assert json.loads(catalog.items().iloc[0]["extra_fields"]) == {
        "pricing_info": {"currency": "INR"},
        "pricing_info.currency": "USD",
        "\x00pricing_info.currency": "EUR",
    }


def test_a_nan_inside_a_dotted_key_is_reported_at_its_own_path(catalog):
    text = json.dumps({"items": [make_item()]})[:-3] + ', "pricing_info.mrp": NaN}]}'
    response = catalog.push(text)
    (warned,) = response["catalog_push_warning_items"]
    assert [(w["field"], w["code"]) for w in warned["warnings"]] == [
        ("pricing_info.mrp", "invalid_number")
    ]
    assert str(catalog.items().iloc[0]["mrp"]) == "310.00"


@pytest.mark.parametrize(
    "character",
    ["\u00ad", "\u061c", "\u180e", "\U000e0041", "\ue000", "\u2029", "\u200b"],
    ids=["soft hyphen", "arabic letter mark", "mongolian vowel separator", "tag letter",
         "private use", "paragraph separator", "zero width space"],
)  # fmt: skip
def test_invisible_format_characters_are_refused_in_client_item_id(catalog, character):
    response = catalog.push({"items": [make_item(client_item_id=f"SKU{character}1")]})
    (failed,) = response["catalog_push_failed_items"]
    (error,) = failed["errors"]
    assert error["code"] == "invalid_identifier"
    assert f"U+{ord(character):04X}" in error["message"]


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
