"""`sync TARGET --apply INDEX_URL` loads each engine as its API documents (issue 43).

No engine server installs here, so a recording HTTP server on 127.0.0.1 stands in
for each: it checks every request against the engine's documented API (method,
path, query, headers, body shape; Algolia's bodies through its own client
model) and answers as the engine does. A refused load leaves the cursor where it
was, so the next sync sends the same range again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from catalog_lake import Catalog, UsageError
from catalog_lake.loaders import EngineError
from tests.conftest import make_item


def _check_algolia(request: dict) -> tuple[int, dict]:
    from algoliasearch.search.models.batch_write_params import BatchWriteParams

    assert (request["method"], request["path"]) == ("POST", "/1/indexes/products/batch")
    assert request["headers"]["x-algolia-application-id"] == "APP"
    assert request["headers"]["x-algolia-api-key"] == "secret"
    body = BatchWriteParams.from_json(request["body"])
    return 200, {"taskID": 1, "objectIDs": [r.body.get("objectID") for r in body.requests]}


def _check_meilisearch(request: dict) -> tuple[int, dict]:
    assert request["headers"]["authorization"] == "Bearer secret"
    if request["path"] == "/indexes/products/documents":
        assert request["method"] == "POST" and request["query"] == {"primaryKey": ["object_id"]}
        assert request["headers"]["content-type"] == "application/x-ndjson"
        documents = [json.loads(line) for line in request["body"].splitlines()]
        assert documents and all("object_id" in d for d in documents)
    else:
        assert (request["method"], request["path"]) == (
            "POST", "/indexes/products/documents/delete-batch")  # fmt: skip
        ids = json.loads(request["body"])
        assert ids and all(isinstance(i, str) for i in ids)
    return 202, {"taskUid": 7, "status": "enqueued"}


def _check_typesense(request: dict) -> tuple[int, object]:
    assert request["headers"]["x-typesense-api-key"] == "secret"
    if request["method"] == "POST":
        assert request["path"] == "/collections/products/documents/import"
        assert request["query"] == {"action": ["upsert"]}
        documents = [json.loads(line) for line in request["body"].splitlines()]
        assert all(isinstance(d["id"], str) for d in documents)
        return 200, "\n".join(json.dumps({"success": True}) for _ in documents)
    assert (request["method"], request["path"]) == ("DELETE", "/collections/products/documents")
    (condition,) = request["query"]["filter_by"]
    assert condition.startswith("id:[") and condition.endswith("]")
    return 200, {"num_deleted": len(condition[4:-1].split(","))}


def _check_bulk(request: dict) -> tuple[int, dict]:
    assert (request["method"], request["path"]) == ("POST", "/products/_bulk")
    assert request["headers"]["content-type"] == "application/x-ndjson"
    assert request["body"].endswith("\n")  # _bulk's NDJSON ends with a newline
    lines = [json.loads(line) for line in request["body"].splitlines()]
    items, position = [], 0
    while position < len(lines):
        ((action, meta),) = lines[position].items()
        assert action in ("index", "delete") and "_index" not in meta  # the URL names it
        position += 2 if action == "index" else 1
        items.append({action: {"_id": meta["_id"], "status": 200}})
    return 200, {"errors": False, "items": items}


CHECKS = {
    "algolia": (_check_algolia, "/1/indexes/products"),
    "meilisearch": (_check_meilisearch, "/indexes/products"),
    "typesense": (_check_typesense, "/collections/products"),
    "elasticsearch": (_check_bulk, "/products"),
    "opensearch": (_check_bulk, "/products"),
}


@contextmanager
def engine(fmt: str, fail_first: int = 0, refuse: bool = False) -> Iterator[tuple[str, list]]:
    """A recording stand-in for ``fmt``'s engine on loopback; yields (index URL, requests)."""
    check, index = CHECKS[fmt]
    seen: list[dict] = []
    failures = [fail_first]

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            request = {
                "method": self.command,
                "path": parts.path,
                "query": parse_qs(parts.query),
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": self.rfile.read(length).decode(),
            }
            seen.append(request)
            if failures[0] > 0:
                failures[0] -= 1
                status, answer = 503, {"message": "overloaded"}
            elif refuse:
                status, answer = 400, {"message": "invalid document"}
            else:
                status, answer = check(request)
            data = answer if isinstance(answer, str) else json.dumps(answer)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data.encode())

        do_POST = do_DELETE = do_PUT = _answer

        def log_message(self, *args) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}{index}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def credentials(monkeypatch):
    for name, value in (("ALGOLIA_APPLICATION_ID", "APP"), ("ALGOLIA_API_KEY", "secret"),
                        ("MEILISEARCH_API_KEY", "secret"), ("TYPESENSE_API_KEY", "secret")):  # fmt: skip
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("fmt", list(CHECKS))
def test_a_sync_loads_its_upserts_then_its_deletes_as_the_engine_documents(
    tmp_path, credentials, fmt
):
    catalog = Catalog(tmp_path / "lake")
    catalog.push({"items": [make_item(client_item_id=f"SKU-{n}") for n in range(3)]})
    with engine(fmt) as (url, requests):
        first = catalog.sync(str(tmp_path / "out"), fmt, apply=url)
        assert first["applied"]["requests"] == len(requests) >= 1
        catalog.delete(["SKU-1"])
        requests.clear()
        second = catalog.sync(str(tmp_path / "out"), fmt, apply=url)
    assert second["deletes"] == 1 and second["applied"]["requests"] == len(requests) >= 1
    if fmt in ("meilisearch", "typesense"):  # a deletes-only range: no documents request
        assert all("delete" in r["path"] or r["method"] == "DELETE" for r in requests)


@pytest.mark.parametrize("fmt", ["meilisearch", "elasticsearch"])
def test_a_busy_engine_is_asked_again_and_a_refusal_leaves_the_cursor_where_it_was(
    tmp_path, credentials, fmt
):
    catalog = Catalog(tmp_path / "lake")
    catalog.push({"items": [make_item(client_item_id="A")]})
    with engine(fmt, fail_first=2) as (url, requests):
        assert catalog.sync(str(tmp_path / "out"), fmt, apply=url)["applied"]["requests"] == 1
        assert len(requests) == 3  # two 503s, then the load
    catalog.push({"items": [make_item(client_item_id="B")]})
    with engine(fmt, refuse=True) as (url, _), pytest.raises(EngineError, match="answered 400"):
        catalog.sync(str(tmp_path / "out"), fmt, apply=url)
    with engine(fmt) as (url, requests):
        again = catalog.sync(str(tmp_path / "out"), fmt, apply=url)
    assert (again["from_version"], again["upserts"]) == (1, 1)  # the same range, sent again


@pytest.mark.parametrize(
    ("fmt", "url", "unset", "message"),
    [
        ("jsonl", "http://127.0.0.1:9/x", None, "jsonl has no engine"),
        ("meilisearch", "ftp://127.0.0.1/x", None, r"takes the index's http\(s\) URL"),
        ("algolia", "http://127.0.0.1:9/1/indexes/x", "ALGOLIA_API_KEY",
         "needs ALGOLIA_API_KEY set"),
        ("typesense", "http://127.0.0.1:9/collections/x", "TYPESENSE_API_KEY",
         "needs TYPESENSE_API_KEY set"),
    ],
)  # fmt: skip
def test_a_load_that_cannot_be_made_is_refused_before_anything_is_written(
    tmp_path, credentials, monkeypatch, fmt, url, unset, message
):
    if unset:
        monkeypatch.delenv(unset)
    catalog = Catalog(tmp_path / "lake")
    catalog.push({"items": [make_item(client_item_id="A")]})
    with pytest.raises(UsageError, match=message):
        catalog.sync(str(tmp_path / "out"), fmt, apply=url)
    assert not (tmp_path / "out").exists()


def test_the_cli_applies_and_prints_what_it_sent(tmp_path, credentials):
    from typer.testing import CliRunner

    from catalog_lake.cli import app

    catalog = Catalog(tmp_path / "lake")
    catalog.push({"items": [make_item(client_item_id="A")]})
    with engine("typesense") as (url, requests):
        ran = CliRunner().invoke(app, ["sync", str(tmp_path / "out"), "--format", "typesense",
                                       "--lake", str(tmp_path / "lake"), "--apply", url])  # fmt: skip
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["applied"] == {"engine": "typesense", "url": url, "requests": 1}
    assert "secret" not in ran.output


def test_an_engine_that_never_answers_or_stays_busy_is_one_line(tmp_path, credentials):
    from catalog_lake import loaders

    catalog = Catalog(tmp_path / "lake")
    catalog.push({"items": [make_item(client_item_id="A")]})
    with pytest.raises(EngineError, match="could not be reached"):  # nothing listens on 9
        catalog.sync(str(tmp_path / "out"), "meilisearch", apply="http://127.0.0.1:9/indexes/x")
    with engine("meilisearch", fail_first=loaders.ATTEMPTS) as (url, requests):
        with pytest.raises(EngineError, match=f"answered 503 {loaders.ATTEMPTS} times"):
            catalog.sync(str(tmp_path / "out"), "meilisearch", apply=url)
    assert len(requests) == loaders.ATTEMPTS


@pytest.mark.parametrize("fmt", ["meilisearch", "typesense", "elasticsearch"])
def test_a_large_file_goes_in_bodies_under_the_engines_limit_never_splitting_an_action(
    tmp_path, credentials, monkeypatch, fmt
):
    from catalog_lake import loaders

    monkeypatch.setattr(loaders, "BODY_LINES", 3)  # as 10,000 lines would, at a small scale
    catalog = Catalog(tmp_path / "lake")
    catalog.push({"items": [make_item(client_item_id=f"SKU-{n}") for n in range(7)]})
    with engine(fmt) as (url, requests):  # the server checks each body is whole
        applied = catalog.sync(str(tmp_path / "out"), fmt, apply=url)["applied"]
    bodies = [r["body"].splitlines() for r in requests]
    assert applied["requests"] == len(requests) > 1
    assert all(len(lines) <= (4 if fmt == "elasticsearch" else 3) for lines in bodies)
    assert sum(len(lines) for lines in bodies) == (14 if fmt == "elasticsearch" else 7)
