"""Search the records: an embedded tantivy index that follows the change feed (issue 28).

No server: the index is a folder of tantivy segments beside a local lake
(``<lake>/_catalog_lake.search``), or in the user's cache for an object-store
lake, and it is only ever a copy. It remembers the records version it holds;
each search first applies ``changes`` since then (``follow``), so a push,
delete, refresh, backfill, metrics run or re-price is visible to the next
search, and a lost or outdated index is rebuilt from ``records``.

This module keeps the index (its schema, documents, state and catch-up) and
bounds what a query may ask; ``ranking.py`` says which documents match and in
what order (docs/design.md, "Search").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import tantivy
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_exponential

from .errors import LakeError, SearchError
from .lake import Lake, is_local, reads
from .ranking import (
    FACETS,
    SEARCHED,
    facet_counts,
    filtered_field,
    filters_query,
    fold,
    hits,
    matching_query,
    rank_key,
    ranked_page,
    restricted,
)
from .sellers import DEFAULT_SELLER, SEPARATOR

#: Bounds on what a query may ask: the text, its words, the page depth.
MAX_QUERY_CHARS = 256


MAX_WORDS = 16


MAX_HITS_PER_PAGE = 1_000


MAX_DEPTH = 10_000

#: Seconds a search waits for another process to bring the index up to date.
BUSY_WAIT = 60.0


_FORMAT = "catalog-lake-search/7"
#: The distinct count of a large result without filters is estimated from a sample of the
#: variant groups (a filtered one is counted in full: ``SearchIndex._aggregated``):
#: those whose ``group`` hash is a multiple of ``SAMPLE_EVERY`` (one in eight) are also
#: indexed in ``group_sample``, and the HyperLogLog counts only them, times eight. Its
#: inserts were most of a large result's count: at a million records, ``green tea bags``
#: (150,000 matches) 7.3 -> 3.8 ms, ``amul ghee 1 kg`` (300,000) 14.3 -> 8.9 ms. A group
#: is sampled or not whatever the query, so a query's count does not move. Below
#: ``SAMPLED_FROM`` groups too few are sampled to estimate well, and every match is
#: counted again; from 20,000 the sample's own error (about 2%) is the HyperLogLog's.
#: Without facets the sample's documents are found in a field of their own too
#: (``sample_words``), so such a count reads an eighth of the postings, not every match:
#: ``amul ghee 1 kg``'s count 11.7 -> 3.8 ms, where walking its 300,000 matches took 9.6.
SAMPLE_EVERY = 8
SAMPLED_FROM = 20_000
#: Indexing threads and memory of a full build: tantivy tokenizes and writes postings on
#: its own threads while Python hands it documents. One thread built a million records
#: in 38 s; two (bare tantivy's setting in ``bench.search``) cut a 200,000-record build
#: from 12.5-17 s to 8-10 s beside a test run on 2 cores, at the same peak memory. A
#: catch-up (``follow``) keeps one thread: a few changes, one new segment. Each thread
#: writes a segment whenever its share of the memory fills; from eight segments alike
#: tantivy merges them into one before the build ends. With ``sample_words`` a million
#: records filled 256 MB nine times, and the merge cost 15-25 s of a 45-s build; 320 MB
#: makes six segments, for 5% more memory at peak (4,053 against 3,861 MB).
BUILD_THREADS = max(1, min(4, os.cpu_count() or 1))
BUILD_HEAP = 320_000_000


def storefront_filters(
    *,
    on_sale: bool = False,
    in_stock: bool = False,
    price: str | None = None,
    inventory: str | None = None,
    categories: list[str] | None = None,
    tags: list[str] | None = None,
    brands: list[str] | None = None,
) -> dict[str, Any] | None:
    """The filters a storefront's search asks for, as ``Catalog.search`` takes them.

    One reading for ``catalog-lake search``'s options and the service's query
    parameters alike: ``price`` and ``inventory`` are ``LOW..HIGH`` ranges, a
    list means any of its values, and no condition at all is None.
    """
    filters: dict[str, Any] = {}
    if on_sale:
        filters["on_sale"] = True
    if in_stock:
        filters["in_stock"] = True
    for name, value in (("price", price), ("inventory", inventory)):
        if value is not None:
            filters[name] = value
    for name, values in (("categories", categories), ("tags", tags), ("brand", brands)):
        if values:
            filters[name] = list(values)
    return filters or None


def index_folder(lake: Lake) -> Path:
    """Where a lake's search index lives (``$CATALOG_LAKE_SEARCH_DIR`` overrides the root).

    Beside the tables for a local lake, so it moves with them; in the user's
    cache for an object store, named by a digest of the lake's URI.
    """
    root = os.environ.get("CATALOG_LAKE_SEARCH_DIR")
    digest = hashlib.sha256(lake.uri.encode()).hexdigest()[:16]
    if root:
        return Path(root) / digest
    if is_local(lake.uri):
        return Path(lake.uri.removeprefix("file://")) / "_catalog_lake.search"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "catalog-lake" / "search" / digest


class SearchIndex:
    """One lake's search index: built from ``records``, kept current by ``changes``."""

    def __init__(self, lake: Lake, folder: str | Path | None = None) -> None:
        self.lake = lake
        self.folder = Path(folder) if folder is not None else index_folder(lake)
        self.schema = _schema()
        self._index: Any = None
        self.version: int | None = None
        #: The identity of the lake the index holds (``Lake.identity``), saved in its state.
        self.lake_id: str | None = None
        #: The whole index's counts and facets, for the version they were taken at.
        self._whole: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._counting: ThreadPoolExecutor | None = None

    # --- keeping it current -----------------------------------------------------------

    def follow(self) -> dict[str, Any]:
        """Bring the index to the lake's latest records version; what it took.

        Never answers from an index behind the lake: while another process
        holds the index's writer (its own search catching up), this waits for
        it, then takes what it wrote, for ``BUSY_WAIT`` seconds at most (issue
        50: a search right after a delete showed the deleted item).

        Raises:
            SearchError: another process held the index for longer.
        """
        retrying = Retrying(
            retry=retry_if_result(lambda done: done["action"] == "busy"),
            stop=stop_after_delay(BUSY_WAIT),
            wait=wait_exponential(multiplier=0.02, max=0.5),
            retry_error_callback=lambda state: self._held(),
        )
        return retrying(self._follow)

    def _held(self) -> dict[str, Any]:
        raise SearchError(
            f"the search index {self.folder} was held by another process for {BUSY_WAIT:g} s "
            "while it caught up with the lake; search again"
        )

    def _follow(self) -> dict[str, Any]:
        """One try at ``follow``: ``busy`` when another process holds the index's writer.

        Applies the changes since the version it holds; builds it whole when it
        is missing, from another format, behind what the lake still keeps, or
        made for another lake. A path names a place, not a lake: an index is
        bound to its lake's identity (``Lake.identity``), so a lake made again
        at the same path, or an index folder copied beside another lake, is
        rebuilt rather than searched (issue 42).
        """
        started = time.perf_counter()
        if self._index is not None and self.lake.is_latest("records", self.version):
            return {"action": "current", "version": self.version, "seconds": 0.0}
        latest = self.lake.version("records")
        self.lake_id = self.lake.identity() if latest is not None else None
        if self._index is None and not self._opened():
            return self._rebuilt(latest, started, "built")
        state = self._state()
        if state is not None and state.get("lake_id") != self.lake_id:
            return self._rebuilt(latest, started, "rebuilt")
        if state is None or state["version"] is None or latest is None:
            if state is not None and state["version"] == latest:
                return {"action": "current", "version": latest, "seconds": 0.0}
            return self._rebuilt(latest, started, "built")
        if state["version"] == latest:
            if self.version != latest:  # another process brought it here: read what it wrote
                self._index.reload()
                self.version = latest
            return {"action": "current", "version": latest, "seconds": 0.0}
        try:
            found = reads_changes(self.lake, state["version"], latest)
        except LakeError:  # the old version's files are gone: start again from records
            return self._rebuilt(latest, started, "rebuilt")
        with self._writer() as writer:
            if writer is None:  # another process is bringing it up to date
                return {"action": "busy", "version": state["version"], "seconds": 0.0}
            for object_id in [*found.upserts["object_id"].to_pylist(), *found.deletes.to_pylist()]:
                writer.delete_documents_by_term("object_id", int(object_id))
            _add(writer, found.upserts)
        self._save(latest)
        return {
            "action": "caught_up",
            "version": latest,
            "upserts": found.upserts.num_rows,
            "deletes": len(found.deletes),
            "seconds": round(time.perf_counter() - started, 3),
        }

    def _counter(self) -> ThreadPoolExecutor:
        """The threads that count and facet a query while it is ranked (made on first use)."""
        if self._counting is None:
            self._counting = ThreadPoolExecutor(2, thread_name_prefix="catalog-lake-count")
        return self._counting

    def _aggregated(
        self,
        searcher: Any,
        matching: Any,
        distinct: bool,
        facets: tuple[str, ...],
        everything: bool,
        filtered: bool,
    ) -> dict[str, Any]:
        """The hits counted (``hits``, and ``groups`` with distinct) and faceted.

        Over the whole index (no words, no filters: a catalog's front page) the
        answer changes only with the index, so it is kept per records version:
        counting a million records' variant groups costs 15-20 ms.

        Without filters the groups are counted from their sample (``SAMPLE_EVERY``),
        and again one by one in a second pass when they are few (``_groups``). A
        filtered query counts them one by one in its one pass: a second would
        repeat the filters, most of its time (a price range at a million records:
        4-6 ms), where its hits are most often too few to sample. A query
        with neither filters nor facets is counted by ``_from_sample`` instead.
        """
        key = (self.version, distinct, facets)
        if everything and key in self._whole:
            return self._whole[key]
        wanted = {"hits": {"value_count": {"field": "group"}}}
        if distinct:
            counted = "group" if filtered else "group_sample"
            wanted["groups"] = {"cardinality": {"field": counted}}
        for name in facets:
            wanted[f"facet:{name}"] = {"terms": {"field": FACETS[name], "size": 100}}
        aggregated = searcher.aggregate(matching, wanted)
        if distinct and not filtered:
            aggregated["groups"] = _groups(searcher, matching, aggregated)
        if everything and self.version is not None:
            if len(self._whole) >= 32 or any(k[0] != self.version for k in self._whole):
                self._whole = {}  # another version's, or too many facet lists kept
            self._whole[key] = aggregated
        return aggregated

    def _rebuilt(self, latest: int | None, started: float, action: str) -> dict[str, Any]:
        if self.folder.is_symlink() or self.folder.is_file():
            self.folder.unlink()  # the index is only ever a copy: whatever stands there goes
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._index = tantivy.Index(self.schema, path=str(self.folder))
        _analyzers(self._index)
        records = (
            reads.select(self.lake, "records", as_of=latest) if latest is not None else pa.table({})
        )
        with self._writer(BUILD_THREADS, BUILD_HEAP) as writer:
            if writer is None:  # another process holds the index: it builds it
                return {"action": "busy", "version": None, "seconds": 0.0}
            _add(writer, records)
        self._save(latest)
        return {
            "action": action,
            "version": latest,
            "records": records.num_rows,
            "seconds": round(time.perf_counter() - started, 3),
        }

    def _opened(self) -> bool:
        """Open the index on disk; False when there is none to open."""
        if not (self.folder / "meta.json").exists():
            return False
        try:
            self._index = tantivy.Index.open(str(self.folder))
        except (OSError, ValueError):
            return False
        _analyzers(self._index)
        return True

    def _state(self) -> dict[str, Any] | None:
        try:
            state = json.loads((self.folder / "catalog-lake.json").read_text())
        except (OSError, ValueError):
            return None
        return state if state.get("format") == _FORMAT else None

    def _save(self, version: int | None) -> None:
        self._index.reload()
        self.version = version
        text = json.dumps(
            {"format": _FORMAT, "version": version, "lake": self.lake.uri, "lake_id": self.lake_id}
        )
        partial = self.folder / "catalog-lake.json.partial"
        partial.write_text(text)
        partial.replace(self.folder / "catalog-lake.json")

    @contextlib.contextmanager
    def _writer(self, threads: int = 1, heap: int = 128_000_000):
        try:
            writer = self._index.writer(heap_size=heap, num_threads=threads)
        except ValueError:  # LockBusy: another process holds the index's writer
            yield None
            return
        yield writer
        writer.commit()
        writer.wait_merging_threads()

    # --- searching ----------------------------------------------------------------------

    def search(
        self,
        query: str = "",
        *,
        filters: dict[str, Any] | list[dict[str, Any]] | None = None,
        facets: list[str] | tuple[str, ...] = (),
        page: int = 0,
        hits_per_page: int = 20,
        distinct: bool = True,
    ) -> dict[str, Any]:
        """The ranked hits of a query, the facet counts, and how long it took (ms)."""
        started = time.perf_counter()
        words = _words(query)
        _check_page(page, hits_per_page)
        unknown = [f for f in facets if f not in FACETS]
        if unknown:
            raise SearchError(
                f"unknown facet(s) {', '.join(map(repr, unknown))}; facets: {', '.join(FACETS)}"
            )
        followed = self.follow()
        searcher = self._index.searcher()
        restriction = filters_query(self.schema, filters)
        # Which documents match, counted and faceted in one pass over the ``words``
        # field; the attribute-by-attribute query is only for ranking.
        matching = restricted(matching_query(self.schema, words), restriction)
        # The sampled groups' matches, where a count may be estimated from them alone.
        sample = (
            matching_query(self.schema, words, "sample_words")
            if words and distinct and restriction is None and not facets
            else None
        )
        # Counting runs beside the ranking: tantivy releases the GIL in both, and they
        # read the same searcher (a long query at 200,000 records: 3.9 ms -> 2.3 ms).
        counting = (
            self._counter().submit(_from_sample, searcher, sample, matching)
            if sample is not None
            else self._counter().submit(
                self._aggregated,
                searcher,
                matching,
                distinct,
                tuple(facets),
                everything=not words and restriction is None,
                filtered=restriction is not None,
            )
        )

        def count() -> int:
            return round(counting.result()["hits"].get("value") or 0)

        def candidates() -> int:  # every match, to rank them all: counted if estimated
            if counting.result().get("sampled"):
                return searcher.search(matching, limit=1, count=True).count
            return count()

        start = page * hits_per_page
        window = slice(start, start + hits_per_page)
        shown = ranked_page(self.schema, searcher, words, restriction, distinct, window, candidates)
        aggregated = counting.result()
        # The distinct count is an estimate (HyperLogLog): never more than the hits counted
        # with it (every match, or the sample's times ``SAMPLE_EVERY``).
        groups = aggregated.get("groups", {}).get("value")
        nb_hits = min(count(), round(groups or 0)) if distinct else count()
        return {
            "query": query,
            "hits": hits(self.schema, searcher, words, shown),
            "nb_hits": nb_hits,
            "page": page,
            "hits_per_page": hits_per_page,
            "facets": facet_counts(aggregated, facets),
            "processing_time_ms": round((time.perf_counter() - started) * 1000, 2),
            "index": followed,
        }


def _from_sample(searcher: Any, sample: Any, matching: Any) -> dict[str, Any]:
    """Hits and groups of a query without filters or facets, from its sample's matches.

    ``sample`` is the query on ``sample_words``: the sampled groups' matches,
    found without walking the rest. Their hits and groups times
    ``SAMPLE_EVERY`` are the counts (``sampled``) when ``_estimate`` takes
    them; else every match is counted. The groups counted are those the
    sample's fast field counts among every match, so the estimate is the same.
    """
    wanted = {
        "hits": {"value_count": {"field": "group"}},
        "groups": {"cardinality": {"field": "group"}},
    }
    found = searcher.aggregate(sample, wanted)
    estimate = _estimate(found)
    if estimate is None:
        return searcher.aggregate(matching, wanted)
    hits = SAMPLE_EVERY * (found["hits"].get("value") or 0)
    return {"hits": {"value": hits}, "groups": {"value": estimate}, "sampled": True}


def _groups(searcher: Any, matching: Any, aggregated: dict[str, Any]) -> dict[str, Any]:
    """The variant groups among the hits: from the sample when they are many, else all counted."""
    estimate = _estimate(aggregated)
    if estimate is not None:
        return {"value": estimate}
    every = {"groups": {"cardinality": {"field": "group"}}}
    return searcher.aggregate(matching, every)["groups"]


def _estimate(aggregated: dict[str, Any]) -> float | None:
    """The groups, estimated from the sampled groups' count; None when they are too few.

    The choice is made on the groups, not the hits: 20,000 hits in groups of
    ten are too few groups to sample.
    """
    estimate = SAMPLE_EVERY * (aggregated["groups"].get("value") or 0)
    return estimate if estimate >= SAMPLED_FROM else None


def reads_changes(lake: Lake, since: int, until: int):
    """The change feed (``changes.changes``), imported late: it imports this module's peers."""
    from .changes import changes

    return changes(lake, since, until)


def _schema() -> Any:
    builder = tantivy.SchemaBuilder()
    # Every searched attribute's words in one field: which documents match is
    # decided here, one posting list per word, not as a union of one per attribute.
    builder.add_text_field("words", tokenizer_name="folded", index_option="basic")
    # The same for the documents of the sampled groups alone (``SAMPLE_EVERY``); the rest
    # hold none: a count from the sample reads an eighth of the postings.
    builder.add_text_field("sample_words", tokenizer_name="folded", index_option="basic")
    for name in SEARCHED:
        stored = name in ("product_name", "description", "categories")
        builder.add_text_field(name, stored=stored, tokenizer_name="folded", index_option="freq")
    for field in FACETS.values():
        if field.endswith("_kw"):
            # counted as sent; a hit shows its seller, a storefront's own or not
            builder.add_text_field(
                field, stored=field == FACETS["seller"], fast=True, tokenizer_name="raw"
            )
            builder.add_text_field(
                filtered_field(field), tokenizer_name="keyword"
            )  # matched folded
    builder.add_text_field("image", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_integer_field("object_id", stored=True, indexed=True, fast=True)
    builder.add_unsigned_field("group", fast=True)
    builder.add_unsigned_field("group_sample", fast=True)  # a group in the sample, or none
    builder.add_unsigned_field("rank_key", fast=True)
    builder.add_float_field("price", stored=True, fast=True, indexed=True)
    builder.add_float_field("mrp", stored=True)
    for name in ("inventory", "sales", "likes"):
        builder.add_integer_field(name, fast=True, indexed=True)
    builder.add_boolean_field("on_sale", stored=True, fast=True, indexed=True)
    builder.add_boolean_field("in_stock", fast=True, indexed=True)
    return builder.build()


def _analyzers(index: Any) -> None:
    """Register ``folded`` (text split into words) and ``keyword`` (a value kept whole).

    Both fold case and accents, as ``fold`` does to a query.
    """
    for name, tokenizer in (
        ("folded", tantivy.Tokenizer.simple()),
        ("keyword", tantivy.Tokenizer.raw()),
    ):
        analyzer = (
            tantivy.TextAnalyzerBuilder(tokenizer)
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .build()
        )
        index.register_tokenizer(name, analyzer)


def _add(writer: Any, records: pa.Table) -> None:
    """Add records as JSON documents, built as whole Polars columns.

    No nulls: tantivy refuses them, so a missing value is empty text, an
    empty list, or a neutral number (-1 for a price or stock never given).
    """
    if records.num_rows == 0:
        return
    frame = pl.from_arrow(records.select([c for c in records.column_names if c != "id_block"]))
    text = [
        pl.col(c).fill_null("") for c in SEARCHED if c not in ("categories", "synonyms", "tags")
    ]
    lists = [pl.col(c).fill_null([]) for c in SEARCHED if c in ("categories", "synonyms", "tags")]
    # A record written before sellers has none: it is the default seller's.
    empty = {"categories": [], "tags": [], "seller": DEFAULT_SELLER}
    keywords = [
        pl.col(name).fill_null(empty.get(name, "")).alias(alias)
        for name, field in FACETS.items()
        if field.endswith("_kw")
        for alias in (field, filtered_field(field))
    ]
    every = [
        pl.col(c).list.join(" ") if c in ("categories", "synonyms", "tags") else pl.col(c)
        for c in SEARCHED
    ]
    documents = frame.select(
        pl.concat_str(every, separator=" ", ignore_nulls=True).alias("words"),
        *text,
        *lists,
        *keywords,
        pl.col("image").fill_null(""),
        pl.col("object_id"),
        # A variant group is one seller's: two sellers' "ATTA" groups are two products.
        pl.when(pl.col("variant_group_id").is_null())
        .then(pl.concat_str(pl.lit("\x00"), pl.col("object_id").cast(pl.String)))
        .otherwise(
            pl.concat_str(
                pl.col("seller").fill_null(DEFAULT_SELLER), pl.lit(SEPARATOR), "variant_group_id"
            )
        )
        .hash(seed=28)
        .alias("group"),
        pl.col("price").fill_null(-1.0),
        pl.col("mrp").fill_null(-1.0),
        pl.col("inventory").fill_null(-1),
        pl.col("sales").fill_null(0),
        pl.col("likes").fill_null(0),
        pl.col("on_sale").fill_null(False),
        pl.col("in_stock").fill_null(False),
        rank_key(),
    )
    sampled = pl.col("group") % SAMPLE_EVERY == 0
    documents = documents.with_columns(
        pl.when(sampled)  # no value at all (an empty list) for a group outside the sample
        .then(pl.concat_list("group"))
        .otherwise(pl.lit([], dtype=pl.List(pl.UInt64)))
        .alias("group_sample"),
        pl.when(sampled).then(pl.col("words")).otherwise(pl.lit("")).alias("sample_words"),
    )
    for line in documents.select(pl.struct(pl.all()).struct.json_encode()).to_series():
        writer.add_json(line)


def _words(query: str) -> list[str]:
    if not isinstance(query, str):
        raise SearchError("the query must be text")
    if len(query) > MAX_QUERY_CHARS:
        raise SearchError(f"the query is longer than {MAX_QUERY_CHARS} characters")
    words = fold(query)
    if len(words) > MAX_WORDS:
        raise SearchError(f"the query has more than {MAX_WORDS} words")
    return words


def _check_page(page: int, hits_per_page: int) -> None:
    if not 1 <= hits_per_page <= MAX_HITS_PER_PAGE:
        raise SearchError(f"hits_per_page is 1 to {MAX_HITS_PER_PAGE}; got {hits_per_page}")
    if page < 0 or (page + 1) * hits_per_page > MAX_DEPTH:
        raise SearchError(f"a search shows the first {MAX_DEPTH:,} hits; page {page} is past them")


__all__ = ["FACETS", "SearchIndex", "fold", "index_folder"]
