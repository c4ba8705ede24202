"""The README's Python examples run as written against a lake made from data/feeds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from catalog_lake import Catalog

ROOT = Path(__file__).parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
# The first block is the contract overview (it uses a placeholder payload).
EXAMPLES = BLOCKS[1:]


@pytest.fixture
def lake_here(tmp_path, monkeypatch):
    catalog = Catalog(tmp_path / "lake")
    for feed in sorted((ROOT / "data" / "feeds").glob("*.json")):
        catalog.push(feed.read_bytes())
    monkeypatch.chdir(tmp_path)
    return catalog


def test_readme_has_pandas_duckdb_and_polars_examples():
    assert len(EXAMPLES) == 3
    assert "Catalog(" in EXAMPLES[0]
    assert "import duckdb" in EXAMPLES[1]
    assert "import polars" in EXAMPLES[2]


@pytest.mark.parametrize("index", range(3))
def test_readme_example_runs(lake_here, index, capsys):
    namespace: dict = {}
    exec(compile(EXAMPLES[index], f"README example {index}", "exec"), namespace)
    if index == 0:
        assert namespace["on_sale"]["client_item_id"].iloc[0] == "FASH-TEE-BLK-M"
        assert len(namespace["items"]) == 9
    if index == 1:
        out = capsys.readouterr().out
        assert "in-stock" in out
        assert "BEAU-LIP-RED" in out and "Red" in out  # a string attribute read from the map
    if index == 2:
        names = set(namespace["cheap_veg"]["product_name"].to_list())
        assert names == {"Paneer Tikka", "Aashirvaad Whole Wheat Atta 5 kg", "Toor Dal 1 kg"}
