"""Prefect flows for catalog-lake: ingest, backfill, metrics and maintain.

Each flow only wires library functions together (``catalog_lake.feeds``,
``.backfill``, ``.metrics``, ``.maintain``) and adds what Prefect is for:
retries on lake I/O, logging, artifacts with stable keys, and schedules
(see ``prefect.yaml``). Validation never retries: a bad item stays bad.

Run one locally with ``python flows/catalog_flows.py [SOURCE]`` (an ingest
of SOURCE, default ``data/feeds``, into ``$CATALOG_LAKE_URI`` or ``./lake``).

Flows take a lake URI, never its credentials: an ``s3://`` lake reads the
standard ``AWS_*`` variables of the worker's environment (set them in the
work pool's ``job_variables``, or load them from a Prefect Secret block
there). Each flow holds the lake's global concurrency limit while it writes
(``one_writer``), so deployments that share a lake take turns; the fenced
commits keep the lake correct either way.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import sys
from contextlib import contextmanager
from datetime import datetime
from typing import Any

# Prefect's local server needs time to start on two cores, and must not phone home.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.cache_policies import NONE  # noqa: E402
from prefect.client.orchestration import get_client  # noqa: E402
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate  # noqa: E402
from prefect.concurrency.sync import concurrency  # noqa: E402
from prefect.context import FlowRunContext  # noqa: E402
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound  # noqa: E402
from prefect.runtime import deployment, flow_run  # noqa: E402
from prefect.variables import Variable  # noqa: E402

from catalog_lake import (  # noqa: E402
    Catalog,
    CatalogLakeError,
    IngestError,
    LakeError,
    PushError,
    UsageError,
    feeds,  # noqa: E402
)
from catalog_lake import backfill as backfill_lib  # noqa: E402
from catalog_lake import maintain as maintain_lib  # noqa: E402
from catalog_lake import metrics as metrics_lib  # noqa: E402
from catalog_lake.loaders import refuse_userinfo  # noqa: E402
from catalog_lake.refresh import (  # noqa: E402
    DEFAULT_MAX_DELETE_SHARE,
    REFRESH_PARAMETERS,
    Refresh,
)
from catalog_lake.sellers import seller_name  # noqa: E402
from catalog_lake.settings import (  # noqa: E402
    DEFAULT_LAKE,
    PLACES,
    SELLER_SETTING,
    is_stable_place,
    lake_limit_name,
)
from catalog_lake.summary import WARNING_ITEMS_KEY, run_failed, summary_markdown  # noqa: E402
from catalog_lake.terminal import file_line  # noqa: E402
from catalog_lake.workers import LOCAL_HTTP  # noqa: E402

IO_RETRIES = {"retries": 2, "retry_delay_seconds": [5, 30]}
#: Items stored with warnings that the ``ingest-warnings`` artifact lists.
WARNING_ROWS = 100


def _lake_failure(task, task_run, state) -> bool:
    """Retry only what a retry can fix: the lake could not be read or written, not a bad file."""
    try:
        state.result()
    except PushError as exc:
        return exc.reason == "lake_write_failed"
    except (LakeError, OSError):
        return True
    except Exception:  # noqa: BLE001 - anything else is not transient
        return False
    return False


def says_why(body):
    """A flow body whose failure is said in one line, where ``deployment run --watch`` shows it.

    ``--watch`` shows a run's logs until its final state, then stops; Prefect's own
    record of the exception is a traceback sent a moment later, after the run has
    ended, so a watcher saw only ``Failed`` (issue 50). The reason is logged as
    one line and the log sent to the server before the run's state is set.
    """

    @functools.wraps(body)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return body(*args, **kwargs)
        except CatalogLakeError as exc:
            if FlowRunContext.get() is None:  # called as a function (``flow.fn``): no run
                raise
            verdict = "refused" if isinstance(exc, UsageError) else "failed"
            get_run_logger().error("%s: %s", verdict, exc)
            for handler in logging.getLogger("prefect.flow_runs").handlers:
                handler.flush()  # the API handler sends what it holds, and waits
            raise

    return run


def stable_place(name: str, given: str | None, local: str | None = None) -> str:
    """Where a run's ``name`` (``settings.PLACES``: lake, source, target, path) is.

    The run's own parameter, else the worker's environment variable, else the
    Prefect variable of that name, else ``local`` (a run outside a deployment:
    ``python flows/catalog_flows.py``, a test). A deployment's run works in a
    fresh clone of the project (``prefect.yaml``'s pull step) that is deleted
    when it ends: a relative place there would be read or written inside that
    clone, a new folder each run, so such a run is refused before it starts,
    in one line that says what to set (issue 41).
    """
    env, variable = PLACES[name]
    place = given or os.environ.get(env) or _prefect_variable(variable) or None
    in_deployment = bool(deployment.id)
    if place is None and not in_deployment:
        place = local
    fix = (
        f"set {env} on the worker (or the Prefect variable {variable}, or the flow's "
        f"{name} parameter) to an absolute path or an s3:// URI"
    )
    if place is None or not place.strip():
        raise _refused(name, f"this run has no {name}: {fix}")
    if in_deployment and not is_stable_place(place):
        what = "write into" if name in ("lake", "target") else "read in"
        raise _refused(
            name,
            f"{name} {place!r} is a relative path, which a deployment's run would {what} its "
            f"temporary clone of the project and lose; {fix}",
        )
    return place


def seller_of_run(seller: str | None) -> str | None:
    """The seller a flow run acts for, checked: a bad name stops the run before it reads.

    The run's ``seller`` parameter, else the worker's ``CATALOG_LAKE_SELLER``, else
    the Prefect variable ``catalog_lake_seller`` (``settings.SELLER_SETTING``), as a
    worker serving one seller sets its source. None when none is set: ``ingest``
    and ``metrics`` then write the default seller's items, ``backfill`` and
    ``sync`` take every seller's.
    """
    env, variable = SELLER_SETTING
    given = seller or os.environ.get(env) or _prefect_variable(variable)
    return None if given is None else seller_name(given)


def _refused(name: str, message: str) -> LakeError | UsageError:
    """The lake's refusal is a ``LakeError``, as before; the other places' a ``UsageError``."""
    return LakeError(message) if name == "lake" else UsageError(message, name)


def _prefect_variable(name: str) -> str | None:
    """A Prefect variable's value, or None where it is not set (or no API answers)."""
    try:
        value = Variable.get(name, default=None)
    except Exception:  # noqa: BLE001 - no server: the variable cannot be set either
        return None
    return str(value) if value not in (None, "") else None


def lake_of_run(lake: str | None) -> str:
    """The lake a flow run writes (``stable_place``): by default ``$CATALOG_LAKE_URI``.

    Else the Prefect variable ``catalog_lake_uri``, else ``./lake`` outside a
    deployment. A deployment's run refuses a relative lake: it would be written
    into the run's temporary clone of the project and lost.
    """
    return stable_place("lake", lake, DEFAULT_LAKE)


@contextmanager
def one_writer(lake: str | None):
    """Hold the lake's global concurrency limit (``settings.lake_limit_name``) while writing.

    Every spelling of one lake (``lake``, ``./lake``, its absolute path) is one
    limit. The limit is created with one slot the first time a flow writes the
    lake, so that deployments sharing a lake take turns; the fenced commits keep
    the lake correct either way, and ``prefect gcl update NAME --limit N`` lets N
    flows run at once.
    """
    name = lake_limit_name(lake_of_run(lake))
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            try:
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=1)
                )
                get_run_logger().info("created the concurrency limit %s (one slot)", name)
            except ObjectAlreadyExists:  # another flow of this lake created it first
                pass
    with concurrency(name, occupy=1, strict=True):
        yield


# Tasks take the lake URI, never DataFrames or a Catalog, and never cache:
# their inputs are cheap to pass and must not be hashed.


@task(name="ingest-feeds", cache_policy=NONE, retry_condition_fn=_lake_failure, **IO_RETRIES)
def ingest_task(
    lake: str | None,
    source: str,
    pattern: str,
    batch_size: int,
    force: bool,
    flow_run_id: str | None,
    group_items: int,
    dask_address: str | None = None,
    strict_values: bool = False,
    dry_run: bool = False,
    refresh: dict[str, Any] | None = None,
    seller: str | None = None,
) -> dict[str, Any]:
    """``feeds.ingest``, the CLI's own ingest; retried when the lake could not be written.

    A retry is a re-run: it repairs what the failed attempt left between
    commits, skips the files it recorded and the batches that landed (their
    keys), and goes on with the rest. ``dask_address``: the scheduler whose
    workers check groups while this task writes.
    """
    logger = get_run_logger()

    def progress(event: str, **info: Any) -> None:
        if event == "file":
            logger.info("%s", file_line(info))

    return feeds.ingest(
        Catalog(lake),
        source,
        pattern,
        batch_size,
        force,
        flow_run_id=flow_run_id,
        progress=progress,
        group_items=group_items,
        dask_address=dask_address,
        strict=strict_values,
        dry_run=dry_run,
        refresh=Refresh(**refresh) if refresh is not None else None,
        seller=seller,
    )


@flow(name="ingest-on-dask", flow_run_name="ingest-on-dask-{source}")
def ingest_on_dask(
    lake: str | None,
    source: str,
    pattern: str,
    batch_size: int,
    force: bool,
    flow_run_id: str | None,
    group_items: int,
    strict_values: bool = False,
    dry_run: bool = False,
    refresh: dict[str, Any] | None = None,
    seller: str | None = None,
) -> dict[str, Any]:
    """The ingest task on this flow's Dask cluster, given by ``ingest`` with its task runner."""
    from prefect.context import FlowRunContext

    # The DaskTaskRunner starts (or connects to) its cluster on first use of its client.
    address = FlowRunContext.get().task_runner.client.scheduler.address
    return ingest_task(
        lake,
        source,
        pattern,
        batch_size,
        force,
        flow_run_id,
        group_items,
        address,
        strict_values=strict_values,
        dry_run=dry_run,
        refresh=refresh,
        seller=seller,
    )


def dask_runner(workers: int, address: str | None):
    """A ``DaskTaskRunner``: a running scheduler at ``address``, else a ``LocalCluster``.

    The local cluster has ``workers`` one-thread processes and lives as long
    as the flow run. Its workers run plain functions (``workers.check_files``),
    never Prefect tasks, so they need no Prefect API of their own.
    """
    from prefect_dask import DaskTaskRunner

    if address:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs={
            "n_workers": max(1, workers),
            "threads_per_worker": 1,
            "dashboard_address": LOCAL_HTTP,
        },
    )


@flow(name="ingest", flow_run_name=lambda: _run_name("ingest", "source"), log_prints=True)
@says_why
def ingest(
    source: str | None = None,
    pattern: str = feeds.DEFAULT_PATTERN,
    batch_size: int = feeds.DEFAULT_BATCH_SIZE,
    force: bool = False,
    lake: str | None = None,
    group_items: int = feeds.DEFAULT_GROUP_ITEMS,
    workers: int = 0,
    dask_address: str | None = None,
    fail_on_bad_files: bool = True,
    strict_values: bool = False,
    dry_run: bool = False,
    full_refresh: bool = False,
    refresh_scope: str = "source",
    refresh_category: str | None = None,
    max_delete_share: float = DEFAULT_MAX_DELETE_SHARE,
    allow_mass_delete: bool = False,
    max_delete_share_per_day: float | None = None,
    seller: str | None = None,
) -> dict[str, Any]:
    """Ingest new or changed feed files under ``source``; return the run summary.

    ``source`` and ``lake`` default to the worker's ``CATALOG_LAKE_SOURCE`` and
    ``CATALOG_LAKE_URI`` (or the Prefect variables ``catalog_lake_source`` and
    ``catalog_lake_uri``), else ``data/feeds`` and ``./lake`` outside a
    deployment; a deployment's run refuses relative ones (``stable_place``).

    The same ``feeds.ingest`` as ``catalog-lake ingest``, in a task that Prefect
    retries when the lake could not be written. With ``workers`` > 0 (a Dask
    ``LocalCluster`` for the run) or ``dask_address`` (a running scheduler),
    it runs in the subflow ``ingest-on-dask`` on prefect-dask's
    ``DaskTaskRunner``, whose workers check groups while the task writes.
    The summary is published as the artifacts ``ingest-summary`` and
    ``ingest-files``. A run in which any file failed, or in which a file that
    failed before is still there unchanged, ends ``Failed`` (``IngestError``)
    after storing everything else, so a schedule stays red while a feed is
    broken; ``fail_on_bad_files=False`` lets it end ``Completed``. ``strict_values``
    refuses items for warnings too; ``dry_run`` reports what the run would
    store and writes nothing (the artifacts say so).

    ``full_refresh`` makes ``source`` the whole catalog, as ``ingest --full-refresh``
    does: the items of the refresh's scope it did not carry are deleted once
    every file is stored (the artifact ``ingest-deleted`` lists them), unless a
    file failed or more than ``max_delete_share`` of the scope would go without
    ``allow_mass_delete``; then the run ends ``Failed`` and deletes nothing.

    ``seller`` names whose items the files hold (``seller_of_run``; none set: the
    default seller), as ``--seller`` does: one deployment or worker per seller, each
    with its ``source``, keeps every seller's ids, files and refreshes apart.
    """
    seller = seller_name(seller_of_run(seller))  # a bad name: refused before any file is read
    lake = lake_of_run(lake)
    source = stable_place("source", source, "data/feeds")
    run_id = str(flow_run.id) if flow_run.id else None
    arguments = (lake, source, pattern, batch_size, force, run_id, group_items)
    refresh = None
    shaped = (
        refresh_scope != "source",
        refresh_category is not None,
        max_delete_share != DEFAULT_MAX_DELETE_SHARE,
        allow_mass_delete,
        max_delete_share_per_day is not None,
    )
    if any(shaped) and not full_refresh:
        raise UsageError(
            "refresh_scope, refresh_category, max_delete_share, allow_mass_delete and "
            "max_delete_share_per_day only apply to a refresh: set full_refresh=true",
            "full_refresh",
        )
    if full_refresh:  # checked here, so a wrong scope fails before any file is read
        try:
            shape = Refresh(
                refresh_scope,
                refresh_category,
                max_delete_share,
                allow_mass_delete,
                max_delete_share_per_day,
            )
        except UsageError as exc:  # named as this flow's parameters, not Refresh's fields
            named = [REFRESH_PARAMETERS[p] for p in exc.parameters]
            raise UsageError(exc.worded(REFRESH_PARAMETERS), *named) from None
        refresh = dataclasses.asdict(shape)
    options = {
        "strict_values": strict_values,
        "dry_run": dry_run,
        "refresh": refresh,
        "seller": seller,
    }
    with one_writer(lake):
        if workers > 0 or dask_address:
            runner = dask_runner(workers, dask_address)
            summary = ingest_on_dask.with_options(task_runner=runner)(*arguments, **options)
        else:
            summary = ingest_task(*arguments, **options)
    create_markdown_artifact(
        key="ingest-summary", markdown=summary_markdown(summary), description="Ingest run summary"
    )
    create_table_artifact(
        key="ingest-files",
        table=[{"file": f, "status": "ingested"} for f in summary["files"]["ingested"]]
        + [
            {
                "file": f,
                "status": "still failing" if f in summary["files"]["still_failing"] else "skipped",
            }
            for f in summary["files"]["skipped"]
        ]
        + [{"file": f["path"], "status": f["status"]} for f in summary["files"]["failed"]],
        description="Files of the ingest run",
    )
    refreshed = summary.get("refresh") or {}
    if refreshed.get("ids"):
        verb = "would be deleted" if refreshed["status"] == "dry_run" else refreshed["status"]
        create_table_artifact(
            key="ingest-deleted",
            table=[{"client_item_id": i, "status": verb} for i in refreshed["ids"]],
            description=f"Full refresh: {refreshed['to_delete']:,} of {refreshed['in_scope']:,} "
            f"items in scope not in the feed ({refreshed['status']})",
        )
    warned = summary.get(WARNING_ITEMS_KEY) or []
    if warned:
        create_table_artifact(
            key="ingest-warnings",
            table=[
                {
                    "file": item["file"],
                    "client_item_id": item["client_item_id"],
                    "field": w["field"],
                    "code": w["code"],
                    "action": w["action"],
                    "value": json.dumps(w["value"], ensure_ascii=False),
                    "repaired_to": w["repaired_to"],
                }
                for item in warned[:WARNING_ROWS]
                for w in item["warnings"]
            ],
            description=f"Values dropped, repaired or kept (first {WARNING_ROWS} items stored with "
            "warnings; `catalog-lake warnings` has them all)",
        )
    get_run_logger().info(
        "received %s, stored %s, failed %s",
        summary["catalog_push_received_product_count"],
        summary["catalog_push_success_product_count"],
        summary["catalog_push_failed_product_count"],
    )
    if fail_on_bad_files and run_failed(summary):
        raise IngestError(summary)
    return summary


@task(name="backfill", cache_policy=NONE, **IO_RETRIES)
def backfill_task(
    lake: str | None,
    since: datetime | None,
    until: datetime | None,
    request_ids: list[str] | None,
    dry_run: bool,
    seller: str | None = None,
) -> dict[str, Any]:
    """Replay raw items in scope through today's rules."""
    return backfill_lib.backfill(
        Catalog(lake),
        since=since,
        until=until,
        request_ids=request_ids,
        dry_run=dry_run,
        seller=seller,
    )


def _backfill_run_name() -> str:
    parameters = flow_run.parameters
    mode = "dry-run" if parameters.get("dry_run", False) else "write"
    scope = "some-pushes" if parameters.get("request_ids") else "all"
    if parameters.get("since") or parameters.get("until"):
        scope = f"{parameters.get('since') or 'start'}..{parameters.get('until') or 'now'}"
    return f"backfill-{mode}-{scope}"


@flow(name="backfill", flow_run_name=_backfill_run_name, log_prints=True)
@says_why
def backfill(
    since: datetime | None = None,
    until: datetime | None = None,
    request_ids: list[str] | None = None,
    dry_run: bool = False,
    lake: str | None = None,
    seller: str | None = None,
) -> dict[str, Any]:
    """Re-derive items and records from raw; ``dry_run`` reports and writes nothing.

    Like every command and flow, it writes unless told ``dry_run`` (``catalog-lake
    backfill`` and ``--dry-run`` are the same rule). ``seller`` (``seller_of_run``)
    replays that seller's pushes alone; none set, every seller's.
    """
    seller = seller_of_run(seller)
    lake = lake_of_run(lake)
    with one_writer(lake):
        report = backfill_task(lake, since, until, request_ids, dry_run, seller)
    create_markdown_artifact(key="backfill-report", markdown=_report_markdown("Backfill", report))
    return report


@task(name="apply-metrics", cache_policy=NONE, **IO_RETRIES)
def metrics_task(lake: str | None, path: str, seller: str | None = None) -> dict[str, Any]:
    """Apply a likes/sales file to items and records."""
    return metrics_lib.apply_metrics(Catalog(lake), path, seller)


@flow(name="metrics", flow_run_name=lambda: _run_name("metrics", "path"), log_prints=True)
@says_why
def metrics(
    path: str | None = None, lake: str | None = None, seller: str | None = None
) -> dict[str, Any]:
    """Load business metrics (likes, sales) for known items; report unknown ids.

    ``path`` defaults to ``CATALOG_LAKE_METRICS_PATH`` (or the Prefect variable
    ``catalog_lake_metrics_path``), else ``data/metrics.csv`` outside a deployment.
    A row's item is its ``seller`` column's, else the run's seller (``seller_of_run``).
    """
    seller = seller_name(seller_of_run(seller))
    lake = lake_of_run(lake)
    path = stable_place("path", path, "data/metrics.csv")
    with one_writer(lake):
        report = metrics_task(lake, path, seller)
    create_markdown_artifact(key="metrics-report", markdown=_report_markdown("Metrics", report))
    return report


@task(name="maintain", cache_policy=NONE, **IO_RETRIES)
def maintain_task(lake: str | None, retention_hours: int) -> dict[str, Any]:
    """Re-price, compact and vacuum."""
    return maintain_lib.maintain(Catalog(lake), retention_hours=retention_hours)


@flow(name="maintain", flow_run_name="maintain-keep-{retention_hours}h", log_prints=True)
@says_why
def maintain(
    retention_hours: int = maintain_lib.DEFAULT_RETENTION_HOURS, lake: str | None = None
) -> dict[str, Any]:
    """Nightly upkeep: discount windows, compaction, vacuum."""
    lake = lake_of_run(lake)
    with one_writer(lake):
        report = maintain_task(lake, retention_hours)
    create_markdown_artifact(key="maintain-report", markdown=_report_markdown("Maintain", report))
    return report


@task(name="sync", cache_policy=NONE, **IO_RETRIES)
def sync_task(
    lake: str | None,
    target: str,
    fmt: str,
    full: bool,
    max_record_bytes: int | None = None,
    apply: str | None = None,
    seller: str | None = None,
) -> dict[str, Any]:
    """``changes.sync``, as ``catalog-lake sync``: a retry exports the same range again."""
    return Catalog(lake).sync(
        target, fmt, full=full, max_record_bytes=max_record_bytes, apply=apply, seller=seller
    )


@flow(name="sync", flow_run_name=lambda: _run_name("sync", "target"), log_prints=True)
@says_why
def sync(
    target: str | None = None,
    format: str = "jsonl",  # noqa: A002 - the CLI's own name for it
    full: bool = False,
    lake: str | None = None,
    max_record_bytes: int | None = None,
    apply: str | None = None,
    seller: str | None = None,
) -> dict[str, Any]:
    """Export the records' changes since ``target``'s cursor to a new file there.

    The first run (or ``full``) exports every record; each later one the
    upserts and deletes since the cursor, which then moves. A run that fails
    after writing its file writes the same range again: loading it twice is
    harmless (upserts and deletes are idempotent). ``apply``, an engine index's URL,
    loads the files there before the cursor moves (``catalog-lake sync --apply``;
    credentials from the worker's environment, never in the URL: Prefect keeps a
    run's parameters). ``target`` defaults to
    ``CATALOG_LAKE_SYNC_TARGET`` (or the Prefect variable ``catalog_lake_sync_target``),
    else ``exports/search`` outside a deployment. ``seller`` (``seller_of_run``): a
    target of that seller's records alone, a storefront's own index; none set, every
    seller's.
    """
    refuse_userinfo(apply, "apply")
    seller = seller_of_run(seller)  # Prefect would keep the password with the run
    lake = lake_of_run(lake)
    target = stable_place("target", target, "exports/search")
    with one_writer(lake):
        report = sync_task(lake, target, format, full, max_record_bytes, apply, seller)
    create_markdown_artifact(key="sync-report", markdown=_report_markdown("Sync", report))
    return report


def _run_name(kind: str, place: str) -> str:
    """``kind-<the run's place>``, as ``stable_place`` finds it; ``default`` when none is set."""
    env, variable = PLACES[place]
    given = flow_run.parameters.get(place) or os.environ.get(env) or _prefect_variable(variable)
    return f"{kind}-{given or 'default'}"


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
    sys.exit(1 if run_failed(result) else 0)
