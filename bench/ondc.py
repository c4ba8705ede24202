"""Seller catalogs from ONDC ``on_search`` payloads, as catalog-lake push files.

ONDC's public verification logs (github.com/ONDC-Official/verification-logs) hold the
``on_search`` catalogs that live seller apps sent when they were certified: grocery, F&B,
fashion, beauty, electronics, home and more. This maps each retail item to the push item of
SPEC 2.3 field by field, keeping every value exactly as the seller app sent it (a string
stays a string, a number a number, ``"NA"`` stays ``"NA"``), so that pushing the files
measures what sellers really send:

    python -m bench.ondc LOGS_CHECKOUT OUT_DIR      # one push file per catalog
    python -m bench.ondc --measure OUT_DIR          # stored share, strict and default

The mapping only follows the protocol's shape (v1.x items; v2 items, whose images are
objects with a ``url``, give that URL); it never cleans a value.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

#: ONDC retail domains and the lake_category each becomes.
DOMAINS = {
    "ONDC:RET10": "GROCERY", "ONDC:RET11": "F_AND_B", "ONDC:RET12": "FASHION",
    "ONDC:RET13": "BEAUTY_AND_PERSONAL_CARE", "ONDC:RET14": "ELECTRONICS",
    "ONDC:RET15": "APPLIANCES", "ONDC:RET16": "HOME_AND_KITCHEN", "ONDC:RET17": "TOYS",
    "ONDC:RET18": "HEALTH_AND_WELLNESS", "ONDC:RET19": "PHARMA", "ONDC:RET1A": "AGRICULTURE",
    "ONDC:RET1B": "HARDWARE", "ONDC:RET1C": "AUTOMOTIVE", "ONDC:RET1D": "BOOKS",
    "nic2004:52110": "GROCERY",
}  # fmt: skip
#: Item keys of the protocol and the SPEC 2.6 attribute each one is.
FLAGS = {
    "@ondc/org/returnable": "returnable",
    "@ondc/org/cancellable": "cancellable",
    "@ondc/org/seller_pickup_return": "return_pickup",
    "@ondc/org/available_on_cod": "available_on_cod",
    "@ondc/org/return_window": "return_window",
    "@ondc/org/time_to_ship": "time_to_ship",
    "@ondc/org/contact_details_consumer_care": "consumer_care_email",
}
STATUTORY = {
    "manufacturer_or_packer_name": "manufacturer_name",
    "manufacturer_or_packer_address": "manufacturer_address",
    "common_or_generic_name_of_commodity": "common_or_generic_name_of_commodity",
    "net_quantity_or_measure_of_commodity_in_pkg": "measure_of_commodity_in_pkg",
    "month_year_of_manufacture_packing_import": "month_year_of_manufacture_packing_import",
    "imported_product_country_of_origin": "imported_product_country_of_origin",
    "nutritional_info": "nutritional_info",
    "additives_info": "additives_info",
    "brand_owner_FSSAI_license_no": "brand_owner_fssai_license_no",
    "other_FSSAI_license_no": "other_fssai_license_no",
    "importer_FSSAI_license_no": "importer_fssai_license_no",
}


def catalogs(checkout: Path):
    """Every retail catalog in the logs, once: (path, domain, catalog message)."""
    listing = subprocess.run(
        ["git", "-C", str(checkout), "ls-tree", "-r", "HEAD"], capture_output=True, text=True
    ).stdout.splitlines()
    seen = set()
    for line in listing:
        meta, path = line.split("\t", 1)
        if "on_search" not in path or not path.endswith(".json"):
            continue
        blob = meta.split()[2]
        if blob in seen:
            continue
        seen.add(blob)
        text = subprocess.run(
            ["git", "-C", str(checkout), "cat-file", "-p", blob], capture_output=True
        ).stdout
        try:
            document = json.loads(text)
        except ValueError:
            continue
        for payload in document if isinstance(document, list) else [document]:
            if not isinstance(payload, dict):
                continue
            domain = str((payload.get("context") or {}).get("domain", ""))
            if domain in DOMAINS:
                yield path, domain, (payload.get("message") or {}).get("catalog") or {}


def item(raw: dict[str, Any], domain: str, provider: str) -> dict[str, Any]:
    """One ONDC item as a SPEC 2.3 item, values as sent."""
    descriptor = raw.get("descriptor") or {}
    price = raw.get("price") or {}
    quantity = raw.get("quantity") or {}
    out: dict[str, Any] = {
        "client_item_id": f"{provider}:{raw.get('id')}",
        "lake_category": DOMAINS[domain],
        "name": descriptor.get("name"),
        "pricing_info": {"mrp": price.get("maximum_value"), "sale_price": price.get("value")},
    }
    for source, target in (("long_desc", "description"), ("short_desc", "short_description")):
        if source in descriptor:
            out[target] = descriptor[source]
    if "category_id" in raw:
        out["category"] = raw["category_id"]
    if "parent_item_id" in raw:
        out["variant_group_id"] = raw["parent_item_id"]
    if "images" in descriptor:
        images = descriptor["images"]
        if isinstance(images, list):  # v2 sends {"url": ...} objects
            images = [i.get("url") if isinstance(i, dict) and "url" in i else i for i in images]
        out["images"] = images
    inventory = {}
    if isinstance(quantity.get("available"), dict) and "count" in quantity["available"]:
        inventory["qty"] = quantity["available"]["count"]
    if isinstance(quantity.get("maximum"), dict) and "count" in quantity["maximum"]:
        inventory["max_qty"] = quantity["maximum"]["count"]
    if inventory:
        out["inventory_info"] = inventory
    attributes: dict[str, Any] = {}
    for key, name in FLAGS.items():
        if key in raw:
            attributes[name] = raw[key]
    for group in ("@ondc/org/statutory_reqs_packaged_commodities",
                  "@ondc/org/statutory_reqs_prepackaged_food"):  # fmt: skip
        statutory = raw.get(group)
        for key, value in (statutory if isinstance(statutory, dict) else {}).items():
            if key in STATUTORY:
                attributes[STATUTORY[key]] = value
    for tag in raw.get("tags") or []:
        if not isinstance(tag, dict):
            continue
        code = tag.get("code") or (tag.get("descriptor") or {}).get("code")
        entries = [e for e in tag.get("list") or [] if isinstance(e, dict)]
        if code == "attribute":
            for entry in entries:
                name = entry.get("code") or (entry.get("descriptor") or {}).get("code")
                if name:
                    attributes[name] = entry.get("value")
        elif code == "veg_nonveg":
            for entry in entries:
                name = entry.get("code") or (entry.get("descriptor") or {}).get("code")
                if str(entry.get("value", "")).lower() == "yes":
                    attributes["veg_nonveg_flag"] = name
    if attributes:
        out["attributes"] = attributes
    return out


def convert(checkout: Path, out_dir: Path) -> Counter:
    """Write one push file per distinct catalog; return the items per category.

    Items seen before (same seller, id and content) are left out, so a seller
    certified in several flows counts once.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    counts: Counter = Counter()
    for path, domain, catalog in catalogs(checkout):
        items = []
        providers = catalog.get("bpp/providers") or catalog.get("providers") or []
        for provider in providers:
            if not isinstance(provider, dict):
                continue
            for raw in provider.get("items") or []:
                if not isinstance(raw, dict):
                    continue
                converted = item(raw, domain, str(provider.get("id")))
                digest = hashlib.sha256(json.dumps(converted, sort_keys=True).encode()).hexdigest()
                if digest not in seen:
                    seen.add(digest)
                    items.append(converted)
        if items:
            name = hashlib.sha1(path.encode()).hexdigest()[:12] + ".json"
            (out_dir / name).write_text(json.dumps({"items": items}, ensure_ascii=False))
            counts[DOMAINS[domain]] += len(items)
    return counts


def measure(folder: Path) -> dict[str, Any]:
    """Dry-run pushes of every file, strict (every problem refuses) and default."""
    from catalog_lake import Catalog
    from catalog_lake.sources import read_push

    catalog = Catalog(folder / "_no_lake_")  # dry runs: nothing is created
    report: dict[str, Any] = {}
    for strict in (True, False):
        received = stored = 0
        errors: Counter = Counter()
        warnings: Counter = Counter()
        for path in sorted(folder.glob("*.json")):
            response = catalog.push(read_push(path), strict=strict, dry_run=True)
            received += int(response["catalog_push_received_product_count"])
            stored += int(response["catalog_push_success_product_count"])
            for failed in response["catalog_push_failed_items"]:
                errors.update({(e["field"], e["code"]) for e in failed["errors"]})
            for warned in response["catalog_push_warning_items"]:
                warnings.update({(w["field"], w["code"], w["action"]) for w in warned["warnings"]})
        report["strict" if strict else "default"] = {
            "received": received,
            "stored": stored,
            "share": round(100 * stored / max(received, 1), 2),
            "items_refused_for": errors.most_common(12),
            "items_warned_for": warnings.most_common(12),
        }
    return report


if __name__ == "__main__":
    if sys.argv[1] == "--measure":
        print(json.dumps(measure(Path(sys.argv[2])), indent=1, default=str))
    else:
        print(dict(convert(Path(sys.argv[1]), Path(sys.argv[2]))))
