"""Push responses (SPEC 2.7) and run summaries, as plain data.

Pure functions: they take what happened and return dicts, so the library,
the CLI and the flows all report in exactly the same shape.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from .sellers import DEFAULT_SELLER

RESPONSE_KEYS = (
    "catalog_push_request_id",
    "catalog_push_received_product_count",
    "catalog_push_success_product_count",
    "catalog_push_failed_product_count",
    "items",
)
#: Our extensions to SPEC 2.7, which leaves failed-item details unstated: the
#: items refused, and the items stored with a value dropped or repaired.
FAILED_ITEMS_KEY = "catalog_push_failed_items"
WARNING_ITEMS_KEY = "catalog_push_warning_items"
#: Present (true) only on the answer of a dry run, which wrote nothing.
DRY_RUN_KEY = "catalog_push_dry_run"


def push_response(
    request_id: str,
    received: int,
    stored: list[tuple[str, int | None]],
    failed: list[dict[str, Any]],
    warned: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    """The SPEC 2.7 response: counts as numeric text, ids as numeric text.

    ``stored`` is ``(client_item_id, service_id)`` in input order, the id None
    for an item a dry run found new; ``failed`` holds one entry per failed
    item and ``warned`` one per stored item with warnings.
    """
    if received != len(stored) + len(failed):
        raise ValueError(f"{received} received but {len(stored)} stored + {len(failed)} failed")
    return {
        "catalog_push_request_id": request_id,
        "catalog_push_received_product_count": str(received),
        "catalog_push_success_product_count": str(len(stored)),
        "catalog_push_failed_product_count": str(len(failed)),
        "items": [{client_id: _id(service_id)} for client_id, service_id in stored],
        FAILED_ITEMS_KEY: failed,
        WARNING_ITEMS_KEY: list(warned),
    }


def response_text(response: dict[str, Any]) -> str:
    """A push response as the ``pushes`` table stores it (``response_json``), which a retry answers.

    The one writer of that text: a push written in this process, a group a
    Dask worker wrote (it sends the text, so the coordinator never encodes
    it) and a delete all store it this way.
    """
    return json.dumps(response, ensure_ascii=False)


def _id(service_id: int | None) -> str | None:
    return None if service_id is None else str(service_id)


def failure_codes(response: dict[str, Any]) -> Counter[str]:
    """How often each error code occurred among a response's failed items.

    A brief response (``brief``) carries the counts instead of the items.
    """
    if "failure_codes" in response:
        return Counter(response["failure_codes"])
    return Counter(
        error["code"] for item in response.get(FAILED_ITEMS_KEY, []) for error in item["errors"]
    )


def warning_codes(response: dict[str, Any]) -> Counter[str]:
    """How often each warning code occurred among a response's items stored with warnings."""
    if "warning_codes" in response:
        return Counter(response["warning_codes"])
    return Counter(
        w["code"] for item in response.get(WARNING_ITEMS_KEY, []) for w in item["warnings"]
    )


def warned_count(response: dict[str, Any]) -> int:
    """Items of a response stored with warnings (a brief response counts them)."""
    if "warned" in response:
        return int(response["warned"])
    return len(response.get(WARNING_ITEMS_KEY, []))


#: Why a file is skipped when nothing else is said: the lake holds it, unchanged.
SKIP_UNCHANGED = "ingested before and unchanged"
#: Why a file that failed to parse is skipped: it would only fail again.
SKIP_FAILED = "failed before and unchanged (fix it, or use --force)"


def run_failed(summary: dict[str, Any]) -> bool:
    """Whether an ingest run ends failed: a file failed now, or still fails unchanged.

    A file that failed before and was skipped unchanged is still broken, so a
    scheduled run over it fails too (exit 1, a ``Failed`` flow run) until the
    file is fixed, replaced or removed: a schedule stays red while a feed is broken.
    A full refresh that stopped short of its deletes fails the run too.
    """
    files = summary["files"]
    stopped = (summary.get("refresh") or {}).get("status") == "stopped"  # a refresh held back
    return bool(files["failed"] or files.get("still_failing") or stopped)


def run_summary(
    run_id: str,
    results: list[Any],
    skipped: list[Any],
    *,
    duration_s: float,
    flow_run_id: str | None = None,
    top: int = 10,
    skipped_reasons: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The summary of an ingest run, itself a push response.

    The SPEC 2.7 keys come first, totalled over every batch of the run (the
    request id is the run's id), so anything that reads a push response can
    read a run. ``results`` are per-file outcomes with ``feed``, ``status``,
    ``error`` and ``responses``; ``skipped`` are the files left alone.
    Brief responses (a big run) count but list nothing: ``detail_complete``
    then says the lists cover part of the run. ``skipped_reasons`` says why
    each skipped file (by path) was left alone (``runs.Plan.reasons``).
    """
    skipped_reasons = skipped_reasons or {}
    responses = [(r.feed.path, response) for r in results for response in r.responses]
    stored = [
        (client_id, service_id)
        for _, response in responses
        for entry in response["items"]
        for client_id, service_id in entry.items()
    ]
    failed = [
        {**item, "file": path, "request_id": response["catalog_push_request_id"]}
        for path, response in responses
        for item in response[FAILED_ITEMS_KEY]
    ]
    warned = [
        {**item, "file": path, "request_id": response["catalog_push_request_id"]}
        for path, response in responses
        for item in response.get(WARNING_ITEMS_KEY, [])
    ]
    received = sum(int(r["catalog_push_received_product_count"]) for _, r in responses)
    # Batches an interrupted run had stored: answered from the lake, not written again.
    already = sum(getattr(r, "already_stored", 0) for r in results)
    success = sum(int(r["catalog_push_success_product_count"]) for _, r in responses)
    complete = not any(is_brief(r) for _, r in responses)
    if complete:
        summary = push_response(run_id, received, stored, failed, warned)
    else:
        summary = {
            "catalog_push_request_id": run_id,
            "catalog_push_received_product_count": str(received),
            "catalog_push_success_product_count": str(success),
            "catalog_push_failed_product_count": str(received - success),
            "items": [{client_id: _id(service_id)} for client_id, service_id in stored],
            FAILED_ITEMS_KEY: failed,
            WARNING_ITEMS_KEY: warned,
        }
    codes, warnings = Counter(), Counter()
    for _, response in responses:
        codes.update(failure_codes(response))
        warnings.update(warning_codes(response))
    summary.update(
        {
            "totals": {
                "received": received,
                "success": success,
                "failed": received - success,
                "warned": sum(warned_count(r) for _, r in responses),
                "already_stored": already,
            },
            "detail_complete": complete,
            "top_failure_codes": [{"code": c, "count": n} for c, n in codes.most_common(top)],
            "top_warning_codes": [{"code": c, "count": n} for c, n in warnings.most_common(top)],
            "files": {
                "ingested": [r.feed.path for r in results if r.status == "ingested"],
                "skipped": [f.path for f in skipped],
                "skipped_reasons": dict(
                    Counter(skipped_reasons.get(f.path, SKIP_UNCHANGED) for f in skipped)
                ),
                "failed": [
                    {"path": r.feed.path, "status": r.status, "error": r.error}
                    for r in results
                    if r.status != "ingested"
                ],
                "still_failing": [
                    f.path for f in skipped if skipped_reasons.get(f.path) == SKIP_FAILED
                ],
            },
            "deletions": _deletions(results),
            "batches": [{"file": path, **response} for path, response in responses],
            "duration_s": round(duration_s, 3),
            "items_per_second": (
                round((received - already) / duration_s, 1) if duration_s > 0 else None
            ),
            "flow_run_id": flow_run_id,
        }
    )
    return summary


def _deletions(results: list[Any]) -> dict[str, Any]:
    """What the run's deletions files deleted (issue 27), by outcome."""
    outcomes: Counter[str] = Counter()
    request_ids = []
    for result in results:
        for response in getattr(result, "deletions", []):
            request_ids.append(response["catalog_delete_request_id"])
            outcomes.update(entry["status"] for entry in response["items"])
    return {"requests": len(request_ids), "request_ids": request_ids, **dict(outcomes)}


def summary_markdown(summary: dict[str, Any]) -> str:
    """A short human report of a run, for Prefect artifacts and terminals."""
    totals = summary["totals"]
    files = summary["files"]
    dry = " (dry run: nothing was written)" if summary.get(DRY_RUN_KEY) else ""
    seller = summary.get("seller") or DEFAULT_SELLER
    whose = "" if seller == DEFAULT_SELLER else f" for seller `{seller}`"
    lines = [
        f"# Ingest run `{summary['catalog_push_request_id']}`{whose}{dry}",
        "",
        "| received | stored | with warnings | failed | files ingested | files skipped "
        "| files failed | seconds | items/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {totals['received']} | {totals['success']} | {totals.get('warned', 0)} | "
        f"{totals['failed']} | {len(files['ingested'])} | {len(files['skipped'])} | "
        f"{len(files['failed'])} | {summary['duration_s']} | "
        f"{summary['items_per_second'] or '-'} |",
    ]
    if summary.get("note"):
        lines += ["", summary["note"]]
    if totals.get("already_stored"):
        lines += [
            "",
            f"{totals['already_stored']:,} of the items received had been stored by an "
            "interrupted run and were not written again.",
        ]
    reasons = files.get("skipped_reasons") or {}
    if reasons:
        lines += [
            "",
            f"{len(files['skipped']):,} skipped: "
            + "; ".join(f"{n:,} {reason}" for reason, n in reasons.items()),
        ]
    deletions = summary.get("deletions") or {}
    if deletions.get("requests"):
        counted = {k: v for k, v in deletions.items() if k not in ("requests", "request_ids")}
        lines += [
            "",
            "Deletions files: "
            + ", ".join(f"{n:,} {what.replace('_', ' ')}" for what, n in counted.items()),
        ]
    refresh = summary.get("refresh")
    if refresh:
        lines += ["", "## Full refresh", ""]
        status = refresh["status"]
        if status == "stopped":
            lines.append(f"**Stopped:** {refresh['reason']}")
        elif status == "nothing_to_delete":
            lines.append(
                f"Nothing to delete: the run carried all {refresh.get('in_scope', 0):,} items "
                f"in scope ({refresh['scope']})."
            )
        else:
            verb = {"deleted": "deleted", "dry_run": "would be deleted"}.get(status, "deleted")
            count = refresh.get("deleted") if status == "deleted" else refresh.get("to_delete", 0)
            lines.append(
                f"{count:,} of {refresh.get('in_scope', 0):,} items in scope "
                f"({refresh['scope']}) {verb}."
            )
            if refresh.get("ids"):
                shown = refresh["ids"][:50]
                more = len(refresh["ids"]) - len(shown)
                lines.append(
                    "Ids: "
                    + ", ".join(f"`{i}`" for i in shown)
                    + (f" and {more:,} more" if more else "")
                )
    if summary["top_failure_codes"]:
        lines += ["", "## Top failure codes", "", "| code | count |", "|---|---:|"]
        lines += [f"| `{c['code']}` | {c['count']} |" for c in summary["top_failure_codes"]]
    if summary.get("top_warning_codes"):
        lines += [
            "",
            "## Top warning codes (values dropped, repaired or kept; the items were stored)",
            "",
            "| code | count |",
            "|---|---:|",
        ]
        lines += [f"| `{c['code']}` | {c['count']} |" for c in summary["top_warning_codes"]]
    if files.get("still_failing"):
        lines += [
            "",
            f"{len(files['still_failing']):,} file(s) still failing, unchanged since they "
            "failed (fix, replace or remove them, or use --force): "
            + ", ".join(f"`{path}`" for path in files["still_failing"]),
        ]
    if files["failed"]:
        lines += ["", "## Files that failed", "", "| file | status | error |", "|---|---|---|"]
        lines += [
            f"| `{f['path']}` | {f['status']} | {str(f['error']).replace('|', '/')} |"
            for f in files["failed"]
        ]
    return "\n".join(lines) + "\n"


def carried(response: dict[str, Any]) -> list[str]:
    """The client ids a push response names: those stored, and those refused that had one."""
    stored = [client_id for entry in response["items"] for client_id in entry]
    failed = [f["client_item_id"] for f in response[FAILED_ITEMS_KEY] if f.get("client_item_id")]
    return stored + failed


def brief(response: dict[str, Any]) -> dict[str, Any]:
    """A push response with counts but without its per-item lists.

    ``failure_codes``, ``warning_codes`` and ``warned`` keep what the run
    summary's totals and top codes need.
    """
    return {
        **response,
        "items": [],
        FAILED_ITEMS_KEY: [],
        WARNING_ITEMS_KEY: [],
        "failure_codes": dict(failure_codes(response)),
        "warning_codes": dict(warning_codes(response)),
        "warned": warned_count(response),
        "detail": "omitted from the run summary; the pushes table has the full response",
    }


def is_brief(response: dict[str, Any]) -> bool:
    """Whether a response is a ``brief`` one, its per-item lists left out."""
    return "detail" in response
