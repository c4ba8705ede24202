"""The explicit Arrow schema of every Delta table, and how each table is written.

Nothing is inferred from a frame: every write casts to these schemas, with
plain strings (never ``string_view``). The items table's columns follow the
rule table (``rules.RULES``): each field's column with its rule's Arrow type.
"""

from __future__ import annotations

import pyarrow as pa_

from .rules import ARROW, ATTRIBUTE_KEYS, RULES

ATTRIBUTE_MAP = pa_.map_(pa_.string(), pa_.string())

TS = pa_.timestamp("us", tz="UTC")
MONEY = pa_.decimal128(12, 2)
STR_LIST = pa_.list_(pa_.string())
#: The seller an item belongs to (``sellers``): null on rows written before sellers, which
#: are the default seller's.
SELLER = pa_.field("seller", pa_.string())


def _items_schema() -> pa_.Schema:
    fields = [
        pa_.field("object_id", pa_.int64(), nullable=False),
        pa_.field("id_block", pa_.int64(), nullable=False),
        pa_.field("client_item_id", pa_.string(), nullable=False),
    ]
    for rule in RULES:
        if rule.column == "client_item_id":
            continue
        if rule.column in ATTRIBUTE_KEYS:
            if rule.column == next(iter(ATTRIBUTE_KEYS)):
                fields.append(pa_.field("attributes", ATTRIBUTE_MAP))
            continue
        fields.append(pa_.field(rule.column, ARROW[rule.rule]))
        if rule.rule == "duration":
            fields.append(pa_.field(f"{rule.column}_seconds", pa_.int64()))
    fields += [
        pa_.field("extra_attributes", pa_.string()),
        pa_.field("extra_fields", pa_.string()),
        pa_.field("likes", pa_.int64()),
        pa_.field("sales", pa_.int64()),
        pa_.field("first_seen_at", TS, nullable=False),
        pa_.field("updated_at", TS, nullable=False),
        pa_.field("request_id", pa_.string(), nullable=False),
        # A tombstone (issue 27): when the item was deleted, and by which request. The row
        # stays, so its service id stays reserved; a later push of the id clears both.
        pa_.field("deleted_at", TS),
        pa_.field("deleted_by", pa_.string()),
        SELLER,
    ]
    return pa_.schema(fields)


ITEMS = _items_schema()

RECORDS = pa_.schema(
    [
        # The service id as in items (int64), so the two join and compare without a cast;
        # the push response and search-engine exports give it as numeric text.
        pa_.field("object_id", pa_.int64(), nullable=False),
        pa_.field("client_item_id", pa_.string(), nullable=False),
        pa_.field("product_name", pa_.string()),
        pa_.field("description", pa_.string()),
        pa_.field("categories", STR_LIST),
        pa_.field("price", pa_.float64()),
        pa_.field("mrp", pa_.float64()),
        pa_.field("on_sale", pa_.bool_()),
        pa_.field("discount_pct", pa_.float64()),
        pa_.field("image", pa_.string()),
        pa_.field("inventory", pa_.int64()),
        pa_.field("in_stock", pa_.bool_()),
        pa_.field("likes", pa_.int64()),
        pa_.field("sales", pa_.int64()),
        pa_.field("tags", STR_LIST),
        pa_.field("synonyms", STR_LIST),
        pa_.field("brand", pa_.string()),
        pa_.field("colour", pa_.string()),
        pa_.field("size", pa_.string()),
        pa_.field("gender", pa_.string()),
        pa_.field("lake_category", pa_.string()),
        pa_.field("variant_group_id", pa_.string()),
        pa_.field("variant", pa_.string()),
        # When the record's content last changed: an unchanged re-push leaves it (issue 27).
        pa_.field("updated_at", TS, nullable=False),
        pa_.field("id_block", pa_.int64(), nullable=False),  # object_id // ID_BLOCK_SIZE
        # When the push that last sent the item was received: the replay guard
        # (``blocks.GUARD``). Null on rows written before it existed (their
        # ``updated_at`` was that time).
        pa_.field("received_at", TS),
        SELLER,
    ]
)

RAW = pa_.schema(
    [
        pa_.field("request_id", pa_.string(), nullable=False),
        pa_.field("index", pa_.int32(), nullable=False),
        pa_.field("received_at", TS, nullable=False),
        pa_.field("client_item_id", pa_.string()),
        pa_.field("passed", pa_.bool_(), nullable=False),
        pa_.field("item_json", pa_.string(), nullable=False),
        pa_.field("received_date", pa_.date32(), nullable=False),
        # The push's identity, so that `repair` finishes an interrupted push as
        # the push it was (its key, source and flow run), not as a new one.
        pa_.field("source", pa_.string()),
        pa_.field("flow_run_id", pa_.string()),
        pa_.field("idempotency_key", pa_.string()),
        # True: a strict push, whose warnings refused items. Null on rows written
        # before warnings existed, which were all judged so (``push.strict_of``).
        pa_.field("strict", pa_.bool_()),
        # What the request was: null for a push (every row before issue 27), "delete"
        # for a delete request, whose item_json is {"client_item_id": ...}.
        pa_.field("operation", pa_.string()),
        SELLER,
    ]
)

ERROR = pa_.struct(
    [
        pa_.field("field", pa_.string()),
        pa_.field("code", pa_.string()),
        pa_.field("message", pa_.string()),
        pa_.field("value", pa_.string()),  # the offending value as JSON text
    ]
)

REJECTS = pa_.schema(
    [
        pa_.field("request_id", pa_.string(), nullable=False),
        pa_.field("index", pa_.int32(), nullable=False),
        pa_.field("client_item_id", pa_.string()),
        pa_.field("codes", STR_LIST),
        pa_.field("errors", pa_.list_(ERROR)),
        pa_.field("rejected_at", TS, nullable=False),
        SELLER,
    ]
)

WARNING = pa_.struct(
    [
        pa_.field("field", pa_.string()),
        pa_.field("code", pa_.string()),
        pa_.field("message", pa_.string()),
        pa_.field("value", pa_.string()),  # the value as sent, as JSON text
        pa_.field("action", pa_.string()),  # dropped | repaired
        pa_.field("repaired_to", pa_.string()),  # the value stored, when repaired
    ]
)

WARNINGS = pa_.schema(
    [
        pa_.field("request_id", pa_.string(), nullable=False),
        pa_.field("index", pa_.int32(), nullable=False),
        pa_.field("client_item_id", pa_.string()),
        pa_.field("codes", STR_LIST),
        pa_.field("warnings", pa_.list_(WARNING)),
        pa_.field("warned_at", TS, nullable=False),
        SELLER,
    ]
)

PUSHES = pa_.schema(
    [
        pa_.field("request_id", pa_.string(), nullable=False),
        pa_.field("received_at", TS, nullable=False),
        pa_.field("finished_at", TS, nullable=False),
        pa_.field("duration_ms", pa_.float64()),
        pa_.field("received", pa_.int64(), nullable=False),
        pa_.field("success", pa_.int64(), nullable=False),
        pa_.field("failed", pa_.int64(), nullable=False),
        pa_.field("source", pa_.string()),
        pa_.field("flow_run_id", pa_.string()),
        pa_.field("idempotency_key", pa_.string()),
        pa_.field("payload_sha256", pa_.string()),
        pa_.field("response_json", pa_.string(), nullable=False),
        pa_.field("operation", pa_.string()),  # null: a push; "delete": a delete request
        SELLER,
    ]
)

FILES = pa_.schema(
    [
        pa_.field("source", pa_.string(), nullable=False),
        pa_.field("path", pa_.string(), nullable=False),
        pa_.field("checksum", pa_.string(), nullable=False),
        pa_.field("size", pa_.int64(), nullable=False),
        pa_.field("status", pa_.string(), nullable=False),  # ingested | invalid | error | removed
        pa_.field("error", pa_.string()),
        pa_.field("items", pa_.int64()),
        pa_.field("request_ids", STR_LIST),
        pa_.field("run_id", pa_.string(), nullable=False),
        pa_.field("flow_run_id", pa_.string()),
        pa_.field("seen_at", TS, nullable=False),
        SELLER,
    ]
)

RUNS = pa_.schema(
    [
        pa_.field("run_id", pa_.string(), nullable=False),
        pa_.field("kind", pa_.string(), nullable=False),  # ingest | backfill | metrics | maintain
        pa_.field("started_at", TS, nullable=False),
        pa_.field("finished_at", TS, nullable=False),
        pa_.field("flow_run_id", pa_.string()),
        pa_.field("summary_json", pa_.string(), nullable=False),
    ]
)

#: Where each ``sync`` target stands: the records version its last export reached.
#: Append-only; a target's latest row is its cursor.
CURSORS = pa_.schema(
    [
        pa_.field("target", pa_.string(), nullable=False),
        pa_.field("format", pa_.string(), nullable=False),
        pa_.field("version", pa_.int64(), nullable=False),
        pa_.field("synced_at", TS, nullable=False),
        pa_.field("file", pa_.string()),
        pa_.field("upserts", pa_.int64()),
        pa_.field("deletes", pa_.int64()),
    ]
)

#: The service's keys (``access``): only a key's SHA-256 is kept, never the key. Append-only;
#: a key's rows are its creation and, once revoked, its revocation.
ACCESS_KEYS = pa_.schema(
    [
        pa_.field("key_id", pa_.string(), nullable=False),
        pa_.field("seller", pa_.string(), nullable=False),
        pa_.field("actions", STR_LIST, nullable=False),
        pa_.field("key_sha256", pa_.string(), nullable=False),
        pa_.field("created_at", TS, nullable=False),
        pa_.field("expires_at", TS),
        pa_.field("revoked_at", TS),
        pa_.field("note", pa_.string()),
    ]
)

TABLES: dict[str, pa_.Schema] = {
    "raw": RAW,
    "items": ITEMS,
    "records": RECORDS,
    "rejects": REJECTS,
    "warnings": WARNINGS,
    "pushes": PUSHES,
    "files": FILES,
    "runs": RUNS,
    "cursors": CURSORS,
    "access_keys": ACCESS_KEYS,
}
#: Partition columns per table. raw grows forever, so it is split by day;
#: items and records by blocks of service ids, so that an update rewrites
#: the few blocks it touches and new items (new, consecutive ids) land in
#: the newest block.
PARTITIONS: dict[str, list[str]] = {
    "raw": ["received_date"],
    "items": ["id_block"],
    "records": ["id_block"],
}

#: Columns whose min/max statistics Delta keeps, for tables too wide for the
#: default (the first 32 columns). Every commit carries the statistics of
#: every file it adds, and delta-rs re-reads the table's statistics after
#: each commit: a 10-row append into the items table of a million-item lake
#: (500 files) took 35 ms with the default and 20 ms with these four.
#: Readers filter items by id, key, category or time; records (25 columns)
#: keeps them all.
STATS_COLUMNS: dict[str, list[str]] = {
    "items": ["object_id", "client_item_id", "lake_category", "updated_at"],
    # Not item_json: the statistics of a text column copy its smallest and
    # largest values, so one 200 MB item was stored twice (issue 16).
    "raw": ["request_id", "index", "received_at", "client_item_id", "passed", "received_date"],
}

#: Nullable columns added to a table after its first release: ``Lake.ensure``
#: adds them to an existing table instead of refusing it.
ADDED_COLUMNS: dict[str, list[str]] = {
    "raw": ["source", "flow_run_id", "idempotency_key", "strict", "operation", "seller"],
    "items": ["deleted_at", "deleted_by", "seller"],
    "records": ["received_at", "seller"],
    "pushes": ["operation", "seller"],
    "rejects": ["seller"],
    "warnings": ["seller"],
    "files": ["seller"],
}
#: Columns whose type changed after a release, with the type earlier lakes hold:
#: ``Lake.ensure`` rewrites such a table once, cast to today's schema (records
#: are derived data, so nothing else about them changes).
RETYPED_COLUMNS: dict[str, dict[str, pa_.DataType]] = {
    "records": {"object_id": pa_.string()},
}

#: Columns whose values are (nearly) all distinct: ids, names, free text,
#: prices, raw item text. Parquet's dictionary encoding only costs time there
#: (it fills its dictionary page, then falls back to plain anyway), so these
#: are written plain; every other column keeps its dictionary, and the
#: items table keeps Parquet statistics only for ``STATS_COLUMNS``. A push's
#: 6-block rewrite of items took 52 ms as written before and 45 ms so, and
#: reading the blocks back 33 ms and 26 ms; files were the same size.
PLAIN_COLUMNS: dict[str, list[str]] = {
    "items": [
        "object_id",
        "client_item_id",
        "name",
        "description",
        "short_description",
        "variant_group_id",
        "mrp",
        "sale_price",
    ],
    "records": [
        "object_id",
        "client_item_id",
        "product_name",
        "description",
        "image",
        "price",
        "mrp",
    ],
    "raw": ["client_item_id", "item_json"],
}

#: Parquet compression of each table (codec, level); Snappy, as delta-rs writes without
#: properties, unless named here. The raw table keeps every item's text as sent and is
#: read only to replay: zstd at level 1 wrote a group of 20,000 items in 34 ms against
#: Snappy's 42, in half the bytes (2.4 MB against 4.9), and read it back in 16 ms against
#: 19 (``python -m bench``; bench/results.md). Every Parquet reader of a Delta table reads zstd.
COMPRESSION: dict[str, tuple[str, int | None]] = {"raw": ("ZSTD", 1)}
