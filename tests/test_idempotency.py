"""Retrying a push with its idempotency key is safe."""

from __future__ import annotations

import json

import pytest

from catalog_lake import PushError
from tests.conftest import make_item

PAYLOAD = {"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]}


def test_same_key_same_payload_returns_the_original_response_and_writes_nothing(catalog):
    first = catalog.push(PAYLOAD, idempotency_key="order-42")
    versions = {t: catalog.lake.version(t) for t in ("raw", "items", "records", "pushes")}
    again = catalog.push(json.dumps(PAYLOAD), idempotency_key="order-42")  # text or dict alike
    assert again == first
    assert {t: catalog.lake.version(t) for t in versions} == versions


def test_same_key_different_payload_is_refused(catalog):
    catalog.push(PAYLOAD, idempotency_key="order-42")
    with pytest.raises(PushError, match="already used for a different payload") as caught:
        catalog.push({"items": [make_item(client_item_id="c")]}, idempotency_key="order-42")
    assert caught.value.reason == "idempotency_conflict"
    assert len(catalog.pushes()) == 1


def test_without_a_key_a_repeat_is_a_new_push_with_the_same_ids(catalog):
    first = catalog.push(PAYLOAD)
    second = catalog.push(PAYLOAD)
    assert second["catalog_push_request_id"] != first["catalog_push_request_id"]
    assert second["items"] == first["items"]
    assert len(catalog.items()) == 2


@pytest.mark.parametrize("key", ["", "   ", "k" * 257])
def test_key_must_be_sensible(catalog, key):
    with pytest.raises(PushError, match="idempotency_key must be 1 to 256 characters"):
        catalog.push(PAYLOAD, idempotency_key=key)
