"""Index settings for search engines, from SPEC 2.1's attribute roles (issue 27, section 3).

No search server can be installed here, so each engine's settings are checked
against what its documentation requires and against the records' own schema:
every attribute they name is a records column of the kind the engine is told.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from catalog_lake.exports import (
    ENGINES,
    EXPORTED,
    IGNORE_ABOVE,
    ROLES,
    document_type,
    index_settings,
)
from catalog_lake.schemas import RECORDS

ROOT = Path(__file__).parents[1]
SPEC_SEARCHED = ["product_name", "description", "categories"]
SPEC_DISPLAYED = {"product_name", "description", "price", "image"}
SPEC_FILTERS = {"on_sale", "price", "categories"}
SPEC_RANKING = ["sales", "likes", "in_stock", "inventory"]  # issue 28: in stock first


def _bare(attribute: str) -> str:
    """``unordered(description)`` or ``filterOnly(in_stock)`` -> the attribute."""
    return attribute.split("(")[-1].rstrip(")")


def test_the_roles_are_spec_2_1s_in_its_order():
    assert list(ROLES.searchable[:3]) == SPEC_SEARCHED
    assert SPEC_DISPLAYED <= set(ROLES.displayed)
    assert SPEC_FILTERS <= set(ROLES.filters)
    assert list(ROLES.ranking) == SPEC_RANKING
    assert ROLES.distinct == "variant_group_id"
    named = {*ROLES.searchable, *ROLES.displayed, *ROLES.filters, *ROLES.ranking, ROLES.distinct}
    assert named <= set(RECORDS.names)


def test_the_embedded_search_takes_its_facets_and_filters_from_the_same_roles():
    """One table of roles: what the engines facet and filter on, the embedded search does too."""
    from catalog_lake.ranking import FACETS, RANGES

    assert list(FACETS) == list(ROLES.search_facets)
    assert set(ROLES.facets) <= set(FACETS)
    assert set(ROLES.filters) <= {*FACETS, *RANGES}
    assert {*FACETS, *RANGES} <= set(RECORDS.names)


def test_algolia_settings():
    settings = index_settings("algolia")
    assert [_bare(a) for a in settings["searchableAttributes"]] == list(ROLES.searchable)
    assert settings["customRanking"] == [
        "desc(sales)", "desc(likes)", "desc(in_stock)", "desc(inventory)",
    ]  # fmt: skip
    assert (settings["attributeForDistinct"], settings["distinct"]) == ("group_key", True)
    facets = {_bare(a) for a in settings["attributesForFaceting"]}
    assert facets | set(settings["numericAttributesForFiltering"]) == set(ROLES.filters)
    assert settings["numericAttributesForFiltering"] == ["price"]
    assert set(settings["attributesToRetrieve"]) >= SPEC_DISPLAYED


def test_meilisearch_settings():
    settings = index_settings("meilisearch")
    assert settings["searchableAttributes"] == list(ROLES.searchable)
    # Meilisearch's six built-in rules, in its default order, then the business metrics as
    # numbers with no nulls: Meilisearch ranks no booleans (issue 43).
    assert settings["rankingRules"] == [
        "words", "typo", "proximity", "attribute", "sort", "exactness",
        "rank_sales:desc", "rank_likes:desc", "rank_in_stock:desc", "rank_inventory:desc",
    ]  # fmt: skip
    assert {f"rank_{a}" for a in SPEC_RANKING} <= set(settings["sortableAttributes"])
    assert SPEC_FILTERS <= set(settings["filterableAttributes"])
    assert settings["distinctAttribute"] == "group_key"


#: What each Typesense field type holds, as Arrow types.
TYPESENSE_ARROW = {
    "string": pa.string(),
    "string[]": pa.list_(pa.string()),
    "float": pa.float64(),
    "int64": pa.int64(),
    "bool": pa.bool_(),
}


def test_typesense_collection_and_preset():
    settings = index_settings("typesense")
    fields = {f["name"]: f for f in settings["collection"]["fields"]}
    assert "object_id" not in fields  # documents carry the service id as "id"
    for name, field in fields.items():
        assert document_type(name) == TYPESENSE_ARROW[field["type"]], name
        assert field["optional"] is True  # records may leave any of them null
    preset = settings["preset"]["value"]
    assert preset["query_by"].split(",") == list(ROLES.searchable)
    weights = [int(w) for w in preset["query_by_weights"].split(",")]
    assert weights == sorted(weights, reverse=True) and len(set(weights)) == len(weights)
    assert preset["sort_by"] == "_text_match:desc,sales:desc,likes:desc"  # Typesense takes 3
    # Typesense groups only by a faceted field; every document has a group key, and missing
    # values would form one group (issue 43).
    assert (preset["group_by"], fields["group_key"]["facet"]) == ("group_key", True)
    assert preset["group_missing_values"] is False
    for name in ROLES.filters:
        assert fields[name].get("index", True) and fields[name]["facet"], name
    assert fields["image"]["index"] is False  # displayed only


@pytest.mark.parametrize("engine", ["elasticsearch", "opensearch"])
def test_elasticsearch_and_opensearch_index_and_template(engine):
    settings = index_settings(engine)
    properties = settings["index"]["mappings"]["properties"]
    for name, mapping in properties.items():
        kind = document_type(name)
        if pa.types.is_boolean(kind):
            assert mapping["type"] == "boolean"
        elif pa.types.is_integer(kind):
            assert mapping["type"] == "long"
        elif pa.types.is_floating(kind):
            assert mapping["type"] == "double"
        else:
            assert mapping["type"] in ("text", "keyword")
    for name in ROLES.filters:  # a filter needs an exact, indexed field
        mapping = properties[name]
        exact = mapping if mapping["type"] != "text" else mapping["fields"]["raw"]
        assert exact.get("index", True), name
    template = settings["search_template"]["script"]
    assert template["lang"] == "mustache"
    source = template["source"]
    assert source["collapse"] == {"field": "group_key"}
    assert properties["group_key"] == {"type": "keyword", "ignore_above": IGNORE_ABOVE}
    # Lucene refuses a document with a term over 32,766 bytes: no keyword may hold one.
    keywords = [m for m in properties.values() if m["type"] == "keyword"] + [
        m["fields"]["raw"] for m in properties.values() if "fields" in m
    ]
    assert keywords and all(k["ignore_above"] * 4 <= 32_766 for k in keywords)
    fields = source["query"]["function_score"]["query"]["multi_match"]["fields"]
    assert [f.split("^")[0] for f in fields] == list(ROLES.searchable)
    ranked = [
        f["field_value_factor"]["field"] if "field_value_factor" in f else next(iter(
            f["filter"]["term"]))
        for f in source["query"]["function_score"]["functions"]
    ]  # fmt: skip
    assert ranked == SPEC_RANKING
    assert "{{query}}" in json.dumps(source)


@pytest.mark.parametrize("engine", ENGINES)
def test_index_settings_command_writes_each_engines_settings(run, tmp_path, engine):
    printed = run("index-settings", "--format", engine)
    assert printed.exit_code == 0
    assert json.loads(printed.stdout) == index_settings(engine)
    written = run("index-settings", "--format", engine, "--output", str(tmp_path / "s.json"))
    assert written.exit_code == 0 and written.stdout == ""
    assert json.loads((tmp_path / "s.json").read_text()) == index_settings(engine)


def test_an_unknown_format_is_a_usage_error(run):
    result = run("index-settings", "--format", "solr")
    assert result.exit_code == 2
    assert result.stderr == (
        "catalog-lake: error: unknown format 'solr'; choose one of algolia, meilisearch, "
        "typesense, elasticsearch, opensearch\n"
    )


# --- the records in each engine's import format, read back -----------------------------


@pytest.fixture
def fed(tmp_path):
    from catalog_lake import Catalog
    from catalog_lake.feeds import ingest

    catalog = Catalog(tmp_path / "lake")
    ingest(catalog, ROOT / "data" / "feeds")
    return catalog


def _documents(fmt: str, text: str) -> dict[str, dict]:
    """Each exported record by its service id (text), read back from ``fmt``'s lines."""
    lines = [json.loads(line) for line in text.splitlines()]
    if fmt == "jsonl":
        assert {line["op"] for line in lines} == {"upsert"}
        return {line["object_id"]: line["record"] for line in lines}
    if fmt == "algolia":
        requests = [r for body in lines for r in body["requests"]]
        assert {r["action"] for r in requests} == {"updateObject"}
        return {r["body"].pop("objectID"): r["body"] for r in requests}
    if fmt == "typesense":
        return {d["id"]: {"object_id": int(d.pop("id")), **d} for d in lines}
    if fmt in ("elasticsearch", "opensearch"):
        actions, documents = lines[::2], lines[1::2]
        return {a["index"]["_id"]: d for a, d in zip(actions, documents, strict=True)}
    return {str(d["object_id"]): d for d in lines}


def _as_json(value):
    if isinstance(value, float) and value != value:
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


@pytest.mark.parametrize("fmt", ["jsonl", *ENGINES])
def test_every_export_format_reads_back_as_the_records(fed, fmt):
    import io

    out = io.StringIO()
    assert fed.export(fmt, out).records == 14
    documents = _documents(fmt, out.getvalue())
    records = fed.records()
    assert set(documents) == {str(i) for i in records["object_id"]}
    # An engine's documents also carry their group key, and Meilisearch's its rank numbers.
    added = set() if fmt == "jsonl" else {"group_key"}
    if fmt == "meilisearch":
        added |= {f"rank_{a}" for a in SPEC_RANKING}
    for row in records.to_dict(orient="records"):
        document = documents[str(row["object_id"])]
        assert set(document) == set(EXPORTED) | added
        if added:
            group = row["variant_group_id"]  # NaN in pandas where the record has none
            assert document["group_key"] == (
                f"group:{group}" if isinstance(group, str) else f"item:{row['object_id']}"
            )
        for column, value in row.items():
            if column == "updated_at":  # ISO 8601 either way: Polars drops trailing zeros
                assert pd.Timestamp(document[column]) == value, (fmt, column)
            elif column in EXPORTED:
                assert document[column] == _as_json(value), (fmt, column)


def test_algolia_bodies_hold_at_most_one_batch_of_requests(fed):
    import io

    from catalog_lake.exports import write_export
    from catalog_lake.lake import reads

    table = reads.select(fed.lake, "records", order_by="object_id")
    out = io.StringIO()
    write_export(table, "algolia", out, batch=5)
    bodies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [len(body["requests"]) for body in bodies] == [5, 5, 4]


def test_export_command_writes_a_file_whole_or_prints(run, fed):
    written = run(
        "export", "--format", "typesense", "--output", "out.jsonl", "--lake", fed.lake.uri
    )
    assert written.exit_code == 0
    assert written.stderr == "14 records written to out.jsonl\n"
    assert len(open("out.jsonl").read().splitlines()) == 14
    printed = run("export", "--format", "jsonl", "--lake", fed.lake.uri, "--as-of", "0")
    assert printed.exit_code == 0 and printed.stdout == ""  # version 0: the empty table
    refused = run("export", "--format", "solr", "--lake", fed.lake.uri, "--output", "x.json")
    assert refused.exit_code == 2
    assert not Path("x.json").exists() and not Path("x.json.partial").exists()


def test_an_export_into_a_pipe_its_reader_closed_stops_quietly(tmp_path):
    """`catalog-lake export ... | head`: no error line, and SIGPIPE's exit status, as Unix tools."""
    import subprocess
    import sys

    from catalog_lake import Catalog
    from tests.conftest import make_item

    catalog = Catalog(tmp_path / "lake")
    catalog.push({"items": [make_item(client_item_id=f"SKU-{n}") for n in range(400)]})
    command = [sys.executable, "-c", "from catalog_lake.cli import main; main()"]
    export = subprocess.Popen(
        [*command, "export", "--format", "jsonl", "--lake", str(tmp_path / "lake")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert export.stdout.read(10) == b'{"op":"ups'
    export.stdout.close()  # the reader goes away, as head does, with 200 KB still to come
    assert export.wait(timeout=120) == 141
    assert export.stderr.read() == b""
