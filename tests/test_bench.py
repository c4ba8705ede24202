"""The benchmark runs end to end on a small feed (a smoke test: it asserts no times)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import synth
from bench.__main__ import app
from bench.run import report, run
from typer.testing import CliRunner


def test_synthetic_items_look_like_the_spec_and_some_are_dirty():
    items = list(synth.items(200, dirty_fraction=0.1))
    assert len({i["client_item_id"] for i in items}) == 200
    assert {i["lake_category"] for i in items} == {
        "GROCERY",
        "FASHION",
        "ELECTRONICS",
        "BEAUTY",
        "F&B",
    }
    assert 1_000 < sum(len(json.dumps(i)) for i in items) / 200 < 1_800
    assert all(len(i["attributes"]) >= 20 for i in items)
    assert list(synth.items(3)) == list(synth.items(3))  # deterministic


def test_bench_runs_every_scenario(tmp_path):
    messages = []
    result = run(
        300, small_pushes=2, batch_size=100, workdir=tmp_path, keep=True, progress=messages.append
    )
    assert result["first"]["received"] == 300
    assert result["first"]["stored"] + result["first"]["failed"] == 300
    assert result["reingest"]["received"] == 300
    assert result["baseline_first"]["rows"] == 299  # DuckDB cannot read the item that repeats a key
    assert result["small"]["pushes"] == 2 and result["small"]["first_ms"] > 0
    assert result["first"]["ratio"] > 0 and result["reingest"]["ratio"] > 0
    assert {
        "read_parse",
        "validate",
        "ids",
        "records",
        "raw_rows",
        "write_items",
        "write_records",
    } <= set(result["first"]["stages"])
    text = report(result)
    assert "| catalog-lake first ingest |" in text and "10-item pushes" in text
    assert "the first, by a new process opening the lake" in text
    # The ingest runs left a key snapshot for the next process's first push.
    assert (tmp_path / "lake" / "_catalog_lake.keys.arrow").exists()
    assert messages[0] == "generating 300 items (dirty 5%)"


def test_bench_command_prints_a_report(tmp_path):
    record = tmp_path / "results.md"
    outcome = CliRunner().invoke(
        app,
        [
            "--items",
            "200",
            "--small-pushes",
            "0",
            "--no-reingest",
            "--repeat",
            "2",
            "--record",
            str(record),
            "--json",
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    result = json.loads(outcome.stdout)
    assert len(result["ratios"]["first"]) == 2  # each run's ratio, baseline timed before it
    assert result["first"]["ratio"] == min(result["ratios"]["first"])  # lower middle of two
    assert "reingest" not in result
    text = record.read_text()
    assert text.startswith("\n## bench ")
    assert "vs DuckDB baseline" in text and "catalog-lake first ingest" in text
    (ratios,) = [line for line in text.splitlines() if line.startswith("Ratios of the 2 runs")]
    assert "first ingest" in ratios and "re-ingest" not in ratios


def test_bench_with_worker_processes_stores_the_same_and_counts_their_memory(tmp_path):
    result = run(
        2_500,
        small_pushes=0,
        reingest=False,
        group_items=1_000,  # three files, one group each: the workers have work
        workers=2,
        workdir=tmp_path,
        progress=lambda message: None,
    )
    first = result["first"]
    assert (first["received"], first["stored"] + first["failed"]) == (2_500, 2_500)
    assert first["workers"] == 2 and first["workers_rss_mb"] > 0
    assert first["rss_mb"] > first["workers_rss_mb"]
    assert "checked by 2 worker processes" in report(result)
    assert "checked by 1 worker process (" in report({**result, "workers": 1})


#: The defects a default push refuses the item for (the rest are warnings).
ERROR_FIELDS = ("mrp", "sale_price", "name", "client_item_id")


def test_the_generator_exercises_every_defect_kind(tmp_path):
    """Each dirty item takes the next defect, so every code (kind-sensitive ones too) occurs."""
    from catalog_lake import Catalog
    from catalog_lake.feeds import ingest

    count = 20 * len(synth.DEFECTS)  # one dirty item in 20: each defect once
    synth.write_feed(tmp_path / "feed", count, per_file=count)
    catalog = Catalog(tmp_path / "lake")
    summary = ingest(catalog, tmp_path / "feed")
    seen = {c["code"] for c in summary["top_failure_codes"] + summary["top_warning_codes"]}
    wanted = {code for *_, code in synth.DEFECTS}
    totals = summary["totals"]
    assert totals["failed"] + totals["warned"] == len(synth.DEFECTS)
    assert totals["failed"] == sum(field in ERROR_FIELDS for _, field, *_ in synth.DEFECTS)
    assert wanted <= seen, wanted - seen


def test_the_search_candidates_bench_runs_both_engines(tmp_path):
    from bench.search import app as search_app

    report = tmp_path / "results.md"
    done = CliRunner().invoke(
        search_app, ["--items", "300", "--rounds", "1", "--record", str(report)]
    )
    assert done.exit_code == 0, done.output
    text = report.read_text()
    assert "| duckdb (baseline) |" in text and "| tantivy |" in text


def test_the_peers_bench_loads_one_feed_with_each_system(tmp_path):
    from bench import peers

    checkout = Path(__file__).parents[1] / "src"  # an older checkout's src, in real use
    found, load = peers.run(300, 1, tmp_path, before=checkout)
    names = list(found)
    before = found.pop(f"catalog-lake ingest, before ({checkout})")
    assert before[0]["rows"] == found[names[2]][0]["rows"]  # the same code stores the same
    assert names[:3] == list(peers.PEERS)[:3]  # DuckDB (the baseline), pandas, catalog-lake
    assert found[names[0]][0]["rows"] == 299  # DuckDB cannot read the item that repeats a key
    assert found[names[1]][0]["rows"] == 300  # pandas keeps every item, checked or not
    assert 0 < found[names[2]][0]["rows"] < 300  # catalog-lake refuses the dirty ones
    assert all(run[0]["wall"] >= run[0]["seconds"] > 0 for run in found.values())
    assert before[0]["wall"] > 0
    # Each process's CPU time is its own: start-up alone takes a Python process some.
    assert all(run[0]["cpu"] > 0 for run in [*found.values(), before])
    assert ("dlt first load, merge (no checks, a table per list)" in found) == peers.has_dlt()
    assert "before" in load and "after" in load


def test_the_scale_out_bench_measures_the_coordinators_share_and_concurrent_ingests(
    tmp_path, capsys
):
    """Issue 45's figures, at a small scale: a real ``LocalCluster``, real processes."""
    from bench.scale import scale_out

    scale_out(tmp_path, 2_000, worker_counts=[2], ingest_counts=[1, 2], group_items=500)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert ", 0 workers: " in lines[0] and "= 1.00 of a no-worker ingest's" in lines[0]
    assert "workers CPU 0.0 s; handed back 0.0 MB" in lines[0]
    assert ", 2 workers: " in lines[1] and "workers CPU 0.0 s" not in lines[1]
    assert "handed back 0.0 MB" not in lines[1]  # the checked groups came back
    stored = {line.split("; ")[-1] for line in lines[:2]}
    assert len(stored) == 1  # the same records with workers as without
    assert "1 concurrent ingest(s)" in lines[2] and "ids unique: True" in lines[3]
