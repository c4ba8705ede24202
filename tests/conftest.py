"""Shared fixtures: a real lake in a temporary folder and a known-good item."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from catalog_lake import Catalog
from catalog_lake.cli import app
from tests.servers import apply_safe_env, aws_env, make_bucket, seaweed

# Before anything can open an object store: no AWS client may leave loopback.
apply_safe_env()

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
CASES = Path(__file__).parent / "cases"

GOOD_ITEM = {
    "client_item_id": "SKU-1",
    "lake_category": "GROCERY",
    "lake_category_id": "1001",
    "product_type": "simple",
    "name": "Whole Wheat Atta 5 kg",
    "description": "Stone-ground whole wheat atta.",
    "short_description": "Atta, 5 kg",
    "category": "Staples",
    "variant_group_id": "ATTA",
    "variant": "5 kg",
    "location_id": [],
    "inventory_info": {"qty": "120", "min_qty": "1", "max_qty": "5", "is_in_stock": "1"},
    "pricing_info": {
        "mrp": "310.00",
        "sale_price": "289.00",
        "discount_start_date": "",
        "discount_end_date": "",
        "discounted_price": "",
    },
    "images": ["https://img.example.com/atta.jpg"],
    "attributes": {
        "brand": "Aashirvaad",
        "is_veg": "yes",
        "available_on_cod": "true",
        "cancellable": "true",
        "returnable": "false",
        "return_pickup": "false",
        "rateable": "true",
        "return_window": "P7D",
        "time_to_ship": "P1D",
    },
}


def make_item(**changes) -> dict:
    """A copy of GOOD_ITEM; ``pricing_info__mrp="1"`` sets a nested field, None deletes."""
    item = copy.deepcopy(GOOD_ITEM)
    for key, value in changes.items():
        target, name = item, key
        if "__" in key:
            outer, name = key.split("__", 1)
            target = item.setdefault(outer, {})
        if value is _DELETE:
            target.pop(name, None)
        else:
            target[name] = value
    return item


#: What an ingest of data/feeds (the samples of the README) receives, stores and refuses.
FEEDS_TOTALS = {"received": 16, "success": 14, "failed": 2, "warned": 5, "already_stored": 0}

_DELETE = object()
DELETE = _DELETE


class Clock:
    """A settable clock, so the price rule and timestamps are reproducible."""

    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Ticking:
    """A clock that moves one second per reading, so pushes get distinct times."""

    def __init__(self, clock) -> None:
        self.now = clock.now

    def __call__(self):
        self.now += timedelta(seconds=1)
        return self.now


def kill_after(target, args: tuple, seconds: float) -> None:
    """Run ``target(*args)`` in a spawned process and SIGKILL it after ``seconds``."""
    import multiprocessing
    import signal
    import time

    writer = multiprocessing.get_context("spawn").Process(target=target, args=args)
    writer.start()
    time.sleep(seconds)
    os.kill(writer.pid, signal.SIGKILL)
    writer.join()


@pytest.fixture
def run(tmp_path, monkeypatch):
    """The CLI in this process, from a fresh folder (its default lake is ``./lake``)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CATALOG_LAKE_URI", raising=False)
    runner = CliRunner()

    def invoke(*args: str, stdin: bytes | None = None):
        return runner.invoke(app, list(args), input=stdin, catch_exceptions=False)

    return invoke


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def catalog(tmp_path: Path, clock: Clock) -> Catalog:
    return Catalog(tmp_path / "lake", clock=clock)


#: The one bucket of the session's S3 server: SeaweedFS gives each bucket volumes of its own,
#: so a bucket per test runs out of them; each test takes a prefix instead.
BUCKET = "catalog-lake-tests"


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> str:
    """A SeaweedFS S3 server on 127.0.0.1 for the session; AWS_* point at it."""
    if os.environ.get("FAKETIME"):
        # `make test`'s second pass moves the clock a year ahead (libfaketime). The server,
        # a static Go binary, keeps the real time and refuses requests signed a year off.
        pytest.skip("the clock is moved (FAKETIME) and the S3 server's is not")
    with seaweed(tmp_path_factory.mktemp("seaweed")) as endpoint:
        os.environ.update(aws_env(endpoint))
        make_bucket(endpoint, BUCKET)
        yield endpoint


@pytest.fixture
def s3_lake(s3_endpoint) -> str:
    """A fresh ``s3://`` lake URI under a prefix of its own."""
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}/lake"


@pytest.fixture(params=["local", "s3"])
def lake(request, tmp_path) -> str:
    """The same test on a lake in a folder and on one on the loopback S3 server."""
    if request.param == "local":
        return str(tmp_path / "lake")
    return request.getfixturevalue("s3_lake")


def cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real command in its own process: what a user's terminal shows, Rust's lines too."""
    return subprocess.run(
        [sys.executable, "-c", "from catalog_lake.cli import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "RUST_BACKTRACE": "0"},
    )


def write_feed(path, items):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"items": items}))
    return path


#: Test files that start real clusters, servers, flows or processes, or kill them. They are
#: marked ``slow``: ``pytest -m "not slow"`` leaves them out while working; CI runs them all.
SLOW_FILES = {
    "test_writers.py",
    "test_faults.py",
    "test_scale_out.py",
    "test_workers.py",
    "test_bench.py",
    "test_packaging.py",
    "test_object_store.py",
    "test_verdicts_stand_alone.py",
    "test_schedules.py",
    "test_ingest_flow.py",
    "test_service_server.py",
}
#: Single tests as slow, in files that are otherwise quick.
SLOW_TESTS = {
    "test_a_refresh_killed_anywhere_is_finished_by_repair",
    "test_a_delete_killed_anywhere_is_finished_by_repair",
    "test_a_value_is_cleaned_alike_whatever_else_its_column_holds",
    "test_clean_and_hostile_items_are_judged_alike_by_both_paths",
    "test_an_engine_that_never_answers_or_stays_busy_is_one_line",
    "test_the_documented_typesense_url_loads_a_real_typesense_server",
    "test_the_round_trip_holds_on_an_s3_lake",
    "test_concurrent_writers_changes_still_round_trip",
    "test_readme_shell_session_prints_what_it_shows",
    "test_the_service_pages_session_answers_what_it_shows",
}


def pytest_collection_modifyitems(config, items):
    """Mark the slow tests (``SLOW_FILES``, ``SLOW_TESTS``, every flow test) ``slow``."""
    for item in items:
        if (
            item.path.name in SLOW_FILES
            or getattr(item, "originalname", item.name) in SLOW_TESTS
            or item.get_closest_marker("flow") is not None
        ):
            item.add_marker(pytest.mark.slow)
