"""Limits and defaults, in one place so the README table and the code agree.

SPEC 8 leaves every bound unstated; these are our choices and are documented
in the README's data contract.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

#: Polars' allocator (a jemalloc of its own) gives freed memory back to the system after
#: half a second. An ingest frees a group's worth and takes as much again about every
#: second, so it paid for every group in page faults: a tenth of its CPU. Kept for 3 s, a
#: group reuses the last one's pages, and what a run frees still goes back soon after
#: (``python -m bench``, bench/results.md; jemalloc's own 10 s was not
#: clearly faster and held 70-100 MB more). Polars appends ``_RJEM_MALLOC_CONF`` to its own
#: settings when it is imported: so this is set on importing the package
#: (``catalog_lake/__init__.py`` imports this module first), and never over the caller's
#: own value. Spawned processes (Dask workers) inherit it.
POLARS_MALLOC_CONF = "dirty_decay_ms:3000,muzzy_decay_ms:0"
os.environ.setdefault("_RJEM_MALLOC_CONF", POLARS_MALLOC_CONF)

#: Environment variable that names the lake when none is given.
LAKE_ENV = "CATALOG_LAKE_URI"
#: Lake used when neither an argument nor the environment names one.
DEFAULT_LAKE = "lake"

MAX_ITEMS_PER_PUSH = 50_000
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
MAX_ITEM_BYTES = 1024 * 1024
MAX_ID_CHARS = 256
MAX_NAME_CHARS = 1_000
MAX_TEXT_CHARS = 65_536
MAX_URL_CHARS = 2_048
MAX_LIST_VALUES = 100
MAX_JSON_DEPTH = 64
#: Largest money amount that fits decimal(12, 2).
MAX_PRICE = 9_999_999_999.99
#: Largest inventory count we accept; beyond it a count is surely a typo.
MAX_COUNT = 10**12

#: Service ids per partition of the items and records tables (``id_block``).
#: A push rewrites only the blocks of the items it updates, so the cost of
#: an update follows the push, not the lake (docs/design.md, "Table layout").
ID_BLOCK_SIZE = 2_048

#: Attempts at a fenced commit (ids, pushes) that keeps losing to other writers. With
#: jittered backoff of up to a second each, 30 attempts outlast bursts of many writers.
FENCE_ATTEMPTS = 30
#: Times one attempt commits the same files again after lost races that touched none of
#: its rows (``store._committed``) before it reads everything again.
RECOMMITS = 8

#: A time_to_ship at or under this many seconds earns the fast-shipping tag.
FAST_SHIPPING_SECONDS = 24 * 3600

#: Environment variable naming a synonym list to use instead of the packaged one.
SYNONYMS_ENV = "CATALOG_LAKE_SYNONYMS"


#: Where the flows' runs read feeds, write sync files and read metrics when a run's own
#: parameter names no place: the worker's environment, else a Prefect variable of the
#: second name (``flows/catalog_flows.py``, ``stable_place``). A deployment's run works in
#: a clone of the project that is deleted when it ends, so these must be absolute paths
#: or object-store URIs there (issue 41).
PLACES = {
    "lake": (LAKE_ENV, "catalog_lake_uri"),
    "source": ("CATALOG_LAKE_SOURCE", "catalog_lake_source"),
    "target": ("CATALOG_LAKE_SYNC_TARGET", "catalog_lake_sync_target"),
    "path": ("CATALOG_LAKE_METRICS_PATH", "catalog_lake_metrics_path"),
}

#: Where a flow run finds its seller when its ``seller`` parameter names none: the
#: worker's environment variable, else the Prefect variable (docs/sellers.md).
SELLER_SETTING = ("CATALOG_LAKE_SELLER", "catalog_lake_seller")


def is_stable_place(place: str) -> bool:
    """Whether ``place`` names the same thing from any working folder: absolute, or a URI."""
    text = place.strip()
    return "://" in text or Path(text).expanduser().is_absolute()


def default_lake_uri() -> str:
    """Resolve the lake from the environment, falling back to ``./lake``."""
    return os.environ.get(LAKE_ENV) or DEFAULT_LAKE


def resolved_lake_uri(uri: str | Path) -> str:
    """One spelling per lake: an absolute folder path, or the object-store URI as given.

    ``lake``, ``./lake`` and ``/home/me/lake`` are one lake; whatever names a lake by
    text (the flows' concurrency limit) uses this, so they are one name too.
    """
    text = str(uri).strip()
    if "://" in text and not text.startswith("file://"):
        return text.rstrip("/")
    return Path(text.removeprefix("file://")).expanduser().resolve().as_posix()


def lake_limit_name(uri: str | Path) -> str:
    """The Prefect global concurrency limit that flows writing this lake hold.

    ``catalog-lake:<last part of the lake's path>-<12 hex digits of the SHA-256 of its
    resolved URI>``: Prefect refuses ``/`` in a limit's name, so the path itself cannot
    be the name, and the digest keeps two lakes named ``lake`` apart.
    """
    resolved = resolved_lake_uri(uri)
    tail = resolved.rstrip("/").rsplit("/", 1)[-1] or "root"
    digest = hashlib.sha256(resolved.encode()).hexdigest()[:12]
    return f"catalog-lake:{tail}-{digest}"
