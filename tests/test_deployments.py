"""Every deployment in prefect.yaml points at a flow that imports, with valid parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
DEPLOYMENTS = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d["entrypoint"])
def test_entrypoint_imports_and_parameters_validate(deployment, monkeypatch):
    from prefect.flows import load_flow_from_entrypoint

    monkeypatch.chdir(ROOT)
    flow = load_flow_from_entrypoint(deployment["entrypoint"])
    assert flow.name == deployment["entrypoint"].rsplit(":", 1)[1]
    validated = flow.validate_parameters(deployment.get("parameters", {}))
    assert set(validated) >= set(deployment.get("parameters", {}))
    assert deployment["work_pool"]["name"] == "catalog-lake"


def test_schedules():
    by_flow = {d["entrypoint"].rsplit(":", 1)[1]: d for d in DEPLOYMENTS if d["name"] != "on-dask"}
    assert by_flow["ingest"]["schedules"] == [{"interval": 900, "timezone": "UTC"}]
    assert by_flow["maintain"]["schedules"] == [{"cron": "0 2 * * *", "timezone": "UTC"}]
    assert "schedules" not in by_flow["backfill"] and "schedules" not in by_flow["metrics"]


def test_flow_parameters_are_typed():
    from flows.catalog_flows import backfill, ingest

    with pytest.raises(Exception, match="batch_size"):
        ingest.validate_parameters({"source": "x", "batch_size": "many"})
    assert backfill.validate_parameters({"since": "2026-11-01T00:00:00Z"})["since"].year == 2026


def test_deployments_that_write_a_lake_run_one_at_a_time():
    for deployment in DEPLOYMENTS:
        if "ingest" in deployment["tags"] or "maintain" in deployment["tags"]:
            assert deployment["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}


def test_a_deployment_run_refuses_a_relative_lake(monkeypatch):
    from flows.catalog_flows import lake_of_run

    from catalog_lake import LakeError

    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", "00000000-0000-0000-0000-000000000001")
    with pytest.raises(LakeError, match="relative path, which a deployment's run would write"):
        lake_of_run("lake")
    assert lake_of_run("/srv/lake") == "/srv/lake"
    assert lake_of_run("s3://bucket/lake") == "s3://bucket/lake"


def test_a_sellers_deployment_as_docs_sellers_md_gives_it_validates():
    """The YAML of docs/sellers.md, added to prefect.yaml's deployments, is a deployment."""
    from prefect.flows import load_flow_from_entrypoint

    page = (ROOT / "docs" / "sellers.md").read_text()
    (block,) = page.split("```yaml\n")[1:]
    snippet = block.split("```")[0]
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text() + snippet)["deployments"]
    seller = deployments[-1]
    assert (seller["name"], seller["parameters"]["seller"]) == ("acme", "acme")
    flow = load_flow_from_entrypoint(str(ROOT / seller["entrypoint"]))
    validated = flow.validate_parameters(seller["parameters"])
    assert validated["seller"] == "acme"
    assert seller["schedules"] == [{"interval": 900, "timezone": "UTC"}]


def test_a_runs_seller_is_its_parameter_else_the_workers_and_is_checked(monkeypatch):
    from flows.catalog_flows import seller_of_run

    from catalog_lake import UsageError

    monkeypatch.setenv("CATALOG_LAKE_SELLER", "acme")
    assert seller_of_run(None) == "acme"
    assert seller_of_run("zeta") == "zeta"
    monkeypatch.setenv("CATALOG_LAKE_SELLER", "acme eu")
    with pytest.raises(UsageError, match="'acme eu' is not a seller's name"):
        seller_of_run(None)
