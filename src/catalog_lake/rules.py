"""The data contract as one table: every field's rule, limits and stored type, and what breaks it.

SPEC 2.3-2.6 name about 140 fields under a handful of rules. Each row of
``RULES`` is one field: where it sits in an item, the rule its value follows,
whether it is required, its length limit and the items-table column it
becomes. ``ARROW`` gives each rule's stored type and ``ACCEPTS`` the JSON
kinds it takes; ``validate`` compiles the rules into Polars expressions, and
the messages a refusal carries are written out here, next to the rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from . import settings
from .errors import ErrorCode
from .flat import INT_DIGITS

# SPEC 2.6: the five boolean attributes and the two durations.
BOOLEAN_ATTRIBUTES = ("available_on_cod", "cancellable", "rateable", "return_pickup", "returnable")
DURATION_ATTRIBUTES = ("return_window", "time_to_ship")
# SPEC 2.6: every other named attribute is a string (is_veg included).
STRING_ATTRIBUTES = (
    # general
    "pattern",
    "material",
    "occasion",
    "season",
    "trend",
    "features",
    "material_finish",
    "size_chart",
    "fulfillment_mode",
    "gender",
    "colour",
    "colour_name",
    "size",
    "brand",
    "fabric",
    "model",
    "model_year",
    "refurbished",
    "weight",
    "length",
    "breadth",
    "height",
    # commerce and origin
    "common_or_generic_name_of_commodity",
    "imported_product_country_of_origin",
    "country_of_origin",
    "manufacturer_address",
    "manufacturer_name",
    "measure_of_commodity_in_pkg",
    "month_year_of_manufacture_packing_import",
    "marketed_by",
    "network_domain",
    "consumer_care_phone",
    "consumer_care_email",
    # food and nutrition
    "nutritional_info",
    "additives_info",
    "brand_owner_fssai_license_no",
    "other_fssai_license_no",
    "importer_fssai_license_no",
    "fssai_number",
    "marketing_fssai_number",
    "manufacturer_fssai_number",
    "veg_nonveg_flag",
    "expiry_date",
    "best_before",
    "net_weight",
    "number_of_items",
    "item_quantity",
    "flavour",
    "number_of_pieces",
    "allergen_information",
    "package_information",
    "package_weight",
    "item_form",
    "sodium_mg",
    "total_fat_gm",
    "total_fat_saturated_gm",
    "total_fat_trans_gm",
    "energy_kcal",
    "protein_gm",
    "carbohydrates_gm",
    "item_volume",
    "net_volume",
    # apparel and accessories
    "strap_material",
    "water_resistant",
    "display",
    "glass_material",
    "sport_type",
    "base_metal",
    "plating",
    "care_instructions",
    "wash_type",
    "fit",
    "collar",
    "neck",
    "hemline",
    "sleeve_length",
    # electronics
    "battery_life",
    "bluetooth",
    "os_type",
    "os_version",
    "ram",
    "ram_unit",
    "storage",
    "storage_unit",
    "storage_type",
    "screen_size",
    "cpu",
    "form_factor",
    # beauty and other
    "skin_type",
    "ingredient",
    "formulation",
    "scent",
    # identification and content
    "upc_code",
    "GTIN",
    "CSIN",
    "scan_type",
    "manufacturing_date",
    "batch_number",
    "product_description",
    "product_benefits",
    "product_highlights",
    "product_disclaimer",
    "product_instructions",
    "more_image_links",
    # not in SPEC 2.6's list, but named by SPEC 2.6 as text, not a boolean
    "is_veg",
)

#: The JSON kinds a value can have, as ``cells`` names them. ``nonfinite`` is a
#: NaN or Infinity (stdlib json accepts them), ``unencodable`` text holding a lone
#: surrogate (refused by ``parse`` as ``invalid_text``, and by no rule again).
KINDS = ("str", "int", "float", "bool", "null", "list", "dict", "nonfinite", "unencodable")

#: The rules, with the JSON kinds each accepts (null always means absent).
ACCEPTS: dict[str, frozenset[str]] = {
    "key": frozenset({"str", "int", "float"}),  # client_item_id: an identifier, never cleaned
    "id": frozenset({"str", "int", "float"}),  # other identifiers: cleaned, not unescaped
    "text": frozenset({"str", "int", "float"}),  # a JSON number is stored as its text
    "count": frozenset({"str", "int", "float"}),
    "money": frozenset({"str", "int", "float"}),
    "flag": frozenset({"str", "int", "bool"}),
    "date": frozenset({"str"}),
    "duration": frozenset({"str"}),
    "urls": frozenset({"list"}),
    "list": frozenset({"list"}),
}

#: The Arrow type each rule's values are stored as in the items table.
ARROW: dict[str, pa.DataType] = {
    "key": pa.string(),
    "id": pa.string(),
    "text": pa.string(),
    "count": pa.int64(),
    "flag": pa.bool_(),
    "money": pa.decimal128(12, 2),
    "date": pa.timestamp("us", tz="UTC"),
    "duration": pa.string(),
    "urls": pa.list_(pa.string()),
    "list": pa.list_(pa.string()),
}

#: The error code a value of a kind the rule does not accept earns.
WRONG_KIND: dict[str, ErrorCode] = {
    "key": ErrorCode.INVALID_STRING,
    "id": ErrorCode.INVALID_STRING,
    "text": ErrorCode.INVALID_STRING,
    "count": ErrorCode.INVALID_COUNT,
    "money": ErrorCode.INVALID_PRICE,
    "flag": ErrorCode.INVALID_BOOLEAN,
    "date": ErrorCode.INVALID_DATE,
    "duration": ErrorCode.INVALID_DURATION,
    "urls": ErrorCode.INVALID_LIST,
    "list": ErrorCode.INVALID_LIST,
}


ERROR, WARNING = "error", "warning"

#: Text sellers send for "no value" (compared trimmed and case-blind); "undefined"
#: is what JavaScript makes of a missing value. Treated as absent only where the
#: value could not be valid anyway: an optional field whose rule gives its text a
#: shape (a flag, count, price, date, duration or list). Free text keeps them:
#: "None" is a true answer to ``additives_info``.
PLACEHOLDERS = ("na", "n/a", "-", "null", "none", "undefined")
PLACEHOLDER_RULES = frozenset({"count", "money", "flag", "date", "duration", "urls", "list"})


@dataclass(frozen=True)
class Rule:
    """One input field: where it sits in an item, its rule, its limit, its column."""

    source: str  # the field's path in an item, e.g. "pricing_info.mrp"
    rule: str  # a key of ACCEPTS
    column: str  # its column in the items table
    required: bool = False
    max_chars: int = settings.MAX_TEXT_CHARS
    #: ``error`` refuses the item; ``warning`` drops or repairs the value and
    #: stores the item (issue 19). ``strict`` pushes treat every one as an error.
    severity: str = WARNING

    @property
    def arrow(self) -> pa.DataType:
        """The type the field is stored as."""
        return ARROW[self.rule]


def _rules() -> tuple[Rule, ...]:
    ids, names, text = settings.MAX_ID_CHARS, settings.MAX_NAME_CHARS, settings.MAX_TEXT_CHARS
    # Errors: what identifies and names the product, what files it, and what its
    # price is computed from. Everything else costs only its own value.
    top = [
        Rule("client_item_id", "key", "client_item_id", True, ids, ERROR),
        Rule("lake_category", "text", "lake_category", True, names, ERROR),
        Rule("lake_category_id", "id", "lake_category_id", False, ids),
        Rule("product_type", "text", "product_type", False, names),
        Rule("name", "text", "name", True, names, ERROR),
        Rule("description", "text", "description"),
        Rule("short_description", "text", "short_description"),
        Rule("category", "text", "category", False, names),
        Rule("variant_group_id", "id", "variant_group_id", False, ids),
        Rule("variant", "text", "variant", False, names),
        Rule("location_id", "list", "location_id"),
        Rule("images", "urls", "images"),
        Rule("inventory_info.qty", "count", "qty"),
        Rule("inventory_info.min_qty", "count", "min_qty"),
        Rule("inventory_info.max_qty", "count", "max_qty"),
        Rule("inventory_info.is_in_stock", "flag", "is_in_stock"),
        Rule("pricing_info.mrp", "money", "mrp", True, text, ERROR),
        Rule("pricing_info.sale_price", "money", "sale_price", True, text, ERROR),
        Rule("pricing_info.discounted_price", "money", "discounted_price", False, text, ERROR),
        Rule("pricing_info.discount_start_date", "date", "discount_start_date"),
        Rule("pricing_info.discount_end_date", "date", "discount_end_date"),
    ]
    attrs = [Rule(f"attributes.{n}", "flag", f"attr_{n}") for n in BOOLEAN_ATTRIBUTES]
    attrs += [Rule(f"attributes.{n}", "duration", f"attr_{n}") for n in DURATION_ATTRIBUTES]
    attrs += [Rule(f"attributes.{n}", "text", f"attr_{n}") for n in STRING_ATTRIBUTES]
    return tuple(top + attrs)


RULES: tuple[Rule, ...] = _rules()
RULES_BY_SOURCE = {rule.source: rule for rule in RULES}
#: Item fields that hold an object of named fields (SPEC 2.4-2.6).
CONTAINERS = ("inventory_info", "pricing_info", "attributes")
#: Known top-level item fields (SPEC 2.3); anything else is kept as an extra.
TOP_LEVEL = frozenset({r.source for r in RULES if "." not in r.source} | set(CONTAINERS))
#: Items-table column -> attribute name, for the string attributes: the items
#: table keeps them in one map column (see docs/design.md, "one map").
ATTRIBUTE_KEYS: dict[str, str] = {
    r.column: r.source.removeprefix("attributes.")
    for r in RULES
    if r.source.startswith("attributes.") and r.rule == "text"
}

# --- messages: what each code says, with the value as sent ---------------------

_MAX_VALUE_CHARS = 200


def shown(value: Any) -> str:
    """A value for a message: text quoted, anything else as JSON, long values cut."""
    if isinstance(value, str):
        cut = value if len(value) <= _MAX_VALUE_CHARS else value[:_MAX_VALUE_CHARS] + "…"
        return repr(cut)
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_VALUE_CHARS else text[:_MAX_VALUE_CHARS] + "…"


def _huge(value: Any) -> str:
    """How to name an integer too long for any reader to convert (``flat.HugeInt``), or ""."""
    text = str(value).lstrip("-")
    if len(text) > INT_DIGITS and text.isascii() and text.isdigit():
        return f"a number of {len(text):,} digits, more than the {INT_DIGITS:,} a reader converts"
    return ""


def message(code: ErrorCode, field: str, value: Any, detail: str = "") -> str:
    """The message of one refusal; ``detail`` is what the rule found (a bad URL, a length)."""
    rule = RULES_BY_SOURCE.get(field)
    if code is ErrorCode.MISSING_REQUIRED_FIELD:
        return f"{field} is required and was missing or blank"
    if code is ErrorCode.INVALID_TYPE:
        return f"{field} must be an object of named fields, got {shown(value)}"
    if code is ErrorCode.INVALID_STRING:
        return f"{field} must be text (a JSON number is accepted as its text), got {shown(value)}"
    if code is ErrorCode.INVALID_IDENTIFIER:
        return (
            f"{field} holds an invisible or control character ({detail}) in {shown(value)}; "
            "an identifier must be visible text, since two ids differing only by such a "
            "character cannot be told apart"
        )
    if code is ErrorCode.TEXT_TOO_LONG:
        limit = rule.max_chars if rule else settings.MAX_TEXT_CHARS
        return f"{field} is {int(detail):,} characters, over the limit of {limit:,}"
    if code is ErrorCode.INVALID_BOOLEAN:
        return (
            f"{field} must be a boolean: true/false, yes/no, y/n, t/f, on/off or 1/0; "
            f"got {shown(value)}"
        )
    if code is ErrorCode.INVALID_DURATION:
        return f"{field} must be an ISO 8601 duration such as P7D or PT24H, got {shown(value)}"
    if code is ErrorCode.INVALID_COUNT:
        return (
            f"{field} must be a whole number from 0 to {settings.MAX_COUNT:,}, got {shown(value)}"
        )
    if code is ErrorCode.INVALID_PRICE:
        return (
            f"{field} must be a non-negative decimal with at most two decimals and no "
            f"currency symbol or thousands separator, such as 1299.00; got {shown(value)}"
        )
    if code is ErrorCode.INVALID_DATE:
        return (
            f"{field} must be an ISO 8601 date or date-time such as 2026-11-30 or "
            f"2026-11-30T18:00:00+05:30, or empty; got {shown(value)}"
        )
    if code is ErrorCode.INVALID_DISCOUNT_WINDOW:
        return f"{field} {shown(value)} is before pricing_info.discount_start_date"
    if code is ErrorCode.INVALID_URL:
        return f"{field} must hold only http(s) URLs; {detail} is not one"
    if code is ErrorCode.INVALID_LIST:
        return f"{field} must be a list of text values, got {shown(value)}"
    if code is ErrorCode.TOO_MANY_VALUES:
        return f"{field} holds more than {settings.MAX_LIST_VALUES} values"
    if code is ErrorCode.INVALID_NUMBER:
        if _huge(value):
            return f"{field} is {_huge(value)}; send it as text"
        return f"{field} is {value}, which a JSON number cannot be; send a finite number, or text"
    return f"{field} is invalid: {shown(value)}"


def above_mrp_message(field: str, value: Any, mrp: Any, *, strict: bool) -> str:
    """Why a price above ``mrp`` is suspect, and what was done about it."""
    done = "refused (strict)" if strict else "stored as sent"
    return (
        f"{field} {shown(value)} is above pricing_info.mrp {shown(mrp)}, the most the product "
        f"may sell for; {done}: check the feed for swapped columns"
    )


def warning_message(
    code: ErrorCode, field: str, value: Any, detail: str, action: str, to: Any = None
) -> str:
    """The message of one warning: what was wrong with the value, and what was done."""
    detail = str(detail)
    if detail == "placeholder":
        return f"{field} {shown(value)} is a placeholder for no value; stored as absent"
    if detail == "empty list":
        return f"{field} is an empty list where an object is expected; taken as no {field}"
    if detail == "nonfinite" and _huge(value):
        return f"{field} is {_huge(value)}; the field outside the spec that holds it was dropped"
    if detail == "nonfinite":
        return (
            f"{field} is {value}, which JSON cannot carry; the field outside the spec that "
            "holds it was dropped"
        )
    if detail == "window dropped":
        return (
            f"{field} {shown(value)} was not applied: its discount window is invalid or "
            "was dropped, and a discount without its window would never end; the item "
            "sells at pricing_info.sale_price"
        )
    where = detail if detail.startswith(f"{field}[") else field
    if action == "repaired":
        if code is ErrorCode.INVALID_URL:
            why = "holds characters a URL may not contain (spaces, quotes, <, >, line breaks)"
            how = "percent-encoded as the URL standard does"
        elif code is ErrorCode.INVALID_PRICE:
            why = "has more than two decimals, but those past the cents are all zeros"
            how = "without them"
        else:
            why = "is not an ISO 8601 duration, but has exactly one reading as one"
            how = "rewritten"
        return f"{where} {shown(value)} {why}; stored {how}: {shown(to)}"
    if where != field:  # one element of a list
        return f"{where} {shown(value)} is not an http(s) URL; dropped, the other images kept"
    said = message(code, field, value, detail)
    return f"{said}; the value was dropped and the item stored"


__all__ = [
    "ACCEPTS",
    "ARROW",
    "ERROR",
    "PLACEHOLDERS",
    "PLACEHOLDER_RULES",
    "WARNING",
    "ATTRIBUTE_KEYS",
    "CONTAINERS",
    "KINDS",
    "RULES",
    "RULES_BY_SOURCE",
    "Rule",
    "TOP_LEVEL",
    "message",
    "warning_message",
]
