"""Prefect flows for catalog-lake: ingest, backfill, metrics and maintain.

Each flow only wires library functions together (``catalog_lake.feeds``,
``.backfill``, ``.metrics``, ``.maintain``) and adds what Prefect is for:
retries on lake I/O, logging, artifacts with stable keys, and schedules
(see ``prefect.yaml``). Validation never retries: a bad item stays bad.

Run one locally with ``python flows/catalog_flows.py [SOURCE]`` (an ingest
of SOURCE, default ``data/feeds``, into ``$CATALOG_LAKE_URI`` or ``./lake``).
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from typing import Any

# Prefect's local server needs time to start on two cores, and must not phone home.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402

from catalog_lake import (  # noqa: E402
    Catalog,
    IngestError,
    PushError,
    feeds,  # noqa: E402
)
from catalog_lake import backfill as backfill_lib  # noqa: E402
from catalog_lake import maintain as maintain_lib  # noqa: E402
from catalog_lake import metrics as metrics_lib  # noqa: E402
from catalog_lake.summary import run_summary, summary_markdown  # noqa: E402

IO_RETRIES = {"retries": 2, "retry_delay_seconds": [5, 30]}


def _lake_failure(task, task_run, state) -> bool:
    """Retry only what a retry can fix: lake I/O, not a bad file."""
    try:
        state.result()
    except PushError as exc:
        return exc.reason == "lake_write_failed"
    except OSError:
        return True
    except Exception:  # noqa: BLE001 - anything else is not transient
        return False
    return False


# Tasks take the lake URI, never DataFrames or a Catalog, and never cache:
# their inputs are cheap to pass and must not be hashed.


@task(name="repair", cache_policy=NONE, **IO_RETRIES)
def repair_task(lake: str | None) -> list[str]:
    """Create the lake if it is new, then finish pushes a killed run left between commits."""
    catalog = Catalog(lake)
    catalog.lake.ensure()
    return [r["catalog_push_request_id"] for r in catalog.repair()]


@task(name="plan-feeds", cache_policy=NONE, **IO_RETRIES)
def plan_feeds(lake: str | None, source: str, pattern: str, force: bool) -> feeds.Plan:
    """Discover feed files and decide which are new or changed."""
    return feeds.plan(Catalog(lake), source, pattern, force)


@task(name="ingest-feeds", cache_policy=NONE, retry_condition_fn=_lake_failure, **IO_RETRIES)
def ingest_feeds(
    lake: str | None,
    files: list[feeds.FeedFile],
    batch_size: int,
    group_items: int,
    flow_run_id: str | None,
    detail_items: int = feeds.DETAIL_ITEMS,
    workers: int = 0,
) -> list[feeds.FileResult]:
    """Push a group of feed files; a lake failure fails the task so Prefect retries it.

    A retry repeats the whole group: batches that landed are skipped by their
    idempotency keys, so each item is still stored once with the same id. A
    batch the failed attempt left between commits is finished first, under
    its own key, so the retry finds that key instead of pushing it again.
    """
    catalog = Catalog(lake)
    catalog.repair()
    results = feeds.ingest_files(
        catalog,
        files,
        batch_size,
        flow_run_id,
        group_items=group_items,
        detail_items=detail_items,
        workers=workers,
    )
    logger = get_run_logger()
    for result in results:
        logger.info("%s: %s, %d items", result.feed.path, result.status, result.items)
    failed = [r for r in results if r.status == "error"]
    if failed:
        raise PushError("lake_write_failed", f"{failed[0].feed.path}: {failed[0].error}")
    return results


@task(name="record-run", cache_policy=NONE, **IO_RETRIES)
def record_run(
    lake: str | None,
    plan: feeds.Plan,
    results: list[feeds.FileResult],
    started_at: datetime,
    duration_s: float,
    flow_run_id: str | None,
    repaired: list[str],
) -> dict[str, Any]:
    """Remember the files seen and keep the run summary in the lake."""
    catalog = Catalog(lake)
    feeds.record_files(catalog, plan, results, flow_run_id)
    summary = run_summary(
        plan.run_id,
        results,
        plan.skipped,
        duration_s=duration_s,
        flow_run_id=flow_run_id,
        skipped_reasons=plan.reasons,
    )
    summary["repaired"] = repaired
    feeds.record_run(catalog, "ingest", plan.run_id, started_at, summary, flow_run_id)
    return summary


@flow(name="ingest", flow_run_name="ingest-{source}", log_prints=True)
def ingest(
    source: str = "data/feeds",
    pattern: str = feeds.DEFAULT_PATTERN,
    batch_size: int = feeds.DEFAULT_BATCH_SIZE,
    force: bool = False,
    lake: str | None = None,
    group_items: int = feeds.DEFAULT_GROUP_ITEMS,
    workers: int = 0,
    fail_on_bad_files: bool = True,
) -> dict[str, Any]:
    """Ingest new or changed feed files under ``source``; return the run summary.

    A run in which any file failed ends ``Failed`` (``IngestError``) after
    storing everything else and publishing its summary, so a schedule alerts;
    ``fail_on_bad_files=False`` lets it end ``Completed``.

    One task per group of files (``feeds.file_groups``, about 32 MB of feed):
    a retry repeats that group only. Inside a task, pushes of ``batch_size``
    items are written ``group_items`` at a time, one commit per table, and
    ``workers`` processes check groups alongside the task (0: the task alone).
    """
    import time

    started, started_at = time.perf_counter(), Catalog(lake).clock()
    run_id = str(flow_run.id) if flow_run.id else None
    repaired = repair_task(lake)
    plan = plan_feeds(lake, source, pattern, force)
    results = list(plan.refused)
    detail_left = feeds.DETAIL_ITEMS  # full responses for the run's first items only
    for group in feeds.file_groups(plan.to_ingest):
        state = ingest_feeds(
            lake,
            group,
            batch_size,
            group_items,
            run_id,
            detail_left,
            workers,
            return_state=True,
        )
        if state.is_completed():
            done = state.result()
            detail_left -= sum(
                int(r["catalog_push_received_product_count"])
                for result in done
                for r in result.responses
                if "detail" not in r
            )
            results += done
        else:  # retries exhausted: record them, go on with the other files
            results += [feeds.FileResult(f, "error", error=str(state.message)) for f in group]
    summary = record_run(
        lake, plan, results, started_at, time.perf_counter() - started, run_id, repaired
    )
    create_markdown_artifact(
        key="ingest-summary", markdown=summary_markdown(summary), description="Ingest run summary"
    )
    create_table_artifact(
        key="ingest-files",
        table=[{"file": f, "status": "ingested"} for f in summary["files"]["ingested"]]
        + [{"file": f, "status": "skipped"} for f in summary["files"]["skipped"]]
        + [{"file": f["path"], "status": f["status"]} for f in summary["files"]["failed"]],
        description="Files of the ingest run",
    )
    get_run_logger().info(
        "received %s, stored %s, failed %s",
        summary["catalog_push_received_product_count"],
        summary["catalog_push_success_product_count"],
        summary["catalog_push_failed_product_count"],
    )
    if fail_on_bad_files and summary["files"]["failed"]:
        raise IngestError(summary)
    return summary


@task(name="backfill", cache_policy=NONE, **IO_RETRIES)
def backfill_task(
    lake: str | None,
    since: datetime | None,
    until: datetime | None,
    request_ids: list[str] | None,
    dry_run: bool,
) -> dict[str, Any]:
    """Replay raw items in scope through today's rules."""
    return backfill_lib.backfill(
        Catalog(lake), since=since, until=until, request_ids=request_ids, dry_run=dry_run
    )


def _backfill_run_name() -> str:
    parameters = flow_run.parameters
    mode = "dry-run" if parameters.get("dry_run", True) else "write"
    scope = "some-pushes" if parameters.get("request_ids") else "all"
    if parameters.get("since") or parameters.get("until"):
        scope = f"{parameters.get('since') or 'start'}..{parameters.get('until') or 'now'}"
    return f"backfill-{mode}-{scope}"


@flow(name="backfill", flow_run_name=_backfill_run_name, log_prints=True)
def backfill(
    since: datetime | None = None,
    until: datetime | None = None,
    request_ids: list[str] | None = None,
    dry_run: bool = True,
    lake: str | None = None,
) -> dict[str, Any]:
    """Re-derive items and records from raw; a dry run (the default) writes nothing."""
    report = backfill_task(lake, since, until, request_ids, dry_run)
    create_markdown_artifact(key="backfill-report", markdown=_report_markdown("Backfill", report))
    return report


@task(name="apply-metrics", cache_policy=NONE, **IO_RETRIES)
def metrics_task(lake: str | None, path: str) -> dict[str, Any]:
    """Apply a likes/sales file to items and records."""
    return metrics_lib.apply_metrics(Catalog(lake), path)


@flow(name="metrics", flow_run_name="metrics-{path}", log_prints=True)
def metrics(path: str, lake: str | None = None) -> dict[str, Any]:
    """Load business metrics (likes, sales) for known items; report unknown ids."""
    report = metrics_task(lake, path)
    create_markdown_artifact(key="metrics-report", markdown=_report_markdown("Metrics", report))
    return report


@task(name="maintain", cache_policy=NONE, **IO_RETRIES)
def maintain_task(lake: str | None, retention_hours: int) -> dict[str, Any]:
    """Re-price, compact and vacuum."""
    return maintain_lib.maintain(Catalog(lake), retention_hours=retention_hours)


@flow(name="maintain", flow_run_name="maintain-keep-{retention_hours}h", log_prints=True)
def maintain(
    retention_hours: int = maintain_lib.DEFAULT_RETENTION_HOURS, lake: str | None = None
) -> dict[str, Any]:
    """Nightly upkeep: discount windows, compaction, vacuum."""
    report = maintain_task(lake, retention_hours)
    create_markdown_artifact(key="maintain-report", markdown=_report_markdown("Maintain", report))
    return report


def _report_markdown(title: str, report: dict[str, Any]) -> str:
    import json

    return f"# {title}\n\n```json\n{json.dumps(report, indent=2, default=str)}\n```\n"


if __name__ == "__main__":
    import argparse
    import json

    from catalog_lake import FAILED_ITEMS_KEY, RESPONSE_KEYS

    parser = argparse.ArgumentParser(description="Run the ingest flow locally, once.")
    parser.add_argument("source", nargs="?", default="data/feeds")
    parser.add_argument("--verbose", action="store_true", help="Also print every push response.")
    arguments = parser.parse_args()
    try:
        result = ingest(source=arguments.source)
    except IngestError as exc:
        result = exc.summary
    if arguments.verbose:
        for batch in result["batches"]:
            response = {key: batch[key] for key in (*RESPONSE_KEYS, FAILED_ITEMS_KEY)}
            print(f"push response for {batch['file']}:")
            print(json.dumps(response, indent=2, ensure_ascii=False))
    print(summary_markdown(result))
    print("Every push response is kept in the lake: `catalog-lake history`, or --verbose here.")
    sys.exit(1 if result["files"]["failed"] else 0)
