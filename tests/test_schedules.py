"""Schedules fire: a real Prefect server schedules prefect.yaml's deployments, a real worker runs one.

``prefect_test_harness`` proves that flows run, not that a schedule fires: the
harness has no scheduler. Here everything is what an operator runs (README,
"Flows"): ``prefect server start`` on loopback, ``prefect work-pool create``,
``prefect variable set``, ``prefect deploy --all`` from the project's own
``prefect.yaml``, then ``prefect worker start``. The worker clones the project
from the repository the variable names (the pull step), runs the scheduled
ingest, and the run ends ``Completed`` with the lake written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from catalog_lake import Catalog
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


def test_a_deployed_schedule_fires_and_a_worker_completes_the_run(tmp_path):
    repository = _project_repository(tmp_path / "project")
    lake = tmp_path / "lake"
    with prefect_server(tmp_path / "prefect") as env:
        _prefect(env, repository, "work-pool", "create", "catalog-lake", "--type", "process")
        _prefect(env, repository, "variable", "set", "catalog_lake_repository", str(repository))
        _prefect(env, repository, "--no-prompt", "deploy", "--all")
        deployments = {
            d["name"]: d
            for d in _api(env, "/deployments/filter", {})
            if d["name"] in ("scheduled", "nightly")
        }
        # Every deployment records the pull step, never the deploying machine's folder.
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

        # The scheduler plans prefect.yaml's schedules: ingest every 15 minutes,
        # maintain at 02:00 UTC.
        ingest_runs = _scheduled(env, deployments["scheduled"]["id"], 3, 60)
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
        due = _scheduled(env, deployments["scheduled"]["id"], len(ingest_runs) + 1, 60)
        assert len(due) > len(ingest_runs), "the scheduler made no run for the new schedule"

        worker_env = {**env, "CATALOG_LAKE_URI": str(lake)}
        worker = subprocess.run(
            [
                prefect_binary(),
                "worker",
                "start",
                "--pool",
                "catalog-lake",
                "--run-once",
                "--limit",
                "1",
            ],  # fmt: skip
            env=worker_env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        finished = _api(
            env,
            "/flow_runs/filter",
            {
                "flow_runs": {
                    "deployment_id": {"any_": [deployments["scheduled"]["id"]]},
                    "state": {"type": {"any_": ["COMPLETED", "FAILED", "CRASHED"]}},
                }
            },
        )
        log = worker.stdout + worker.stderr
        assert [r["state"]["type"] for r in finished] == ["COMPLETED"], log
        assert finished[0]["auto_scheduled"] is True
        assert finished[0]["name"] and finished[0]["parameters"]["source"] == "data/feeds"

    # The run wrote the lake the worker was given, from the clone's sample feeds.
    assert len(Catalog(lake).records()) == 14
