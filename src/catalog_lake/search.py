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
from .errors import CatalogLakeError, LakeError
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
_FORMAT = "catalog-lake-search/3"


class SearchError(CatalogLakeError):
    """A search that cannot be run as asked (a filter, a facet or a page out of bounds)."""


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

    # --- keeping it current -----------------------------------------------------------

    def follow(self) -> dict[str, Any]:
        """Bring the index to the lake's latest records version; what it took.

        Applies the changes since the version it holds; builds it whole when it
        is missing, from another format, or behind what the lake still keeps.
        """
        started = time.perf_counter()
        table = self.lake.table("records")
        latest = table.version() if table is not None else None
        if self._index is None and not self._opened():
            return self._rebuilt(latest, started, "built")
        state = self._state()
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

    def _rebuilt(self, latest: int | None, started: float, action: str) -> dict[str, Any]:
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
        text = json.dumps({"format": _FORMAT, "version": version, "lake": self.lake.uri})
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
        text = _text_query(t, self.schema, words)
        restriction = _filters_query(t, self.schema, filters)
        clauses = [(t.Occur.Must, text)]
        if restriction is not None:
            clauses.append((t.Occur.Must, t.Query.const_score_query(restriction, 0.0)))
        full = t.Query.boolean_query(clauses)
        count = searcher.search(full, limit=1, count=True).count
        start = page * hits_per_page
        window = slice(start, start + hits_per_page)
        banded = None
        if len(words) <= 1 or (
            len(words) <= BANDED_WORDS
            and _every_word(t, self.schema, searcher, words, restriction) >= window.stop
        ):  # few text ranks: each band ordered and cut by the engine
            banded = _banded(t, self.schema, searcher, words, restriction, distinct, window)
        if banded is not None:
            shown = banded
            nb_hits = round(searcher.cardinality(full, "group")) if distinct else count
        else:
            nb_hits, shown = _ranked(searcher, full, min(count, MAX_CANDIDATES), distinct, window)
        # Highlighted: the query's words where the description holds them as written.
        marked = t.Query.boolean_query(
            [(t.Occur.Should, t.Query.term_query(self.schema, "description", w)) for w in words]
        )
        snippets = t.SnippetGenerator.create(searcher, marked, self.schema, "description")
        snippets.set_max_num_chars(160)
        hits = [_hit(searcher, snippets, address, score) for address, score in shown]
        counts = {}
        if facets:
            aggregated = searcher.aggregate(
                full, {f: {"terms": {"field": FACETS[f], "size": 100}} for f in facets}
            )
            counts = {f: _buckets(aggregated[f]["buckets"]) for f in facets}
        return {
            "query": query,
            "hits": hits,
            "nb_hits": nb_hits if distinct else count,
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
    documents = frame.select(
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
) -> tuple[int, list[tuple[Any, float]]]:
    """Rank every candidate by text rank, then the custom ranking; one per variant group.

    Returns how many hits there are, and the page's (address, score) pairs.
    """
    if limit == 0:
        return 0, []
    found = searcher.search(query, limit=limit, count=False).hits
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
    return len(order), [(addresses[i], float(score[i])) for i in order[page]]


#: Queries of at most this many words are ranked band by band inside the engine.
BANDED_WORDS = 2


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
        options = []
        for combo in combos[total]:
            clauses = []
            for w, i in enumerate(combo):
                clauses.append((t.Occur.Must, per_word[w][i][1]))
                clauses += [(t.Occur.MustNot, better) for _, better in per_word[w][:i]]
            options.append(t.Query.boolean_query(clauses))
        yield total, (options[0] if len(options) == 1 else t.Query.boolean_query(
            [(t.Occur.Should, option) for option in options]))  # fmt: skip


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
    hit past the page is read. None when the documents matching every word do
    not fill the page (the rest match fewer words: ``_ranked`` ranks them all).
    """
    wanted = page.stop
    taken: list[tuple[Any, float]] = []
    groups: set[int] = set()
    for score, query in _bands(t, schema, words):
        band = query
        if restriction is not None:
            band = t.Query.boolean_query([(t.Occur.Must, query), (t.Occur.Must, restriction)])
        limit = max(1, wanted - len(taken))
        while True:
            found = searcher.search(band, limit=limit * (3 if distinct else 1), count=True,
                                    order_by_field="rank_key")  # fmt: skip
            hits = _tie_broken(searcher, [address for _, address in found.hits])
            kept = _distinct(searcher, hits, groups) if distinct else hits
            if len(kept) >= wanted - len(taken) or len(found.hits) >= found.count:
                break
            limit *= 4
        if distinct and kept:
            groups.update(searcher.fast_field_values("group", kept))
        taken += [(address, score) for address in kept[: wanted - len(taken)]]
        if len(taken) >= wanted:
            return taken[page]
    return taken[page] if len(words) <= 1 else None


def _every_word(t: Any, schema: Any, searcher: Any, words: list[str], restriction: Any) -> int:
    """How many documents match every word (and the filters)."""
    clauses = [
        (t.Occur.Must, t.Query.disjunction_max_query(
            [q for _, q in _word_clauses(t, schema, w, i == len(words) - 1)]))
        for i, w in enumerate(words)
    ]  # fmt: skip
    if restriction is not None:
        clauses.append((t.Occur.Must, restriction))
    return searcher.search(t.Query.boolean_query(clauses), limit=1, count=True).count


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


__all__ = ["FACETS", "SearchError", "SearchIndex", "fold", "index_folder"]
