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

from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa

from .errors import CatalogLakeError
from .schemas import RECORDS


@dataclass(frozen=True)
class Roles:
    """SPEC 2.1's attribute roles, with the choices the spec leaves open."""

    #: Matched against search terms, most important first. SPEC 2.1 names the first
    #: three; brand and the synonyms the lake derives come after them.
    searchable: tuple[str, ...] = ("product_name", "description", "categories", "brand", "synonyms")
    #: Shown in results (SPEC 2.1), and what a result needs to link and explain itself.
    displayed: tuple[str, ...] = (
        "object_id", "client_item_id", "product_name", "description", "price", "mrp", "on_sale",
        "discount_pct", "image", "in_stock", "categories", "brand", "tags",
    )  # fmt: skip
    #: Filters: SPEC 2.1's boolean, numeric and list filters, then stock and brand.
    filters: tuple[str, ...] = ("on_sale", "price", "categories", "in_stock", "brand", "tags")
    #: Facets users count by (a subset of the filters).
    facets: tuple[str, ...] = ("categories", "brand", "on_sale", "tags")
    #: Custom ranking after text relevance, each descending: business metrics, then
    #: in stock first, then stock (SPEC 2.1). The embedded search uses the same.
    ranking: tuple[str, ...] = ("sales", "likes", "in_stock", "inventory")
    #: One result per product: its variants share this attribute.
    distinct: str = "variant_group_id"
    key: str = "object_id"


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
        raise CatalogLakeError(f"unknown format {fmt!r}; choose one of {', '.join(formats)}")


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
        "attributeForDistinct": roles.distinct,
        "distinct": True,
    }


def _meilisearch(roles: Roles) -> dict[str, Any]:
    """Meilisearch index settings (the body of ``PATCH /indexes/{uid}/settings``)."""
    return {
        "searchableAttributes": list(roles.searchable),
        "displayedAttributes": list(roles.displayed),
        "filterableAttributes": list(roles.filters),
        "sortableAttributes": [*[a for a in roles.filters if _kind(a) == "number"], *roles.ranking],
        "rankingRules": [
            "words",
            "typo",
            "proximity",
            "attribute",
            "sort",
            "exactness",
            *(f"{a}:desc" for a in roles.ranking),
        ],  # fmt: skip
        "distinctAttribute": roles.distinct,
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
        if name in roles.facets or name in roles.filters or name == roles.distinct:
            field["facet"] = True
        if (
            name not in roles.searchable
            and name not in roles.filters
            and name not in (roles.ranking + (roles.distinct,))
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
                "group_by": roles.distinct,
                "group_limit": 1,
                "include_fields": ",".join(a if a != roles.key else "id" for a in roles.displayed),
            }
        },
    }


#: Elasticsearch and OpenSearch mapping types of the records' kinds.
_MAPPING = {"number": "double", "integer": "long", "flag": "boolean"}


def _search_index(roles: Roles) -> dict[str, Any]:
    """An Elasticsearch or OpenSearch index body (``PUT /index``) and search template.

    Both engines rank and collapse per query, so the searched fields with
    their weights, the business-metric ranking and the collapse on
    ``variant_group_id`` are a stored mustache template (``PUT
    _scripts/catalog-lake-search``) that searches run with ``{"query": text}``.
    """
    used = dict.fromkeys([*roles.searchable, *roles.displayed, *roles.filters, *roles.ranking])
    used[roles.distinct] = None
    properties: dict[str, Any] = {}
    for name in used:
        kind = _kind(name)
        if name in roles.searchable:
            properties[name] = {"type": "text"}
            if name in roles.filters or name in roles.facets:
                properties[name]["fields"] = {"raw": {"type": "keyword"}}
        elif kind in ("string", "list"):
            indexed = name in roles.filters or name == roles.distinct or name == roles.key
            properties[name] = (
                {"type": "keyword"} if indexed else {"type": "keyword", "index": False}
            )
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
        "collapse": {"field": roles.distinct},
        "_source": list(roles.displayed),
    }
    return {
        "index": {"mappings": {"dynamic": False, "properties": properties}},
        "search_template": {"script": {"lang": "mustache", "source": template}},
    }


def _kind(name: str) -> str:
    """The SPEC 2.1 kind of a records column: string, number, integer, flag or list."""
    kind = RECORDS.field(name).type
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


def write_export(records: pa.Table, fmt: str, output: Any, *, batch: int = ALGOLIA_BATCH) -> None:
    """Write the records to ``output`` (a text or binary stream) as ``fmt``'s import lines.

    - ``jsonl``: ``{"op": "upsert", "object_id": "17", "record": {...}}`` per line.
    - ``algolia``: one ``batch`` body per line, ``updateObject`` with ``objectID``,
      ``batch`` requests each.
    - ``meilisearch``: one document per line (``application/x-ndjson``), primary
      key ``object_id``.
    - ``typesense``: one document per line for ``import?action=upsert``, ``id`` as text.
    - ``elasticsearch``, ``opensearch``: ``_bulk`` NDJSON, an ``index`` action by
      ``_id`` then the document.

    Raises:
        CatalogLakeError: a format not in ``EXPORT_FORMATS``.
    """
    require_format(fmt)
    chunk = max(batch, EXPORT_CHUNK - EXPORT_CHUNK % batch)  # Algolia bodies never straddle
    for start in range(0, records.num_rows, chunk):
        part = records.slice(start, chunk)
        frame = pl.from_arrow(part.select(EXPORTED))
        # Polars writes the column of lines straight to the stream: no Python string per chunk.
        _lines(frame, fmt, batch).to_frame().write_csv(  # type: ignore[arg-type]
            output, include_header=False, quote_style="never"
        )


def _lines(frame: pl.DataFrame, fmt: str, batch: int) -> pl.Series:
    ids = pl.col("object_id").cast(pl.String)
    if fmt == "typesense":
        frame = frame.with_columns(ids.alias("id")).drop("object_id").select("id", pl.exclude("id"))
    elif fmt == "algolia":
        frame = frame.with_columns(ids.alias("objectID"))
    text = frame.select(
        pl.struct(pl.all()).struct.json_encode().alias("document"),
        (ids if fmt != "typesense" else pl.col("id")).alias("key"),
    )
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
            )  # fmt: skip
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
