"""``python -m bench.serve``: the HTTP service against the library, in one run (issue 53).

On a lake of ``--records`` synthetic records (``bench.synth``), a real
``catalog-lake serve`` process on loopback and this process as the load
generator (httpx, keep-alive connections), alternating each HTTP call with the
same call through the library, so that both see the same machine:

- a 10-item push (half updates, half new items): p50 and p95, HTTP and library;
- a search of one or two words: p50 and p95, HTTP and library;
- ``--clients`` concurrent clients pushing 10 items each, ``--pushes`` times:
  pushes per second over HTTP, and with each client a process opening the lake
  through the library; then every pushed id is checked: none lost, none
  doubled, service ids unique;
- 401 (an unknown key), 403 (an action the key lacks) and 429 (a second server
  with ``--rate-limit 1/minute``): p50 each, none reads the lake;
- with ``--isolation-steps N``: the key-isolation walk of tests/test_service.py
  (three sellers, colliding ids, every answer checked) run N steps in-process.

The load average is read before and after each part. ``--record`` appends the
report to ``bench/results.md``.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from bench import synth

ROOT = Path(__file__).resolve().parent.parent
WORDS = ["kurta", "cotton", "blue shirt", "atta", "steel", "organic rice", "lamp", "red"]


def _load() -> float:
    return os.getloadavg()[0]


def _ms(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values), 2), "p95_ms": round(synth.p95(values), 2)}


def _batch(rng: random.Random, lake_items: int, number: int, size: int = 10) -> list[dict]:
    numbers = [rng.randrange(lake_items) for _ in range(size // 2)]
    numbers += [10**8 + number * size + k for k in range(size - size // 2)]
    return [synth.item(k, rng, version=1 + number) for k in numbers]


def _library_pusher(lake: str, first: int, pushes: int, size: int, start, done) -> None:
    """One client process: opens the lake through the library and pushes ``pushes`` times."""
    from catalog_lake import Catalog

    catalog = Catalog(lake)
    rng = random.Random(first)
    batches = [[synth.item(first + n * size + k, rng) for k in range(size)] for n in range(pushes)]
    start.wait()
    for batch in batches:
        catalog.push({"items": batch})
    done.put(os.getpid())


def _concurrent(url: str, key: str, lake: str, clients: int, pushes: int) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    size = 10
    headers = {"Authorization": f"Bearer {key}"}

    def client(number: int) -> int:
        rng = random.Random(number)
        first = 2 * 10**8 + number * pushes * size
        batches = [
            [synth.item(first + n * size + k, rng) for k in range(size)] for n in range(pushes)
        ]
        with httpx.Client(base_url=url, headers=headers, timeout=300) as session:
            for batch in batches:
                answer = session.post("/v1/push", json={"items": batch})
                answer.raise_for_status()
        return pushes

    load = _load()
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        sent = sum(pool.map(client, range(clients)))
    http_seconds = time.perf_counter() - started

    context = multiprocessing.get_context("spawn")
    start, done = context.Event(), context.Queue()
    workers = [
        context.Process(
            target=_library_pusher,
            args=(lake, 3 * 10**8 + n * pushes * size, pushes, size, start, done),
        )
        for n in range(clients)
    ]
    for worker in workers:
        worker.start()
    time.sleep(3.0)  # every process has imported the package and built its batches
    library_started = time.perf_counter()
    start.set()
    for _ in workers:
        done.get(timeout=900)
    library_seconds = time.perf_counter() - library_started
    for worker in workers:
        worker.join()

    from catalog_lake import Catalog

    records = Catalog(lake).records()
    expected = clients * pushes * size
    pushed = records[records["client_item_id"].map(_synth_number) >= 2 * 10**8]
    numbers = pushed["client_item_id"].map(_synth_number)
    return {
        "clients": clients,
        "pushes_each": pushes,
        "load_before": round(load, 2),
        "http_pushes_per_s": round(sent / http_seconds, 1),
        "library_pushes_per_s": round(clients * pushes / library_seconds, 1),
        "ratio": round((sent / http_seconds) / (clients * pushes / library_seconds), 2),
        "http_items_stored": int(((numbers >= 2 * 10**8) & (numbers < 3 * 10**8)).sum()),
        "library_items_stored": int((numbers >= 3 * 10**8).sum()),
        "items_expected_each": expected,
        "ids_unique": bool(records["object_id"].is_unique),
        "client_ids_unique": bool(records["client_item_id"].is_unique),
    }


def _synth_number(client_item_id: str) -> int:
    digits = "".join(ch for ch in client_item_id if ch.isdigit())
    return int(digits) if digits else -1


def run(records: int, rounds: int, clients: int, pushes: int, isolation_steps: int) -> dict:
    """Every part of the benchmark on a fresh lake; the figures as data."""
    from tests.servers import catalog_server

    from catalog_lake import Catalog, access

    result: dict[str, Any] = {
        "records": records,
        "rounds": rounds,
        "cores": os.cpu_count(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as folder:
        started = time.perf_counter()
        lake = synth.lake(folder, records)
        result["lake_build_s"] = round(time.perf_counter() - started, 1)
        catalog = Catalog(lake)
        now = datetime.now(UTC)
        key, _ = access.create(catalog.lake, "default", access.ACTIONS, now=now)
        reader, _ = access.create(catalog.lake, "default", "read", now=now)
        catalog.search("warm")  # the index is built once, before either side is timed
        with catalog_server(lake) as server:
            url = server["url"]
            rng = random.Random(11)
            http_push, library_push, http_search, library_search = [], [], [], []
            result["load_before"] = round(_load(), 2)
            with httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120
            ) as session:
                session.get("/v1/search", params={"q": "warm"})
                for number in range(rounds):
                    batch = _batch(rng, records, 2 * number)
                    started = time.perf_counter()
                    answer = session.post("/v1/push", json={"items": batch})
                    http_push.append((time.perf_counter() - started) * 1000)
                    answer.raise_for_status()
                    batch = _batch(rng, records, 2 * number + 1)
                    started = time.perf_counter()
                    catalog.push({"items": batch})
                    library_push.append((time.perf_counter() - started) * 1000)
                for number in range(rounds):
                    query = WORDS[number % len(WORDS)]
                    started = time.perf_counter()
                    answer = session.get("/v1/search", params={"q": query})
                    http_search.append((time.perf_counter() - started) * 1000)
                    answer.raise_for_status()
                    started = time.perf_counter()
                    catalog.search(query, seller="default")
                    library_search.append((time.perf_counter() - started) * 1000)
                refusals: dict[str, list[float]] = {"401": [], "403": []}
                for _ in range(rounds):
                    for status, headers in (
                        ("401", {"Authorization": "Bearer clk_0000000000000000_" + "x" * 43}),
                        ("403", {"Authorization": f"Bearer {reader}"}),
                    ):
                        started = time.perf_counter()
                        answer = session.post("/v1/push", json={"items": []}, headers=headers)
                        refusals[status].append((time.perf_counter() - started) * 1000)
                        assert answer.status_code == int(status), answer.text
            result["push_10_items"] = {
                "http": _ms(http_push),
                "library": _ms(library_push),
                "http_minus_library_p50_ms": round(
                    statistics.median(http_push) - statistics.median(library_push), 2
                ),
            }
            result["search"] = {
                "http": _ms(http_search),
                "library": _ms(library_search),
                "http_minus_library_p50_ms": round(
                    statistics.median(http_search) - statistics.median(library_search), 2
                ),
            }
            result["load_after_latency"] = round(_load(), 2)
            result["concurrent"] = _concurrent(url, key, lake, clients, pushes)
        with catalog_server(lake, "--rate-limit", "1/minute") as server:
            with httpx.Client(
                base_url=server["url"], headers={"Authorization": f"Bearer {reader}"}
            ) as session:
                session.get("/v1/limits")  # the one allowed this minute
                for _ in range(rounds):
                    started = time.perf_counter()
                    answer = session.get("/v1/limits")
                    refusals.setdefault("429", []).append((time.perf_counter() - started) * 1000)
                    assert answer.status_code == 429, answer.text
        result["refusals_p50_ms"] = {s: round(statistics.median(v), 2) for s, v in refusals.items()}
    if isolation_steps:
        result["isolation"] = _isolation(isolation_steps)
    result["load_after"] = round(_load(), 2)
    return result


def _isolation(steps: int) -> dict[str, Any]:
    from tests.conftest import Clock
    from tests.test_service import Service, run_isolation

    with tempfile.TemporaryDirectory(prefix="bench-isolation-") as folder:
        started = time.perf_counter()
        counts = run_isolation(Service(Path(folder), Clock()), steps=steps, seed=53)
        seconds = round(time.perf_counter() - started)
        return {"steps": steps, "by_action": counts, "seconds": seconds}


def report(result: dict[str, Any]) -> str:
    """The figures as the lines ``bench/results.md`` and docs/performance.md keep."""
    push, search, many = result["push_10_items"], result["search"], result["concurrent"]
    lines = [
        f"{result['records']:,} records, {result['rounds']} rounds, {result['cores']} cores; "
        f"load {result['load_before']} before, {result['load_after']} after",
        f"10-item push p50: HTTP {push['http']['p50_ms']} ms, library "
        f"{push['library']['p50_ms']} ms (HTTP +{push['http_minus_library_p50_ms']} ms); p95 "
        f"{push['http']['p95_ms']} and {push['library']['p95_ms']} ms",
        f"search p50: HTTP {search['http']['p50_ms']} ms, library {search['library']['p50_ms']} "
        f"ms (HTTP +{search['http_minus_library_p50_ms']} ms); p95 {search['http']['p95_ms']} "
        f"and {search['library']['p95_ms']} ms",
        f"{many['clients']} concurrent clients x {many['pushes_each']} pushes of 10 items (load "
        f"{many['load_before']}): HTTP {many['http_pushes_per_s']} pushes/s, library processes "
        f"{many['library_pushes_per_s']} pushes/s ({many['ratio']}x); stored "
        f"{many['http_items_stored']:,} and {many['library_items_stored']:,} of "
        f"{many['items_expected_each']:,} each, ids unique: {many['ids_unique']}",
        "refusals p50: "
        + ", ".join(f"{s} {ms} ms" for s, ms in sorted(result["refusals_p50_ms"].items())),
    ]
    if "isolation" in result:
        iso = result["isolation"]
        lines.append(
            f"key isolation: {iso['steps']:,} steps ({iso['by_action']}), every answer checked, "
            f"{iso['seconds']} s"
        )
    return "\n".join(lines)


def main(
    records: Annotated[int, typer.Option(min=100, help="Records in the lake.")] = 200_000,
    rounds: Annotated[int, typer.Option(min=5, help="Timed calls per measure and side.")] = 100,
    clients: Annotated[int, typer.Option(min=1, help="Concurrent clients.")] = 16,
    pushes: Annotated[int, typer.Option(min=1, help="Pushes per concurrent client.")] = 5,
    isolation_steps: Annotated[
        int, typer.Option(min=0, help="Steps of the key-isolation walk (0: none).")
    ] = 0,
    record: Annotated[bool, typer.Option(help="Append the report to bench/results.md.")] = False,
) -> None:
    """Measure the service against the library in one run, and print the report."""
    import json

    result = run(records, rounds, clients, pushes, isolation_steps)
    print(json.dumps(result, indent=2))
    text = report(result)
    print(text)
    if record:
        with open(ROOT / "bench" / "results.md", "a", encoding="utf-8") as out:
            out.write(
                f"\n## Service (`python -m bench.serve`, {result['started']})\n\n```\n{text}\n```\n"
            )


if __name__ == "__main__":
    typer.run(main)
