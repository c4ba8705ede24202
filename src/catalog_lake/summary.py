"""Push responses (SPEC 2.7) and run summaries, as plain data.

Pure functions: they take what happened and return dicts, so the library,
the CLI and the flows all report in exactly the same shape.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

RESPONSE_KEYS = (
    "catalog_push_request_id",
    "catalog_push_received_product_count",
    "catalog_push_success_product_count",
    "catalog_push_failed_product_count",
    "items",
)
#: Our one extension to SPEC 2.7, which leaves failed-item details unstated.
FAILED_ITEMS_KEY = "catalog_push_failed_items"


def push_response(
    request_id: str,
    received: int,
    stored: list[tuple[str, int]],
    failed: list[dict[str, Any]],
) -> dict[str, Any]:
    """The SPEC 2.7 response: counts as numeric text, ids as numeric text.

    ``stored`` is ``(client_item_id, service_id)`` in input order; ``failed``
    holds one entry per failed item.
    """
    if received != len(stored) + len(failed):
        raise ValueError(f"{received} received but {len(stored)} stored + {len(failed)} failed")
    return {
        "catalog_push_request_id": request_id,
        "catalog_push_received_product_count": str(received),
        "catalog_push_success_product_count": str(len(stored)),
        "catalog_push_failed_product_count": str(len(failed)),
        "items": [{client_id: str(service_id)} for client_id, service_id in stored],
        FAILED_ITEMS_KEY: failed,
    }


def failure_codes(response: dict[str, Any]) -> Counter[str]:
    """How often each error code occurred among a response's failed items."""
    return Counter(
        error["code"] for item in response.get(FAILED_ITEMS_KEY, []) for error in item["errors"]
    )
