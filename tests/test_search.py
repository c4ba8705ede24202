"""Search the records (issue 28): each test is one rule of the relevance spec.

Real Delta lakes and a real tantivy index on disk; the index follows the lake
through the change feed, so every test also exercises freshness.
"""

from __future__ import annotations

import json
import shutil
from datetime import timedelta

import pytest
import tantivy

from catalog_lake import Catalog, search
from catalog_lake.errors import SearchError
from catalog_lake.feeds import ingest
from catalog_lake.metrics import apply_metrics
from catalog_lake.refresh import Refresh
from catalog_lake.search import SearchIndex, index_folder
from tests.conftest import Ticking, make_item


def _item(client_id: str, name: str, **changes) -> dict:
    """An item searchable by its own words only (the sample item's text would match too)."""
    changes.setdefault("description", f"All about {name.lower()}")
    changes.setdefault("variant_group_id", client_id)
    return make_item(client_item_id=client_id, name=name, short_description=None,
                     **changes)  # fmt: skip


def _names(found: dict) -> list[str]:
    return [hit["product_name"] for hit in found["hits"]]


@pytest.fixture
def shop(tmp_path, clock) -> Catalog:
    catalog = Catalog(tmp_path / "lake", clock=Ticking(clock))
    catalog.push(
        {
            "items": [
                _item("tee", "Crème Crew Neck T-Shirt", category="Tops", lake_category="FASHION",
                      attributes__brand="Roadster", attributes__colour="Red"),
                _item("kurta", "Printed Cotton Kurta", category="Ethnic", lake_category="FASHION",
                      attributes__brand="Biba", pricing_info__sale_price="250.00"),
                _item("lipstick", "Matte Lipstick", category="Makeup", lake_category="BEAUTY",
                      attributes__brand="Lakmé", attributes__colour="Red"),
                _item("atta", "Whole Wheat Atta", description="Stone-ground atta for soft rotis"),
            ]
        }
    )  # fmt: skip
    return catalog


# --- text -------------------------------------------------------------------------


def test_matching_ignores_case_and_accents(shop):
    assert _names(shop.search("CREME")) == ["Crème Crew Neck T-Shirt"]
    assert _names(shop.search("lakme")) == ["Matte Lipstick"]


def test_a_hyphen_is_a_space(shop):
    assert _names(shop.search("t shirt")) == _names(shop.search("t-shirt"))
    assert _names(shop.search("t shirt"))[0] == "Crème Crew Neck T-Shirt"


def test_the_last_word_matches_as_a_prefix_only_the_last(shop):
    assert _names(shop.search("printed kur")) == ["Printed Cotton Kurta"]
    assert shop.search("kur printed")["hits"][0]["text_rank"]["words"] == 1  # "kur" is no prefix


def test_a_synonym_in_the_query_finds_the_item(shop):
    assert _names(shop.search("tee")) == ["Crème Crew Neck T-Shirt"]  # t-shirt, tshirt, tee


def test_one_typo_matches_in_words_of_five_letters_or_more(shop):
    assert _names(shop.search("lipstik")) == ["Matte Lipstick"]
    assert _names(shop.search("kurtaa")) == ["Printed Cotton Kurta"]
    assert shop.search("atts")["nb_hits"] == 0  # four letters: no typo allowed...
    assert _names(shop.search("attx whole")) == ["Whole Wheat Atta"]  # ...but "whole" matches


def test_a_hostile_query_is_bounded_and_refused_in_one_line(shop):
    with pytest.raises(SearchError, match="longer than 256"):
        shop.search("a" * 257)
    with pytest.raises(SearchError, match="more than 16 words"):
        shop.search(" ".join(["word"] * 17))
    assert shop.search('*:* OR 1=1 ) ( "')["nb_hits"] == 0  # no query language: just words


# --- ranking ------------------------------------------------------------------------


def test_more_query_words_matched_rank_first(shop, clock):
    shop.push({"items": [_item("cotton-tee", "Cotton Tee", description="plain")]})
    found = shop.search("printed cotton kurta")
    assert _names(found)[0] == "Printed Cotton Kurta"
    assert [h["text_rank"]["words"] for h in found["hits"]] == [3, 1]


def test_a_match_in_a_higher_priority_attribute_ranks_first(shop):
    shop.push({"items": [_item("d", "Plain Dupatta", description="goes with any kurta")]})
    names = _names(shop.search("kurta"))
    assert names == ["Printed Cotton Kurta", "Plain Dupatta"]  # name before description


def test_exact_ranks_before_prefix_before_typo(shop):
    shop.push(
        {
            "items": [
                _item("x1", "Sari Classic"),
                _item("x2", "Saris Bundle"),
                _item("x3", "Sarie Special"),
            ]
        }
    )
    found = shop.search("sari")
    assert _names(found)[0] == "Sari Classic"
    assert {h["product_name"]: h["text_rank"]["exactness"] for h in found["hits"]}[
        "Sari Classic"
    ] == 3


def test_ties_go_to_sales_then_likes_then_in_stock_then_inventory(shop, tmp_path):
    shop.push(
        {
            "items": [
                _item("p1", "Steel Bottle", inventory_info={"qty": "5"}),
                _item("p2", "Steel Bottle", inventory_info={"qty": "50"}),
                _item("p3", "Steel Bottle", inventory_info={"qty": "0"}),
                _item("p4", "Steel Bottle", inventory_info={"qty": "9"}),
                _item("p5", "Steel Bottle", inventory_info={"qty": "1"}),
            ]
        }
    )
    path = tmp_path / "m.csv"
    path.write_text("client_item_id,likes,sales\np1,0,9\np2,3,1\np3,9,1\np4,0,0\np5,0,0\n")
    apply_metrics(shop, path)
    found = shop.search("steel bottle")
    ids = [shop.items().set_index("object_id").loc[int(h["object_id"]), "client_item_id"]
           for h in found["hits"]]  # fmt: skip
    # sales 9; then sales 1 with likes 9 before likes 3; then in stock with 9 before 1
    assert ids == ["p1", "p3", "p2", "p4", "p5"]


def test_one_hit_per_variant_group_the_best_one(shop):
    shop.push(
        {
            "items": [
                make_item(client_item_id="v-m", name="Linen Shirt M", variant_group_id="LINEN",
                          inventory_info={"qty": "10"}),
                make_item(client_item_id="v-l", name="Linen Shirt L", variant_group_id="LINEN",
                          inventory_info={"qty": "90"}),
            ]
        }
    )  # fmt: skip
    assert _names(shop.search("linen")) == ["Linen Shirt L"]
    assert sorted(_names(shop.search("linen", distinct=False))) == [
        "Linen Shirt L",
        "Linen Shirt M",
    ]


# --- filters and facets -----------------------------------------------------------------


def test_filters_on_sale_ranges_lists_and_equality_combine(shop):
    everything = shop.search("")
    assert everything["nb_hits"] == 4
    assert _names(shop.search("", filters={"price": (200, 260)})) == ["Printed Cotton Kurta"]
    assert _names(shop.search("", filters={"price": "..260"})) == ["Printed Cotton Kurta"]
    fashion = shop.search("", filters={"categories": "fashion"})  # any case
    assert sorted(_names(fashion)) == ["Crème Crew Neck T-Shirt", "Printed Cotton Kurta"]
    red = shop.search("", filters={"colour": "Red", "brand": ["Roadster", "Lakmé"]})
    assert sorted(_names(red)) == ["Crème Crew Neck T-Shirt", "Matte Lipstick"]
    either = shop.search("", filters=[{"brand": "Biba"}, {"categories": "BEAUTY"}])  # OR
    assert sorted(_names(either)) == ["Matte Lipstick", "Printed Cotton Kurta"]
    assert shop.search("", filters={"on_sale": True, "in_stock": True})["nb_hits"] == 4
    with pytest.raises(SearchError, match="unknown filter 'colour_code'"):
        shop.search("", filters={"colour_code": "R"})


def test_facets_count_the_filtered_hits(shop):
    found = shop.search("", filters={"categories": "FASHION"}, facets=["brand", "categories"])
    assert found["facets"]["brand"] == {"Biba": 1, "Roadster": 1}
    assert found["facets"]["categories"] == {"FASHION": 2, "Ethnic": 1, "Tops": 1}
    with pytest.raises(SearchError, match="unknown facet"):
        shop.search("", facets=["price"])


def test_each_hit_carries_what_a_result_shows_and_a_highlighted_snippet(shop):
    (hit,) = shop.search("rotis")["hits"]
    assert set(hit) >= {"object_id", "product_name", "price", "mrp", "on_sale", "image",
                        "categories", "snippet"}  # fmt: skip
    assert "<b>rotis</b>" in hit["snippet"]


# --- freshness ----------------------------------------------------------------------


def test_the_next_search_sees_a_push_a_delete_metrics_and_a_refresh(shop, tmp_path):
    assert shop.search("kurta")["index"]["action"] in ("built", "current")
    shop.push({"items": [_item("kurta-2", "Silk Kurta")]})
    assert sorted(_names(shop.search("kurta"))) == ["Printed Cotton Kurta", "Silk Kurta"]
    shop.delete(["kurta"])
    found = shop.search("kurta")
    assert _names(found) == ["Silk Kurta"]
    assert found["index"]["action"] == "caught_up" and found["index"]["deletes"] == 1
    path = tmp_path / "m.csv"
    path.write_text("client_item_id,sales\natta,50\n")
    apply_metrics(shop, path)
    assert _names(shop.search(""))[0] == "Whole Wheat Atta"  # the most sales, first
    feeds = tmp_path / "feeds"
    feeds.mkdir()
    (feeds / "all.json").write_text(json.dumps({"items": [_item("silk", "Silk Saree")]}))
    ingest(shop, feeds, refresh=Refresh(scope="all", allow_mass_delete=True))
    assert _names(shop.search("")) == ["Silk Saree"]


def test_an_index_rebuilt_from_nothing_answers_as_the_kept_one(shop):
    shop.push({"items": [_item("n1", "Nova Earbuds"), _item("n2", "Nova Watch")]})
    shop.search("nova")  # kept current step by step
    shop.delete(["n1"])
    kept = shop.search("nova", facets=["brand"])
    shutil.rmtree(index_folder(shop.lake))
    rebuilt = Catalog(shop.lake.uri).search("nova", facets=["brand"])
    assert rebuilt["index"]["action"] == "built"
    for key in ("hits", "nb_hits", "facets"):
        assert rebuilt[key] == kept[key]


def _crowd(shop: Catalog) -> None:
    """120 products whose words overlap and whose custom rankings tie in small groups.

    Pushed in three batches, then a third of them again with new stock, so the
    index's documents are not in object id order.
    """
    names = [f"{c} {f} {k}" for c in ("Red", "Blue", "Green") for f in ("Cotton", "Silk", "Linen")
             for k in ("Kurta", "Shirt", "Saree", "Dupatta")]  # fmt: skip
    items = [
        make_item(client_item_id=f"c{n}", name=names[n % len(names)],
                  description=f"{names[(n * 7) % len(names)]} for {('daily', 'festive')[n % 2]} wear",
                  short_description=None, variant_group_id=f"g{n // 3}" if n % 4 else None,
                  inventory_info={"qty": str((0, 5, 5, 9)[n % 4])})
        for n in range(120)
    ]  # fmt: skip
    for start in (0, 40, 80):
        shop.push({"items": items[start : start + 40]})
    for item in items[::3]:
        item["inventory_info"] = {"qty": "7"}
    shop.push({"items": items[::3]})


@pytest.mark.parametrize("query", ["kurta", "red silk", "red cotton kurta", "blue linen shirt festive",
                                   "sil", "grean kurta",
                                   # no product holds every word: the best of one word fewer,
                                   # two fewer, three fewer (``ranking._best_bands``)
                                   "red silk kurta saree", "cotton kurta saree dupatta",
                                   "kurta shirt saree"])  # fmt: skip
def test_every_page_is_the_one_that_ranking_every_candidate_gives(shop, monkeypatch, query):
    """The engine is asked for a page's worth, band by band or best scores first, never for
    every candidate; the pages must be those that ranking every candidate in full gives,
    ties cut by object id: in the kept index, in one rebuilt from nothing, and when the
    last rank on a page is read further rather than asked for as a band."""
    from catalog_lake import ranking

    _crowd(shop)
    asked = [
        dict(filters=filters, distinct=distinct, page=page, hits_per_page=3)
        for filters in (None, {"in_stock": True}) for distinct in (True, False) for page in range(4)
    ]  # fmt: skip
    kept = [shop.search(query, **a) for a in asked]
    shutil.rmtree(index_folder(shop.lake))
    rebuilt = [Catalog(shop.lake.uri).search(query, **a) for a in asked]
    monkeypatch.setattr(ranking, "BANDED_WORDS", 0)  # best scores first, for short queries too
    monkeypatch.setattr(ranking, "MAX_BAND_WAYS", 0)  # and no band: more hits read instead
    read_further = [shop.search(query, **a) for a in asked]
    monkeypatch.setattr(ranking, "_topped", lambda *_: None)  # rank every candidate
    every = [shop.search(query, **a) for a in asked]
    assert every[0]["hits"], query
    for a, *found in zip(asked, kept, rebuilt, read_further, every, strict=True):
        ids = [[h["object_id"] for h in one["hits"]] for one in found]
        assert ids[0] == ids[1] == ids[2] == ids[3], a
        assert len({one["nb_hits"] for one in found}) == 1


def test_the_index_lives_beside_a_local_lake_and_is_only_a_copy(shop, tmp_path, clock):
    shop.search("")
    folder = index_folder(shop.lake)
    assert folder.parent == tmp_path / "lake" and folder.name == "_catalog_lake.search"
    (folder / "catalog-lake.json").write_text("{broken")  # a damaged index is rebuilt
    assert SearchIndex(shop.lake).search("atta")["index"]["action"] == "built"
    clock.now += timedelta(seconds=1)


def test_the_cli_searches_with_filters_and_facets(run):
    catalog = Catalog("lake")
    catalog.push({"items": [_item("k", "Printed Kurta", lake_category="FASHION",
                                  attributes__brand="Biba")]})  # fmt: skip
    done = run("search", "red cotton kurta", "--on-sale", "--price", "200..900",
               "--category", "Fashion", "--facet", "brand")  # fmt: skip
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].startswith("1 hit (")
    assert lines[1].endswith("Printed Kurta  289 (was 310)")
    assert lines[2] == "brand: Biba 1"
    assert json.loads(run("search", "kurta", "--json").stdout)["nb_hits"] == 1
    assert run("search", "x", "--price", "cheap").exit_code == 2


def test_the_whole_catalog_is_counted_once_per_version_and_never_past_its_hits(shop):
    assert shop.search("")["nb_hits"] <= shop.search("", distinct=False)["nb_hits"] == 4
    assert "Lumo" not in shop.search("", facets=["brand"])["facets"]["brand"]
    shop.push({"items": [_item("lamp", "Brass Lamp", attributes__brand="Lumo")]})
    # a new records version: the front page's counts and facets are taken again
    assert shop.search("", distinct=False)["nb_hits"] == 5
    assert shop.search("", facets=["brand"])["facets"]["brand"]["Lumo"] == 1


@pytest.fixture
def sampled(tmp_path, monkeypatch):
    """A catalog of lamps in variant groups of two, with the sample scaled down.

    One group in two sampled, and a sample from 200 groups (8 and 20,000).
    ``lamps(n, kind)`` pushes ``n`` lamps named ``f"{kind(k)} Lamp {k}"``.
    """
    monkeypatch.setattr(search, "SAMPLE_EVERY", 2)
    monkeypatch.setattr(search, "SAMPLED_FROM", 200)
    catalog = Catalog(tmp_path / "lake")

    def lamps(count, kind):
        lamp = [_item(f"lamp{n}", f"{kind(n)} Lamp {n}", variant_group_id=f"LAMP-{n // 2}")
                for n in range(count)]  # fmt: skip
        catalog.push({"items": lamp})
        return catalog

    return lamps


def test_many_variant_groups_are_counted_from_a_sample_of_them_and_few_one_by_one(sampled):
    catalog = sampled(800, lambda n: "Desk" if n < 60 else "Floor")
    found = catalog.search("lamp")
    assert catalog.search("lamp", distinct=False)["nb_hits"] == 800
    index = SearchIndex(catalog.lake)
    index.follow()
    counts = index._index.searcher().aggregate(
        tantivy.Query.all_query(),
        {
            "sampled": {"cardinality": {"field": "group_sample"}},
            "every": {"cardinality": {"field": "group"}},
        },
    )
    sampled = counts["sampled"]["value"]
    assert 0 < sampled < 400 and found["nb_hits"] == 2 * sampled  # the sample's, times two
    assert abs(found["nb_hits"] - 400) <= 40  # of 400 groups
    assert catalog.search("desk")["nb_hits"] == 30  # 30 groups: each one counted
    # A filtered query counts its groups one by one, however many: one pass over its filters.
    in_stock = catalog.search("lamp", filters={"in_stock": True})
    assert in_stock["nb_hits"] == round(counts["every"]["value"])


def test_a_sampled_count_reads_the_samples_own_postings_and_counts_what_every_match_gives(
    sampled,
):
    # Without facets, the sampled groups' matches are found on ``sample_words``, which
    # holds their documents alone; the groups counted are the ones the sample's fast
    # field counts among every match (the count with facets), so the estimate is the same.
    catalog = sampled(1_200, lambda n: ("Desk", "Floor", "Wall")[n % 3])
    index = SearchIndex(catalog.lake)
    index.follow()
    searcher = index._index.searcher()
    every = search.matching_query(index.schema, ["lamp"])
    sample = search.matching_query(index.schema, ["lamp"], "sample_words")
    in_sample = searcher.aggregate(every, {"n": {"value_count": {"field": "group_sample"}}})
    assert 0 < searcher.search(sample, limit=1, count=True).count == in_sample["n"]["value"] < 1_200

    for query in ("desk floor", "lamp"):  # two words of a third of the lamps each; then all
        plain = catalog.search(query)
        faceted = catalog.search(query, facets=["brand"])
        assert plain["nb_hits"] == faceted["nb_hits"] and plain["nb_hits"] % 2 == 0
        assert [h["object_id"] for h in plain["hits"]] == [h["object_id"] for h in faceted["hits"]]
    assert catalog.search("desk floor", distinct=False)["nb_hits"] == 800  # counted, never sampled


# --- an index belongs to one lake, not to a path (issue 42) -------------------------


def test_a_lake_made_again_at_the_same_path_is_never_searched_through_the_old_index(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("CATALOG_LAKE_SEARCH_DIR", str(tmp_path / "idx"))
    lake = tmp_path / "L"
    Catalog(lake).push({"items": [_item("old", "Oldlake Lamp")]})
    assert _names(Catalog(lake).search("oldlake")) == ["Oldlake Lamp"]
    shutil.rmtree(lake)
    Catalog(lake).push({"items": [_item("new", "Newlake Lamp")]})
    assert Catalog(lake).search("oldlake")["nb_hits"] == 0
    assert _names(Catalog(lake).search("newlake")) == ["Newlake Lamp"]


def test_a_new_lake_a_version_ahead_is_not_applied_on_top_of_the_old_index(tmp_path, monkeypatch):
    monkeypatch.setenv("CATALOG_LAKE_SEARCH_DIR", str(tmp_path / "idx"))
    lake = tmp_path / "L"
    Catalog(lake).push({"items": [_item("old", "Oldlake Lamp")]})
    Catalog(lake).search("lamp")
    shutil.rmtree(lake)
    fresh = Catalog(lake)
    for n in range(3):  # its records are now versions ahead of the old index's
        fresh.push({"items": [_item(f"new{n}", f"Newlake Lamp {n}")]})
    found = Catalog(lake).search("lamp")
    assert found["nb_hits"] == 3 and "Oldlake Lamp" not in _names(found)


def test_an_index_folder_copied_beside_another_lake_is_rebuilt_for_it(tmp_path):
    big, small = Catalog(tmp_path / "A"), Catalog(tmp_path / "B")
    big.push({"items": [_item(f"a{n}", f"Lamp {n}") for n in range(50)]})
    small.push({"items": [_item(f"b{n}", f"Lamp {n}") for n in range(5)]})
    assert big.search("lamp")["nb_hits"] == 50
    shutil.copytree(tmp_path / "A" / "_catalog_lake.search",
                    tmp_path / "B" / "_catalog_lake.search")  # fmt: skip
    assert Catalog(tmp_path / "B").search("lamp")["nb_hits"] == 5


@pytest.mark.parametrize("damage", ["file", "link to a file"])
def test_an_index_folder_replaced_by_a_file_is_rebuilt(shop, tmp_path, damage):
    folder = index_folder(shop.lake)
    shop.search("atta")
    shutil.rmtree(folder)
    if damage == "file":
        folder.write_text("not an index")
    else:
        (tmp_path / "elsewhere").write_text("not an index")
        folder.symlink_to(tmp_path / "elsewhere")
    assert _names(Catalog(tmp_path / "lake").search("atta")) == ["Whole Wheat Atta"]
    assert folder.is_dir() and not folder.is_symlink()
    assert (tmp_path / "elsewhere").exists() or damage == "file"


def test_search_on_a_missing_lake_says_so_and_creates_nothing(run, tmp_path):
    result = run("search", "tee", "--lake", "nolake")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        "catalog-lake: error: no lake at nolake; push or ingest a feed to create one, or point "
        "--lake at an existing lake\n"
    )
    assert not (tmp_path / "nolake").exists()


def _hold_the_index_writer(folder: str, seconds: float, ready) -> None:
    """Another process's search, catching up: it holds the index's writer for a while."""
    import time

    import tantivy

    writer = tantivy.Index.open(folder).writer(heap_size=15_000_000, num_threads=1)
    ready.set()
    time.sleep(seconds)
    writer.rollback()


def test_a_search_after_a_delete_never_shows_the_item_while_another_holds_the_index(tmp_path):
    import multiprocessing

    catalog = Catalog(tmp_path / "lake")
    catalog.push(
        {"items": [make_item(client_item_id=c, name=f"Atta {c}", variant_group_id=c) for c in "ab"]}
    )
    assert catalog.search("atta")["nb_hits"] == 2  # the index holds both
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    holder = context.Process(
        target=_hold_the_index_writer, args=(str(index_folder(catalog.lake)), 3.0, ready)
    )
    holder.start()
    try:
        assert ready.wait(60)
        catalog.delete(["a"])  # returned: every search that starts now must miss it
        for searcher in (catalog, Catalog(tmp_path / "lake")):  # this process, and a new one
            found = searcher.search("atta")
            assert [h["object_id"] for h in found["hits"]] == ["2"], found["index"]
    finally:
        holder.join(60)
