"""What every command does alike: ``--json``, ``--version``, global options before or after
the command, and an empty ``--lake`` refused in one line."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from catalog_lake import Catalog
from catalog_lake.errors import SearchError, UsageError

ROOT = Path(__file__).parents[1]
FEEDS = ROOT / "data" / "feeds"


@pytest.mark.parametrize(
    "command",
    [["maintain"], ["metrics", "metrics.csv"], ["repair"], ["backfill"], ["backfill", "--dry-run"]],
    ids=lambda c: " ".join(c),
)
def test_every_command_takes_json(run, tmp_path, command):
    run("push", str(FEEDS / "food.json"))
    (tmp_path / "metrics.csv").write_text("client_item_id,likes,sales\nFOOD-BIRYANI-01,3,4\n")
    result = run(*command, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) is not None


def test_repair_json_is_a_list_of_what_it_finished(run):
    run("push", str(FEEDS / "food.json"))
    result = run("repair", "--json")
    assert result.stdout == "[]\n"


def test_a_version_flag(run):
    from importlib.metadata import version

    result = run("--version")
    assert (result.exit_code, result.stdout) == (0, f"catalog-lake {version('catalog-lake')}\n")


def test_global_options_are_accepted_after_the_command_as_well(run):
    run("push", str(FEEDS / "food.json"))
    before = run("--storage-option", "AWS_REGION=us-east-1", "records", "--json")
    after = run("records", "--json", "--storage-option", "AWS_REGION=us-east-1")
    assert after.exit_code == 0, after.output
    assert after.stdout == before.stdout
    bad = run("records", "--storage-option", "secret-without-key")
    assert bad.exit_code == 1
    assert "secret" not in bad.stderr


def test_an_empty_lake_path_is_a_usage_error_that_creates_nothing(run, tmp_path):
    result = run("push", str(FEEDS / "food.json"), "--lake", "")
    assert result.exit_code == 2
    assert (
        result.stderr
        == "catalog-lake: error: --lake is empty; name a lake folder or an s3:// URI\n"
    )
    with pytest.raises(Exception, match="the lake path is empty"):
        Catalog("")


def test_a_usage_error_respells_its_parameters_but_never_the_value_quoted_in_it():
    refused = UsageError("unknown column 'where' in where 'where > 1'", "where")
    assert refused.worded({"where": "--where"}) == "unknown column 'where' in --where 'where > 1'"
    assert str(refused) == "unknown column 'where' in where 'where > 1'"  # the library's words


def test_a_usage_error_crosses_a_process_boundary_as_its_own_class():
    """A Dask worker's error reaches the coordinator pickled: still usage, still which one."""
    again = pickle.loads(pickle.dumps(SearchError("filter 'x' takes numbers", "filters")))
    assert type(again) is SearchError and again.parameters == ("filters",)
