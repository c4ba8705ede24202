"""How the embedded search ranks: a hosted engine's record model, over tantivy queries.

``search.py`` keeps the index (built from ``records``, caught up by the change
feed); this module says which documents a query matches and in what order,
as the storage is split between ``lake.py``, ``blocks.py`` and ``reads.py``.

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

import itertools
import re
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import tantivy

from .errors import CatalogLakeError, SearchError
from .exports import ROLES
from .schemas import RECORDS

#: Searched text, highest priority first: the roles' searchable attributes, then tags.
SEARCHED = (*ROLES.searchable, *(("tags",) if "tags" not in ROLES.searchable else ()))
#: The true-or-false facets, each counted and matched on a field of its own name.
FLAGS = tuple(n for n in ROLES.search_facets if RECORDS.field(n).type == pa.bool_())
#: Facet columns (``ROLES.search_facets``) and the field each is counted on: a text
#: column's keyword field (``<name>_kw``), a flag's own.
FACETS = {name: name if name in FLAGS else f"{name}_kw" for name in ROLES.search_facets}
#: Numeric filters: ``(low, high)``, either side None for open.
RANGES = dict(ROLES.search_ranges)
#: Hits ranked in full per query; past this, the rest by text rank alone is never shown.
MAX_CANDIDATES = 200_000
#: The text rank's units: kind (exact 3, prefix 2, typo 1) < attribute < words matched.
#: Exact in tantivy's 32-bit scores for up to ``MAX_WORDS`` words.
_KIND, _ATTRIBUTE, _WORD = 1.0, 64.0, 8192.0
#: Ways (one per word: an attribute and a kind, or no match) to reach one text rank that
#: ``_topped`` writes as one query, and steps spent looking for them; a rank reached in
#: more ways, or harder to find, is ranked by ``_ranked``.
MAX_BAND_WAYS = 512
MAX_BAND_STEPS = 20_000
#: Queries of at most this many words are ranked band by band inside the engine; past
#: ``BANDS_TRIED`` bands that leave the page short, by the engine's best scores (``_topped``).
BANDED_WORDS = 2
BANDS_TRIED = 6
#: A longer query's best bands (``_best_bands``), one word fewer each, are asked for while
#: the words kept can be chosen in at most this many ways (four words: 4, then 6).
MAX_BAND_WAYS_FEWER = 16
#: Bits of each custom-ranking column in ``rank_key``, most significant first; a value
#: past its width counts as the width's largest (sales past 16.7 million tie).
RANK_BITS = {"sales": 24, "likes": 20, "in_stock": 1, "inventory": 19}


def ranked_page(
    schema: Any,
    searcher: Any,
    words: list[str],
    restriction: Any,
    distinct: bool,
    window: slice,
    count: Callable[[], int],
) -> list[tuple[Any, float]]:
    """The (address, score) pairs of one page of hits, best first.

    A short query is ranked band by band inside the engine (``_banded``); a
    longer one by the engine's best scores (``_topped``); a rank reached in too
    many ways to ask for, by ranking every one of the ``count()`` candidates
    (a callable: the count is still being made when the ranking starts).
    """
    if len(words) <= BANDED_WORDS:  # few text ranks: each band ordered and cut by the engine
        shown = _banded(schema, searcher, words, restriction, distinct, window)
    else:  # the best ranks there are, if they fill the page (a few term lists: cheap)
        bands = _best_bands(searcher, restriction)
        shown = _banded(schema, searcher, words, restriction, distinct, window, bands)
    if shown is None:
        best = _topped(schema, searcher, words, restriction, distinct, window.stop)
        shown = best[window] if best is not None else None
    if shown is None:  # a rank reached in too many ways to ask for: rank every candidate
        text = restricted(_text_query(schema, words), restriction)
        shown = _ranked(searcher, text, min(count(), MAX_CANDIDATES), distinct, window)
    return shown


def hits(
    schema: Any, searcher: Any, words: list[str], shown: list[tuple[Any, float]]
) -> list[dict[str, Any]]:
    """The page's hits as shown: stored fields, a snippet and the text rank explained.

    The snippet highlights the query's words where the description holds them as written.
    """
    marked = tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "description", w)) for w in words]
    )
    snippets = tantivy.SnippetGenerator.create(searcher, marked, schema, "description")
    snippets.set_max_num_chars(160)
    return [_hit(searcher, snippets, address, score) for address, score in shown]


def facet_counts(aggregated: dict[str, Any], facets: list[str] | tuple[str, ...]) -> dict:
    """Each facet's values and counts, from the aggregation ``search.py`` ran."""
    return {f: _buckets(aggregated[f"facet:{f}"]["buckets"]) for f in facets}


def fold(text: str) -> list[str]:
    """The words of ``text`` as the index holds them: lower case, no accents, split on the rest."""
    return re.findall(r"[^\W_]+", folded_value(text))


def filtered_field(field: str) -> str:
    """The field a facet column is filtered on: its whole value, any case, any accents."""
    return field.removesuffix("_kw") + "_kf"


def _word_clauses(schema: Any, word: str, last: bool) -> list[tuple[float, Any]]:
    """One word's ways to match, each with its constant, best first.

    A term in an attribute (exact), a prefix of one (the last word only), or a
    term one edit off (words of five letters or more), per attribute.
    """
    clauses = []
    for priority, field in enumerate(SEARCHED):
        base = _WORD + (len(SEARCHED) - priority) * _ATTRIBUTE
        clauses.append((base + 3 * _KIND, tantivy.Query.term_query(schema, field, word)))
        if last:
            prefix = tantivy.Query.fuzzy_term_query(schema, field, word, 0, True, True)
            clauses.append((base + 2 * _KIND, prefix))
        if len(word) >= 5:
            typo = tantivy.Query.fuzzy_term_query(schema, field, word, 1, True, last)
            clauses.append((base + 1 * _KIND, typo))
    return sorted(clauses, key=lambda clause: -clause[0])


def _text_query(schema: Any, words: list[str]) -> Any:
    """Each word's best match scores a constant; the words' constants add up."""
    if not words:
        return tantivy.Query.const_score_query(tantivy.Query.all_query(), 0.0)
    per_word = []
    for position, word in enumerate(words):
        clauses = _word_clauses(schema, word, position == len(words) - 1)
        options = [tantivy.Query.const_score_query(query, score) for score, query in clauses]
        per_word.append((tantivy.Occur.Should, tantivy.Query.disjunction_max_query(options)))
    return tantivy.Query.boolean_query(per_word)


def _word_matches(schema: Any, word: str, last: bool, field: str = "words") -> Any:
    """The documents a word matches in any way ``_word_clauses`` names, on the ``words`` field.

    One edit off, as a prefix when last, holds the exact term and the prefixes too.
    ``field``: ``sample_words`` for the same among the sampled groups' documents.
    """
    if len(word) >= 5:
        return tantivy.Query.fuzzy_term_query(schema, field, word, 1, True, last)
    if last:
        return tantivy.Query.fuzzy_term_query(schema, field, word, 0, True, True)
    return tantivy.Query.term_query(schema, field, word)


def matching_query(schema: Any, words: list[str], field: str = "words") -> Any:
    """The documents that match any query word: the same set as ``_text_query``'s, unscored.

    ``field="sample_words"``: the same set's documents of the sampled variant
    groups only (``search.SAMPLE_EVERY``).
    """
    if not words:
        return tantivy.Query.all_query()
    return tantivy.Query.boolean_query(
        [
            (tantivy.Occur.Should, _word_matches(schema, w, i == len(words) - 1, field))
            for i, w in enumerate(words)
        ]
    )


def restricted(query: Any, restriction: Any) -> Any:
    """``query``, kept to the documents the filters let through (which add no score)."""
    if restriction is None:
        return query
    return tantivy.Query.boolean_query(
        [
            (tantivy.Occur.Must, query),
            (tantivy.Occur.Must, tantivy.Query.const_score_query(restriction, 0.0)),
        ]
    )


def filters_query(schema: Any, filters: Any) -> Any:
    """A filter dict (conditions AND-ed; a list value is any of) or a list of them (OR-ed)."""
    if not filters:
        return None
    groups = filters if isinstance(filters, list) else [filters]
    if not all(isinstance(g, dict) and g for g in groups):
        raise SearchError("filters are a dict of conditions, or a list of such dicts (any of)")
    queries = [_group(schema, group) for group in groups]
    if len(queries) == 1:
        return queries[0]
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in queries])


def _group(schema: Any, conditions: dict[str, Any]) -> Any:
    musts = []
    for name, value in conditions.items():
        if name in RANGES:
            low, high = _range(name, value)
            kind = tantivy.FieldType.Float if RANGES[name] == "float" else tantivy.FieldType.Integer
            cast = float if RANGES[name] == "float" else int
            low = cast(low) if low is not None else (0 if name == "inventory" else None)
            high = cast(high) if high is not None else None
            if low is None and high is None:
                continue
            query = tantivy.Query.range_query(schema, name, kind, low, high)
        elif name in FLAGS:
            if not isinstance(value, bool):
                raise SearchError(f"filter {name!r} takes true or false; got {value!r}")
            query = tantivy.Query.term_query(schema, name, value)
        elif name in FACETS:
            values = value if isinstance(value, (list, tuple)) else [value]
            if not values or not all(isinstance(v, str) for v in values):
                raise SearchError(f"filter {name!r} takes text, or a list of text (any of)")
            if name == "seller":  # a name, matched exactly: ``Acme`` is not ``acme``
                query = tantivy.Query.term_set_query(schema, FACETS[name], list(values))
            else:
                folded = [folded_value(v) for v in values]
                query = tantivy.Query.term_set_query(schema, filtered_field(FACETS[name]), folded)
        else:
            raise SearchError(f"unknown filter {name!r}; filters: {', '.join([*RANGES, *FACETS])}")
        musts.append((tantivy.Occur.Must, query))
    return tantivy.Query.boolean_query(musts) if musts else tantivy.Query.all_query()


def folded_value(value: str) -> str:
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


def _topped(
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
    per_word = [_word_clauses(schema, w, i == len(words) - 1) for i, w in enumerate(words)]
    text = restricted(_text_query(schema, words), restriction)
    limit = wanted * (3 if distinct else 1)
    while True:
        found = searcher.search(text, limit=limit, count=False).hits
        if len(found) < limit:  # every candidate is here
            return _ordered(searcher, found, distinct)[:wanted]
        lowest = min(score for score, _ in found)
        fetched = _ordered(searcher, found, distinct)
        if len(fetched) >= wanted and fetched[wanted - 1][1] > lowest:
            return fetched[:wanted]  # the page ends above the cut: nothing unread ranks in it
        # When every hit read ties (a catalog's usual first page), ``lowest`` is the best
        # score there is, and the band needs no "and no better match" clauses.
        band = _band(schema, words, per_word, lowest, top=lowest == max(s for s, _ in found))
        if band is None:  # too many ways to ask for that score: read further instead
            if limit >= MAX_CANDIDATES:
                return None
            limit = min(limit * 4, MAX_CANDIDATES)
            continue
        if restriction is not None:
            band = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, band), (tantivy.Occur.Must, restriction)]
            )
        tied, _ = _in_rank_order(schema, searcher, band, limit)
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
    schema: Any,
    words: list[str],
    per_word: list[list[tuple[float, Any]]],
    score: float,
    top: bool = False,
) -> Any:
    """The documents whose text rank is exactly ``score``; None past ``MAX_BAND_WAYS`` ways.

    A way gives each word its best match (an option of ``_word_clauses``: that
    one matches, no better one does) or no match at all; the ways whose
    constants add up to ``score`` are found by a walk that drops a branch as
    soon as it cannot reach it. ``top``: no document ranks above ``score``
    (``_ways_query``).
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
    return _ways_query(schema, words, per_word, ways, top)


def _ways_query(
    schema: Any,
    words: list[str],
    per_word: list[list[tuple[float, Any]]],
    ways: list[tuple[int, ...]],
    top: bool = False,
) -> Any:
    """The documents that match the query in one of ``ways``.

    A way names, for each word, its best match: an index into that word's
    ``per_word`` options (that one matches, no better one does), or one past
    them for no match at all. ``top``: the ways' rank is the best any document
    has, so a document that matches a way's options cannot also match a
    better one (it would rank higher): the ``MustNot`` clauses that say so are
    left out. They were most of the band's time (a long query at 1,000,000
    records: 6.4 ms -> 0.8 ms), each a fuzzy or prefix term expanded again.
    """
    queries = []
    for way in ways:
        clauses = []
        for w, j in enumerate(way):
            if j == len(per_word[w]):
                if not top:
                    last = w == len(words) - 1
                    clauses.append((tantivy.Occur.MustNot, _word_matches(schema, words[w], last)))
            else:
                clauses.append((tantivy.Occur.Must, per_word[w][j][1]))
                if not top:
                    clauses += [(tantivy.Occur.MustNot, better) for _, better in per_word[w][:j]]
        if clauses:  # a way of no match at all ranks 0, below any hit: never the best
            queries.append(tantivy.Query.boolean_query(clauses))
    return _any_of(queries)


def _bands(schema: Any, words: list[str]) -> Iterator[tuple[float, Any]]:
    """The text ranks a query can give, best first, each with the query of its documents.

    A document is in a band when every word's best way to match (an attribute
    and a kind) is the band's: that way, and none better. Bands of equal rank
    are one band. Only documents that match every word are in a band.
    """
    if not words:
        yield 0.0, tantivy.Query.all_query()
        return
    per_word = [_word_clauses(schema, w, i == len(words) - 1) for i, w in enumerate(words)]
    combos: dict[float, list[tuple[int, ...]]] = {}
    for combo in itertools.product(*(range(len(c)) for c in per_word)):
        total = sum(per_word[w][i][0] for w, i in enumerate(combo))
        combos.setdefault(total, []).append(combo)
    for total in sorted(combos, reverse=True):
        yield total, _ways_query(schema, words, per_word, combos[total])


def _best_bands(searcher: Any, restriction: Any) -> Callable[..., Iterator[tuple[float, Any]]]:
    """The best text ranks a longer query can have, best first, each with its documents.

    First, every word exact in the first searched attribute. No document ranks
    above it, so its query needs no "and none better" clauses: one term list a
    word, intersected. Then, only when no document (of those the filters let
    through) matches every word in some way, every word but one so (any one):
    nothing can rank above that either. And so on, one word fewer each time,
    while the words left can be chosen in at most ``MAX_BAND_WAYS_FEWER`` ways.
    When one of these fills the page (a query whose words stand in some
    product names), the engine's best scores are never asked for (``_topped``
    scores every document that matches any word: at a million records, 5-11 ms).
    """

    def bands(schema: Any, words: list[str]) -> Iterator[tuple[float, Any]]:
        last = len(words) - 1
        best = [_word_clauses(schema, w, i == last)[0] for i, w in enumerate(words)]
        matched = [_word_matches(schema, w, i == last) for i, w in enumerate(words)]
        for size in range(len(words), 0, -1):
            chosen = list(itertools.combinations(range(len(words)), size))
            if len(chosen) > MAX_BAND_WAYS_FEWER:
                return
            if size < len(words):  # only when no document matches one word more, in any way
                more = itertools.combinations(range(len(words)), size + 1)
                some = _any_of([_all_of([matched[i] for i in way]) for way in more])
                if searcher.search(restricted(some, restriction), limit=1, count=False).hits:
                    return  # the best rank lies between the two: ``_topped`` finds it
            scores = {sum(best[i][0] for i in way) for way in chosen}
            if len(scores) > 1:  # words whose best matches score apart: not one band
                return
            yield scores.pop(), _any_of([_all_of([best[i][1] for i in way]) for way in chosen])

    return bands


def _any_of(queries: list[Any]) -> Any:
    if len(queries) == 1:
        return queries[0]
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, query) for query in queries])


def _all_of(queries: list[Any]) -> Any:
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, query) for query in queries])


def _banded(
    schema: Any,
    searcher: Any,
    words: list[str],
    restriction: Any,
    distinct: bool,
    page: slice,
    bands: Callable[[Any, list[str]], Iterator[tuple[float, Any]]] | None = None,
) -> list[tuple[Any, float]] | None:
    """The page of a short query, band by band, each in the engine's order; None if short.

    A short query's text rank has few values (``_bands``), so each is a query
    of its own, which tantivy orders by ``rank_key`` and cuts at the page: no
    hit past the page is read. None when ``BANDS_TRIED`` bands of a query of
    several words leave the page short: its documents are spread over many
    bands, or match fewer words (``_topped`` ranks them). ``bands``: other
    bands than ``_bands``, best first (``_best_bands``).
    """
    wanted = page.stop
    taken: list[tuple[Any, float]] = []
    groups: set[int] = set()
    for tried, (score, query) in enumerate((bands or _bands)(schema, words)):
        if len(words) > 1 and tried >= BANDS_TRIED:
            return None
        band = query
        if restriction is not None:
            band = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, query), (tantivy.Occur.Must, restriction)]
            )
        limit = max(1, wanted - len(taken))
        while True:
            hits, every = _in_rank_order(schema, searcher, band, limit * (3 if distinct else 1))
            kept = _distinct(searcher, hits, groups) if distinct else hits
            if len(kept) >= wanted - len(taken) or every:
                break
            limit *= 4
        if distinct and kept:
            groups.update(searcher.fast_field_values("group", kept))
        taken += [(address, score) for address in kept[: wanted - len(taken)]]
        if len(taken) >= wanted:
            return taken[page]
    # One word's bands are all its ranks: read to the end, the page is all there is.
    return taken[page] if len(words) <= 1 and bands is None else None


def _in_rank_order(schema: Any, searcher: Any, query: Any, limit: int) -> tuple[list[Any], bool]:
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
    key = tantivy.Query.range_query(schema, "rank_key", tantivy.FieldType.Unsigned, lowest, lowest)
    tied = tantivy.Query.boolean_query([(tantivy.Occur.Must, query), (tantivy.Occur.Must, key)])
    rest = searcher.search(
        tied, limit=limit - above, count=False, order_by_field="object_id", order=tantivy.Order.Asc
    ).hits
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


def rank_key() -> pl.Expr:
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
        "seller": (stored.get(FACETS["seller"]) or [None])[0],
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


__all__ = [
    "FACETS",
    "RANGES",
    "SEARCHED",
    "facet_counts",
    "filtered_field",
    "filters_query",
    "fold",
    "hits",
    "matching_query",
    "rank_key",
    "ranked_page",
    "restricted",
]
