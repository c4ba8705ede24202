"""``python -m bench.scale``: the figures of docs/scaling.md (scale-out, object store, writers).

First, in local folders (issue 45), each setting a whole process with a fresh lake:

- ``catalog-lake ingest`` with 0, 2, 4 and 8 Dask workers (``--worker-counts``),
  each a whole process as a user runs it: its wall time, the coordinating
  process's own CPU (``utime + stime`` from ``/proc`` as it exits: every thread,
  imports and start-up included, apart from its children) as a share of the
  no-worker ingest's, the workers' CPU, and the data the workers hand back to it
  (each group's result, pickled; the bench's own pickling is not counted in the
  coordinator's CPU). Before 2026-12-05 the share was counted inside the
  ingest call (``getrusage``), which left out start-up and read 0.15 where a
  user's ``time`` saw 0.24;
- 1, 2, 4 and 8 concurrent ingests into one lake, splitting the same files
  (``--ingest-counts``): wall time, speed-up, records stored and ids unique.

Then it starts a SeaweedFS S3 server on 127.0.0.1 (the tests' own, ``tests/servers.py``;
dev extras), and measures in one run, each figure beside its baseline:

- an ingest into an S3 lake against the same ingest into a local folder;
- 10-item pushes into the S3 lake that ingest made: p50 and p95;
- N concurrent writers (separate processes) pushing 10-item batches into one
  lake, local and S3: commits per second and fenced commits retried.

Every AWS client stays on loopback (``tests.servers.SAFE_AWS_ENV``).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import pickle
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tests.servers import apply_safe_env, aws_env, make_bucket, seaweed

from . import synth
from .run import as_installed


def _ingest(feed: str, lake: str, env: dict[str, str]) -> float:
    os.environ.update(env)
    from catalog_lake.catalog import Catalog
    from catalog_lake.feeds import ingest

    started = time.perf_counter()
    ingest(Catalog(lake), feed)
    return time.perf_counter() - started


def _coordinated(feed: str, lake: str, workers: int, group_items: int) -> dict[str, float]:
    """One ``catalog-lake ingest`` as a user runs it, with ``workers`` Dask workers: who paid what.

    The command runs in a process of its own, and its CPU is read from
    ``/proc`` as it exits: the whole process, every thread of it, imports and
    start-up included, as ``ps`` shows it (``_cli_measured``).
    The workers are its children (a ``LocalCluster``'s nannies, and theirs),
    reaped when the cluster closes, so their CPU is the process's
    ``cutime + cstime``.
    """
    from catalog_lake.catalog import Catalog

    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        command = [
            sys.executable,
            "-c",
            "from bench.scale import _cli_measured; _cli_measured()",
            "ingest",
            feed,
            "--lake",
            lake,
            "--workers",
            str(workers),
            "--group-items",
            str(group_items),
        ]
        env = {**os.environ, "BENCH_SCALE_REPORT": report.name}
        root = Path(__file__).resolve().parents[1]  # where ``bench`` imports from
        started = time.perf_counter()
        done = subprocess.run(  # noqa: S603 - this interpreter, our own arguments
            command, env=env, cwd=root, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command[3:])} exited {done.returncode}: {done.stderr}")
        wall = time.perf_counter() - started
        cost = json.loads(Path(report.name).read_text())
    return cost | {"wall": wall, "stored": len(Catalog(lake).items())}


def _cli_measured() -> None:
    """Run the CLI (``sys.argv[1:]``), then write the process's CPU, read from ``/proc``.

    ``own_cpu`` is this process's ``utime + stime``, less the bench's own
    pickling of what Dask handed back (counted as ``shipped``);
    ``workers_cpu`` its reaped children's.
    """
    from catalog_lake import cli, groups

    shipped, measuring = [0], [0.0]
    settle = groups._settle

    def counted(writer: Any, done: Any, batch_size: int) -> None:
        began = time.thread_time()  # what Dask moved back: the outline and the written files
        shipped[0] += sum(
            len(pickle.dumps(part, protocol=5))
            for part in (done.outline, done.written, done.fallback)
            if part is not None
        )
        measuring[0] += time.thread_time() - began
        settle(writer, done, batch_size)

    groups._settle = counted
    sys.argv = ["catalog-lake", *sys.argv[1:]]
    try:
        cli.main()
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    # After the command's name: state is field 3, so utime..cstime (14-17) are [11:15].
    utime, stime, cutime, cstime = (int(v) / tick for v in fields[11:15])
    report = {
        "own_cpu": utime + stime - measuring[0],
        "workers_cpu": cutime + cstime,
        "shipped": shipped[0],
    }
    Path(os.environ["BENCH_SCALE_REPORT"]).write_text(json.dumps(report))


def _part(feed: str, lake: str, start: float) -> tuple[float, int, int]:
    from catalog_lake.catalog import Catalog
    from catalog_lake.feeds import ingest

    counter = _Retries()
    logging.getLogger("catalog_lake.lake").addHandler(counter)
    logging.getLogger("catalog_lake.lake").setLevel(logging.INFO)
    time.sleep(max(0.0, start - time.time()))
    ingest(Catalog(lake), feed)
    return time.time(), counter.redone, counter.again


def _concurrent_ingests(files: list[Path], root: Path, lake: str, count: int) -> dict[str, Any]:
    """``count`` processes each ingesting its share of ``files`` into one lake, at once."""
    from catalog_lake.catalog import Catalog

    parts = []
    for number in range(count):
        part = root / f"part-{count}-{number}"
        part.mkdir()
        for path in files[number::count]:
            os.link(path, part / path.name)
        parts.append(str(part))
    context = multiprocessing.get_context("spawn")
    start = time.time() + 8.0  # after every process imported the stack
    with ProcessPoolExecutor(count, mp_context=context) as pool:
        done = list(pool.map(_part, parts, [lake] * count, [start] * count))
    ends, redone, again = zip(*done, strict=True)
    items = Catalog(lake).items()
    return {
        "wall": max(ends) - start,
        "redone": sum(redone),
        "again": sum(again),
        "stored": len(items),
        "ids_unique": bool(items["object_id"].is_unique and items["client_item_id"].is_unique),
    }


def scale_out(
    root: Path,
    items: int,
    worker_counts: list[int],
    ingest_counts: list[int],
    group_items: int = 20_000,
) -> None:
    """Print the figures of issue 45: the coordinator's share, data shipped, wall times."""
    feed = root / "scale-feed"
    files = sorted(synth.write_feed(feed, items))
    baseline: dict[str, float] = {}
    for workers in [0, *(n for n in worker_counts if n != 0)]:  # the baseline first
        load = os.getloadavg()[0]
        lake = str(root / f"lake-w{workers}")
        got = _coordinated(str(feed), lake, workers, group_items)
        baseline = baseline or got
        print(
            f"load {load:.2f}: {items:,} items, {workers} workers: {got['wall']:.2f} s wall "
            f"({baseline['wall'] / got['wall']:.2f}x no workers); coordinator CPU "
            f"{got['own_cpu']:.1f} s = {got['own_cpu'] / baseline['own_cpu']:.2f} of a no-worker "
            f"ingest's {baseline['own_cpu']:.1f} s; workers CPU {got['workers_cpu']:.1f} s; "
            f"handed back {got['shipped'] / items * 100_000 / 1e6:,.1f} MB per 100,000 items; "
            f"{got['stored']:,} stored"
        )
    one = None
    for count in ingest_counts:
        load = os.getloadavg()[0]
        got = _concurrent_ingests(files, root, str(root / f"lake-i{count}"), count)
        one = one or got["wall"]
        print(
            f"load {load:.2f}: {count} concurrent ingest(s) into one lake: {got['wall']:.2f} s "
            f"wall ({one / got['wall']:.2f}x one), {got['stored']:,} items stored, "
            f"ids unique: {got['ids_unique']}; lost races: {got['redone']} redone, "
            f"{got['again']} committed again as written"
        )


def _pushes(lake: str, env: dict[str, str], lake_items: int, pushes: int) -> dict[str, float]:
    os.environ.update(env)
    from catalog_lake.catalog import Catalog

    catalog = Catalog(lake)
    rng = random.Random(11)
    latencies = []
    for n in range(pushes):
        numbers = [rng.randrange(lake_items) for _ in range(5)]
        numbers += [10**8 + n * 10 + k for k in range(5)]
        batch = [synth.item(k, rng, version=1 + n) for k in numbers]
        started = time.perf_counter()
        catalog.push({"items": batch})
        latencies.append((time.perf_counter() - started) * 1000)
    latencies = sorted(latencies[1:])  # the first opens the lake: a new process's cost
    return {
        "p50_ms": statistics.median(latencies),
        "p95_ms": latencies[max(0, round(0.95 * len(latencies)) - 1)],
    }


class _Retries(logging.Handler):
    """Counts fenced commits that lost a race: redone, or committed again as written.

    ``races`` logs each retry; ``store._committed`` each commit of the same files again.
    """

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0
        self.again = 0

    @property
    def redone(self) -> int:
        return self.count

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Retrying" in message:
            self.count += 1
        elif "committed again" in message:
            self.again += 1


def _writer(lake: str, env: dict[str, str], writer: int, pushes: int, start: float) -> dict:
    os.environ.update(env)
    from catalog_lake.catalog import Catalog

    retries = _Retries()
    logger = logging.getLogger("catalog_lake.lake")
    logger.setLevel(logging.INFO)
    logger.addHandler(retries)
    catalog = Catalog(lake)
    rng = random.Random(writer)
    time.sleep(max(0.0, start - time.time()))
    began = time.perf_counter()
    for n in range(pushes):
        # Half new items of this writer, half items every writer updates.
        numbers = [writer * 10**6 + n * 5 + k for k in range(5)] + [k for k in range(5)]
        catalog.push({"items": [synth.item(k, rng, version=n) for k in numbers]})
    return {"seconds": time.perf_counter() - began, "retries": retries.count}


def _concurrent(lake: str, env: dict[str, str], writers: int, pushes: int) -> dict[str, Any]:
    from catalog_lake.catalog import Catalog

    os.environ.update(env)
    Catalog(lake).lake.ensure()
    context = multiprocessing.get_context("spawn")
    start = time.time() + 8.0  # after every process imported the stack
    with ProcessPoolExecutor(writers, mp_context=context) as pool:
        jobs = [pool.submit(_writer, lake, env, w, pushes, start) for w in range(writers)]
        results = [job.result() for job in jobs]
    wall = max(r["seconds"] for r in results)
    items = Catalog(lake).items()
    return {
        "writers": writers,
        "pushes": writers * pushes,
        "pushes_per_second": writers * pushes / wall,
        "retries": sum(r["retries"] for r in results),
        "ids_unique": bool(items["object_id"].is_unique and items["client_item_id"].is_unique),
    }


def _child(function, *args):
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(function, *args).result()


def main() -> None:  # noqa: D103 - see the module
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--small-pushes", type=int, default=20)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--writer-pushes", type=int, default=25)
    parser.add_argument("--worker-counts", default="0,2,4,8", help="Dask workers per ingest.")
    parser.add_argument("--ingest-counts", default="1,2,4,8", help="Ingests into one lake.")
    parser.add_argument(
        "--scale-out-only", action="store_true", help="Skip the object-store and writer figures."
    )
    options = parser.parse_args()
    apply_safe_env()
    as_installed()
    root = Path(tempfile.mkdtemp(prefix="catalog-lake-scale-"))
    try:
        counts = [int(n) for n in options.worker_counts.split(",") if n.strip()]
        ingests = [int(n) for n in options.ingest_counts.split(",") if n.strip()]
        scale_out(root, options.items, counts, ingests)
        if options.scale_out_only:
            return
        feed = root / "feed"
        synth.write_feed(feed, options.items)
        with seaweed(root / "seaweed") as endpoint:
            env = aws_env(endpoint)
            os.environ.update(env)
            make_bucket(endpoint, "scale")
            load = os.getloadavg()[0]
            local = _child(_ingest, str(feed), str(root / "local"), env)
            remote = _child(_ingest, str(feed), "s3://scale/lake", env)
            print(
                f"load {load:.2f}: ingest of {options.items:,} items: local {local:.2f} s, "
                f"S3 {remote:.2f} s ({remote / local:.2f}x)"
            )
            small_local = _child(
                _pushes, str(root / "local"), env, options.items, options.small_pushes
            )
            small_remote = _child(
                _pushes, "s3://scale/lake", env, options.items, options.small_pushes
            )
            print(
                f"load {os.getloadavg()[0]:.2f}: 10-item pushes into {options.items:,} items: "
                f"local p50 {small_local['p50_ms']:.0f} ms p95 {small_local['p95_ms']:.0f} ms; "
                f"S3 p50 {small_remote['p50_ms']:.0f} ms p95 {small_remote['p95_ms']:.0f} ms"
            )
            for name, lake in (("local", str(root / "writers")), ("S3", "s3://scale/writers")):
                load = os.getloadavg()[0]
                result = _concurrent(lake, env, options.writers, options.writer_pushes)
                print(
                    f"load {load:.2f}: {result['writers']} writers, {name}: "
                    f"{result['pushes']} pushes, {result['pushes_per_second']:.1f} pushes/s "
                    f"(each 5 commits), {result['retries']} fenced commits retried, "
                    f"ids unique: {result['ids_unique']}"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
