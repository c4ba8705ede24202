"""``python -m bench``: our full ingest against a DuckDB baseline, in the same run.

Absolute seconds mean little on a shared two-core machine, so every figure
that matters is a ratio to the baseline measured moments before on the same
files: DuckDB reading the JSON feed and writing the flat records to a fresh
Delta table with one SQL statement (no validation, one table). Each scenario
runs in its own spawned process, so its peak RSS is its own (and deltalake
never runs after a fork).
"""

from __future__ import annotations

import multiprocessing
import random
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import synth

BASELINE_SQL = """
WITH raw AS (
    SELECT unnest(items) AS i
    FROM read_json({files}, maximum_object_size = 67108864)
)
SELECT
    i.client_item_id::VARCHAR AS client_item_id,
    i.name::VARCHAR AS product_name,
    coalesce(nullif(i.description::VARCHAR, ''), i.short_description::VARCHAR) AS description,
    list_filter([i.lake_category::VARCHAR, i.category::VARCHAR], lambda x: x IS NOT NULL)
        AS categories,
    TRY_CAST(i.pricing_info.sale_price AS DOUBLE) AS price,
    TRY_CAST(i.pricing_info.mrp AS DOUBLE) AS mrp,
    TRY_CAST(i.pricing_info.sale_price AS DOUBLE) < TRY_CAST(i.pricing_info.mrp AS DOUBLE)
        AS on_sale,
    i.images[1]::VARCHAR AS image,
    TRY_CAST(i.inventory_info.qty AS BIGINT) AS inventory,
    i.attributes.brand::VARCHAR AS brand,
    i.attributes.colour::VARCHAR AS colour,
    i.attributes.size::VARCHAR AS size,
    i.attributes.gender::VARCHAR AS gender,
    i.lake_category::VARCHAR AS lake_category
FROM raw
"""


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _children_peak_rss_mb() -> float:
    """The largest peak of this process's finished children (the ingest workers)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def _baseline(feed: str, out: str) -> dict[str, Any]:
    import duckdb
    from deltalake import write_deltalake

    started = time.perf_counter()
    # DuckDB refuses a file with a repeated key: the baseline reads all but that one.
    files = sorted(
        str(p) for p in Path(feed).glob("*.json") if not p.name.endswith(synth.REPEATS_FILE)
    )
    reader = duckdb.connect().sql(BASELINE_SQL.format(files=files)).arrow()
    table = reader.read_all() if hasattr(reader, "read_all") else reader
    write_deltalake(out, table, mode="overwrite")
    return {
        "seconds": time.perf_counter() - started,
        "rows": table.num_rows,
        "rss_mb": _peak_rss_mb(),
    }


def _ingest(
    feed: str, lake: str, batch_size: int, group_items: int, workers: int = 0
) -> dict[str, Any]:
    from catalog_lake.catalog import Catalog
    from catalog_lake.feeds import ingest

    from .stages import timed_stages

    catalog = Catalog(lake)
    with timed_stages() as stages:
        started = time.perf_counter()
        summary = ingest(
            catalog, feed, batch_size=batch_size, group_items=group_items, workers=workers
        )
        seconds = time.perf_counter() - started
    # Each worker's own peak is at most the largest one: their sum is bounded by this.
    workers_mb = workers * _children_peak_rss_mb()
    return {
        "seconds": seconds,
        "received": summary["totals"]["received"],
        "stored": summary["totals"]["success"],
        "failed": summary["totals"]["failed"],
        "stages": dict(stages),
        "rss_mb": _peak_rss_mb() + workers_mb,
        "workers": workers,
        "workers_rss_mb": workers_mb,
    }


def _small_pushes(lake: str, lake_items: int, pushes: int, size: int, seed: int) -> dict[str, Any]:
    from catalog_lake.catalog import Catalog

    catalog = Catalog(lake)
    rng = random.Random(seed)
    latencies = []
    for n in range(pushes):
        # Half updates of existing items, half new ones.
        numbers = [rng.randrange(lake_items) for _ in range(size // 2)]
        numbers += [10**8 + n * size + k for k in range(size - size // 2)]
        batch = [synth.item(k, rng, version=1 + n) for k in numbers]
        started = time.perf_counter()
        catalog.push({"items": batch})
        latencies.append((time.perf_counter() - started) * 1000)
    # This child's first push opens the lake and loads the key index: what a
    # new process (a CLI push, a flow task) pays once.
    first = latencies[0] if latencies else None
    latencies.sort()
    return {
        "pushes": pushes,
        "first_ms": first,
        "p50_ms": statistics.median(latencies),
        "p95_ms": latencies[max(0, int(round(0.95 * len(latencies))) - 1)],
        "rss_mb": _peak_rss_mb(),
    }


def as_installed(*sources: str | Path) -> None:
    """Write the bytecode of ``catalog_lake`` (and of each other checkout's ``src``), as installed.

    pip compiles a package's modules as it installs it, and Python writes a
    module's bytecode the first time it imports it, so a user's second run
    never compiles the package. An editable checkout run with
    ``PYTHONDONTWRITEBYTECODE`` set, as on this project's machines, compiled
    every module in every process: 0.14 s of CPU (``python -c "import
    catalog_lake.cli"``: 0.80 s without the bytecode, 0.66 s with it), which
    the peers, whose packages come compiled, never pay. Compiling writes the
    bytecode whatever that variable says.
    """
    import compileall

    import catalog_lake

    for source in (Path(catalog_lake.__file__).parent, *map(Path, sources)):
        compileall.compile_dir(source, quiet=1)


def _in_child(function, *args):
    """``function(*args)`` in a spawned process; a dict result gains ``cpu``.

    ``cpu`` is the process's user and system seconds, every thread, its own
    children, start-up and exit included: what ``time`` reports for it. On a
    shared machine the wall time follows the other jobs; the CPU time follows
    the work.
    """
    # Not multiprocessing.Pool: its daemonic children could not start ingest workers.
    context = multiprocessing.get_context("spawn")
    spent = resource.getrusage(resource.RUSAGE_CHILDREN)
    with ProcessPoolExecutor(1, mp_context=context) as pool:  # its exit waits for the process
        result = pool.submit(function, *args).result()
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    if isinstance(result, dict):
        result["cpu"] = done.ru_utime - spent.ru_utime + done.ru_stime - spent.ru_stime
    return result


def run(
    items: int,
    *,
    update_fraction: float = 0.5,
    dirty_fraction: float = 0.05,
    batch_size: int = 1_000,
    group_items: int = 20_000,
    small_pushes: int = 20,
    workers: int = 0,
    reingest: bool = True,
    repeat: int = 1,
    workdir: str | Path | None = None,
    keep: bool = False,
    progress=print,
) -> dict[str, Any]:
    """Generate feeds, run every scenario, and return the figures with ratios.

    With ``repeat`` > 1 the baselines and ingests run that many times, each
    ingest into a fresh lake right after its baseline, and the run whose
    ratio is the median is the one reported (with every ratio listed): on a
    shared machine one run's ratio moves by a fifth or more.
    """
    root = Path(workdir or tempfile.mkdtemp(prefix="catalog-lake-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    first, second, lake = root / "feed-first", root / "feed-second", root / "lake"
    outputs = (lake, root / "baseline-first", root / "baseline-second")
    for folder in (first, second, *outputs):
        shutil.rmtree(folder, ignore_errors=True)
    as_installed()
    try:
        progress(f"generating {items:,} items (dirty {dirty_fraction:.0%})")
        synth.write_feed(first, items, dirty_fraction=dirty_fraction)
        updates = int(items * update_fraction) if reingest else items
        if reingest:
            synth.write_feed(
                second, updates, dirty_fraction=dirty_fraction, version=1, prefix="upd"
            )
            synth.write_feed(
                second, items - updates, start=items, dirty_fraction=dirty_fraction, prefix="new"
            )
        result: dict[str, Any] = {
            "items": items,
            "update_fraction": update_fraction,
            "dirty_fraction": dirty_fraction,
            "batch_size": batch_size,
            "group_items": group_items,
            "workers": workers,
            "repeat": repeat,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": _commit(),
        }
        options = (str(lake), update_fraction, batch_size, group_items, workers)
        runs = []
        for number in range(1, repeat + 1):
            if number > 1:
                for folder in outputs:
                    shutil.rmtree(folder, ignore_errors=True)
            label = f" (run {number} of {repeat})" if repeat > 1 else ""
            runs.append(_scenarios(root, reingest, label, progress, *options))
        result.update(_median_run(runs))
        if repeat > 1:
            names = [name for name, _ in _SCENARIOS if name in runs[0]]
            result["ratios"] = {name: [one[name]["ratio"] for one in runs] for name in names}
        if small_pushes:
            progress(
                f"{small_pushes} pushes of 10 items into the {items + items - updates:,}-item lake"
            )
            result["small"] = _in_child(_small_pushes, str(lake), items, small_pushes, 10, 11)
            result["small"]["lake_items"] = items + items - updates
        return result
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


_SCENARIOS = (("first", "baseline_first"), ("reingest", "baseline_second"))
_NAMES = {"first": "first ingest", "reingest": "re-ingest"}


def _scenarios(
    root: Path,
    reingest: bool,
    label: str,
    progress,
    lake: str,
    update_fraction: float,
    batch_size: int,
    group_items: int,
    workers: int,
) -> dict[str, Any]:
    """One baseline and ingest of each feed, in that order, with ratios."""
    one: dict[str, Any] = {}
    first, second = root / "feed-first", root / "feed-second"
    progress(f"baseline: DuckDB SQL flatten to a fresh Delta table{label}")
    one["baseline_first"] = _in_child(_baseline, str(first), str(root / "baseline-first"))
    progress(f"first ingest{label}")
    one["first"] = _in_child(_ingest, str(first), lake, batch_size, group_items, workers)
    if reingest:
        progress(f"baseline on the re-ingest feed{label}")
        one["baseline_second"] = _in_child(_baseline, str(second), str(root / "baseline-second"))
        progress(f"re-ingest: {update_fraction:.0%} updates{label}")
        one["reingest"] = _in_child(_ingest, str(second), lake, batch_size, group_items, workers)
    for name, baseline in _SCENARIOS:
        if name in one:
            scenario = one[name]
            scenario["items_per_second"] = scenario["received"] / scenario["seconds"]
            scenario["ratio"] = scenario["seconds"] / one[baseline]["seconds"]
    return one


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per scenario, the run (ingest and its baseline) whose ratio is the median (lower middle)."""
    chosen: dict[str, Any] = {}
    for name, baseline in _SCENARIOS:
        if name in runs[0]:
            ranked = sorted(runs, key=lambda one: one[name]["ratio"])
            middle = ranked[(len(ranked) - 1) // 2]
            chosen[name], chosen[baseline] = middle[name], middle[baseline]
    return chosen


def _commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def report(result: dict[str, Any]) -> str:
    """A markdown report of one bench run, ratios first."""
    lines = [
        f"## bench {result['date']} (commit {result['commit'] or 'unknown'})",
        "",
        f"{result['items']:,} items, "
        + (
            f"{result['update_fraction']:.0%} updates on re-ingest, "
            if "reingest" in result
            else "no re-ingest, "
        )
        + f"{result['dirty_fraction']:.0%} dirty, pushes of {result['batch_size']:,} items "
        f"written in groups of {result.get('group_items', 1):,}"
        + (
            f", checked by {result['workers']} worker "
            f"{'process' if result['workers'] == 1 else 'processes'} (peak RSS counts them)"
            if result.get("workers")
            else ""
        ),
        "",
        "| scenario | seconds | items/s | peak RSS MB | vs DuckDB baseline |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, baseline in _SCENARIOS:
        if name not in result:
            continue
        base, ours = result[baseline], result[name]
        lines.append(
            f"| DuckDB baseline ({name} feed) | {base['seconds']:.2f} | "
            f"{base['rows'] / base['seconds']:,.0f} | {base['rss_mb']:,.0f} | 1.00x |"
        )
        lines.append(
            f"| catalog-lake {name} ingest | {ours['seconds']:.2f} | "
            f"{ours['items_per_second']:,.0f} | {ours['rss_mb']:,.0f} | **{ours['ratio']:.2f}x** |"
        )
    if result.get("ratios"):
        listed = "; ".join(
            f"{_NAMES[name]} " + ", ".join(f"{ratio:.2f}x" for ratio in ratios)
            for name, ratios in result["ratios"].items()
        )
        lines += [
            "",
            f"Ratios of the {result['repeat']} runs (each scenario's median run is shown "
            f"above): {listed}",
        ]
    if "small" in result:
        small = result["small"]
        lines += [
            "",
            f"10-item pushes into the {small.get('lake_items', 0):,}-item lake: "
            f"p50 {small['p50_ms']:.0f} ms, "
            f"p95 {small['p95_ms']:.0f} ms over {small['pushes']} pushes"
            + (
                f"; the first, by a new process opening the lake: {small['first_ms']:.0f} ms"
                if small.get("first_ms") is not None
                else ""
            ),
        ]
    return "\n".join(lines + _stage_table(result)) + "\n"


def _stage_table(result: dict[str, Any]) -> list[str]:
    """Seconds per stage of each ingest run, largest first: where the time went."""
    runs = [name for name in ("first", "reingest") if name in result]
    stages = [result[name]["stages"] for name in runs]
    totals = [sum(s.values()) or 1 for s in stages]
    unit = "s, all processes" if result.get("workers") else "s"
    if runs == ["first"]:
        header = [f"| first-ingest stage | {unit.replace('s', 'seconds', 1)} | share |"]
    else:
        header = ["| stage | " + " | ".join(f"{_NAMES[n]} ({unit}) | share" for n in runs) + " |"]
    lines = ["", *header, "|---|" + "---:|---:|" * len(runs)]
    for stage in sorted(stages[0], key=lambda k: -stages[0][k]) + sorted(
        set().union(*stages) - set(stages[0])
    ):
        cells = [
            f"{s.get(stage, 0.0):.2f} | {s.get(stage, 0.0) / total:.0%}"
            for s, total in zip(stages, totals, strict=True)
        ]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return lines
