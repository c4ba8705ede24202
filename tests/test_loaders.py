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
from pathlib import Path
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
    if request["method"] == "GET":  # the tasks it queued, which a load waits for
        assert request["path"] == "/tasks"
        (uids,) = request["query"]["uids"]
        return 200, {"results": [{"uid": int(u), "status": "succeeded"} for u in uids.split(",")]}
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

        do_POST = do_DELETE = do_PUT = do_GET = _answer

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


def _loads(requests: list[dict]) -> list[dict]:
    """The requests that load: not Meilisearch's task polls."""
    return [r for r in requests if r["method"] != "GET"]


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
        assert first["applied"]["requests"] == len(_loads(requests)) >= 1
        catalog.delete(["SKU-1"])
        requests.clear()
        second = catalog.sync(str(tmp_path / "out"), fmt, apply=url)
    requests = _loads(requests)
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
        assert len(_loads(requests)) == 3  # two 503s, then the load
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
    requests = _loads(requests)
    bodies = [r["body"].splitlines() for r in requests]
    assert applied["requests"] == len(requests) > 1
    assert all(len(lines) <= (4 if fmt == "elasticsearch" else 3) for lines in bodies)
    assert sum(len(lines) for lines in bodies) == (14 if fmt == "elasticsearch" else 7)


# --- hostile engines (issue 50): only a documented success is a load, and no secret shows ----


@contextmanager
def loopback(answer) -> Iterator[tuple[str, list]]:
    """A server on 127.0.0.1 answering every request with ``answer(request)``.

    ``answer`` returns (status, headers, body): body is bytes, or an iterator of
    bytes written one chunk at a time (a trickle). Yields (base URL, requests seen).
    """
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

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
            status, headers, body = answer(request)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if isinstance(body, bytes):
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for chunk in body:
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up, as it should
            self.close_connection = True

        do_POST = do_DELETE = do_PUT = do_GET = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()


def _json(status: int, value, **headers) -> tuple[int, dict, bytes]:
    return status, {"Content-Type": "application/json", **headers}, json.dumps(value).encode()


@pytest.fixture
def shop(tmp_path, run, credentials, monkeypatch):
    """A lake with two items, and the CLI to sync it (its cursor shows whether a load counted)."""
    monkeypatch.setenv("ELASTICSEARCH_API_KEY", "es-secret-key")
    catalog = Catalog(tmp_path / "lake")
    catalog.push({"items": [make_item(client_item_id="A"), make_item(client_item_id="B")]})
    return catalog


def _sync(run, fmt: str, url: str, target: str = "out", *more: str):
    return run("sync", target, "--format", fmt, "--apply", url, *more)


def _one_line(result) -> str:
    """The single line a failed command prints (stderr), never a traceback."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize(("fmt", "index"), [("algolia", "/1/indexes/products"),
                                            ("typesense", "/collections/products")])  # fmt: skip
def test_a_redirect_is_no_load_and_is_never_followed(shop, run, fmt, index):
    with loopback(lambda r: _json(301, {}, Location="http://127.0.0.2:9/stolen")) as (url, seen):
        moved = _sync(run, fmt, url + index)
    assert moved.exit_code == 1
    line = _one_line(moved)
    assert "answered 301, a redirect to http://127.0.0.2:9/stolen" in line
    assert len(seen) == 1  # not followed: the other host never got the credentials
    with engine(fmt) as (good, _):  # the cursor did not move: the next sync sends it all again
        again = _sync(run, fmt, good)
    assert again.exit_code == 0 and json.loads(again.stdout)["from_version"] is None


def test_a_password_in_the_apply_url_is_sent_as_basic_auth_and_never_shown(shop, run):
    password = "pa55:w%40rd"  # percent-encoded in the URL, as RFC 3986 asks
    with engine("elasticsearch") as (url, seen):
        secured = url.replace("http://", f"http://admin:{password}@")
        done = _sync(run, "elasticsearch", secured)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["applied"]["url"] == url.replace("http://", "http://***@")
    import base64

    sent = seen[0]["headers"]["authorization"]
    assert base64.b64decode(sent.removeprefix("Basic ")).decode() == "admin:pa55:w@rd"
    echoed = lambda r: _json(401, {"error": f"bad credentials {r['headers']}"})  # noqa: E731
    with loopback(echoed) as (base, _):
        refused = _sync(run, "elasticsearch", base.replace("http://", f"http://admin:{password}@")
                        + "/products", "out2")  # fmt: skip
        malformed = _sync(run, "elasticsearch", f"http://admin:{password}@[::1/products", "out3")
    for result, code in ((refused, 1), (malformed, 2)):
        assert result.exit_code == code
        line = _one_line(result)
        for secret in (password, "pa55:w@rd", "w%40rd", "cGFzcw", sent.removeprefix("Basic ")):
            assert secret not in result.output, line


def test_basic_auth_credentials_come_from_the_environment(shop, run, monkeypatch):
    monkeypatch.setenv("ELASTICSEARCH_USERNAME", "loader")
    monkeypatch.setenv("ELASTICSEARCH_PASSWORD", "from-the-env")
    with engine("opensearch") as (url, seen):
        assert _sync(run, "opensearch", url).exit_code == 0
    import base64

    sent = seen[0]["headers"]["authorization"].removeprefix("Basic ")
    assert base64.b64decode(sent).decode() == "loader:from-the-env"


@pytest.mark.parametrize(("fmt", "index"), [("algolia", "/1/indexes/products"),
                                            ("elasticsearch", "/products"),
                                            ("meilisearch", "/indexes/products")])  # fmt: skip
def test_an_engine_that_echoes_the_request_never_puts_a_key_on_the_terminal(shop, run, fmt, index):
    def echo(request):
        return 400, {"Content-Type": "text/plain"}, (json.dumps(request) * 20).encode()

    with loopback(echo) as (url, seen):
        refused = _sync(run, fmt, url + index)
    assert refused.exit_code == 1
    line = _one_line(refused)
    assert seen and "answered 400" in line and len(line) < 700  # quoted in part
    for key in ("secret", "es-secret-key"):
        assert key not in refused.output


def test_a_record_over_its_budget_is_deleted_from_the_engine_not_left_old(shop, run, tmp_path):
    with engine("algolia") as (url, seen):
        assert _sync(run, "algolia", url).exit_code == 0
        shop.push({"items": [make_item(client_item_id="A", pricing_info__sale_price="50.00",
                                       attributes__brand="B" * 4_000)]})  # fmt: skip
        seen.clear()
        done = _sync(run, "algolia", url, "out", "--max-record-bytes", "3000")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    object_id = str(shop.records().set_index("client_item_id").at["A", "object_id"])
    assert report["too_large_ids"] == [object_id] and report["deletes"] == 1
    assert report["upserts"] == 0
    (request,) = seen
    actions = [
        (r["action"], r["body"]["objectID"]) for r in json.loads(request["body"])["requests"]
    ]
    assert actions == [("deleteObject", object_id)]  # its old version (price 500) is gone
    assert shop.records().set_index("client_item_id").at["A", "price"] == 50  # the lake keeps it


@pytest.mark.parametrize(
    ("fmt", "index", "answer"),
    [
        ("elasticsearch", "/products", (200, {}, b'{"errors": true, "items": [{"index": {}}]}')),
        ("elasticsearch", "/products", (200, {"Content-Type": "text/html"}, b"<html>ok</html>")),
        ("elasticsearch", "/products", (200, {}, b"[1, 2, 3]")),
        ("algolia", "/1/indexes/products", (200, {}, b"not json at all")),
        ("algolia", "/1/indexes/products", (200, {}, b"{}")),
        ("typesense", "/collections/products", (200, {}, b'{"success": true}\n[]')),
        ("meilisearch", "/indexes/products", (200, {}, b'{"taskUid": 1}')),  # not its 202
        ("meilisearch", "/indexes/products", (202, {}, b"")),
    ],
)
def test_an_unexpected_engine_answer_is_one_line_and_keeps_the_cursor(
    shop, run, fmt, index, answer
):
    with loopback(lambda r: answer) as (url, _):
        failed = _sync(run, fmt, url + index)
    assert failed.exit_code == 1, failed.output
    _one_line(failed)
    with engine(fmt) as (good, _):
        assert json.loads(_sync(run, fmt, good).stdout)["from_version"] is None


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1/products",  # a broken IPv6 literal
        "http://\u2603.example/products",  # a snowman
        "http://exa\u200bmple.com/products",  # a zero-width space
        "http://127.0.0.1:http/products",  # a port that is no number
        "http://127.0.0.1:99999/products",
        "http://127.0.0.1:9/prod\r\nX-Injected: 1",  # CRLF in the path
        f"http://{'a' * 300}.example/products",  # a 300-character label
        "http://127.0.0.1:9/",  # no index named
        "http://127.0.0.1:9/products?refresh=true",
        "file:///etc/passwd",
    ],
)
def test_a_bad_apply_url_is_a_usage_error_before_anything_is_written(shop, run, tmp_path, url):
    refused = _sync(run, "elasticsearch", url)
    assert refused.exit_code == 2
    line = _one_line(refused)
    assert line.startswith("catalog-lake: error: --apply takes the index's http(s) URL")
    assert "\r" not in line and "\n" not in line
    assert not (tmp_path / "out").exists()


def test_a_trickling_answer_ends_at_the_requests_deadline(shop, run, monkeypatch):
    import time

    from catalog_lake import loaders

    monkeypatch.setattr(loaders, "DEADLINE", 1.5)

    def trickle():
        for _ in range(40):  # 20 s in all, if nobody stops it
            yield b" "
            time.sleep(0.5)

    started = time.monotonic()
    with loopback(lambda r: (200, {"Content-Type": "application/json"}, trickle())) as (url, _):
        slow = _sync(run, "elasticsearch", url + "/products")
    assert slow.exit_code == 1
    assert "did not answer in full within 1.5 s" in _one_line(slow)
    assert time.monotonic() - started < 10


def test_a_huge_answer_is_refused_unread(shop, run, monkeypatch):
    from catalog_lake import loaders

    monkeypatch.setattr(loaders, "ANSWER_BYTES", 64 * 1024)
    endless = (b'{"errors": false, "items": [' + b"0," * 50_000 for _ in range(100))
    with loopback(lambda r: (200, {"Content-Type": "application/json"}, endless)) as (url, _):
        huge = _sync(run, "elasticsearch", url + "/products")
    assert huge.exit_code == 1
    assert "answered more than 65,536 bytes" in _one_line(huge)


def _meilisearch_with_tasks(statuses: list[str]):
    """A Meilisearch stand-in whose task reports each status of ``statuses`` in turn."""
    polls = iter(statuses)

    def answer(request):
        if request["path"] == "/tasks":
            (uids,) = request["query"]["uids"]
            status = next(polls, statuses[-1])
            error = {"message": "invalid document id", "code": "invalid_document_id"}
            results = [{"uid": int(u), "status": status,
                        "error": error if status == "failed" else None} for u in uids.split(",")]  # fmt: skip
            return _json(200, {"results": results})
        return _json(202, {"taskUid": len(request["body"]) % 1000, "status": "enqueued"})

    return answer


def test_meilisearch_loads_count_only_once_their_tasks_succeeded(shop, run, monkeypatch):
    from catalog_lake import loaders

    with loopback(_meilisearch_with_tasks(["enqueued", "processing", "failed"])) as (url, seen):
        failed = _sync(run, "meilisearch", url + "/indexes/products")
    assert failed.exit_code == 1
    assert "task" in _one_line(failed) and "failed: invalid document id" in failed.stderr
    assert [r["path"] for r in seen].count("/tasks") == 3
    monkeypatch.setattr(loaders, "TASKS_DEADLINE", 1.0)
    with loopback(_meilisearch_with_tasks(["processing"])) as (url, _):
        waiting = _sync(run, "meilisearch", url + "/indexes/products")
    assert waiting.exit_code == 1 and "had not finished task(s)" in _one_line(waiting)
    with loopback(_meilisearch_with_tasks(["processing", "succeeded"])) as (url, _):
        done = _sync(run, "meilisearch", url + "/indexes/products")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["from_version"] is None  # the range failed twice, sent again


def test_a_target_whose_first_load_failed_still_refuses_another_format(shop, run):
    with engine("algolia", refuse=True) as (url, _):
        assert _sync(run, "algolia", url).exit_code == 1
    other = run("sync", "out", "--format", "meilisearch")
    assert other.exit_code == 2
    assert "was synced as algolia, not meilisearch" in _one_line(other)
    assert run("sync", "out", "--format", "meilisearch", "--full").exit_code == 0


@pytest.mark.parametrize("command", ["sync out", "export --output f.json"])
def test_a_record_budget_past_any_engines_is_a_usage_error(shop, run, command):
    huge = run(*command.split(), "--format", "algolia", "--max-record-bytes", "9" * 26)
    assert huge.exit_code == 2
    assert "--max-record-bytes" in _one_line(huge)


def test_the_documented_typesense_url_loads_a_real_typesense_server(tmp_path, run, monkeypatch):
    """index-settings' collection, created as docs/search.md says, then loaded and emptied."""
    import httpx

    from catalog_lake.exports import index_settings
    from tests.servers import typesense

    monkeypatch.setenv("TYPESENSE_API_KEY", "typesense-test-key")
    catalog = Catalog(tmp_path / "lake")
    catalog.push(
        {"items": [make_item(client_item_id=f"SKU-{n}", name=f"Atta {n}") for n in range(3)]}
    )
    settings = index_settings("typesense")
    documented = (Path(__file__).parents[1] / "docs" / "search.md").read_text()
    name = settings["collection"]["name"]
    assert f"http://HOST:8108/collections/{name}" in documented  # the URL users are given
    with typesense(tmp_path / "typesense", "typesense-test-key") as server:
        key = {"X-TYPESENSE-API-KEY": "typesense-test-key"}
        assert (
            httpx.post(
                f"{server}/collections", json=settings["collection"], headers=key
            ).status_code
            == 201
        )
        index = f"{server}/collections/{name}"  # the URL docs/search.md gives
        loaded = _sync(run, "typesense", index)
        assert loaded.exit_code == 0, loaded.output

        def found() -> list[str]:
            params = {"q": "atta", "query_by": "product_name", "per_page": 50}
            hits = httpx.get(f"{index}/documents/search", params=params, headers=key).json()["hits"]
            return sorted(h["document"]["client_item_id"] for h in hits)

        assert found() == ["SKU-0", "SKU-1", "SKU-2"]
        catalog.delete(["SKU-1"])
        again = _sync(run, "typesense", index)
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["deletes"] == 1
        assert found() == ["SKU-0", "SKU-2"]
        wrong = _sync(run, "typesense", f"{server}/collections/products", "other")
    assert wrong.exit_code == 1 and "answered 404" in _one_line(wrong)


def test_the_sync_flow_refuses_a_password_in_its_apply_parameter():
    """Prefect keeps a run's parameters in its database: the password would be stored there."""
    from flows.catalog_flows import sync

    url = "http://admin:hunter2@127.0.0.1:9200/products"
    with pytest.raises(
        UsageError, match="ELASTICSEARCH_USERNAME and ELASTICSEARCH_PASSWORD"
    ) as caught:
        sync.fn(target="exports", format="elasticsearch", apply=url)
    assert "hunter2" not in str(caught.value)
