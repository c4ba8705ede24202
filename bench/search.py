"""``python -m bench.search``: candidate engines for an embedded search of the records (issue 28).

Issue 28 asks for the engine to be chosen by measurement. This measures, in one
run, on the records of a lake built from the synthetic feed (``bench.synth``):

- ``tantivy`` (the Rust engine's Python bindings): one index with the searchable
  attributes as text (lower-cased, accents folded, split on anything not a
  letter or digit), keyword and numeric fast fields for filters, facets and the
  custom ranking. A query word matches exactly, as a prefix when it is the
  last one, or within one edit when it has five letters or more; every word
  must match some attribute; filters are fast-field queries; facets are a
  terms aggregation over the matching documents;
- ``catalog.search``: the shipped search on tantivy, with the issue's ranking
  (words, attribute, exactness, then the custom ranking), one hit per variant
  group, stored fields and snippets for the page; its catch-up is the
  ``follow`` of the change feed after a push of the 1,000 changed items;
- DuckDB, the baseline: the same records in a table with one folded text
  column; every word must be a substring of it (no typos), ordered by the
  custom ranking; facets are ``GROUP BY`` over the matches.

For each: the full build, the catch-up after a change of 1,000 records
(deleted and added again), and query latency at p50 and p95 for text alone,
text with filters, and text with filters and two facets. Times are wall
seconds in this process, with the load average; appended to
``bench/results.md`` with ``--record``.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from catalog_lake.search import fold

from . import synth
from .memory import emit

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

#: Searchable attributes, most important first (``exports.ROLES.searchable``), and tags.
TEXT = ("product_name", "description", "categories", "brand", "synonyms", "tags")
QUERIES = [
    "atta", "basmati rice", "kurta", "printed kurt", "sneakers", "bluetooth earbud",
    "smart watch", "lipstick", "matte lipstik", "moisturiser", "biryani", "paneer tikka",
    "cold coffee", "levis jeans", "samsung tv", "amul ghee", "green tea", "face wash",
    "masala dosa", "t-shirt",
]  # fmt: skip
#: Longer queries, timed apart: a page of them is ranked from the engine's best scores.
LONG_QUERIES = [
    "red cotton kurta", "slim fit jeans", "crew neck t-shirt", "green tea bags",
    "matte lipstik red", "samsung led tv black", "amul ghee 1 kg", "printed kurta festive wear",
]  # fmt: skip


# --- tantivy ------------------------------------------------------------------------


class Tantivy:
    """A tantivy index of the records in a folder."""

    def __init__(self, folder: Path) -> None:
        import tantivy

        self.t = tantivy
        builder = tantivy.SchemaBuilder()
        for name in TEXT:
            builder.add_text_field(name, tokenizer_name="folded", index_option="freq")
        for name in ("brand_kw", "category_kw", "variant_group_id"):
            builder.add_text_field(name, fast=True, tokenizer_name="raw")
        builder.add_integer_field("object_id", indexed=True, fast=True, stored=True)
        builder.add_float_field("price", fast=True)
        for name in ("inventory", "sales", "likes"):
            builder.add_integer_field(name, fast=True)
        builder.add_boolean_field("on_sale", fast=True, indexed=True)
        builder.add_boolean_field("in_stock", fast=True, indexed=True)
        self.schema = builder.build()
        self.index = tantivy.Index(self.schema, path=str(folder))
        folded = (
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .build()
        )
        self.index.register_tokenizer("folded", folded)

    def add(self, records: Any) -> None:
        """Add records (an Arrow table) as JSON documents, then commit."""
        self._write(records, replace=False)

    def replace(self, records: Any) -> None:
        """Delete records by object id and add their new versions (a catch-up)."""
        self._write(records, replace=True)

    def _write(self, records: Any, *, replace: bool) -> None:
        import polars as pl

        frame = pl.from_arrow(records).select(
            *TEXT,
            pl.col("brand").alias("brand_kw"),
            pl.col("categories").alias("category_kw"),
            "variant_group_id", "object_id", "price", "inventory", "sales", "likes",
            "on_sale", "in_stock",
        )  # fmt: skip
        lines = frame.select(pl.struct(pl.all()).struct.json_encode()).to_series().to_list()
        writer = self.index.writer(heap_size=256_000_000, num_threads=2)
        if replace:
            for object_id in records["object_id"].to_pylist():
                writer.delete_documents_by_term("object_id", object_id)
        for line in lines:
            writer.add_json(line)
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()

    def query(self, text: str, filters: bool) -> Any:
        """Every word must match an attribute: exactly, as a prefix (last), or one edit off."""
        t, schema = self.t, self.schema
        words = fold(text)
        musts = []
        for position, word in enumerate(words):
            last = position == len(words) - 1
            options = []
            for weight, field in zip((6, 5, 4, 3, 2, 1), TEXT, strict=True):
                exact = t.Query.term_query(schema, field, word)
                options.append(t.Query.boost_query(exact, float(weight * 4)))
                if last:
                    prefix = t.Query.fuzzy_term_query(schema, field, word, 0, True, True)
                    options.append(t.Query.boost_query(prefix, float(weight * 2)))
                if len(word) >= 5:
                    typo = t.Query.fuzzy_term_query(schema, field, word, 1, True, last)
                    options.append(t.Query.boost_query(typo, float(weight)))
            musts.append(
                (t.Occur.Must, t.Query.boolean_query([(t.Occur.Should, q) for q in options]))
            )
        if filters:
            musts.append((t.Occur.Must, t.Query.term_query(schema, "on_sale", True)))
            musts.append(
                (
                    t.Occur.Must,
                    t.Query.range_query(schema, "price", t.FieldType.Float, 100.0, 20_000.0),
                )
            )
        return t.Query.boolean_query(musts)

    def search(self, text: str, *, filters: bool = False, facets: bool = False) -> tuple[int, list]:
        """The count and the first 20 object ids, by score; facets computed when asked."""
        searcher = self.index.searcher()
        query = self.query(text, filters)
        found = searcher.search(query, limit=20, count=True)
        ids = searcher.fast_field_values("object_id", [address for _, address in found.hits])
        if facets:
            searcher.aggregate(
                query,
                {
                    "brand": {"terms": {"field": "brand_kw", "size": 10}},
                    "category": {"terms": {"field": "category_kw", "size": 10}},
                },
            )
        return found.count, ids


# --- DuckDB -------------------------------------------------------------------------


class DuckDB:
    """The records in an in-memory DuckDB table with one folded text column."""

    def __init__(self) -> None:
        import duckdb

        self.db = duckdb.connect()

    def _folded(self, name: str) -> str:
        parts = ", ".join(
            f"array_to_string({c}, ' ')" if c in ("categories", "synonyms", "tags") else c
            for c in TEXT
        )
        return (
            f"SELECT *, replace(strip_accents(lower(concat_ws(' ', {parts}))), '-', ' ') AS folded "
            f"FROM {name}"
        )

    def add(self, records: Any) -> None:
        """Load the records into a table with the folded text column."""
        self.db.register("incoming", records)
        self.db.execute(f"CREATE TABLE records AS {self._folded('incoming')}")
        self.db.unregister("incoming")

    def replace(self, records: Any) -> None:
        """Delete records by object id and insert their new versions."""
        self.db.register("incoming", records)
        self.db.execute("DELETE FROM records WHERE object_id IN (SELECT object_id FROM incoming)")
        self.db.execute(f"INSERT INTO records {self._folded('incoming')}")
        self.db.unregister("incoming")

    def search(self, text: str, *, filters: bool = False, facets: bool = False) -> tuple[int, list]:
        """The count and the first 20 object ids by the custom ranking; facets when asked."""
        words = fold(text)
        where = " AND ".join("folded LIKE ?" for _ in words)
        params = [f"%{w}%" for w in words]
        if filters:
            where += " AND on_sale AND price BETWEEN 100 AND 20000"
        rows = self.db.execute(
            f"SELECT object_id, count(*) OVER () FROM records WHERE {where} "
            "ORDER BY sales DESC, likes DESC, in_stock DESC, inventory DESC LIMIT 20",
            params,
        ).fetchall()
        if facets:
            self.db.execute(
                f"SELECT brand, count(*) FROM records WHERE {where} GROUP BY brand", params
            ).fetchall()
            self.db.execute(
                f"SELECT c, count(*) FROM (SELECT unnest(categories) AS c FROM records "
                f"WHERE {where}) GROUP BY c",
                params,
            ).fetchall()
        return (rows[0][1] if rows else 0), [r[0] for r in rows]


class CatalogSearch:
    """``Catalog.search`` itself: the embedded index, its ranking, distinct and display."""

    def __init__(self, lake: str, folder: Path) -> None:
        from catalog_lake.catalog import Catalog
        from catalog_lake.search import SearchIndex

        self.catalog = Catalog(lake)
        self.index = SearchIndex(self.catalog.lake, folder)
        self.followed: float | None = None

    def add(self, records: Any) -> None:
        """Build the index from the lake's records (its first ``follow``)."""
        self.index.follow()

    def replace(self, records: Any) -> None:
        """Push the changed records' items again, changed, and catch up through the feed."""
        numbers = [int(c.removeprefix("SKU-")) for c in records["client_item_id"].to_pylist()]
        batch = [synth.item(n, random.Random(n), version=7, dirty_fraction=0.0) for n in numbers]
        self.catalog.push({"items": batch})
        self.followed = self.index.follow()["seconds"]

    def search(self, text: str, *, filters: bool = False, facets: bool = False) -> tuple[int, list]:
        """The count and the first 20 object ids, as ``Catalog.search`` answers them."""
        found = self.index.search(
            text,
            filters={"on_sale": True, "price": (100, 20_000)} if filters else None,
            facets=["brand", "categories"] if facets else [],
        )
        return found["nb_hits"], [h["object_id"] for h in found["hits"]]


# --- the run --------------------------------------------------------------------------


@app.command()
def search(
    items: Annotated[int, typer.Option(help="Records in the lake.")] = 100_000,
    rounds: Annotated[int, typer.Option(help="Times each query runs per kind.")] = 3,
    record: Annotated[Path | None, typer.Option(help="Append the report to this file.")] = None,
) -> None:
    """Build, catch up and query both engines over the same ``items`` records."""
    from catalog_lake.catalog import Catalog
    from catalog_lake.lake import reads

    rng = random.Random(28)
    with tempfile.TemporaryDirectory(prefix="catalog-lake-search-") as folder:
        lake = synth.lake(folder, items)
        records = reads.select(Catalog(lake).lake, "records", order_by="object_id")
        size = min(1_000, records.num_rows)  # a change of 1,000 records (fewer in a tiny lake)
        changed = records.take(sorted(rng.sample(range(records.num_rows), size)))
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        rows = []
        for name in ("duckdb", "tantivy", "catalog.search"):
            index_folder = Path(folder) / "index"
            shutil.rmtree(index_folder, ignore_errors=True)
            index_folder.mkdir()
            if name == "catalog.search":
                engine: Any = CatalogSearch(lake, index_folder)
            else:
                engine = DuckDB() if name == "duckdb" else Tantivy(index_folder)
            started = time.perf_counter()
            engine.add(records)
            build = time.perf_counter() - started
            started = time.perf_counter()
            engine.replace(changed)
            # catalog.search: the follow after the push, not the push itself
            catch_up = getattr(engine, "followed", None) or time.perf_counter() - started
            latencies: dict[str, list[float]] = {
                "text": [],
                "filters": [],
                "facets": [],
                "long": [],
            }
            hits = 0
            for _ in range(rounds):
                for query in LONG_QUERIES:
                    started = time.perf_counter()
                    engine.search(query)
                    latencies["long"].append(time.perf_counter() - started)
                for query in QUERIES:
                    for kind in ("text", "filters", "facets"):
                        started = time.perf_counter()
                        count, _ids = engine.search(
                            query, filters=kind != "text", facets=kind == "facets"
                        )
                        latencies[kind].append(time.perf_counter() - started)
                        hits += count if kind == "text" else 0
            rows.append((name, build, catch_up, latencies, hits // rounds))
        base = {kind: statistics.median(t) for kind, t in rows[0][3].items()}
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        lines = [
            f"## Embedded search candidates ({when} UTC)",
            "",
            f"{items:,} records; {len(QUERIES)} queries of 1-2 words x {rounds}, and "
            f"{len(LONG_QUERIES)} of 3-4 words x {rounds}; load average {load}",
            "",
            "| engine | build s | catch-up (1,000) s | text p50 / p95 ms | + filters p50 / p95 ms "
            "| + facets p50 / p95 ms | 3-4 words p50 / p95 ms | text hits (1-2 words) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, build, catch_up, latencies, hits in rows:
            cells = [
                f"{statistics.median(t) * 1000:.1f} / {synth.p95(t) * 1000:.1f} "
                f"({statistics.median(t) / base[kind]:.2f}x)"
                for kind, t in latencies.items()
            ]
            lines.append(
                f"| {name}{' (baseline)' if name == 'duckdb' else ''} | {build:.1f} | "
                f"{catch_up:.2f} | {' | '.join(cells)} | {hits:,} |"
            )
        lines.append("")
    emit("\n".join(lines), record)


if __name__ == "__main__":
    app()
