"""Each engine takes a real catalog's export whole (issue 43).

No engine server installs here, so each export is held to what the engine's
own client library validates (Algolia's ``algoliasearch`` models, Meilisearch's
``meilisearch-python-sdk`` settings model) and to what each engine documents:
Algolia's 10 KB records on its smallest plan, Lucene's 32,766-byte terms,
Meilisearch's numeric ranking and empty payloads, Typesense's field types and
grouping. The catalog is hostile on purpose: a 56,000-character Devanagari
description, an 11,000-character brand, CJK text without spaces, quotes and
backslashes, products without a variant group, and unknown stock.
"""

from __future__ import annotations

import io
import itertools
import json

import pytest

from catalog_lake import Catalog
from catalog_lake.exports import IGNORE_ABOVE, RECORD_BYTES, index_settings
from tests.conftest import make_item

LUCENE_MAX_TERM_BYTES = 32_766


def _item(client_id: str, **changes) -> dict:
    return make_item(client_item_id=client_id, **changes)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Catalog:
    catalog = Catalog(tmp_path_factory.mktemp("engines") / "lake")
    items = [
        _item("DEVANAGARI", description="नमस्ते दुनिया " * 4_000, variant_group_id=None),
        _item("CJK", description="数据湖" * 20_000, variant_group_id=None),
        _item("LONG-BRAND", attributes__brand="B" * 11_000, variant_group_id=None),
        _item("QUOTES", name='Tee "Classic" \\ 100% \t cotton', variant_group_id=None),
        _item("NO-STOCK", inventory_info__qty="", variant_group_id=None),
        _item("TEE-S", variant_group_id="TEE", variant="S"),
        _item("TEE-M", variant_group_id="TEE", variant="M"),
        _item("EMOJI", name="Mug ☕ 👍🏽", variant_group_id=None),
    ]
    response = catalog.push({"items": items})
    assert response["catalog_push_failed_product_count"] == "0", response
    return catalog


def _export(catalog: Catalog, fmt: str, **options) -> tuple[list[str], dict]:
    out = io.StringIO()
    report = catalog.export(fmt, out, **options).summary()
    return out.getvalue().splitlines(), report


def _bytes(document: dict) -> int:
    return len(json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode())


# --- Algolia ------------------------------------------------------------------------------


def test_algolia_batches_parse_in_its_client_and_every_record_fits_the_build_plan(hostile):
    from algoliasearch.search.models.batch_write_params import BatchWriteParams

    lines, report = _export(hostile, "algolia")
    bodies = [BatchWriteParams.from_json(line) for line in lines]
    records = [request.body for body in bodies for request in body.requests]
    assert all(request.action == "updateObject" for b in bodies for request in b.requests)
    assert max(_bytes(r) for r in records) <= RECORD_BYTES["algolia"] == 10_000
    # Trimmed, not dropped: the long texts end in an ellipsis, ids and filters are whole.
    by_id = {r["client_item_id"]: r for r in records}
    assert by_id["DEVANAGARI"]["description"].endswith("…")
    assert by_id["CJK"]["description"].endswith("…")
    assert report["trimmed"] == 2
    # A filter value alone over the budget is never cut: the record is left out, and said.
    assert "LONG-BRAND" not in by_id and report["too_large"] == 1
    assert report["too_large_ids"] == [str(hostile.query_records(
        "client_item_id = 'LONG-BRAND'")["object_id"][0])]  # fmt: skip
    # Raised to Algolia's 100 KB ceiling (paid plans), the brand fits whole; the two long
    # descriptions (168 and 180 KB) are still trimmed, to 100 KB now.
    lines, raised = _export(hostile, "algolia", max_record_bytes=100_000)
    assert (raised["too_large"], raised["trimmed"]) == (0, 2)
    records = [r["body"] for line in lines for r in json.loads(line)["requests"]]
    assert 90_000 < max(_bytes(r) for r in records) <= 100_000


def test_algolia_settings_parse_in_its_client_model(hostile):
    from algoliasearch.search.models.index_settings import IndexSettings

    settings = index_settings("algolia")
    model = IndexSettings.from_json(json.dumps(settings))  # from_dict changes its argument
    parsed = {k: v for k, v in json.loads(model.to_json()).items() if v is not None}
    assert parsed == settings  # every key known to the client, none dropped
    assert model.attribute_for_distinct == "group_key"


# --- Meilisearch ------------------------------------------------------------------------


def test_meilisearch_settings_parse_in_its_sdk_and_rank_only_numbers(hostile):
    from meilisearch_python_sdk.models.settings import MeilisearchSettings

    settings = index_settings("meilisearch")
    model = MeilisearchSettings(**settings)
    assert model.model_dump(by_alias=True, exclude_none=True) == settings
    ranked = [rule.split(":")[0] for rule in settings["rankingRules"] if ":" in rule]
    documents = [json.loads(line) for line in _export(hostile, "meilisearch")[0]]
    for name in ranked:  # numbers and strings only, never a boolean, never missing
        assert all(type(d[name]) is int for d in documents), name
    no_stock = next(d for d in documents if d["client_item_id"] == "NO-STOCK")
    assert no_stock["inventory"] is None and no_stock["rank_inventory"] == -1
    assert all(d[settings["distinctAttribute"]] for d in documents)


def test_a_deletes_only_range_writes_no_empty_documents_file(tmp_path):
    catalog = Catalog(tmp_path / "lake")
    catalog.push({"items": [_item("A"), _item("B")]})
    for fmt in ("meilisearch", "typesense"):
        target = tmp_path / fmt
        catalog.sync(str(target), fmt)
    catalog.delete(["A"])
    for fmt in ("meilisearch", "typesense"):
        target = tmp_path / fmt
        synced = catalog.sync(str(target), fmt)
        assert synced["file"] is None and synced["upserts"] == 0 and synced["deletes"] == 1
        assert json.loads(open(synced["deletes_file"]).read()) == ["1"]
        assert all(p.stat().st_size > 0 for p in target.glob("0*"))
    catalog.push({"items": [_item("C")]})
    upserts_only = catalog.sync(str(tmp_path / "meilisearch"), "meilisearch")
    assert upserts_only["deletes_file"] is None and upserts_only["upserts"] == 1


# --- Typesense ----------------------------------------------------------------------------

TYPESENSE_TYPES = {
    "string": (str,),
    "string[]": (list,),
    "float": (float, int),
    "int64": (int,),
    "bool": (bool,),
}


def test_typesense_documents_match_the_collection_and_group_apart(hostile):
    settings = index_settings("typesense")
    fields = {f["name"]: f for f in settings["collection"]["fields"]}
    documents = [json.loads(line) for line in _export(hostile, "typesense")[0]]
    for document in documents:
        assert isinstance(document["id"], str)
        for name, value in document.items():
            if name in fields and value is not None:
                assert isinstance(value, TYPESENSE_TYPES[fields[name]["type"]]), name
    preset = settings["preset"]["value"]
    group = preset["group_by"]
    assert fields[group]["facet"] and preset["group_missing_values"] is False
    # Every product without a variant group stands alone; variants share theirs.
    groups = {d["client_item_id"]: d[group] for d in documents}
    ungrouped = [v for k, v in groups.items() if not k.startswith("TEE")]
    assert len(set(ungrouped)) == len(ungrouped) and None not in ungrouped
    assert groups["TEE-S"] == groups["TEE-M"] == "group:TEE"


def test_meilisearch_filter_values_past_its_limit_are_reported_and_groups_stay_apart(tmp_path):
    from meilisearch_python_sdk.models.settings import MeilisearchSettings

    from catalog_lake.exports import FILTER_VALUE_BYTES

    catalog = Catalog(tmp_path / "lake")
    shared = "सूती कुर्ता " * 40  # 640 bytes of Devanagari: two groups alike in their first 468
    items = [
        _item("KURTA-RED", variant_group_id=shared + "red"),
        _item("KURTA-BLUE", variant_group_id=shared + "blue"),
        _item("LONG-TAG", attributes__brand="Brand " * 100, variant_group_id=None),
        _item("PLAIN", variant_group_id=None),
    ]
    catalog.push({"items": items})
    lines, report = _export(catalog, "meilisearch")
    documents = {d["client_item_id"]: d for d in map(json.loads, lines)}
    groups = {name: documents[name]["group_key"] for name in documents}
    assert groups["KURTA-RED"] != groups["KURTA-BLUE"]
    assert all(len(g.encode()) <= FILTER_VALUE_BYTES for g in groups.values())
    assert groups["KURTA-RED"][:FILTER_VALUE_BYTES] != groups["KURTA-BLUE"][:FILTER_VALUE_BYTES]
    assert groups["PLAIN"].startswith("item:")  # a short key is kept as it was
    long_brand = str(documents["LONG-TAG"]["object_id"])
    assert report["long_filter_values"] == 1 and report["long_filter_values_ids"] == [long_brand]
    settings = MeilisearchSettings(**index_settings("meilisearch"))
    assert "group_key" == settings.distinct_attribute
    again, _ = _export(catalog, "meilisearch")  # the same keys, sync after sync
    assert [json.loads(line)["group_key"] for line in again] == [
        json.loads(line)["group_key"] for line in lines
    ]


# --- Elasticsearch and OpenSearch -------------------------------------------------------


@pytest.mark.parametrize("engine", ["elasticsearch", "opensearch"])
def test_no_keyword_term_can_pass_lucenes_limit_and_products_collapse_apart(hostile, engine):
    settings = index_settings(engine)
    properties = settings["index"]["mappings"]["properties"]
    keywords = {name: m for name, m in properties.items() if m["type"] == "keyword"}
    keywords |= {f"{n}.raw": m["fields"]["raw"] for n, m in properties.items() if "fields" in m}
    assert all(m["ignore_above"] == IGNORE_ABOVE for m in keywords.values())
    assert IGNORE_ABOVE * 4 <= LUCENE_MAX_TERM_BYTES  # 4 bytes at most per UTF-8 character
    lines = _export(hostile, engine)[0]
    actions, documents = lines[::2], [json.loads(line) for line in lines[1::2]]
    assert all("_index" not in json.loads(a)["index"] for a in actions)  # POST /{index}/_bulk
    brand = next(d for d in documents if d["client_item_id"] == "LONG-BRAND")["brand"]
    assert len(brand) == 11_000 > IGNORE_ABOVE  # kept whole, left out of the keyword index
    collapse = settings["search_template"]["script"]["source"]["collapse"]["field"]
    values = [d[collapse] for d in documents if not d["client_item_id"].startswith("TEE")]
    assert None not in values and len(set(values)) == len(values)


@pytest.mark.parametrize("budget", [3_000, 10_000, 50_000])
def test_a_trimmed_text_ends_at_a_word_or_a_whole_grapheme(hostile, budget):
    import unicodedata

    lines, _ = _export(hostile, "meilisearch", max_record_bytes=budget)
    documents = {d["client_item_id"]: d for d in map(json.loads, lines)}
    originals = {
        "DEVANAGARI": "नमस्ते दुनिया " * 4_000,  # words, and vowel signs that are marks
        "CJK": "数据湖" * 20_000,  # no spaces: a character boundary is a grapheme boundary
    }
    for client_id, original in originals.items():
        document = documents[client_id]
        assert _bytes(document) <= budget
        kept = document["description"].removesuffix("…")
        assert document["description"].endswith("…") and original.startswith(kept)
        following = original[len(kept)]
        assert not unicodedata.category(following).startswith("M"), client_id
        if client_id == "DEVANAGARI":
            assert following == " "  # the cut ends at a word


#: Texts of whole emoji clusters without a space, so no cut can end at a word.
CLUSTERS = {
    "FLAGS": "🇮🇳🇯🇵🇧🇷" * 900,  # pairs of regional indicators
    "FAMILY": "👨\u200d👩\u200d👧\u200d👦" * 700,  # joined by zero-width joiners
    "SKIN": "👍🏽👋🏿" * 1_200,  # emoji and their skin-tone modifiers
    "KEYCAP": "1\ufe0f\u20e3" * 2_000,  # a digit, a variation selector, a keycap mark
    "ENGLAND": "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f" * 500,  # tags
}


@pytest.mark.parametrize("budget", [2_000, 2_001, 2_002, 2_003, 5_000, 9_999])
def test_a_trim_never_cuts_a_flag_or_an_emoji_in_half(tmp_path, budget):
    import regex

    catalog = Catalog(tmp_path / "lake")
    items = [
        _item(name, description=text, variant_group_id=None) for name, text in CLUSTERS.items()
    ]
    assert catalog.push({"items": items})["catalog_push_failed_product_count"] == "0"
    lines, report = _export(catalog, "meilisearch", max_record_bytes=budget)
    assert report["too_large"] == 0
    for document in map(json.loads, lines):
        original = CLUSTERS[document["client_item_id"]]
        assert _bytes(document) <= budget
        kept = document["description"].removesuffix("…")
        assert kept and original.startswith(kept)
        ends = set(itertools.accumulate(len(c) for c in regex.findall(r"\X", original)))
        assert len(kept) in ends, (document["client_item_id"], kept[-3:])


def test_a_text_of_quote_marks_is_cut_to_what_fits_not_dropped(tmp_path):
    catalog = Catalog(tmp_path / "lake")
    quoted = 'He said "yes" ' * 700  # about a third of its bytes are escaped quotes
    catalog.push({"items": [_item("SAID", description=quoted, variant_group_id=None),
                            _item("QUOTES", description='"' * 6_000, variant_group_id=None)]})  # fmt: skip
    lines, report = _export(catalog, "algolia")
    documents = {r["body"]["client_item_id"]: r["body"] for line in lines
                 for r in json.loads(line)["requests"]}  # fmt: skip
    assert report["trimmed"] == 2 and report["too_large"] == 0
    for client_id, original in (("SAID", quoted), ("QUOTES", '"' * 6_000)):
        kept = documents[client_id]["description"].removesuffix("…")
        assert original.startswith(kept)
        assert _bytes(documents[client_id]) <= RECORD_BYTES["algolia"]
        # All but the record's other fields and a little slack: nothing like a drop.
        escaped = len(json.dumps(kept)) - 2
        assert escaped > RECORD_BYTES["algolia"] - 1_500, (client_id, escaped)


def test_the_export_command_reports_what_it_trimmed_and_left_out(hostile, tmp_path):
    from typer.testing import CliRunner

    from catalog_lake.cli import app

    out = tmp_path / "algolia.ndjson"
    ran = CliRunner().invoke(app, ["export", "--format", "algolia", "--lake", hostile.lake.uri,
                                   "--output", str(out)])  # fmt: skip
    assert ran.exit_code == 0, ran.output
    lines = ran.stderr.splitlines()
    assert lines[0] == "7 records written to " + str(out)
    assert lines[1].startswith("2 records trimmed to 10,000 bytes: ")
    assert lines[2].startswith("1 record left out, over 10,000 bytes even trimmed: ")
    summary = CliRunner().invoke(app, ["export", "--format", "meilisearch", "--lake",
                                       hostile.lake.uri, "--output", str(out), "--json",
                                       "--max-record-bytes", "5000"])  # fmt: skip
    report = json.loads(summary.stdout)
    assert (report["records"], report["trimmed"], report["too_large"]) == (7, 2, 1)
    assert report["max_record_bytes"] == 5000
