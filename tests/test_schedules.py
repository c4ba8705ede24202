"""Schedules fire: a real Prefect server schedules prefect.yaml's deployments, a real worker runs one.

``prefect_test_harness`` proves that flows run, not that a schedule fires: the
harness has no scheduler. Here everything is what an operator runs (README,
"Flows"): ``prefect server start`` on loopback, ``prefect work-pool create``,
``prefect variable set``, ``prefect deploy --all`` from the project's own
``prefect.yaml``, then ``prefect worker start``. The worker clones the project
from the repository the variable names (the pull step), runs the scheduled
ingest, and the run ends ``Completed`` with the lake written. Every place a run
reads or writes is absolute and outside that clone, so runs keep their state.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from catalog_lake import Catalog
from catalog_lake.changes import cursors
from catalog_lake.runs import runs as past_runs
from tests.servers import prefect_binary, prefect_server

ROOT = Path(__file__).parents[1]
pytestmark = pytest.mark.flow


def _project_repository(folder: Path) -> Path:
    """A git repository of the project as it is in this tree (committed or not)."""
    for part in ("flows", "data"):
        shutil.copytree(ROOT / part, folder / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "prefect.yaml", folder / "prefect.yaml")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost", "-C", str(folder)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the project"], check=True)
    return folder


def _api(env: dict[str, str], path: str, body: dict) -> list[dict]:
    request = urllib.request.Request(
        f"{env['PREFECT_API_URL']}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - loopback
        return json.loads(answer.read())


def _prefect(env: dict[str, str], cwd: Path, *arguments: str) -> str:
    done = subprocess.run(
        [prefect_binary(), *arguments], env=env, cwd=cwd, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _scheduled(env: dict[str, str], deployment_id: str, least: int, timeout: float) -> list[dict]:
    """The deployment's scheduled runs, soonest first, once the scheduler made ``least``."""
    deadline = time.monotonic() + timeout
    while True:
        runs = _api(
            env,
            "/flow_runs/filter",
            {
                "flow_runs": {
                    "deployment_id": {"any_": [deployment_id]},
                    "state": {"type": {"any_": ["SCHEDULED"]}},
                },
                "sort": "EXPECTED_START_TIME_ASC",
            },
        )
        if len(runs) >= least or time.monotonic() > deadline:
            return runs
        time.sleep(1)


def _polled(env: dict[str, str], path: str, body: dict) -> list[dict] | None:
    """One poll of the API; None when the server was too busy to answer in time.

    A test server on SQLite, beside a worker and its flow run on two cores, now and
    then holds its database lock past the client's timeout: the next poll asks again.
    """
    try:
        return _api(env, path, body)
    except OSError:
        return None


def _runs(env: dict[str, str], deployment_id: str, states: tuple[str, ...]) -> list[dict] | None:
    """The deployment's runs in these states, in the order they started."""
    return _polled(
        env,
        "/flow_runs/filter",
        {
            "flow_runs": {
                "deployment_id": {"any_": [deployment_id]},
                "state": {"type": {"any_": list(states)}},
            },
            "sort": "START_TIME_ASC",
        },
    )


FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def _finished(env, deployment_id: str, least: int, worker, timeout: float = 240) -> list[dict]:
    """Wait until ``least`` runs of the deployment ended; the worker must still be running."""
    deadline = time.monotonic() + timeout
    while True:
        done = _runs(env, deployment_id, FINAL)
        if done is not None and len(done) >= least:
            return done
        assert worker.poll() is None, "the worker stopped"
        assert time.monotonic() < deadline, f"{len(done or [])} of {least} runs ended in time"
        time.sleep(2)


def _run_now(env, cwd: Path, name: str, *parameters: str) -> str:
    """``prefect deployment run NAME -p ...``: the new flow run's id."""
    shown = _prefect(env, cwd, "deployment", "run", name, *parameters)
    return UUID.search(shown).group(0)


def _run(env, run_id: str, worker, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        found = _polled(env, "/flow_runs/filter", {"flow_runs": {"id": {"any_": [run_id]}}})
        if found and found[0]["state"]["type"] in FINAL:
            return found[0]
        assert worker.poll() is None, "the worker stopped"
        assert time.monotonic() < deadline, f"run {run_id} did not end in time"
        time.sleep(2)


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_deployed_schedules_fire_and_keep_their_state_from_run_to_run(tmp_path):
    """The README's "Flows" session, as an operator runs it (issue 41).

    The lake comes from the worker's environment, the feeds and the sync target
    from Prefect variables: absolute places outside each run's clone. So a
    second scheduled ingest skips every file, a search-sync run leaves its file
    where a shell finds it, and a full refresh through the deployment deletes a
    removed file's items. A run given a relative source refuses it in one line.
    """
    repository = _project_repository(tmp_path / "project")
    lake, feeds, exports = tmp_path / "lake", tmp_path / "feeds", tmp_path / "exports"
    shutil.copytree(ROOT / "data" / "feeds", feeds)
    with prefect_server(tmp_path / "prefect") as env:
        _prefect(env, repository, "work-pool", "create", "catalog-lake", "--type", "process")
        _prefect(env, repository, "variable", "set", "catalog_lake_repository", str(repository))
        _prefect(env, repository, "variable", "set", "catalog_lake_source", str(feeds))
        _prefect(env, repository, "variable", "set", "catalog_lake_sync_target", str(exports))
        _prefect(env, repository, "--no-prompt", "deploy", "--all")
        deployments = {
            f"{d['name']}": d
            for d in _api(env, "/deployments/filter", {})
            if d["name"] in ("scheduled", "nightly", "search-sync")
        }
        # Every deployment records the pull step, never the deploying machine's folder,
        # and no parameter names a place: the clone is gone when the run ends.
        for deployment in _api(env, "/deployments/filter", {}):
            assert deployment["pull_steps"] == [
                {
                    "prefect.deployments.steps.git_clone": {
                        "id": "clone",
                        "repository": "{{ prefect.variables.catalog_lake_repository }}",
                    }
                }
            ]
            assert str(repository) not in json.dumps(deployment)
            assert not {"source", "target", "path", "lake"} & set(deployment["parameters"])

        # The scheduler plans prefect.yaml's schedules: ingest every 15 minutes,
        # maintain at 02:00 UTC.
        ingest_id = deployments["scheduled"]["id"]
        ingest_runs = _scheduled(env, ingest_id, 3, 60)
        starts = [datetime.fromisoformat(r["expected_start_time"]) for r in ingest_runs[:3]]
        assert [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)] == [
            900.0,
            900.0,
        ]
        assert all(r["auto_scheduled"] for r in ingest_runs)
        nightly = _scheduled(env, deployments["nightly"]["id"], 1, 60)
        first = datetime.fromisoformat(nightly[0]["expected_start_time"]).astimezone(UTC)
        assert (first.hour, first.minute) == (2, 0)

        # A schedule that is due now: the same deployment, every 5 s.
        _prefect(
            env, repository, "deployment", "schedule", "create", "ingest/scheduled",
            "--interval", "5",
        )  # fmt: skip
        due = _scheduled(env, ingest_id, len(ingest_runs) + 1, 60)
        assert len(due) > len(ingest_runs), "the scheduler made no run for the new schedule"

        worker_log = (tmp_path / "worker.log").open("wb")
        worker = subprocess.Popen(  # noqa: S603 - the pinned prefect, fixed arguments
            [prefect_binary(), "worker", "start", "--pool", "catalog-lake", "--limit", "1"],
            env={**env, "CATALOG_LAKE_URI": str(lake), "PREFECT_WORKER_QUERY_SECONDS": "3"},
            cwd=tmp_path,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
        )
        try:
            # Two consecutive scheduled runs: the second finds every file as the lake has it.
            scheduled = _finished(env, ingest_id, 2, worker)[:2]
            _prefect(env, repository, "deployment", "schedule", "clear", "ingest/scheduled", "-y")
            for run in _runs(env, ingest_id, ("RUNNING", "PENDING")) or []:
                _run(env, run["id"], worker)
            assert [r["state"]["type"] for r in scheduled] == ["COMPLETED", "COMPLETED"]
            assert all(r["auto_scheduled"] for r in scheduled)
            ingests = past_runs(Catalog(lake), "ingest").sort_values("started_at")
            summaries = [json.loads(s) for s in ingests["summary_json"]]
            assert len(summaries[0]["files"]["ingested"]) == 7
            assert summaries[0]["catalog_push_success_product_count"] == "14"
            for later in summaries[1:]:
                assert later["files"]["ingested"] == [] and len(later["files"]["skipped"]) == 7
                assert later["catalog_push_received_product_count"] == "0"

            # A search-sync run writes where a shell finds it, and the cursor says so.
            synced = _run(env, _run_now(env, repository, "sync/search-sync"), worker)
            assert synced["state"]["type"] == "COMPLETED", synced["state"]["message"]
            (written,) = sorted(exports.glob("*-full.jsonl"))
            assert len(written.read_text().splitlines()) == 14
            manifest = json.loads((exports / ".catalog-lake-target.json").read_text())
            assert manifest["lake_id"] == Catalog(lake).lake.identity()
            (cursor,) = cursors(Catalog(lake).lake)
            assert cursor["target"] == str(exports) and cursor["file"] == str(written)
            assert written.name == f"{cursor['version']:020d}-full.jsonl"

            # A full refresh through the deployment deletes a removed file's items.
            (feeds / "fashion.json").unlink()
            refreshed = _run(
                env,
                _run_now(env, repository, "ingest/scheduled", "-p", "full_refresh=true"),
                worker,
            )
            assert refreshed["state"]["type"] == "COMPLETED", refreshed["state"]["message"]
            live = set(Catalog(lake).records()["client_item_id"])
            assert len(live) == 12 and not {"FASH-TEE-BLK-M", "FASH-KURTA-BLU-L"} & live

            # A relative source is refused before anything is read, in one line, and
            # `prefect deployment run --watch` shows that line, not only "Failed".
            watched = subprocess.run(
                [prefect_binary(), "deployment", "run", "ingest/scheduled", "-p",
                 "source=data/feeds", "--watch", "--watch-timeout", "240"],
                env={**env, "COLUMNS": "400"}, cwd=repository, capture_output=True, text=True,
                timeout=300,
            )  # fmt: skip
            reason = (
                "source 'data/feeds' is a relative path, which a deployment's run would read in "
                "its temporary clone of the project and lose; set CATALOG_LAKE_SOURCE"
            )
            assert watched.returncode == 1, watched.stdout + watched.stderr
            shown = watched.stdout + watched.stderr
            refused = [line for line in shown.splitlines() if "refused:" in line]
            assert refused and reason in refused[0], shown
            assert "Flow run finished in state 'Failed'" in shown
            log = (tmp_path / "worker.log").read_text(errors="replace")
            assert reason in log
        finally:
            worker.terminate()
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
            worker_log.close()
