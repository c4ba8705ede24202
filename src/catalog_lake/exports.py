"""How the records leave the lake for a search engine: index settings and documents.

SPEC 2.1 gives every record attribute a role: searched, displayed, filtered,
ranked. Each engine spells those roles in its own settings (Algolia's index
settings, Meilisearch's settings object, a Typesense collection schema and
search preset, an Elasticsearch or OpenSearch index body and search
template). ``index_settings`` writes them all from one table, ``ROLES``, so
the engines agree with each other and with the records' schema: an attribute
named here that the records table lacks, or types otherwise, fails the tests.

``write_export`` writes the records themselves in each engine's import
format, built as whole columns by Polars (no Python per record). The records'
key is ``object_id`` (the service id, as text where an engine wants a string
id); a product's variants share ``variant_group_id``, shown once per group.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa

from .errors import UsageError
from .schemas import RECORDS
from .sellers import DEFAULT_SELLER


@dataclass(frozen=True)
class Roles:
    """SPEC 2.1's attribute roles, with the choices the spec leaves open."""

    #: Matched against search terms, most important first. SPEC 2.1 names the first
    #: three; brand and the synonyms the lake derives come after them.
    searchable: tuple[str, ...] = ("product_name", "description", "categories", "brand", "synonyms")
    #: Shown in results (SPEC 2.1), and what a result needs to link and explain itself.
    displayed: tuple[str, ...] = (
        "object_id",
        "client_item_id",
        "product_name",
        "description",
        "price",
        "mrp",
        "on_sale",
        "discount_pct",
        "image",
        "in_stock",
        "categories",
        "brand",
        "tags",
        "seller",
    )
    #: Filters: SPEC 2.1's boolean, numeric and list filters, then stock and brand, and the
    #: seller, so that an engine-side key can be restricted to one seller's records.
    filters: tuple[str, ...] = (
        "on_sale",
        "price",
        "categories",
        "in_stock",
        "brand",
        "tags",
        "seller",
    )
    #: Facets users count by (a subset of the filters).
    facets: tuple[str, ...] = ("categories", "brand", "on_sale", "tags")
    #: What the embedded search (``ranking.py``) counts and filters on: the engines'
    #: facets, the attributes a shopper narrows a catalog by, and the two flags.
    search_facets: tuple[str, ...] = (
        "brand",
        "categories",
        "tags",
        "colour",
        "size",
        "gender",
        "lake_category",
        "on_sale",
        "in_stock",
        "seller",
    )
    #: The embedded search's range filters, each with the kind of number it compares.
    search_ranges: tuple[tuple[str, str], ...] = (("price", "float"), ("inventory", "integer"))
    #: Custom ranking after text relevance, each descending: business metrics, then
    #: in stock first, then stock (SPEC 2.1). The embedded search uses the same.
    ranking: tuple[str, ...] = ("sales", "likes", "in_stock", "inventory")
    #: One result per product: its variants share this attribute.
    distinct: str = "variant_group_id"
    key: str = "object_id"
    #: What the engines group on: ``distinct``'s value within its seller, or the record's
    #: own id where it has none, so that a product without variants stands alone
    #: (``_documents``).
    group: str = "group_key"


ROLES = Roles()

#: Engines ``index_settings`` writes for, as ``--format`` names them.
ENGINES = ("algolia", "meilisearch", "typesense", "elasticsearch", "opensearch")


def index_settings(engine: str, roles: Roles = ROLES) -> dict[str, Any]:
    """The settings ``engine`` takes for an index of records, as its documentation spells them.

    Raises:
        CatalogLakeError: an engine not in ``ENGINES``.
    """
    writers = {
        "algolia": _algolia,
        "meilisearch": _meilisearch,
        "typesense": _typesense,
        "elasticsearch": _search_index,
        "opensearch": _search_index,
    }
    if engine not in writers:
        require_format(engine, ENGINES)
    return writers[engine](roles)


def require_format(fmt: str, formats: tuple[str, ...] | None = None) -> None:
    """Refuse a format not in ``formats`` (``EXPORT_FORMATS``), naming the ones there are.

    Raises:
        CatalogLakeError: ``fmt`` is not one of them.
    """
    formats = EXPORT_FORMATS if formats is None else formats
    if fmt not in formats:
        raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(formats)}", "fmt")


def _algolia(roles: Roles) -> dict[str, Any]:
    """Algolia index settings (the body of ``setSettings``)."""
    numeric = [a for a in roles.filters if _kind(a) == "number"]
    return {
        "searchableAttributes": [
            a if a != "description" else "unordered(description)" for a in roles.searchable
        ],
        "attributesToRetrieve": list(roles.displayed),
        "attributesForFaceting": [
            a if a in roles.facets else f"filterOnly({a})"
            for a in roles.filters
            if _kind(a) != "number"
        ],
        "numericAttributesForFiltering": numeric,
        "customRanking": [f"desc({a})" for a in roles.ranking],
        "attributeForDistinct": roles.group,
        "distinct": True,
    }


def _meilisearch(roles: Roles) -> dict[str, Any]:
    """Meilisearch index settings (the body of ``PATCH /indexes/{uid}/settings``)."""
    return {
        "searchableAttributes": list(roles.searchable),
        "displayedAttributes": list(roles.displayed),
        "filterableAttributes": list(roles.filters),
        "sortableAttributes": [
            *[a for a in roles.filters if _kind(a) == "number"],
            *(_RANK + a for a in roles.ranking),
        ],
        "rankingRules": [
            "words",
            "typo",
            "proximity",
            "attribute",
            "sort",
            "exactness",
            *(f"{_RANK}{a}:desc" for a in roles.ranking),
        ],
        "distinctAttribute": roles.group,
    }


#: Typesense field types of the records' Arrow types.
_TYPESENSE = {"string": "string", "number": "float", "integer": "int64", "flag": "bool"}


def _typesense(roles: Roles) -> dict[str, Any]:
    """A Typesense collection schema (``POST /collections``) and search preset.

    Typesense picks searched fields, ranking and grouping per query, so those
    roles go into a preset (``PUT /presets/catalog-lake``) that searches name it.
    """
    used = dict.fromkeys([*roles.searchable, *roles.displayed, *roles.filters, *roles.ranking])
    used[roles.distinct] = None
    used[roles.group] = None
    fields = []
    for name in used:
        if name == roles.key:
            continue  # documents carry it as "id"
        kind = _kind(name)
        field: dict[str, Any] = {
            "name": name,
            "type": "string[]" if kind == "list" else _TYPESENSE[kind],
            "optional": True,
        }
        # Typesense filters any indexed field; it counts facets, and groups only by one.
        if name in roles.facets or name in roles.filters or name in (roles.distinct, roles.group):
            field["facet"] = True
        if (
            name not in roles.searchable
            and name not in roles.filters
            and name not in (*roles.ranking, roles.distinct, roles.group)
        ):
            field["index"] = False  # displayed only
        fields.append(field)
    return {
        "collection": {"name": "catalog-lake-records", "fields": fields},
        "preset": {
            "value": {
                "query_by": ",".join(roles.searchable),
                "query_by_weights": ",".join(
                    str(len(roles.searchable) - i) for i in range(len(roles.searchable))
                ),
                "sort_by": ",".join(
                    ["_text_match:desc", *(f"{a}:desc" for a in roles.ranking[:2])]
                ),
                # Every document has a group key, so no product merges with another's;
                # missing values would otherwise all form one group (Typesense's default).
                "group_by": roles.group,
                "group_limit": 1,
                "group_missing_values": False,
                "include_fields": ",".join(a if a != roles.key else "id" for a in roles.displayed),
            }
        },
    }


#: Elasticsearch and OpenSearch mapping types of the records' kinds.
_MAPPING = {"number": "double", "integer": "long", "flag": "boolean"}
#: Lucene refuses a whole document with a term over 32,766 bytes, and a keyword is one
#: term. 8,191 characters of up to 4 UTF-8 bytes each fit: a longer value is kept in the
#: document and its text fields, and left out of the keyword index (Elasticsearch's own
#: advice for ``ignore_above``), so a long brand never costs its product.
IGNORE_ABOVE = 8_191
_KEYWORD = {"type": "keyword", "ignore_above": IGNORE_ABOVE}
#: Meilisearch ranks and sorts numbers and strings, not booleans, and documents no place
#: for a missing value: its documents carry ``rank_<attribute>`` numbers with no nulls.
_RANK = "rank_"


def _search_index(roles: Roles) -> dict[str, Any]:
    """An Elasticsearch or OpenSearch index body (``PUT /index``) and search template.

    Both engines rank and collapse per query, so the searched fields with
    their weights, the business-metric ranking and the collapse on
    ``variant_group_id`` are a stored mustache template (``PUT
    _scripts/catalog-lake-search``) that searches run with ``{"query": text}``.
    """
    used = dict.fromkeys([*roles.searchable, *roles.displayed, *roles.filters, *roles.ranking])
    used[roles.distinct] = None
    used[roles.group] = None
    properties: dict[str, Any] = {}
    for name in used:
        kind = _kind(name)
        if name in roles.searchable:
            properties[name] = {"type": "text"}
            if name in roles.filters or name in roles.facets:
                properties[name]["fields"] = {"raw": _KEYWORD}
        elif kind in ("string", "list"):
            indexed = name in roles.filters or name in (roles.distinct, roles.group, roles.key)
            properties[name] = _KEYWORD if indexed else {**_KEYWORD, "index": False}
        else:
            properties[name] = {"type": _MAPPING[kind]}
    weights = [f"{a}^{len(roles.searchable) - i}" for i, a in enumerate(roles.searchable)]
    template = {
        "query": {
            "function_score": {
                "query": {"multi_match": {"query": "{{query}}", "fields": weights}},
                "functions": [  # a flag is no factor: in stock is boosted by a filter
                    {"field_value_factor": {"field": a, "modifier": "log1p", "missing": 0}}
                    if _kind(a) != "flag"
                    else {"filter": {"term": {a: True}}, "weight": 1}
                    for a in roles.ranking
                ],
                "score_mode": "sum",
                "boost_mode": "sum",
            }
        },
        "collapse": {"field": roles.group},
        "_source": list(roles.displayed),
    }
    return {
        "index": {"mappings": {"dynamic": False, "properties": properties}},
        "search_template": {"script": {"lang": "mustache", "source": template}},
    }


#: What engines' documents carry besides the records' columns (``_documents``).
ADDED = pa.schema([pa.field("group_key", pa.string(), nullable=False)])


def document_type(name: str) -> pa.DataType:
    """The Arrow type of a field of an engine's documents: a records column, or ``ADDED``."""
    return ADDED.field(name).type if name in ADDED.names else RECORDS.field(name).type


def _kind(name: str) -> str:
    """The SPEC 2.1 kind of a document field: string, number, integer, flag or list."""
    kind = document_type(name)
    if pa.types.is_list(kind):
        return "list"
    if pa.types.is_boolean(kind):
        return "flag"
    if pa.types.is_integer(kind):
        return "integer"
    if pa.types.is_floating(kind):
        return "number"
    return "string"


#: The record fields a search engine gets: not the partition, nor the replay guard.
EXPORTED = [c for c in RECORDS.names if c not in ("id_block", "received_at")]

#: Formats ``write_export`` writes: plain JSON Lines, then each engine's import format.
EXPORT_FORMATS = ("jsonl", *ENGINES)
#: Requests per Algolia batch body (Algolia's clients send 1,000 at a time).
ALGOLIA_BATCH = 1_000
#: Records turned into text at a time, so memory follows this, not the lake.
EXPORT_CHUNK = 50_000
#: Each engine's budget for one record, in UTF-8 bytes of the JSON document it receives.
#: Algolia refuses a record over 10 KB on its smallest plan (Build) and over 100 KB on any
#: ("Record is too big"); a record within the data contract can pass either. The other
#: engines document no bound per document that a record can reach. ``max_record_bytes``
#: sets or raises a budget for any format (issue 43).
RECORD_BYTES = {"algolia": 10_000}
#: The largest budget taken: past any engine's whole request (Elasticsearch's
#: ``http.max_content_length`` is 100 MB), and within the 64-bit sizes it is compared with.
MAX_RECORD_BYTES = 1 << 30
#: Texts a record over its budget gives up, in this order: the description (searched
#: last, as ``unordered``), then the name. Never an id, a price or a filter value.
TRIMMABLE = ("description", "product_name")
#: Ends a trimmed text, so a reader sees that more was there.
ELLIPSIS = "…"
#: Ids a report lists one by one; past this, counts.
REPORTED_IDS = 100


@dataclass
class Exported:
    """What an export wrote: how many records, which were trimmed to fit, which could not.

    A record whose trimmable texts are gone and that is still over its budget
    (an id or filter value alone past it) is left out of the file and listed
    in ``too_large``: an engine would refuse it, and with it, for Algolia, its
    whole batch. The lake keeps it whole either way.
    """

    records: int = 0
    max_record_bytes: int | None = None
    trimmed: list[str] = field(default_factory=list)
    too_large: list[str] = field(default_factory=list)
    #: Records with a filter value past the engine's own limit (``FILTER_VALUE_BYTES``).
    long_filter_values: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The report as JSON-ready data: counts, and the first ``REPORTED_IDS`` ids."""
        summary = {
            "records": self.records,
            "max_record_bytes": self.max_record_bytes,
            "trimmed": len(self.trimmed),
            "trimmed_ids": self.trimmed[:REPORTED_IDS],
            "too_large": len(self.too_large),
            "too_large_ids": self.too_large[:REPORTED_IDS],
        }
        if self.long_filter_values:
            summary["long_filter_values"] = len(self.long_filter_values)
            summary["long_filter_values_ids"] = self.long_filter_values[:REPORTED_IDS]
        return summary


def write_export(
    records: pa.Table,
    fmt: str,
    output: Any,
    *,
    batch: int = ALGOLIA_BATCH,
    max_record_bytes: int | None = None,
) -> Exported:
    """Write the records to ``output`` (a text or binary stream) as ``fmt``'s import lines.

    - ``jsonl``: ``{"op": "upsert", "object_id": "17", "record": {...}}`` per line.
    - ``algolia``: one ``batch`` body per line, ``updateObject`` with ``objectID``,
      ``batch`` requests each.
    - ``meilisearch``: one document per line (``application/x-ndjson``), primary
      key ``object_id``.
    - ``typesense``: one document per line for ``import?action=upsert``, ``id`` as text.
    - ``elasticsearch``, ``opensearch``: ``_bulk`` NDJSON, an ``index`` action by
      ``_id`` then the document.

    An engine's documents also carry ``group_key`` (``Roles.group``), and
    Meilisearch's the ``rank_*`` numbers it ranks by. Each record is held to
    ``max_record_bytes``, else its engine's ``RECORD_BYTES`` (``_fitted``).

    Raises:
        CatalogLakeError: a format not in ``EXPORT_FORMATS``, or a budget under 1 byte.
    """
    require_format(fmt)
    budget = max_record_bytes if max_record_bytes is not None else RECORD_BYTES.get(fmt)
    if budget is not None and not 1 <= budget <= MAX_RECORD_BYTES:
        raise UsageError(
            f"max_record_bytes is 1 to {MAX_RECORD_BYTES:,}; got {budget:,}", "max_record_bytes"
        )
    report = Exported(max_record_bytes=budget)
    chunk = max(batch, EXPORT_CHUNK - EXPORT_CHUNK % batch)  # Algolia bodies never straddle
    for start in range(0, records.num_rows, chunk):
        part = records.slice(start, chunk)
        frame = _documents(pl.from_arrow(part.select(EXPORTED)), fmt)
        report.long_filter_values += _long_filter_values(frame, fmt)
        text = _encoded(frame, fmt)
        if budget is not None and (text["document"].str.len_bytes() > budget).any():
            frame = _fitted(frame, budget, report)  # rare: only then is anything encoded twice
            text = _encoded(frame, fmt)
        report.records += text.height
        # Polars writes the column of lines straight to the stream: no Python string per chunk.
        _lines(text, fmt, batch).to_frame().write_csv(  # type: ignore[arg-type]
            output, include_header=False, quote_style="never"
        )
    return report


def _documents(frame: pl.DataFrame, fmt: str) -> pl.DataFrame:
    """The records as ``fmt``'s engine takes them: its key, the group key, rank numbers.

    Every document carries its seller: a record written before sellers has none,
    and is the default seller's.
    """
    frame = frame.with_columns(pl.col("seller").fill_null(DEFAULT_SELLER))
    if fmt == "jsonl":
        return frame  # the records as the lake holds them
    ids = pl.col("object_id").cast(pl.String)
    # A variant group is one seller's. The default seller's keys are those of a lake
    # before sellers (an index loaded then needs no reload); another seller's start
    # with its name, which holds no ':' (``sellers.SELLER``), so no two groups share one.
    owner = pl.col("seller")
    group = (
        pl.when(pl.col(ROLES.distinct).is_null())
        .then(pl.concat_str([pl.lit("item:"), ids]))
        .when(owner == DEFAULT_SELLER)
        .then(pl.concat_str([pl.lit("group:"), pl.col(ROLES.distinct)]))
        .otherwise(
            pl.concat_str([pl.lit("seller:"), owner, pl.lit(":group:"), pl.col(ROLES.distinct)])
        )
    )
    frame = _short_group_keys(frame.with_columns(group.alias(ROLES.group)))
    if fmt == "meilisearch":
        frame = frame.with_columns(
            pl.col(a).cast(pl.Int64).fill_null(-1).alias(_RANK + a) for a in ROLES.ranking
        )
    if fmt == "typesense":
        return frame.with_columns(ids.alias("id")).drop("object_id").select("id", pl.exclude("id"))
    if fmt == "algolia":
        return frame.with_columns(ids.alias("objectID"))
    return frame


#: Bytes of a filterable value an engine keeps: Meilisearch cuts facet and filter values
#: at 468 bytes (its documented limit), the smallest of the engines'.
FILTER_VALUE_BYTES = 468


def _short_group_keys(frame: pl.DataFrame) -> pl.DataFrame:
    """Group keys that no engine cuts: one past ``FILTER_VALUE_BYTES`` becomes its digest.

    Two variant groups whose ids share their first 468 bytes would otherwise
    be one group in Meilisearch, and show as one product (issue 50). The
    digest (``group:sha256:…``) is computed in Python, for those rare long keys
    alone: Polars' own hash is not stable across its versions, and a key must
    stay the same from one sync to the next.
    """
    group = frame[ROLES.group]
    long = group.str.len_bytes() > FILTER_VALUE_BYTES
    if not long.any():
        return frame
    digests = {
        key: "group:sha256:" + hashlib.sha256(key.encode()).hexdigest()
        for key in group.filter(long).unique().to_list()
    }
    return frame.with_columns(pl.col(ROLES.group).replace(digests))


def _long_filter_values(frame: pl.DataFrame, fmt: str) -> list[str]:
    """Ids of documents with a filter value Meilisearch would cut at ``FILTER_VALUE_BYTES``.

    Only Meilisearch cuts: filtering by such a value matches on its first 468
    bytes, so the export says which records carry one, rather than nothing.
    """
    if fmt != "meilisearch":
        return []
    checks = []
    for name in ROLES.filters:
        if _kind(name) == "string":
            checks.append(pl.col(name).str.len_bytes() > FILTER_VALUE_BYTES)
        elif _kind(name) == "list":
            longest = pl.col(name).list.eval(pl.element().str.len_bytes()).list.max()
            checks.append(longest > FILTER_VALUE_BYTES)
    long = frame.select(pl.any_horizontal(checks).fill_null(False)).to_series()
    return frame["object_id"].filter(long).cast(pl.String).to_list()


def _size() -> pl.Expr:
    """Each document's size: UTF-8 bytes of its JSON, as the engine receives it."""
    return pl.struct(pl.all()).struct.json_encode().str.len_bytes()


def _fitted(frame: pl.DataFrame, budget: int, report: Exported) -> pl.DataFrame:
    """The documents held to ``budget`` bytes each; ``report`` learns which were trimmed.

    Only the documents over it are worked on, a few passes of whole columns:
    each pass cuts the first trimmable text that is left by the bytes still
    over (``_cut``), and measures again, since JSON escapes make a text's
    share of its document larger than its own bytes.
    """
    sizes = frame.select(_size()).to_series().cast(pl.Int64)
    over = sizes > budget
    if not over.any():
        return frame
    order = pl.int_range(pl.len()).alias("_order")
    frame = frame.with_columns(order)
    keep, work = frame.filter(~over), frame.filter(over)
    for column in TRIMMABLE:
        for _ in range(4):
            size = work.drop("_order").select(_size()).to_series().cast(pl.Int64)
            if not (size > budget).any():
                break
            work = work.with_columns(_cut(column, size - budget))
    size = work.drop("_order").select(_size()).to_series()
    key = "id" if "id" in work.columns else "object_id"
    ids = work[key].cast(pl.String)
    report.too_large += ids.filter(size > budget).to_list()
    report.trimmed += ids.filter(size <= budget).to_list()
    kept = pl.concat([keep, work.filter(size <= budget)], how="vertical")
    return kept.sort("_order").drop("_order")


def _cut(column: str, excess: pl.Series) -> pl.Expr:
    """``column`` shortened by at least ``excess`` bytes, at a word or grapheme boundary.

    ``excess`` is in bytes of the document's JSON, where a quote or a
    backslash takes two and a control character six: the share of the text
    kept is the share of its escaped bytes kept, so a text of quote marks is
    cut by half as many characters as a plain one, not dropped (issue 50).
    Slices are in characters, never inside one; a cut that would split a
    grapheme drops the whole cluster (``_whole_graphemes``); one with a space
    in its last 64 characters ends at that word. ``ELLIPSIS`` marks what was cut.
    """
    text = pl.col(column)
    excess = excess.cast(pl.Int64)  # lengths are UInt32: their products and differences wrap
    # The text's own bytes in the document: its JSON member, less the name and punctuation.
    escaped = pl.struct(text).struct.json_encode().str.len_bytes().cast(pl.Int64) - (
        len(column) + 7
    )
    want = (escaped - pl.lit(excess) - len(ELLIPSIS.encode())).clip(lower_bound=0)
    share = want.cast(pl.Float64) / escaped.clip(lower_bound=1)
    chars = (text.str.len_chars().cast(pl.Float64) * share).floor().cast(pl.Int64)
    head = _whole_graphemes(text, chars)
    worded = head.str.replace(r"\s+\S{0,64}$", "")
    head = pl.when(worded.str.len_chars() > 0).then(worded).otherwise(head)
    shortened = pl.when(head.str.len_chars() > 0).then(pl.concat_str([head, pl.lit(ELLIPSIS)]))
    return (
        pl.when(text.is_null() | (pl.lit(excess) <= 0))
        .then(text)
        .otherwise(shortened.otherwise(None))
        .alias(column)
    )


#: What extends a grapheme cluster (UAX #29): combining marks and the variation selectors
#: (``\p{M}``), emoji skin-tone modifiers, and the tag characters of subdivision flags.
_EXTEND = r"\p{M}\x{1F3FB}-\x{1F3FF}\x{E0020}-\x{E007F}"
#: The zero-width joiner, which joins two emoji into one (a family, a profession).
_ZWJ = r"\x{200D}"
#: Regional indicators: a flag is a pair of them, and a cut may fall between the two.
_RI = r"\x{1F1E6}-\x{1F1FF}"
#: The last cluster of a text: a base and its extenders, joined to others by ZWJs.
_LAST_CLUSTER = rf"[^{_EXTEND}{_ZWJ}][{_EXTEND}]*(?:{_ZWJ}[^{_EXTEND}{_ZWJ}][{_EXTEND}]*)*{_ZWJ}?$"
#: The last regional indicator of an odd run at a text's end: half of a flag.
_HALF_FLAG = rf"((?:^|[^{_RI}])(?:[{_RI}]{{2}})*)[{_RI}]$"


def _whole_graphemes(text: pl.Expr, chars: pl.Expr) -> pl.Expr:
    """The first ``chars`` characters of ``text``, less a grapheme cluster the cut would split.

    A cut splits a cluster when the next character extends it (a mark, a skin
    tone, a tag, a joiner), when the kept part ends with a joiner, or between
    the two regional indicators of a flag. Polars has no grapheme segmentation,
    so these, the clusters a product text carries, are matched by their
    Unicode classes, whole columns at a time.
    """
    head = text.str.slice(0, chars)
    following = text.str.slice(chars, 1)
    joined = following.str.contains(rf"^[{_EXTEND}{_ZWJ}]") | head.str.contains(rf"{_ZWJ}$")
    half_flag = following.str.contains(rf"^[{_RI}]") & head.str.contains(_HALF_FLAG)
    return (
        pl.when(joined)
        .then(head.str.replace(_LAST_CLUSTER, ""))
        .when(half_flag)
        .then(head.str.replace(_HALF_FLAG, "$1"))
        .otherwise(head)
    )


def _encoded(frame: pl.DataFrame, fmt: str) -> pl.DataFrame:
    """Each document's JSON text and its key, as text."""
    key = pl.col("id") if fmt == "typesense" else pl.col("object_id").cast(pl.String)
    return frame.select(
        pl.struct(pl.all()).struct.json_encode().alias("document"), key.alias("key")
    )


def _lines(text: pl.DataFrame, fmt: str, batch: int) -> pl.Series:
    """The import lines of encoded documents (``_encoded``) in ``fmt``."""
    if fmt == "jsonl":
        lines = text.select(
            pl.concat_str(
                [
                    pl.lit('{"op":"upsert","object_id":"'),
                    "key",
                    pl.lit('","record":'),
                    "document",
                    pl.lit("}"),
                ]
            )
        )
    elif fmt in ("elasticsearch", "opensearch"):
        lines = text.select(
            pl.concat_str([pl.lit('{"index":{"_id":"'), "key", pl.lit('"}}\n'), "document"])
        )
    elif fmt == "algolia":
        requests = text.select(
            pl.concat_str(
                [pl.lit('{"action":"updateObject","body":'), "document", pl.lit("}")]
            ).alias("request"),
            (pl.int_range(pl.len()) // batch).alias("body"),
        )
        lines = (
            requests.group_by("body", maintain_order=True)
            .agg(pl.col("request").str.join(","))
            .select(pl.concat_str([pl.lit('{"requests":['), "request", pl.lit("]}")]))
        )
    else:  # meilisearch, typesense: the documents themselves
        lines = text.select("document")
    return lines.to_series()
