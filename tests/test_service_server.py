"""A real ``catalog-lake serve`` process on loopback, driven with httpx (docs/service.md)."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from catalog_lake import Catalog
from tests.conftest import cli, make_item
from tests.servers import catalog_server


def key_for(lake, seller: str, actions: str = "push,delete,read,search") -> str:
    made = cli("keys", "create", "--seller", seller, "--actions", actions, "--lake", str(lake),
               cwd=lake.parent)  # fmt: skip
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def feed(prefix: str, count: int) -> dict:
    return {"items": [make_item(client_item_id=f"{prefix}-{n}") for n in range(count)]}


def test_keys_are_made_listed_and_revoked_from_the_command_line_and_obeyed_by_the_server(
    tmp_path,
):
    lake = tmp_path / "lake"
    key = key_for(lake, "acme", "push,read")
    listed = cli("keys", "list", "--lake", str(lake), cwd=tmp_path)
    key_id, secret = key.split("_", 2)[1:]
    assert listed.returncode == 0
    assert listed.stdout.split() == [key_id, "acme", "push,read", "active"]
    assert key not in listed.stdout and secret not in listed.stdout
    with catalog_server(lake) as server:
        headers = {"Authorization": f"Bearer {key}"}
        pushed = httpx.post(f"{server['url']}/v1/push", json=feed("A", 2), headers=headers)
        assert pushed.status_code == 200
        assert pushed.json()["items"] == [{"A-0": "1"}, {"A-1": "2"}]
        assert httpx.get(f"{server['url']}/v1/items/A-1", headers=headers).status_code == 200
        revoked = cli("keys", "revoke", key_id, "--lake", str(lake), cwd=tmp_path)
        assert revoked.returncode == 0, revoked.stderr
        deadline = time.monotonic() + 10
        while httpx.get(f"{server['url']}/v1/limits", headers=headers).status_code != 401:
            assert time.monotonic() < deadline, "a revoked key still works"
            time.sleep(0.1)
    again = cli("keys", "list", "--lake", str(lake), cwd=tmp_path)
    assert again.stdout.split()[-1] == "revoked"
    not_an_id = cli("keys", "revoke", "nothex", "--lake", str(lake), cwd=tmp_path)
    assert not_an_id.returncode == 2 and "not a key id" in not_an_id.stderr
    unknown_id = cli("keys", "revoke", "0" * 16, "--lake", str(lake), cwd=tmp_path)
    assert unknown_id.returncode == 1 and "nothing was revoked" in unknown_id.stderr
    bad = cli("keys", "create", "--seller", "no such", "--lake", str(lake), cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    unknown = cli("keys", "create", "--seller", "a", "--actions", "admin", "--lake", str(lake),
                  cwd=tmp_path)  # fmt: skip
    assert unknown.returncode == 2 and "admin" in unknown.stderr


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(tmp_path):
    lake = tmp_path / "lake"
    key = key_for(lake, "acme")
    with catalog_server(lake, "--max-body-bytes", "1000000") as server:
        with socket.create_connection(("127.0.0.1", server["port"]), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {key}\r\n".encode()
                + b'Content-Length: 500000000\r\n\r\n{"items": ['
            )
            answer = b""  # answered while 500 MB are still unsent; the server then closes
            while chunk := sock.recv(65536):
                answer += chunk
            answer = answer.decode()
        assert answer.startswith("HTTP/1.1 413")
        assert '"code":"payload_too_large"' in answer

        def chunks():  # no Content-Length: counted as it arrives
            yield b'{"items": ['
            for _ in range(2_000):
                yield b'{"client_item_id": "' + b"x" * 1_000 + b'"},'
            yield b"{}]}"

        streamed = httpx.post(
            f"{server['url']}/v1/push",
            content=chunks(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        assert streamed.status_code == 413
        assert streamed.json()["error"]["code"] == "payload_too_large"
    assert Catalog(lake).lake.version("items") is None  # nothing was written


def test_sixteen_concurrent_clients_lose_and_double_nothing(tmp_path):
    lake = tmp_path / "lake"
    keys = {seller: key_for(lake, seller) for seller in ("acme", "zeta")}
    with catalog_server(lake) as server:

        def push(number: int) -> dict:
            seller = "acme" if number % 2 else "zeta"
            with httpx.Client(base_url=server["url"], timeout=120) as client:
                answer = client.post(
                    "/v1/push",
                    json=feed(f"C{number % 8}", 10),  # colliding ids, within and across sellers
                    headers={"Authorization": f"Bearer {keys[seller]}"},
                )
            assert answer.status_code == 200, answer.text
            return {"seller": seller, **answer.json()}

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(push, range(16)))
    records = Catalog(lake).records()
    assert len(records) == 80  # 8 prefixes x 10 ids, each pushed by one seller
    assert records["object_id"].is_unique
    for answer in answers:
        stored = records[records["seller"] == answer["seller"]]
        ids = dict(zip(stored["client_item_id"], stored["object_id"].astype(str), strict=True))
        assert all(ids[c] == o for pair in answer["items"] for c, o in pair.items())


def test_a_server_killed_during_a_push_is_repaired_at_start_and_a_retry_doubles_nothing(
    tmp_path,
):
    lake = tmp_path / "lake"
    key = key_for(lake, "acme")
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": "batch-1"}
    payload = feed("K", 3_000)
    killed_at = []
    for delay in (0.4, 1.2):  # early in the push, and later in its commits
        with catalog_server(lake) as server:
            sent = threading.Thread(
                target=lambda url=server["url"]: _post_quietly(url, payload, headers)
            )
            sent.start()
            time.sleep(delay)
            server["process"].kill()  # SIGKILL: no shutdown, no cleanup
            server["process"].wait()
            sent.join()
            killed_at.append(delay)
        with catalog_server(lake) as server:  # the start repairs what the kill left
            retried = httpx.post(
                f"{server['url']}/v1/push", json=payload, headers=headers, timeout=120
            )
            again = httpx.post(
                f"{server['url']}/v1/push", json=payload, headers=headers, timeout=120
            )
        assert retried.status_code == 200, retried.text
        assert again.json() == retried.json()  # the same answer, however it came about
        catalog = Catalog(lake)
        records = catalog.records()
        assert len(records) == 3_000 and records["client_item_id"].is_unique
        assert records["object_id"].is_unique
        assert catalog.interrupted() == []
        pushes = catalog.pushes()
        assert (pushes["idempotency_key"] == "batch-1").sum() == 1  # one push, never two
    assert killed_at == [0.4, 1.2]


def _post_quietly(url: str, payload: dict, headers: dict) -> None:
    try:
        httpx.post(f"{url}/v1/push", json=payload, headers=headers, timeout=60)
    except httpx.HTTPError:
        pass  # the server was killed under it


@pytest.mark.parametrize("limit", ["20/second"])
def test_the_rate_limit_of_a_real_server_answers_429_with_retry_after(tmp_path, limit):
    lake = tmp_path / "lake"
    key = key_for(lake, "acme", "read")
    with catalog_server(lake, "--rate-limit", limit) as server:
        with httpx.Client(base_url=server["url"]) as client:
            codes = [
                client.get("/v1/limits", headers={"Authorization": f"Bearer {key}"})
                for _ in range(30)
            ]
    refused = [a for a in codes if a.status_code == 429]
    assert refused and all(a.headers["Retry-After"].isdigit() for a in refused)
    assert codes[0].json()["rate_limit"] == limit


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT"])
def test_a_stopped_server_finishes_the_push_in_flight_exits_0_and_leaves_no_file(tmp_path, stop):
    """docs/service.md: Ctrl-C or SIGTERM lets requests in flight finish (10 s at most)."""
    import json
    import signal

    lake = tmp_path / "lake"
    key = key_for(lake, "acme")
    body = json.dumps(feed("T", 20)).encode()
    half_sent, go_on = threading.Event(), threading.Event()

    def slowly():  # the request is in flight, its body half sent, when the signal comes
        yield body[: len(body) // 2]
        half_sent.set()
        go_on.wait(30)
        yield body[len(body) // 2 :]

    with (
        catalog_server(lake) as server,
        httpx.Client(base_url=server["url"], timeout=60) as client,
    ):
        headers = {"Authorization": f"Bearer {key}", "Content-Length": str(len(body)),
                   "Content-Type": "application/json"}  # fmt: skip
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(client.post, "/v1/push", content=slowly(), headers=headers)
            assert half_sent.wait(30)
            time.sleep(1)  # the server reads the request's head
            server["process"].send_signal(getattr(signal, stop))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:  # stopping, it soon takes no new connection
                try:
                    httpx.get(f"{server['url']}/healthz", timeout=1)
                except httpx.ConnectError:
                    break
                time.sleep(0.1)
            else:
                pytest.fail("a stopping server still took new connections after 5 s")
            go_on.set()
            answer = answer.result(timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["catalog_push_success_product_count"] == "20"
        assert server["process"].wait(timeout=30) == 0
        assert list(server["tmp"].iterdir()) == []  # terminal.native_stderr's file is gone
    assert len(Catalog(lake).records()) == 20


def test_a_cli_writer_beside_the_server_keeps_its_items_and_the_servers(tmp_path):
    """Fenced commits: the server's pushes and a CLI ingest into the same lake, at once."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    lake = tmp_path / "lake"
    key = key_for(lake, "acme")
    shutil.copytree(Path(__file__).parent.parent / "data", tmp_path / "data")
    with catalog_server(lake) as server:
        binary = str(Path(sys.executable).with_name("catalog-lake"))
        beside = subprocess.Popen(
            [binary, "ingest", "data/feeds", "--lake", str(lake), "--seller", "zeta"],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        with httpx.Client(base_url=server["url"], timeout=120) as client:
            for number in range(8):
                answer = client.post(
                    "/v1/push", json=feed(f"S{number}", 10),
                    headers={"Authorization": f"Bearer {key}"},
                )  # fmt: skip
                assert answer.status_code == 200, answer.text
        assert beside.wait(timeout=300) in (0, 1), beside.stderr.read()  # 1: the bad sample
        beside.stderr.close()
    records = Catalog(lake).records()
    assert (records["seller"] == "acme").sum() == 80
    assert (records["seller"] == "zeta").sum() == 14  # every good item of data/feeds
    assert records["object_id"].is_unique


def test_a_server_killed_between_a_pushs_commits_finishes_it_at_start(tmp_path):
    """SIGKILL the moment the push's raw rows are committed, before its ``pushes`` row."""
    lake = tmp_path / "lake"
    key = key_for(lake, "acme")
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": "batch-2"}
    payload = feed("W", 3_000)
    landed = lake / "raw" / "_delta_log" / f"{1:020d}.json"  # the push's raw commit
    with catalog_server(lake) as server:
        sent = threading.Thread(
            target=lambda url=server["url"]: _post_quietly(url, payload, headers)
        )
        sent.start()
        deadline = time.monotonic() + 120
        while not landed.exists():
            assert time.monotonic() < deadline, "the push never reached the raw table"
            time.sleep(0.001)
        server["process"].kill()
        server["process"].wait()
        sent.join()
    catalog = Catalog(lake)
    assert len(catalog.interrupted()) == 1  # raw rows without their pushes row
    with catalog_server(lake) as server:  # the start repairs it
        assert Catalog(lake).interrupted() == []
        retried = httpx.post(f"{server['url']}/v1/push", json=payload, headers=headers, timeout=120)
    assert retried.status_code == 200, retried.text
    records = Catalog(lake).records()
    assert len(records) == 3_000 and records["object_id"].is_unique
    pushes = Catalog(lake).pushes()
    assert (pushes["idempotency_key"] == "batch-2").sum() == 1  # the repaired push, answered
    assert retried.json()["catalog_push_request_id"] in set(pushes["request_id"])
