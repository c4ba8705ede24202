"""Search the records: an embedded tantivy index that follows the change feed (issue 28).

No server: the index is a folder of tantivy segments beside a local lake
(``<lake>/_catalog_lake.search``), or in the user's cache for an object-store
lake, and it is only ever a copy. It remembers the records version it holds;
each search first applies ``changes`` since then (``follow``), so a push,
delete, refresh, backfill, metrics run or re-price is visible to the next
search, and a lost or outdated index is rebuilt from ``records``.

Relevance follows a hosted engine's record model (docs/design.md, "Search"):

- every query word is matched against the searchable attributes in priority
  order (``exports.ROLES.searchable``), exactly, as a prefix when it is the
  last word, or one edit off when it has five letters or more; text is
  compared lower-cased, without accents, with anything but letters and
  digits (a hyphen too) separating words;
- a hit's text rank is, in this order: how many query words it matched,
  which attributes matched (higher priority first), and exact over prefix
  over typo. Each word scores a constant for its best match, and the words'
  constants add up so that the criteria compare in that order;
- ties go to the custom ranking (``ROLES.ranking``: sales, likes, in stock,
  inventory, each descending), and one hit per ``variant_group_id`` is kept.

Which documents match is decided on one catch-all ``words`` field (counted and
faceted in one aggregation); the attribute-by-attribute query only ranks, and
only as far as the page needs (``_banded``, ``_topped``).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from . import reads
from .errors import CatalogLakeError, LakeError, SearchError
from .exports import ROLES
from .lake import Lake, is_local

#: Searched text, highest priority first: the roles' searchable attributes, then tags.
SEARCHED = (*ROLES.searchable, *(("tags",) if "tags" not in ROLES.searchable else ()))
#: Facet columns and the keyword field each is counted on.
FACETS = {
    "brand": "brand_kw",
    "categories": "categories_kw",
    "tags": "tags_kw",
    "colour": "colour_kw",
    "size": "size_kw",
    "gender": "gender_kw",
    "lake_category": "lake_category_kw",
    "on_sale": "on_sale",
    "in_stock": "in_stock",
}
#: Numeric filters: ``(low, high)``, either side None for open.
RANGES = {"price": "float", "inventory": "integer"}
#: Shown with every hit (issue 28, "Display"), and the snippet.
SHOWN = ("object_id", "product_name", "price", "mrp", "on_sale", "image", "categories")
#: Bounds on what a query may ask: the text, its words, the page depth.
MAX_QUERY_CHARS = 256
MAX_WORDS = 16
MAX_HITS_PER_PAGE = 1_000
MAX_DEPTH = 10_000
#: Hits ranked in full per query; past this, the rest by text rank alone is never shown.
MAX_CANDIDATES = 200_000
#: The text rank's units: kind (exact 3, prefix 2, typo 1) < attribute < words matched.
#: Exact in tantivy's 32-bit scores for up to ``MAX_WORDS`` words.
_KIND, _ATTRIBUTE, _WORD = 1.0, 64.0, 8192.0
_FORMAT = "catalog-lake-search/4"


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


def fold(text: str) -> list[str]:
    """The words of ``text`` as the index holds them: lower case, no accents, split on the rest."""
    return re.findall(r"[^\W_]+", _folded_value(text))


class SearchIndex:
    """One lake's search index: built from ``records``, kept current by ``changes``."""

    def __init__(self, lake: Lake, folder: str | Path | None = None) -> None:
        import tantivy

        self.t = tantivy
        self.lake = lake
        self.folder = Path(folder) if folder is not None else index_folder(lake)
        self.schema = _schema(tantivy)
        self._index: Any = None
        self.version: int | None = None
        #: The identity of the lake the index holds (``Lake.identity``), saved in its state.
        self.lake_id: str | None = None
        #: The whole index's counts and facets, for the version they were taken at.
        self._whole: dict[tuple[Any, ...], dict[str, Any]] = {}

    # --- keeping it current -----------------------------------------------------------

    def follow(self) -> dict[str, Any]:
        """Bring the index to the lake's latest records version; what it took.

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
        table = self.lake.table("records")
        latest = table.version() if table is not None else None
        self.lake_id = table.metadata().id if table is not None else None
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

    def _aggregated(
        self,
        searcher: Any,
        matching: Any,
        distinct: bool,
        facets: tuple[str, ...],
        everything: bool,
    ) -> dict[str, Any]:
        """The hits counted (``hits``, and ``groups`` with distinct) and faceted, in one pass.

        Over the whole index (no words, no filters: a catalog's front page) the
        answer changes only with the index, so it is kept per records version:
        counting a million records' variant groups costs 15-20 ms.
        """
        key = (self.version, distinct, facets)
        if everything and key in self._whole:
            return self._whole[key]
        wanted = {"hits": {"value_count": {"field": "group"}}}
        if distinct:
            wanted["groups"] = {"cardinality": {"field": "group"}}
        for name in facets:
            wanted[f"facet:{name}"] = {"terms": {"field": FACETS[name], "size": 100}}
        aggregated = searcher.aggregate(matching, wanted)
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
        self._index = self.t.Index(self.schema, path=str(self.folder))
        _analyzers(self.t, self._index)
        records = (
            reads.select(self.lake, "records", as_of=latest) if latest is not None else pa.table({})
        )
        with self._writer() as writer:
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
            self._index = self.t.Index.open(str(self.folder))
        except (OSError, ValueError):
            return False
        _analyzers(self.t, self._index)
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
    def _writer(self):
        try:
            writer = self._index.writer(heap_size=128_000_000, num_threads=1)
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
        t = self.t
        searcher = self._index.searcher()
        restriction = _filters_query(t, self.schema, filters)
        # Which documents match, counted and faceted in one pass over the ``words``
        # field; the attribute-by-attribute query is only for ranking.
        matching = _restricted(t, _matching_query(t, self.schema, words), restriction)
        aggregated = self._aggregated(searcher, matching, distinct, tuple(facets),
                                      everything=not words and restriction is None)  # fmt: skip
        count = round(aggregated["hits"].get("value") or 0)
        # The distinct count is an estimate (HyperLogLog): never more than the hits.
        groups = aggregated.get("groups", {}).get("value")
        nb_hits = min(count, round(groups or 0)) if distinct else count
        start = page * hits_per_page
        window = slice(start, start + hits_per_page)
        shown = None
        if len(words) <= BANDED_WORDS:  # few text ranks: each band ordered and cut by the engine
            shown = _banded(t, self.schema, searcher, words, restriction, distinct, window)
        if shown is None:
            best = _topped(t, self.schema, searcher, words, restriction, distinct, window.stop)
            shown = best[window] if best is not None else None
        if shown is None:  # a rank reached in too many ways to ask for: rank every candidate
            text = _restricted(t, _text_query(t, self.schema, words), restriction)
            shown = _ranked(searcher, text, min(count, MAX_CANDIDATES), distinct, window)
        # Highlighted: the query's words where the description holds them as written.
        marked = t.Query.boolean_query(
            [(t.Occur.Should, t.Query.term_query(self.schema, "description", w)) for w in words]
        )
        snippets = t.SnippetGenerator.create(searcher, marked, self.schema, "description")
        snippets.set_max_num_chars(160)
        hits = [_hit(searcher, snippets, address, score) for address, score in shown]
        counts = {f: _buckets(aggregated[f"facet:{f}"]["buckets"]) for f in facets}
        return {
            "query": query,
            "hits": hits,
            "nb_hits": nb_hits,
            "page": page,
            "hits_per_page": hits_per_page,
            "facets": counts,
            "processing_time_ms": round((time.perf_counter() - started) * 1000, 2),
            "index": followed,
        }


def reads_changes(lake: Lake, since: int, until: int):
    """The change feed (``changes.changes``), imported late: it imports this module's peers."""
    from .changes import changes

    return changes(lake, since, until)


# --- the index's schema and documents --------------------------------------------------


def _schema(tantivy: Any) -> Any:
    builder = tantivy.SchemaBuilder()
    # Every searched attribute's words in one field: which documents match is
    # decided here, one posting list per word, not as a union of one per attribute.
    builder.add_text_field("words", tokenizer_name="folded", index_option="basic")
    for name in SEARCHED:
        stored = name in ("product_name", "description", "categories")
        builder.add_text_field(name, stored=stored, tokenizer_name="folded", index_option="freq")
    for field in FACETS.values():
        if field.endswith("_kw"):
            builder.add_text_field(field, fast=True, tokenizer_name="raw")  # counted as sent
            builder.add_text_field(_filtered(field), tokenizer_name="keyword")  # matched folded
    builder.add_text_field("image", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_integer_field("object_id", stored=True, indexed=True, fast=True)
    builder.add_unsigned_field("group", fast=True)
    builder.add_unsigned_field("rank_key", fast=True)
    builder.add_float_field("price", stored=True, fast=True, indexed=True)
    builder.add_float_field("mrp", stored=True)
    for name in ("inventory", "sales", "likes"):
        builder.add_integer_field(name, fast=True, indexed=True)
    builder.add_boolean_field("on_sale", stored=True, fast=True, indexed=True)
    builder.add_boolean_field("in_stock", fast=True, indexed=True)
    return builder.build()


def _analyzers(tantivy: Any, index: Any) -> None:
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


def _filtered(field: str) -> str:
    """The field a facet column is filtered on: its whole value, any case, any accents."""
    return field.removesuffix("_kw") + "_kf"


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
    keywords = [
        pl.col(name).fill_null([] if name in ("categories", "tags") else "").alias(alias)
        for name, field in FACETS.items()
        if field.endswith("_kw")
        for alias in (field, _filtered(field))
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
        pl.when(pl.col("variant_group_id").is_null())
        .then(pl.concat_str(pl.lit("\x00"), pl.col("object_id").cast(pl.String)))
        .otherwise(pl.col("variant_group_id"))
        .hash(seed=28)
        .alias("group"),
        pl.col("price").fill_null(-1.0),
        pl.col("mrp").fill_null(-1.0),
        pl.col("inventory").fill_null(-1),
        pl.col("sales").fill_null(0),
        pl.col("likes").fill_null(0),
        pl.col("on_sale").fill_null(False),
        pl.col("in_stock").fill_null(False),
        _rank_key(),
    )
    for line in documents.select(pl.struct(pl.all()).struct.json_encode()).to_series():
        writer.add_json(line)


# --- queries ------------------------------------------------------------------------


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


def _word_clauses(t: Any, schema: Any, word: str, last: bool) -> list[tuple[float, Any]]:
    """One word's ways to match, each with its constant, best first.

    A term in an attribute (exact), a prefix of one (the last word only), or a
    term one edit off (words of five letters or more), per attribute.
    """
    clauses = []
    for priority, field in enumerate(SEARCHED):
        base = _WORD + (len(SEARCHED) - priority) * _ATTRIBUTE
        clauses.append((base + 3 * _KIND, t.Query.term_query(schema, field, word)))
        if last:
            prefix = t.Query.fuzzy_term_query(schema, field, word, 0, True, True)
            clauses.append((base + 2 * _KIND, prefix))
        if len(word) >= 5:
            typo = t.Query.fuzzy_term_query(schema, field, word, 1, True, last)
            clauses.append((base + 1 * _KIND, typo))
    return sorted(clauses, key=lambda clause: -clause[0])


def _text_query(t: Any, schema: Any, words: list[str]) -> Any:
    """Each word's best match scores a constant; the words' constants add up."""
    if not words:
        return t.Query.const_score_query(t.Query.all_query(), 0.0)
    per_word = []
    for position, word in enumerate(words):
        clauses = _word_clauses(t, schema, word, position == len(words) - 1)
        options = [t.Query.const_score_query(query, score) for score, query in clauses]
        per_word.append((t.Occur.Should, t.Query.disjunction_max_query(options)))
    return t.Query.boolean_query(per_word)


def _word_matches(t: Any, schema: Any, word: str, last: bool) -> Any:
    """The documents a word matches in any way ``_word_clauses`` names, on the ``words`` field.

    One edit off, as a prefix when last, holds the exact term and the prefixes too.
    """
    if len(word) >= 5:
        return t.Query.fuzzy_term_query(schema, "words", word, 1, True, last)
    if last:
        return t.Query.fuzzy_term_query(schema, "words", word, 0, True, True)
    return t.Query.term_query(schema, "words", word)


def _matching_query(t: Any, schema: Any, words: list[str]) -> Any:
    """The documents that match any query word: the same set as ``_text_query``'s, unscored."""
    if not words:
        return t.Query.all_query()
    return t.Query.boolean_query(
        [(t.Occur.Should, _word_matches(t, schema, w, i == len(words) - 1))
         for i, w in enumerate(words)]
    )  # fmt: skip


def _restricted(t: Any, query: Any, restriction: Any) -> Any:
    """``query``, kept to the documents the filters let through (which add no score)."""
    if restriction is None:
        return query
    return t.Query.boolean_query(
        [(t.Occur.Must, query), (t.Occur.Must, t.Query.const_score_query(restriction, 0.0))]
    )


def _filters_query(t: Any, schema: Any, filters: Any) -> Any:
    """A filter dict (conditions AND-ed; a list value is any of) or a list of them (OR-ed)."""
    if not filters:
        return None
    groups = filters if isinstance(filters, list) else [filters]
    if not all(isinstance(g, dict) and g for g in groups):
        raise SearchError("filters are a dict of conditions, or a list of such dicts (any of)")
    queries = [_group(t, schema, group) for group in groups]
    if len(queries) == 1:
        return queries[0]
    return t.Query.boolean_query([(t.Occur.Should, q) for q in queries])


def _group(t: Any, schema: Any, conditions: dict[str, Any]) -> Any:
    musts = []
    for name, value in conditions.items():
        if name in RANGES:
            low, high = _range(name, value)
            kind = t.FieldType.Float if RANGES[name] == "float" else t.FieldType.Integer
            cast = float if RANGES[name] == "float" else int
            low = cast(low) if low is not None else (0 if name == "inventory" else None)
            high = cast(high) if high is not None else None
            if low is None and high is None:
                continue
            query = t.Query.range_query(schema, name, kind, low, high)
        elif name in ("on_sale", "in_stock"):
            if not isinstance(value, bool):
                raise SearchError(f"filter {name!r} takes true or false; got {value!r}")
            query = t.Query.term_query(schema, name, value)
        elif name in FACETS:
            values = value if isinstance(value, (list, tuple)) else [value]
            if not values or not all(isinstance(v, str) for v in values):
                raise SearchError(f"filter {name!r} takes text, or a list of text (any of)")
            folded = [_folded_value(v) for v in values]
            query = t.Query.term_set_query(schema, _filtered(FACETS[name]), folded)
        else:
            raise SearchError(f"unknown filter {name!r}; filters: {', '.join([*RANGES, *FACETS])}")
        musts.append((t.Occur.Must, query))
    return t.Query.boolean_query(musts) if musts else t.Query.all_query()


def _folded_value(value: str) -> str:
    """A filter value as the ``keyword`` analyzer indexes one: lower case, accents folded."""
    decomposed = unicodedata.normalize("NFKD", value.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _range(name: str, value: Any) -> tuple[Any, Any]:
    if isinstance(value, str):
        low, sep, high = value.partition("..")
        if not sep:
            raise SearchError(
                f"filter {name!r} takes LOW..HIGH (either may be empty); got {value!r}"
            )
        value = (low or None, high or None)
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise SearchError(f"filter {name!r} takes (low, high); got {value!r}")
    try:
        bounds = tuple(None if v is None else float(v) for v in value)
    except (TypeError, ValueError):
        raise SearchError(f"filter {name!r} takes numbers; got {value!r}") from None
    if any(b is not None and not np.isfinite(b) for b in bounds):
        raise SearchError(f"filter {name!r} takes finite numbers; got {value!r}")
    return bounds


# --- ranking and display ------------------------------------------------------------


def _ranked(
    searcher: Any, query: Any, limit: int, distinct: bool, page: slice
) -> list[tuple[Any, float]]:
    """Rank every candidate by text rank, then the custom ranking; one per variant group.

    Returns the page's (address, score) pairs.
    """
    if limit == 0:
        return []
    return _ordered(searcher, searcher.search(query, limit=limit, count=False).hits, distinct)[page]


def _ordered(
    searcher: Any, found: list[tuple[float, Any]], distinct: bool
) -> list[tuple[Any, float]]:
    """(score, address) pairs as (address, score), by score, then the custom ranking, then id."""
    if not found:
        return []
    scores, places = zip(*found, strict=True)
    addresses = list(places)
    score = np.fromiter(scores, dtype="float64", count=len(found))
    rank = np.array(searcher.fast_field_values("rank_key", addresses), dtype="uint64")
    object_id = np.array(searcher.fast_field_values("object_id", addresses))
    # lexsort sorts by the last key first: the object id last breaks every remaining tie.
    order = np.lexsort([object_id, np.iinfo(np.uint64).max - rank, -score])
    if distinct:
        group = np.array(searcher.fast_field_values("group", addresses), dtype="uint64")
        _, first = np.unique(group[order], return_index=True)
        order = order[np.sort(first)]
    return [(addresses[i], float(score[i])) for i in order]


#: Ways (one per word: an attribute and a kind, or no match) to reach one text rank that
#: ``_topped`` writes as one query, and steps spent looking for them; a rank reached in
#: more ways, or harder to find, is ranked by ``_ranked``.
MAX_BAND_WAYS = 512
MAX_BAND_STEPS = 20_000


def _topped(
    t: Any,
    schema: Any,
    searcher: Any,
    words: list[str],
    restriction: Any,
    distinct: bool,
    wanted: int,
) -> list[tuple[Any, float]] | None:
    """The ``wanted`` best hits of a longer query, in order (fewer when there are no more).

    tantivy returns the ``limit`` best scores, but cuts among equal scores by
    document address. Every hit scoring above the lowest score it returned is
    there, and is ordered here by the custom ranking; the documents of exactly
    that score are asked for again as one band (``_band``), in the custom
    ranking's order, so the page ends where the ranking says. When the page
    ends above the lowest score, nothing more is asked; when that score is
    reached in more ways than ``_band`` writes, more hits are read, up to
    ``MAX_CANDIDATES``. A few thousand hits are read, not every candidate.
    None when even that many leave the page's end among equal scores.
    """
    per_word = [_word_clauses(t, schema, w, i == len(words) - 1) for i, w in enumerate(words)]
    text = _restricted(t, _text_query(t, schema, words), restriction)
    limit = wanted * (3 if distinct else 1)
    while True:
        found = searcher.search(text, limit=limit, count=False).hits
        if len(found) < limit:  # every candidate is here
            return _ordered(searcher, found, distinct)[:wanted]
        lowest = min(score for score, _ in found)
        fetched = _ordered(searcher, found, distinct)
        if len(fetched) >= wanted and fetched[wanted - 1][1] > lowest:
            return fetched[:wanted]  # the page ends above the cut: nothing unread ranks in it
        band = _band(t, schema, words, per_word, lowest)
        if band is None:  # too many ways to ask for that score: read further instead
            if limit >= MAX_CANDIDATES:
                return None
            limit = min(limit * 4, MAX_CANDIDATES)
            continue
        if restriction is not None:
            band = t.Query.boolean_query([(t.Occur.Must, band), (t.Occur.Must, restriction)])
        tied, _ = _in_rank_order(t, schema, searcher, band, limit)
        ordered = _ordered(searcher, [(s, a) for s, a in found if s > lowest], False)
        ordered += [(a, lowest) for a in tied]
        if distinct:
            groups = searcher.fast_field_values("group", [a for a, _ in ordered])
            first = dict(zip(reversed(groups), range(len(groups) - 1, -1, -1), strict=True))
            ordered = [ordered[i] for i in sorted(first.values())]
        if len(ordered) >= wanted:
            return ordered[:wanted]
        limit *= 4


def _band(
    t: Any, schema: Any, words: list[str], per_word: list[list[tuple[float, Any]]], score: float
) -> Any:
    """The documents whose text rank is exactly ``score``; None past ``MAX_BAND_WAYS`` ways.

    A way gives each word its best match (an option of ``_word_clauses``: that
    one matches, no better one does) or no match at all; the ways whose
    constants add up to ``score`` are found by a walk that drops a branch as
    soon as it cannot reach it.
    """
    options = [[(round(c), q) for c, q in clauses] + [(0, None)] for clauses in per_word]
    best_after = [0] * (len(words) + 1)
    for i in range(len(words) - 1, -1, -1):
        best_after[i] = best_after[i + 1] + options[i][0][0]
    target, ways, steps = round(score), [], [0]

    def walk(i: int, total: int, chosen: tuple[int, ...]) -> None:
        steps[0] += 1
        if len(ways) > MAX_BAND_WAYS or steps[0] > MAX_BAND_STEPS:
            return
        if i == len(words):
            if total == target:
                ways.append(chosen)
            return
        for j, (constant, _) in enumerate(options[i]):
            if total + constant + best_after[i + 1] < target:
                break  # the options are best first: no later one reaches it either
            if total + constant <= target:
                walk(i + 1, total + constant, (*chosen, j))

    walk(0, 0, ())
    if not ways or len(ways) > MAX_BAND_WAYS or steps[0] > MAX_BAND_STEPS:
        return None
    return _ways_query(t, schema, words, per_word, ways)


def _ways_query(
    t: Any,
    schema: Any,
    words: list[str],
    per_word: list[list[tuple[float, Any]]],
    ways: list[tuple[int, ...]],
) -> Any:
    """The documents that match the query in one of ``ways``.

    A way names, for each word, its best match: an index into that word's
    ``per_word`` options (that one matches, no better one does), or one past
    them for no match at all.
    """
    queries = []
    for way in ways:
        clauses = []
        for w, j in enumerate(way):
            if j == len(per_word[w]):
                last = w == len(words) - 1
                clauses.append((t.Occur.MustNot, _word_matches(t, schema, words[w], last)))
            else:
                clauses.append((t.Occur.Must, per_word[w][j][1]))
                clauses += [(t.Occur.MustNot, better) for _, better in per_word[w][:j]]
        queries.append(t.Query.boolean_query(clauses))
    if len(queries) == 1:
        return queries[0]
    return t.Query.boolean_query([(t.Occur.Should, q) for q in queries])


#: Queries of at most this many words are ranked band by band inside the engine; past
#: ``BANDS_TRIED`` bands that leave the page short, by the engine's best scores (``_topped``).
BANDED_WORDS = 2
BANDS_TRIED = 6


def _bands(t: Any, schema: Any, words: list[str]) -> Iterator[tuple[float, Any]]:
    """The text ranks a query can give, best first, each with the query of its documents.

    A document is in a band when every word's best way to match (an attribute
    and a kind) is the band's: that way, and none better. Bands of equal rank
    are one band. Only documents that match every word are in a band.
    """
    if not words:
        yield 0.0, t.Query.all_query()
        return
    per_word = [_word_clauses(t, schema, w, i == len(words) - 1) for i, w in enumerate(words)]
    combos: dict[float, list[tuple[int, ...]]] = {}
    for combo in itertools.product(*(range(len(c)) for c in per_word)):
        total = sum(per_word[w][i][0] for w, i in enumerate(combo))
        combos.setdefault(total, []).append(combo)
    for total in sorted(combos, reverse=True):
        yield total, _ways_query(t, schema, words, per_word, combos[total])


def _banded(
    t: Any,
    schema: Any,
    searcher: Any,
    words: list[str],
    restriction: Any,
    distinct: bool,
    page: slice,
) -> list[tuple[Any, float]] | None:
    """The page of a short query, band by band, each in the engine's order; None if short.

    A short query's text rank has few values (``_bands``), so each is a query
    of its own, which tantivy orders by ``rank_key`` and cuts at the page: no
    hit past the page is read. None when ``BANDS_TRIED`` bands of a query of
    several words leave the page short: its documents are spread over many
    bands, or match fewer words (``_topped`` ranks them).
    """
    wanted = page.stop
    taken: list[tuple[Any, float]] = []
    groups: set[int] = set()
    for tried, (score, query) in enumerate(_bands(t, schema, words)):
        if len(words) > 1 and tried >= BANDS_TRIED:
            return None
        band = query
        if restriction is not None:
            band = t.Query.boolean_query([(t.Occur.Must, query), (t.Occur.Must, restriction)])
        limit = max(1, wanted - len(taken))
        while True:
            hits, every = _in_rank_order(t, schema, searcher, band, limit * (3 if distinct else 1))
            kept = _distinct(searcher, hits, groups) if distinct else hits
            if len(kept) >= wanted - len(taken) or every:
                break
            limit *= 4
        if distinct and kept:
            groups.update(searcher.fast_field_values("group", kept))
        taken += [(address, score) for address in kept[: wanted - len(taken)]]
        if len(taken) >= wanted:
            return taken[page]
    return taken[page] if len(words) <= 1 else None


def _in_rank_order(
    t: Any, schema: Any, searcher: Any, query: Any, limit: int
) -> tuple[list[Any], bool]:
    """The first ``limit`` documents of ``query`` by the custom ranking, and whether that is all.

    tantivy orders by ``rank_key`` but cuts among equal keys by document
    address, which a rebuild changes. So twice the page is read, and when the
    documents tied with the page's last key run past that too, they are asked
    for again in object id order: the cut is the same in any index.
    """
    # Twice the page: the documents that tie with the last of it are most often all there.
    found = searcher.search(query, limit=2 * limit, count=False, order_by_field="rank_key").hits
    ordered = _tie_broken(searcher, [address for _, address in found])
    if len(found) < 2 * limit:  # every document of the query is here
        return ordered[:limit], len(found) <= limit
    lowest = found[limit - 1][0]
    if found[-1][0] < lowest:  # and every one tied with the last of the page
        return ordered[:limit], False
    above = sum(1 for key, _ in found if key > lowest)
    key = t.Query.range_query(schema, "rank_key", t.FieldType.Unsigned, lowest, lowest)
    tied = t.Query.boolean_query([(t.Occur.Must, query), (t.Occur.Must, key)])
    rest = searcher.search(tied, limit=limit - above, count=False, order_by_field="object_id",
                           order=t.Order.Asc).hits  # fmt: skip
    return ordered[:above] + [address for _, address in rest], False


def _tie_broken(searcher: Any, addresses: list[Any]) -> list[Any]:
    """Addresses in ``rank_key`` order, equal keys by object id (as a rebuilt index has them)."""
    if not addresses:
        return []
    rank = np.array(searcher.fast_field_values("rank_key", addresses), dtype="uint64")
    object_id = np.array(searcher.fast_field_values("object_id", addresses))
    order = np.lexsort([object_id, np.iinfo(np.uint64).max - rank])
    return [addresses[i] for i in order]


def _distinct(searcher: Any, addresses: list[Any], seen: set[int]) -> list[Any]:
    """The first address of each variant group not in ``seen``, in order."""
    groups = searcher.fast_field_values("group", addresses)
    kept, mine = [], set(seen)
    for address, group in zip(addresses, groups, strict=True):
        if group not in mine:
            mine.add(group)
            kept.append(address)
    return kept


#: Bits of each custom-ranking column in ``rank_key``, most significant first; a value
#: past its width counts as the width's largest (sales past 16.7 million tie).
RANK_BITS = {"sales": 24, "likes": 20, "in_stock": 1, "inventory": 19}


def _rank_key() -> pl.Expr:
    """The custom ranking as one unsigned 64-bit number: compared once, in one fast field."""
    if tuple(RANK_BITS) != tuple(ROLES.ranking):
        raise CatalogLakeError(f"rank_key encodes {tuple(RANK_BITS)}, not {ROLES.ranking}")
    key = pl.lit(0, dtype=pl.UInt64)
    for name, bits in RANK_BITS.items():
        value = pl.col(name).cast(pl.Int64).fill_null(0).clip(0, (1 << bits) - 1).cast(pl.UInt64)
        key = key * (1 << bits) + value
    return key.alias("rank_key")


def _hit(searcher: Any, snippets: Any, address: Any, score: float) -> dict[str, Any]:
    document = searcher.doc(address)
    stored = document.to_dict()
    hit = {
        "object_id": str(stored["object_id"][0]),
        "product_name": (stored.get("product_name") or [None])[0],
        "price": (stored.get("price") or [None])[0],
        "mrp": (stored.get("mrp") or [None])[0],
        "on_sale": (stored.get("on_sale") or [False])[0],
        "image": (stored.get("image") or [""])[0] or None,
        "categories": list(stored.get("categories") or []),
    }
    snippet = snippets.snippet_from_doc(document)
    hit["snippet"] = snippet.to_html() or ((stored.get("description") or [""])[0][:160])
    hit["text_rank"] = _explained(score)
    return hit


def _explained(score: float) -> dict[str, int]:
    """A hit's text rank spelled out: words matched, attribute points, match kind points."""
    words = int(score // _WORD)
    rest = score - words * _WORD
    return {
        "words": words,
        "attributes": int(rest // _ATTRIBUTE),
        "exactness": int(rest % _ATTRIBUTE),
    }


def _buckets(buckets: list[dict[str, Any]]) -> dict[str, int]:
    counts = {}
    for bucket in buckets:
        key = bucket.get("key_as_string", bucket["key"])
        if key == "":  # a record without the value
            continue
        counts[str(key)] = int(bucket["doc_count"])
    return counts


__all__ = ["FACETS", "SearchIndex", "fold", "index_folder"]
