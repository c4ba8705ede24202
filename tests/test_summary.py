"""Run summaries are push responses first, built by a pure function."""

from __future__ import annotations

from dataclasses import dataclass, field

from catalog_lake import RESPONSE_KEYS, push_response
from catalog_lake.summary import SKIP_FAILED, run_summary, summary_markdown


@dataclass
class Feed:
    path: str


@dataclass
class Result:
    feed: Feed
    status: str
    responses: list = field(default_factory=list)
    error: str | None = None


def failed_item(index, client_id, code):
    return {
        "index": index,
        "client_item_id": client_id,
        "errors": [{"field": "f", "code": code, "message": "m", "value": 1}],
    }


def test_run_summary_totals_batches_and_keeps_the_response_shape():
    one = push_response("r1", 3, [("a", 1), ("b", 2)], [failed_item(2, "c", "invalid_price")])
    two = push_response("r2", 2, [("a", 1)], [failed_item(0, "d", "invalid_price")])
    results = [
        Result(Feed("x.json"), "ingested", [one, two]),
        Result(Feed("bad.json"), "invalid", error="not JSON"),
    ]
    summary = run_summary("run-1", results, [Feed("old.json")], duration_s=2.0, flow_run_id="fr")

    assert list(summary)[:5] == list(RESPONSE_KEYS)
    assert summary["catalog_push_request_id"] == "run-1"
    assert summary["catalog_push_received_product_count"] == "5"
    assert summary["catalog_push_success_product_count"] == "3"
    assert summary["catalog_push_failed_product_count"] == "2"
    assert summary["items"] == [{"a": "1"}, {"b": "2"}, {"a": "1"}]
    assert summary["catalog_push_failed_items"][1] == {
        **failed_item(0, "d", "invalid_price"),
        "file": "x.json",
        "request_id": "r2",
    }
    assert summary["totals"] == {
        "received": 5,
        "success": 3,
        "failed": 2,
        "warned": 0,
        "already_stored": 0,
    }
    assert summary["top_failure_codes"] == [{"code": "invalid_price", "count": 2}]
    assert summary["files"] == {
        "ingested": ["x.json"],
        "skipped": ["old.json"],
        "skipped_reasons": {"ingested before and unchanged": 1},
        "failed": [{"path": "bad.json", "status": "invalid", "error": "not JSON"}],
        "still_failing": [],
    }
    assert [b["catalog_push_request_id"] for b in summary["batches"]] == ["r1", "r2"]
    assert (summary["duration_s"], summary["items_per_second"], summary["flow_run_id"]) == (
        2.0,
        2.5,
        "fr",
    )


def test_markdown_report():
    summary = run_summary("run-1", [], [], duration_s=0.5)
    assert summary_markdown(summary) == (
        "# Ingest run `run-1`\n\n"
        "| received | stored | with warnings | failed | files ingested | files skipped "
        "| files failed | seconds | items/s |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        "| 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0.5 | - |\n"
    )


def test_the_still_failing_rule_names_each_file():
    from catalog_lake.errors import IngestError
    from catalog_lake.sources import FeedFile

    skipped = [FeedFile("/f", "broken.json", "x", 1)]
    summary = run_summary(
        "r", [], skipped, duration_s=1.0, skipped_reasons={"broken.json": SKIP_FAILED}
    )
    assert str(IngestError(summary)) == (
        "1 feed file(s) failed: broken.json (failed before and unchanged)"
    )
