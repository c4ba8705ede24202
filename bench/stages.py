"""Where an ingest's time goes, measured from outside the package.

The package carries no timers. For the length of one benchmark run, the
functions that make up each stage are wrapped with a clock, and the seconds
spent in them are summed per stage. Only the outermost stage running on a
thread counts, so an append made inside an upsert is not counted twice.
Work done in other processes (``--workers``) is not seen.
"""

from __future__ import annotations

import functools
import importlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: (module, attribute path, stage). A stage of None is named by the table written.
STAGES = (
    # A file is read and split whole (issue 26), then parsed several thousand items at a
    # time, small files together, on a thread of its own while groups are written (issue 29):
    # stages of the two threads add up to more than the wall time.
    ("catalog_lake.groups", "GroupWriter.read", "read_parse"),
    ("catalog_lake.groups", "parse_together", "read_parse"),
    ("catalog_lake.sources", "parse_push", "read_parse"),
    ("catalog_lake.sources", "parse_split", "read_parse"),
    ("catalog_lake.sources", "parse_texts", "read_parse"),
    ("catalog_lake.push", "validate", "validate"),
    ("catalog_lake.push", "typed_items", "typed_items"),
    ("catalog_lake.keys", "Keys.assign", "ids"),
    ("catalog_lake.store", "earlier_pushes", "idempotency"),
    ("catalog_lake.store", "group_rows", "combine"),
    ("catalog_lake.store", "raw_rows", "raw_rows"),
    ("catalog_lake.store", "derive_records", "records"),
    ("catalog_lake.store", "plan_responses", "responses"),
    ("catalog_lake.records", "Batch.table", "to_arrow"),
    ("catalog_lake.lake.writes", "Writes.append", None),
    ("catalog_lake.lake.upserts", "Upserts.upsert", None),
    # Items and records: their files written, then committed (issue 45).
    ("catalog_lake.lake.upserts", "Upserts.staged_upsert", None),
    ("catalog_lake.lake.writes", "Writes.commit_files", None),
    ("catalog_lake.groups", "GroupWriter.checkpoint", "checkpoint"),
)


@contextmanager
def timed_stages() -> Iterator[dict[str, float]]:
    """Sum seconds per stage while the block runs; the dict fills as it goes."""
    seconds: dict[str, float] = defaultdict(float)
    active = threading.local()
    undo: list[Callable[[], None]] = []
    try:
        for module_name, path, stage in STAGES:
            owner: Any = importlib.import_module(module_name)
            *parents, name = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            original = owner.__dict__[name]
            setattr(owner, name, _clocked(original, stage, seconds, active))
            undo.append(functools.partial(setattr, owner, name, original))
        yield seconds
    finally:
        for restore in reversed(undo):
            restore()


def _clocked(function, stage: str | None, seconds: dict[str, float], active: threading.local):
    @functools.wraps(function)
    def clocked(*args, **kwargs):
        if getattr(active, "running", False):
            return function(*args, **kwargs)
        # Lake methods: (self, table name, ...); the stage is the table written.
        name = stage or f"write_{args[1]}"
        active.running = True
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - started
            active.running = False

    return clocked
