"""A user's filters: ``--where`` is one allow-listed expression over the table's columns,
``--as-of`` a version or a time; neither reads a file, reaches the network or shows a traceback."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest

from catalog_lake import Catalog
from catalog_lake.errors import UsageError
from tests.conftest import make_item

ROOT = Path(__file__).parents[1]
FEEDS = ROOT / "data" / "feeds"


@pytest.fixture
def listener():
    """A real HTTP server on loopback that counts the requests it gets."""
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"client_item_id\nSECRET-FROM-THE-NETWORK\n")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", hits
    server.shutdown()


HOSTILE_WHERE = [
    # The examples: a file's first line inside an error, network reads, size, depth.
    "client_item_id IN (SELECT nosuch FROM read_csv('{secret}'))",
    "client_item_id IN (SELECT * FROM read_csv('{url}/x.csv'))",
    "price > (SELECT max(price) FROM read_parquet('{url}/x.parquet'))",
    " OR ".join(f"client_item_id = 'x{i}'" for i in range(4_000)),
    "NOT (" * 60 + "price > 1" + ")" * 60,
    # Our own: other table functions and spellings, statements, settings, functions.
    "read_csv('{secret}') IS NOT NULL",
    "read_json_auto('{url}/x.json') IS NOT NULL",
    "EXISTS (SELECT 1 FROM read_text('{secret}'))",
    "client_item_id = 'a' UNION SELECT * FROM read_csv('{secret}')",
    "client_item_id = 'a'; COPY records TO '{secret}'",
    "client_item_id = getenv('HOME')",
    "client_item_id = current_setting('home_directory')",
    "client_item_id LIKE '%' || (SELECT content FROM read_blob('{secret}'))",
    "client_item_id IN (" + ", ".join(f"'x{i}'" for i in range(600)) + ")",
    "lower(" * 40 + "client_item_id" + ")" * 40 + " = 'a'",
    "price > 1 AND " * 300 + "price > 1",
    '"records"."client_item_id" = \'a\' OR 1 IN (SELECT 1 FROM records)',
]


@pytest.mark.parametrize("where", HOSTILE_WHERE, ids=range(len(HOSTILE_WHERE)))
def test_where_reads_no_file_and_reaches_no_network(run, tmp_path, listener, where):
    url, hits = listener
    secret = tmp_path / ".env"
    secret.write_text("client_item_id\nSECRET-TOKEN-123\n")
    where = where.replace("{secret}", str(secret)).replace("{url}", url)
    run("push", str(FEEDS / "food.json"))
    result = run("records", "--where", where)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert "SECRET" not in result.stdout + result.stderr
    assert hits == []
    with pytest.raises(UsageError) as refused:  # the library's door is the same one
        Catalog(tmp_path / "lake").query_records(where=where)
    assert "SECRET" not in str(refused.value) and hits == []


def test_where_on_an_odd_file_is_a_refusal_not_a_traceback(run, tmp_path):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(bytes(range(256)) * 40)
    run("push", str(FEEDS / "food.json"))
    result = run("records", "--where", f"client_item_id IN (SELECT * FROM read_csv('{odd}'))")
    assert result.exit_code == 2
    assert result.stderr.startswith("catalog-lake: error: --where")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("as_of", ["²", "NaT", "nan", "-1", "٣", "1e3", "2026-11-25T25:00:00"])
def test_as_of_values_that_are_no_time_are_a_usage_error(run, as_of):
    run("push", str(FEEDS / "food.json"))
    result = run("records", "--as-of", as_of)
    assert result.exit_code == 2
    assert result.stderr == (
        "catalog-lake: error: --as-of takes a version number, a date (2026-11-25) or a "
        f"date-time (2026-11-25T18:00:00Z); got {as_of!r}\n"
    )


@pytest.mark.parametrize(
    ("where", "found"),
    [
        ("updated_at >= '2020-01-01'", 1),
        ("updated_at > '2999-01-01'", 0),
        ("updated_at < '2999-12-31T23:59:59+05:30'", 1),
        ("updated_at BETWEEN '2000-01-01' AND '2999-01-01T00:00:00Z'", 1),
    ],
)
def test_timestamps_compare_with_the_literals_users_type(catalog, where, found):
    catalog.push({"items": [make_item()]})
    assert len(catalog.query_records(where=where)) == found
