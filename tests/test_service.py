"""The service (docs/service.md): the library over HTTP, each key bound to one seller.

In-process through httpx (Starlette's TestClient, which runs the app's start and
stop); tests/test_service_server.py drives a real ``catalog-lake serve``.
"""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from catalog_lake import Catalog, access
from catalog_lake.service import Limits, create_app
from tests.conftest import NOW, Clock, make_item

ALL = ",".join(access.ACTIONS)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def items(*ids: str, price: str = "289.00", name: str | None = None) -> dict:
    made = []
    for client_item_id in ids:
        item = make_item(client_item_id=client_item_id, pricing_info__sale_price=price)
        if name:
            item["name"] = name
        made.append(item)
    return {"items": made}


class Service:
    """A lake, its keys, and a client of the app over it."""

    def __init__(self, tmp_path, clock: Clock, limits: Limits | None = None) -> None:
        self.catalog = Catalog(tmp_path / "lake", clock=clock)
        self.clock = clock
        self.keys: dict[str, str] = {}
        self.app = create_app(self.catalog, limits, keys_refresh=0.05, clock=clock)

    def key(self, seller: str, actions: str = ALL, **kwargs) -> str:
        text, _ = access.create(self.catalog.lake, seller, actions, now=self.clock(), **kwargs)
        return text

    def client(self) -> TestClient:
        return TestClient(self.app)


@pytest.fixture
def service(tmp_path, clock):
    return Service(tmp_path, clock)


@pytest.fixture
def acme(service):
    return service.key("acme")


@pytest.fixture
def zeta(service):
    return service.key("zeta")


def test_a_push_over_http_answers_the_spec_push_response_exactly_as_the_library(
    service, acme, tmp_path, clock
):
    payload = items("SKU-1", "SKU-2")
    with service.client() as client:
        answer = client.post("/v1/push", json=payload, headers=bearer(acme))
    library = Catalog(tmp_path / "other", clock=clock).push(payload, seller="acme")
    assert answer.status_code == 200
    body = answer.json()
    assert body.keys() == library.keys()
    assert {k: v for k, v in body.items() if k != "catalog_push_request_id"} == {
        k: v for k, v in library.items() if k != "catalog_push_request_id"
    }
    assert body["items"] == [{"SKU-1": "1"}, {"SKU-2": "2"}]
    assert body["catalog_push_success_product_count"] == "2"


def test_the_seller_comes_from_the_key_alone(service, acme, zeta):
    with service.client() as client:
        client.post("/v1/push", json=items("SKU-1"), headers=bearer(acme))
        # A seller named in the request is not a seller: the key's seller is.
        client.post(
            "/v1/push?seller=acme", json=items("SKU-1", price="199.00"), headers=bearer(zeta)
        )
    records = service.catalog.records()
    assert sorted(zip(records["seller"], records["price"], strict=True)) == [
        ("acme", 289.0),
        ("zeta", 199.0),
    ]


def test_two_sellers_pushing_the_same_id_get_two_items_and_each_reads_only_its_own(
    service, acme, zeta
):
    with service.client() as client:
        one = client.post("/v1/push", json=items("SKU-1"), headers=bearer(acme)).json()
        two = client.post(
            "/v1/push", json=items("SKU-1", price="199.00"), headers=bearer(zeta)
        ).json()
        assert one["items"] == [{"SKU-1": "1"}] and two["items"] == [{"SKU-1": "2"}]
        mine = client.get("/v1/items/SKU-1", headers=bearer(acme)).json()
        theirs = client.get("/v1/items/SKU-1", headers=bearer(zeta)).json()
    assert (mine["object_id"], mine["seller"], mine["price"]) == (1, "acme", 289.0)
    assert (theirs["object_id"], theirs["seller"], theirs["price"]) == (2, "zeta", 199.0)


def test_another_sellers_item_is_404_exactly_as_one_that_does_not_exist(service, acme, zeta):
    with service.client() as client:
        client.post("/v1/push", json=items("ONLY-ACME"), headers=bearer(acme))
        client.post("/v1/push", json=items("ZETA-1"), headers=bearer(zeta))
        theirs = client.get("/v1/items/ONLY-ACME", headers=bearer(zeta))
        nobody = client.get("/v1/items/NO-SUCH", headers=bearer(zeta))
    assert theirs.status_code == nobody.status_code == 404
    assert (
        theirs.json()
        == nobody.json()
        == {"error": {"code": "not_found", "message": "no such item"}}
    )


def test_healthz_needs_no_key_and_everything_else_does(service):
    with service.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        for method, path in [
            ("post", "/v1/push"),
            ("post", "/v1/delete"),
            ("get", "/v1/items/SKU-1"),
            ("get", "/v1/search?q=atta"),
            ("get", "/v1/changes?since=0"),
            ("get", "/v1/limits"),
        ]:
            answer = getattr(client, method)(path)
            assert answer.status_code == 401, path
            assert answer.json()["error"]["code"] == "unauthorized"


def test_a_caller_without_a_key_learns_nothing_of_its_body(service):
    with service.client() as client:
        for path in ("/v1/push", "/v1/delete"):
            answer = client.post(path, content=b"{not json", headers={"Content-Type": "x"})
            assert answer.status_code == 401, path


@pytest.mark.parametrize(
    "header",
    [
        "Bearer clk_0123456789abcdef_" + "A" * 43,  # the right shape, no such key
        "Bearer not-a-key",
        "Basic dXNlcjpwYXNz",
        "Bearer ",
    ],
)
def test_an_unknown_or_malformed_key_is_401(service, acme, header):
    with service.client() as client:
        answer = client.get("/v1/limits", headers={"Authorization": header})
    assert answer.status_code == 401
    assert set(answer.json()) == {"error"}


def test_a_key_with_a_wrong_secret_is_401(service, acme):
    forged = acme[:-4] + ("AAAA" if not acme.endswith("AAAA") else "BBBB")
    with service.client() as client:
        assert client.get("/v1/limits", headers=bearer(forged)).status_code == 401
        assert client.get("/v1/limits", headers=bearer(acme)).status_code == 200


def test_a_revoked_key_stops_working_while_the_server_runs(service, acme):
    import time

    key_id = access.KEY.fullmatch(acme).group(1)
    with service.client() as client:
        assert client.get("/v1/limits", headers=bearer(acme)).status_code == 200
        access.revoke(service.catalog.lake, key_id, now=service.clock())
        deadline = time.monotonic() + 10
        while client.get("/v1/limits", headers=bearer(acme)).status_code == 200:
            assert time.monotonic() < deadline, "the revoked key still works"
            time.sleep(0.05)
        assert client.get("/v1/limits", headers=bearer(acme)).json()["error"] == {
            "code": "unauthorized",
            "message": "the key is unknown, revoked or expired",
        }


def test_an_expired_key_is_401(service, clock):
    key = service.key("acme", expires_at=NOW + timedelta(hours=1))
    with service.client() as client:
        assert client.get("/v1/limits", headers=bearer(key)).status_code == 200
        clock.now = NOW + timedelta(hours=1)
        assert client.get("/v1/limits", headers=bearer(key)).status_code == 401


def test_an_action_the_key_lacks_is_403(service):
    reader = service.key("acme", "read")
    with service.client() as client:
        pushed = client.post("/v1/push", json=items("SKU-1"), headers=bearer(reader))
        deleted = client.post("/v1/delete", json={"ids": ["SKU-1"]}, headers=bearer(reader))
        searched = client.get("/v1/search?q=x", headers=bearer(reader))
    for answer, action in [(pushed, "push"), (deleted, "delete"), (searched, "search")]:
        assert answer.status_code == 403
        assert answer.json() == {
            "error": {"code": "forbidden", "message": f"this key may not {action}"}
        }
    assert service.catalog.lake.version("items") is None  # nothing was written


def test_a_body_over_the_limit_is_413_and_nothing_is_written(tmp_path, clock):
    service = Service(tmp_path, clock, Limits(max_body_bytes=2_000))
    key = service.key("acme")
    with service.client() as client:
        answer = client.post("/v1/push", json=items("A", "B", "C"), headers=bearer(key))
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "payload_too_large"
    assert "2,000 bytes" in answer.json()["error"]["message"]
    assert service.catalog.lake.version("items") is None


def test_more_items_than_a_push_may_hold_is_413(tmp_path, clock):
    service = Service(tmp_path, clock, Limits(max_items_per_push=2))
    key = service.key("acme")
    with service.client() as client:
        answer = client.post("/v1/push", json=items("A", "B", "C"), headers=bearer(key))
        limits = client.get("/v1/limits", headers=bearer(key)).json()
    assert answer.status_code == 413
    assert answer.json()["error"] == {
        "code": "too_many_items",
        "message": "3 items, over the limit of 2 per push; send them in several pushes",
    }
    assert limits["max_items_per_push"] == 2


@pytest.mark.parametrize(
    "body",
    [
        b'{"items": "no"}',
        b"[1, 2]",
        b'{"products": []}',
        b"{not json",
        b"",
        b'{"items": [1]}',
    ],
)
def test_a_payload_that_is_not_a_product_object_is_422(service, acme, body):
    with service.client() as client:
        answer = client.post(
            "/v1/push",
            content=body,
            headers={**bearer(acme), "Content-Type": "application/json"},
        )
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["code"] in {"invalid_payload", "invalid_json"}
    assert "\n" not in error["message"] and "Traceback" not in error["message"]


def test_items_that_fail_validation_are_refused_one_by_one_in_a_200(service, acme):
    payload = items("GOOD")
    payload["items"].append(make_item(client_item_id="BAD", pricing_info__mrp="free"))
    with service.client() as client:
        answer = client.post("/v1/push", json=payload, headers=bearer(acme)).json()
    assert answer["catalog_push_success_product_count"] == "1"
    assert answer["catalog_push_failed_items"][0]["client_item_id"] == "BAD"


def test_the_keys_rate_is_enforced_with_retry_after(tmp_path, clock):
    service = Service(tmp_path, clock, Limits(rate_limit="3/minute"))
    key, other = service.key("acme"), service.key("zeta")
    with service.client() as client:
        codes = [client.get("/v1/limits", headers=bearer(key)).status_code for _ in range(4)]
        refused = client.get("/v1/limits", headers=bearer(key))
        beside = client.get("/v1/limits", headers=bearer(other))  # per key, not per server
    assert codes == [200, 200, 200, 429]
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.json()["error"]["code"] == "rate_limited"
    assert beside.status_code == 200


def test_an_idempotency_key_replays_the_same_push_and_refuses_other_content_with_409(service, acme):
    headers = {**bearer(acme), "Idempotency-Key": "order-17"}
    with service.client() as client:
        first = client.post("/v1/push", json=items("SKU-1"), headers=headers).json()
        again = client.post("/v1/push", json=items("SKU-1"), headers=headers).json()
        other = client.post("/v1/push", json=items("SKU-2"), headers=headers)
    assert again == first
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    assert len(service.catalog.pushes()) == 1


def test_the_same_idempotency_key_under_two_sellers_is_two_pushes(service, acme, zeta):
    with service.client() as client:
        one = client.post(
            "/v1/push", json=items("SKU-1"), headers={**bearer(acme), "Idempotency-Key": "k-1"}
        ).json()
        two = client.post(
            "/v1/push", json=items("SKU-1"), headers={**bearer(zeta), "Idempotency-Key": "k-1"}
        ).json()
    assert one["catalog_push_request_id"] != two["catalog_push_request_id"]
    assert one["items"] == [{"SKU-1": "1"}] and two["items"] == [{"SKU-1": "2"}]


def test_dry_run_answers_and_writes_nothing_and_strict_refuses_warnings(service, acme):
    with service.client() as client:
        dry = client.post("/v1/push?dry_run=true", json=items("SKU-1"), headers=bearer(acme))
        warned = items("SKU-2")
        warned["items"][0]["images"] = ["not a url", "https://img.example.com/a.jpg"]
        lenient = client.post("/v1/push", json=warned, headers=bearer(acme)).json()
        warned["items"][0]["client_item_id"] = "SKU-3"
        strict = client.post("/v1/push?strict=true", json=warned, headers=bearer(acme)).json()
    assert dry.status_code == 200 and dry.json()["catalog_push_dry_run"] is True
    assert dry.json()["items"] == [{"SKU-1": None}]
    assert lenient["catalog_push_success_product_count"] == "1"
    assert lenient["catalog_push_warning_items"]
    assert strict["catalog_push_failed_product_count"] == "1"
    assert list(service.catalog.records()["client_item_id"]) == ["SKU-2"]


def test_a_delete_by_one_seller_leaves_the_others_item_as_it_was(service, acme, zeta):
    with service.client() as client:
        client.post("/v1/push", json=items("SKU-1", "SKU-2"), headers=bearer(acme))
        client.post("/v1/push", json=items("SKU-1"), headers=bearer(zeta))
        answer = client.post("/v1/delete", json={"ids": ["SKU-1"]}, headers=bearer(acme))
        gone = client.get("/v1/items/SKU-1", headers=bearer(acme))
        kept = client.get("/v1/items/SKU-1", headers=bearer(zeta))
    assert answer.status_code == 200
    assert answer.json()["items"][0]["status"] == "deleted"
    assert gone.status_code == 404 and kept.status_code == 200
    assert kept.json()["seller"] == "zeta"


def test_a_delete_of_a_seller_with_no_items_is_404_and_touches_nobody(service, acme, zeta):
    with service.client() as client:
        client.post("/v1/push", json=items("SKU-1"), headers=bearer(acme))
        answer = client.post("/v1/delete", json={"ids": ["SKU-1"]}, headers=bearer(zeta))
        bad = client.post("/v1/delete", json={"ids": "SKU-1"}, headers=bearer(acme))
    assert answer.status_code == 404
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
    assert list(service.catalog.records()["client_item_id"]) == ["SKU-1"]


def test_search_filters_by_the_keys_seller_inside_the_index(service, acme, zeta):
    with service.client() as client:
        client.post("/v1/push", json=items("A-1", "A-2", name="Blue Kurta"), headers=bearer(acme))
        client.post("/v1/push", json=items("Z-1", name="Blue Kurta"), headers=bearer(zeta))
        mine = client.get(
            "/v1/search", params={"q": "kurta", "all_variants": "true"}, headers=bearer(acme)
        ).json()
        theirs = client.get(
            "/v1/search",
            params={"q": "kurta", "all_variants": "true", "facet": "brand"},
            headers=bearer(zeta),
        ).json()
        library = service.catalog.search("kurta", distinct=False, seller="acme")
        too_far = client.get("/v1/search", params={"hits_per_page": 5000}, headers=bearer(acme))
    assert mine["nb_hits"] == 2 == library["nb_hits"]
    assert {h["seller"] for h in mine["hits"]} == {"acme"}
    assert [h["object_id"] for h in theirs["hits"]] == ["3"]
    assert theirs["facets"]["brand"] == {"Aashirvaad": 1}
    assert too_far.status_code == 422


def test_the_change_feed_carries_only_the_keys_seller_and_pages_by_id(service, acme, zeta):
    with service.client() as client:
        client.post("/v1/push", json=items("A-1", "A-2", "A-3"), headers=bearer(acme))
        since = service.catalog.lake.version("records")
        client.post("/v1/push", json=items("A-1"), headers=bearer(zeta))
        client.post("/v1/push", json=items("A-1", "A-3", price="199.00"), headers=bearer(acme))
        client.post("/v1/delete", json={"ids": ["A-2"]}, headers=bearer(acme))
        first = client.get(f"/v1/changes?since={since}&limit=1", headers=bearer(acme)).json()
        rest = client.get(
            f"/v1/changes?since={since}&limit=5&until={first['until']}&after={first['next_after']}",
            headers=bearer(acme),
        ).json()
        theirs = client.get(f"/v1/changes?since={since}", headers=bearer(zeta)).json()
        beyond = client.get("/v1/changes?since=99", headers=bearer(acme))
    assert [(r["client_item_id"], r["price"]) for r in first["upserts"]] == [("A-1", 199.0)]
    assert first["deletes"] == [] and first["next_after"] == "1"
    assert [r["client_item_id"] for r in rest["upserts"]] == ["A-3"]
    assert rest["deletes"] == ["2"] and rest["next_after"] is None
    assert [(r["client_item_id"], r["seller"]) for r in theirs["upserts"]] == [("A-1", "zeta")]
    assert beyond.status_code == 422


def test_limits_are_published(service, acme):
    with service.client() as client:
        limits = client.get("/v1/limits", headers=bearer(acme)).json()
    assert limits["max_body_bytes"] == 32 * 1024 * 1024
    assert limits["max_items_per_push"] == 10_000
    assert limits["rate_limit"] is None and limits["rate_limit_scope"] == "key"


def test_every_error_has_one_shape_and_no_traceback(service, acme):
    with service.client() as client:
        answers = [
            client.get("/v2/nothing"),
            client.delete("/v1/push", headers=bearer(acme)),
            client.get("/v1/search?page=-1", headers=bearer(acme)),
            client.post(
                "/v1/push", json=items("A"), headers={**bearer(acme), "Idempotency-Key": ""}
            ),
        ]
    for answer in answers:
        assert answer.status_code in {404, 405, 422}
        assert set(answer.json()) == {"error"}
        assert set(answer.json()["error"]) == {"code", "message"}
        assert "Traceback" not in answer.text


def test_a_server_failure_is_500_in_the_one_shape_without_a_traceback(tmp_path, clock):
    service = Service(tmp_path, clock)
    key = service.key("acme")

    def broken(*args, **kwargs):
        raise RuntimeError("secret internals /etc/passwd")

    service.catalog.search = broken
    with TestClient(service.app, raise_server_exceptions=False) as client:
        answer = client.get("/v1/search?q=x", headers=bearer(key))
    assert answer.status_code == 500
    assert answer.json() == {
        "error": {
            "code": "internal_error",
            "message": "the server failed this request; see its log",
        }
    }


def test_the_openapi_document_describes_every_endpoint_and_status(service):
    with service.client() as client:
        document = client.get("/openapi.json").json()
    paths = document["paths"]
    assert set(paths) == {
        "/healthz",
        "/v1/limits",
        "/v1/push",
        "/v1/delete",
        "/v1/items/{client_item_id}",
        "/v1/search",
        "/v1/changes",
    }
    push = paths["/v1/push"]["post"]
    assert {"200", "401", "403", "409", "413", "422", "429"} <= set(push["responses"])
    assert "bearerAuth" in json.dumps(document) or "HTTPBearer" in json.dumps(document)


def run_isolation(service: Service, steps: int, seed: int) -> dict[str, int]:
    """Random pushes, deletes, reads and searches under three sellers' keys, all checked.

    Each seller's ids collide with the others' (``I-0`` .. ``I-7`` for all three).
    A model of each seller's items says what every answer must be; no answer may
    show, change, delete or replay another seller's item.
    """
    rng = random.Random(seed)
    sellers = ["acme", "zeta", "omni"]
    keys = {s: service.key(s) for s in sellers}
    model: dict[str, dict[str, str]] = {s: {} for s in sellers}  # id -> price
    ids: dict[tuple[str, str], str] = {}  # (seller, client id) -> service id
    answers: dict[tuple[str, str], dict] = {}  # (seller, idempotency key) -> answer
    counts = {"push": 0, "delete": 0, "read": 0, "search": 0}
    with service.client() as client:
        for step in range(steps):
            seller = rng.choice(sellers)
            headers = bearer(keys[seller])
            action = rng.choice(["push", "push", "delete", "read", "search"])
            counts[action] += 1
            chosen = rng.sample([f"I-{n}" for n in range(8)], rng.randint(1, 3))
            if action == "push":
                price = f"{rng.randint(100, 299)}.00"
                key = f"k-{step % 4}" if rng.random() < 0.3 else None  # shared by every seller
                sent = {**headers, **({"Idempotency-Key": key} if key else {})}
                answer = client.post("/v1/push", json=items(*chosen, price=price), headers=sent)
                if answer.status_code == 409:
                    continue  # the seller's key already stands for other content
                body = answer.json()
                assert answer.status_code == 200, body
                earlier = answers.get((seller, key)) if key else None
                if earlier is not None:  # a replay: this seller's own earlier answer
                    assert body == earlier
                    continue
                if key:
                    answers[(seller, key)] = body
                for pair in body["items"]:
                    ((client_id, object_id),) = pair.items()
                    assert ids.setdefault((seller, client_id), object_id) == object_id
                for client_id in chosen:
                    model[seller][client_id] = price
            elif action == "delete":
                answer = client.post("/v1/delete", json={"ids": chosen}, headers=headers)
                if not any(k[0] == seller for k in ids):
                    assert answer.status_code == 404
                    continue
                assert answer.status_code == 200, answer.text
                for client_id in chosen:
                    model[seller].pop(client_id, None)
            elif action == "read":
                for client_id in chosen:
                    found = client.get(f"/v1/items/{client_id}", headers=headers)
                    if client_id in model[seller]:
                        record = found.json()
                        assert found.status_code == 200, record
                        assert record["seller"] == seller
                        assert str(record["object_id"]) == ids[(seller, client_id)]
                        assert f"{record['price']:.2f}" == model[seller][client_id]
                    else:
                        assert found.status_code == 404
            else:
                found = client.get(
                    "/v1/search",
                    params={"all_variants": "true", "hits_per_page": 50},
                    headers=headers,
                ).json()
                shown = {str(h["object_id"]) for h in found["hits"]}
                assert shown == {ids[(seller, c)] for c in model[seller]}
                assert {h["seller"] for h in found["hits"]} <= {seller}
    assert len(set(ids.values())) == len(ids)  # service ids unique across sellers
    return counts


def test_no_request_reads_changes_deletes_or_replays_another_sellers_item(service):
    counts = run_isolation(service, steps=240, seed=7)
    assert min(counts.values()) > 10
    for seller in ("acme", "zeta", "omni"):
        records = service.catalog.records(seller=seller)
        assert set(records["seller"]) <= {seller}


# --- the OpenAPI document, held to what the app answers (schemathesis) -------------------


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    catalog = Catalog(tmp_path_factory.mktemp("schemathesis") / "lake")
    catalog.push(items("SKU-1", "SKU-2"), seller="acme")
    key, _ = access.create(catalog.lake, "acme", ALL, now=NOW)
    app = create_app(catalog, Limits(max_body_bytes=64 * 1024, max_items_per_push=20))
    return schemathesis.openapi.from_asgi("/openapi.json", app), key


OPERATIONS = [
    "GET /healthz",
    "GET /v1/limits",
    "POST /v1/push",
    "POST /v1/delete",
    "GET /v1/items/{client_item_id}",
    "GET /v1/search",
    "GET /v1/changes",
]


@pytest.mark.parametrize("label", OPERATIONS)
def test_no_generated_request_gets_a_5xx_or_an_undocumented_answer(api_schema, label):
    """Requests made from the app's own OpenAPI document, valid and not, under a real key."""

    schema, key = api_schema
    (operation,) = [o.ok() for o in schema.get_all_operations() if o.ok().label == label]

    strategy = operation.as_strategy() | operation.as_strategy(GenerationMode.NEGATIVE)

    @given(case=strategy)
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    def check(case):
        case.call_and_validate(
            headers={"Authorization": f"Bearer {key}"},
            checks=[
                not_a_server_error,
                status_code_conformance,
                content_type_conformance,
                response_schema_conformance,
            ],
        )

    check()
