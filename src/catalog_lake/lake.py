"""The only module that talks to deltalake.

One Delta table per folder under the lake URI (``raw``, ``items``,
``records``, ``rejects``, ``pushes``). Reads go through DataFusion's
``QueryBuilder`` or pyarrow datasets rather than ``to_pyarrow_table``, which
can abort the interpreter at exit (delta-rs issue 2184).
"""

from __future__ import annotations

import fcntl
import random
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import CommitProperties, DeltaTable, QueryBuilder
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from . import settings
from .errors import LakeError
from .schemas import PARTITIONS, TABLES

#: Attempts for a merge that loses a commit race before giving up.
MERGE_ATTEMPTS = 5
#: Columns an upsert never changes on a row that already exists.
KEPT_ON_UPDATE = frozenset({"object_id", "id_block", "first_seen_at", "likes", "sales"})
#: The file in a local lake that serializes writers (see ``Lake.writing``).
LOCK_FILE = "_catalog_lake.lock"

_held = threading.local()


def is_local(uri: str) -> bool:
    """Whether a lake URI is a local folder (where the writer lock works)."""
    return "://" not in uri or uri.startswith("file://")


class Lake:
    """A folder (or object-store prefix) of Delta tables with fixed schemas."""

    def __init__(self, uri: str | Path, storage_options: dict[str, str] | None = None) -> None:
        self.uri = str(uri).rstrip("/")
        self.storage_options = storage_options
        self._tables: dict[str, DeltaTable] = {}

    def __repr__(self) -> str:  # never show storage options: they may hold secrets
        return f"Lake({self.uri!r})"

    @contextmanager
    def writing(self):
        """Hold the lake's writer lock: one writer at a time changes ids and rows.

        Delta commits are atomic per table, but a push reads the items table
        (to find ids), then appends and merges: two writers interleaving
        there could give one id to two items or two rows to one item, and an
        append never conflicts in Delta. An exclusive ``flock`` on a file in
        the lake folder serializes writers across processes; the kernel drops
        it when a holder dies, so a killed writer never leaves it stuck.
        Re-entrant within a thread. Object-store lakes have no such file:
        there, run one writer at a time (one deployment, one worker).
        """
        depth = getattr(_held, "depth", {})
        _held.depth = depth
        if not is_local(self.uri) or depth.get(self.uri, 0):
            depth[self.uri] = depth.get(self.uri, 0) + 1
            try:
                yield
            finally:
                depth[self.uri] -= 1
            return
        folder = Path(self.uri.removeprefix("file://"))
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle = open(folder / LOCK_FILE, "a+")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise LakeError(f"cannot lock the lake {self.uri}: {exc}") from exc
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            depth[self.uri] = 1
            try:
                yield
            finally:
                depth[self.uri] = 0
                fcntl.flock(handle, fcntl.LOCK_UN)

    def path(self, name: str) -> str:
        """URI of one table of the lake."""
        return f"{self.uri}/{name}"

    def table(self, name: str) -> DeltaTable | None:
        """The Delta table ``name`` at its latest version, or None before its first commit.

        Opening a table replays its log from the last checkpoint (30-50 ms
        at a million rows, and a push touches a table up to four times), so
        each table is opened once per ``Lake`` and brought up to date with
        ``update_incremental``, which reads only the commits made since
        (5 ms), whoever made them.
        """
        cached = self._tables.get(name)
        if cached is not None:
            try:
                cached.update_incremental()
                return cached
            except (DeltaError, OSError):
                self._tables.pop(name, None)  # replaced or removed: open it afresh
        try:
            table = DeltaTable(self.path(name), storage_options=self.storage_options)
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as exc:
            raise LakeError(f"cannot open table {name!r} in {self.uri}: {exc}") from exc
        self._tables[name] = table
        return table

    def ensure(self) -> None:
        """Create every table that does not exist yet, with its declared schema."""
        if is_local(self.uri):
            Path(self.uri.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        for name, schema in TABLES.items():
            existing = self.table(name)
            if existing is not None:
                _require_compatible(name, existing, schema, self.uri)
                continue
            if existing is None:
                DeltaTable.create(
                    self.path(name),
                    schema,
                    mode="ignore",
                    partition_by=PARTITIONS.get(name),
                    storage_options=self.storage_options,
                    name=name,
                    description=_description(name),
                )

    # --- writes -------------------------------------------------------------

    def append(self, name: str, data: pa.Table, metadata: dict[str, str] | None = None) -> None:
        """Append rows; appends never conflict with each other in Delta."""
        from deltalake import write_deltalake

        if data.num_rows == 0:
            return
        write_deltalake(
            self.table(name) or self.path(name),
            data.cast(TABLES[name]),
            mode="append",
            partition_by=PARTITIONS.get(name),
            storage_options=self.storage_options,
            commit_properties=CommitProperties(custom_metadata=metadata or {}),
        )

    def upsert(
        self,
        name: str,
        data: pa.Table,
        metadata: dict[str, str] | None = None,
        known: Any = None,
    ) -> dict[str, Any]:
        """Insert new ``client_item_id`` rows and replace older versions of known ones.

        ``known`` marks the rows whose id was found in the table just before
        (under the writer lock, so nobody can have added them since): the
        others are appended, which neither scans nor rewrites the table, and
        only the known ones go through a merge. Without ``known`` every row
        is merged. The update only applies when
        the incoming row is at least as new as the stored one (``updated_at``),
        so replaying an old push after a crash never rolls an item back, and
        it leaves ``KEPT_ON_UPDATE`` as stored.
        """
        data = data.cast(TABLES[name])
        if known is not None:
            mask = pa.array(known, pa.bool_())
            self.append(name, data.filter(pc.invert(mask)), metadata)
            data = data.filter(mask)
        if data.num_rows == 0:
            return {}
        # A known row keeps its id, block, first sighting and metrics: the
        # caller need not read them back to write them again.
        updates = {f'"{c}"': f's."{c}"' for c in data.column_names if c not in KEPT_ON_UPDATE}
        return self._merge(
            name,
            data,
            metadata,
            lambda merger: merger.when_matched_update(
                updates, predicate="s.updated_at >= t.updated_at"
            ).when_not_matched_insert_all(),
        )

    def update_matched(
        self,
        name: str,
        data: pa.Table,
        updates: dict[str, str],
        metadata: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Update some columns of the rows whose ``client_item_id`` is in ``data``; never insert."""
        return self._merge(name, data, metadata, lambda m: m.when_matched_update(updates=updates))

    def _merge(self, name: str, data: pa.Table, metadata, clauses) -> dict[str, Any]:
        """Merge on ``client_item_id``, retrying a lost commit race with jittered backoff.

        When the rows carry their partition (``id_block``), the predicate
        names those blocks as literals: delta-rs then reads and rewrites only
        them (5 updated items in a 100k-row table: 170 ms instead of 500 ms,
        and the same at any table size) where a join predicate alone makes it
        scan every file.
        """
        predicate = "t.client_item_id = s.client_item_id"
        partitions = PARTITIONS.get(name, [])
        if partitions == ["id_block"] and "id_block" in data.column_names:
            blocks = sorted(pc.unique(data["id_block"]).to_pylist())
            predicate = f"t.id_block IN ({', '.join(map(str, blocks))}) AND {predicate}"
        for attempt in range(1, MERGE_ATTEMPTS + 1):
            table = self.table(name)
            if table is None:
                raise LakeError(f"table {name!r} does not exist in {self.uri}; push creates it")
            merger = table.merge(
                data,
                predicate=predicate,
                source_alias="s",
                target_alias="t",
                commit_properties=CommitProperties(custom_metadata=metadata or {}),
            )
            try:
                return clauses(merger).execute()
            except CommitFailedError:
                if attempt == MERGE_ATTEMPTS:
                    raise
                time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    def tidy(self, name: str, *, compact: bool, vacuum: bool, retention_hours: int) -> dict:
        """Compact small files and vacuum unreferenced ones older than the retention."""
        table = self.table(name)
        if table is None:
            return {}
        done: dict[str, Any] = {}
        if compact:
            metrics = table.optimize.compact()
            done["files_added"] = metrics.get("numFilesAdded", 0)
            done["files_removed"] = metrics.get("numFilesRemoved", 0)
        if vacuum:
            removed = table.vacuum(
                retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False
            )
            done["files_vacuumed"] = len(removed)
        return done

    # --- reads --------------------------------------------------------------

    def read(self, name: str, sql: str | None = None) -> pa.Table:
        """Rows of a table as Arrow with its declared schema; ``sql`` may filter.

        ``sql`` is a whole SELECT over a table registered under ``name``.
        """
        table = self.table(name)
        if table is None:
            return TABLES[name].empty_table()
        reader = QueryBuilder().register(name, table).execute(sql or f'SELECT * FROM "{name}"')
        result = pa.RecordBatchReader.from_stream(reader).read_all()
        if sql is None:
            return _conform(result, TABLES[name])
        return result

    def select(
        self,
        name: str,
        *,
        columns: list[str] | None = None,
        where: str | None = None,
        order_by: str | None = None,
        limit: int | None = None,
        as_of: int | str | None = None,
    ) -> pa.Table:
        """Read-only SQL over one table, optionally as it was at a version or time.

        ``where`` is a SQL boolean expression placed inside a SELECT that we
        build; DataFusion runs a single statement only, so it cannot become a
        COPY, INSERT or DDL. It still reads whatever the table holds, so
        treat it as read access to the table.
        """
        schema = TABLES[name]
        columns = columns or schema.names
        unknown = [c for c in columns if c not in schema.names]
        if unknown:
            raise LakeError(
                f"unknown column(s) {', '.join(unknown)}; known: {', '.join(schema.names)}"
            )
        if where is not None and ";" in where:
            raise LakeError("--where takes one SQL expression; ';' is not allowed")
        table = self.table(name)
        if table is None:
            return schema.empty_table().select(columns)
        if as_of is not None:
            try:
                table = DeltaTable(self.path(name), storage_options=self.storage_options)
                table.load_as_version(int(as_of) if str(as_of).isdigit() else str(as_of))
            except (DeltaError, ValueError) as exc:
                raise LakeError(f"cannot read {name} as of {as_of!r}: {exc}") from None
        sql = f'SELECT {", ".join(chr(34) + c + chr(34) for c in columns)} FROM "{name}"'
        if where:
            sql += f"\nWHERE (\n{where}\n)"
        if order_by:
            sql += f"\nORDER BY {order_by}"
        if limit is not None:
            sql += f"\nLIMIT {int(limit)}"
        try:
            reader = QueryBuilder().register(name, table).execute(sql)
            result = pa.RecordBatchReader.from_stream(reader).read_all()
        except Exception as exc:  # DataFusion reports SQL errors as plain exceptions
            raise LakeError(f"query on {name} failed: {str(exc).splitlines()[0]}") from None
        return _conform(result, schema, columns)

    def history(self, name: str, limit: int = 20) -> list[dict[str, Any]]:
        """The latest commits of a table: version, time, operation, metrics."""
        table = self.table(name)
        return [] if table is None else table.history(limit)

    def scan(self, name: str, columns: list[str]) -> pa.Table:
        """Some columns of every current row, read straight from the table's files.

        For a local lake, pyarrow reads the Parquet files the Delta log lists
        (``file_uris``): no SQL planning, and none of the exit-time aborts
        that delta-rs's own pyarrow filesystem can cause (issue 2184).
        Partition columns are not in the files, so they cannot be scanned.
        Object stores go through DataFusion.
        """
        table = self.table(name)
        if table is None:
            return TABLES[name].empty_table().select(columns)
        if set(columns) & set(PARTITIONS.get(name, [])):
            raise LakeError(f"partition columns of {name!r} cannot be scanned: {columns}")
        try:
            if is_local(self.uri):
                paths = [u.removeprefix("file://") for u in table.file_uris()]
                if not paths:
                    return TABLES[name].empty_table().select(columns)
                stored = ds.dataset(paths, format="parquet").to_table(columns=columns)
            else:
                selected = ", ".join(f'"{c}"' for c in columns)
                stored = self.read(name, f'SELECT {selected} FROM "{name}"')
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise LakeError(f"cannot read {name!r} in {self.uri}: {exc}") from exc
        return _conform(stored, TABLES[name], columns)

    def lookup(self, name: str, key: str, values: list[str], columns: list[str]) -> pa.Table:
        """Rows whose ``key`` is one of ``values``, as a hash join in Arrow.

        20 ms for 20,000 keys against a 20,000-row table, where an SQL ``IN``
        list of the same keys took 420 ms in DataFusion. No filter is pushed
        into the dataset: random keys prune nothing on min/max statistics,
        and after a merge delta-rs writes string statistics as
        ``string_view``, which pyarrow refuses to filter on.
        """
        if not values:
            return TABLES[name].empty_table().select(columns)
        stored = self.scan(name, columns)
        # Join key and row number only (Arrow's join cannot carry list columns), then take.
        rows = pa.table({key: stored[key], "_row": pa.array(range(stored.num_rows), pa.int64())})
        keys = pa.table({key: pa.array(values, TABLES[name].field(key).type)})
        return stored.take(rows.join(keys, key, join_type="inner")["_row"])

    def has(self, name: str, column: str, value: str) -> bool:
        """Whether any row of ``name`` has ``column`` equal to ``value``."""
        sql = f'SELECT 1 FROM "{name}" WHERE "{column}" = {quote(value)} LIMIT 1'
        return self.read(name, sql).num_rows > 0

    def version(self, name: str) -> int | None:
        """Current Delta version of a table, None before its first commit."""
        table = self.table(name)
        return None if table is None else table.version()


def _description(name: str) -> str | None:
    """The table description, which records the block size for id-block tables.

    Merges find a known item in the block ``object_id // ID_BLOCK_SIZE``; a
    lake written with another block size would be searched in the wrong
    partitions and get duplicates, so the size is kept with the table
    (Delta refuses unknown configuration keys; the description is free text).
    """
    if PARTITIONS.get(name) != ["id_block"]:
        return None
    return f"catalog-lake {name}: id_block = object_id // {settings.ID_BLOCK_SIZE}"


def _require_compatible(name: str, table: DeltaTable, schema: pa.Schema, uri: str) -> None:
    """Refuse a table written with another layout rather than fail mid-push."""
    stored = set(pa.schema(table.schema().to_arrow()).names)
    missing = [f.name for f in schema if f.name not in stored]
    metadata = table.metadata()
    partitions = metadata.partition_columns
    if missing or list(partitions) != PARTITIONS.get(name, []):
        raise LakeError(
            f"table {name!r} in {uri} has an older layout (missing {', '.join(missing) or 'none'}; "
            f"partitioned by {list(partitions)}) that this version cannot write; use a new lake "
            "(--lake or CATALOG_LAKE_URI) and re-ingest the feeds, or push the old raw "
            "table's item_json into it"
        )
    if _description(name) is not None and metadata.description != _description(name):
        raise LakeError(
            f"table {name!r} in {uri} was written with another id_block size "
            f"({metadata.description!r}; this version uses object_id // "
            f"{settings.ID_BLOCK_SIZE}); use a new lake (--lake or CATALOG_LAKE_URI) and "
            "re-ingest the feeds, or push the old raw table's item_json into it"
        )


def quote(value: str) -> str:
    """A SQL string literal; values come from validated items or request ids."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_timestamp(value: datetime) -> str:
    """A SQL timestamp literal in UTC (a naive datetime is taken as UTC)."""
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return f"TIMESTAMP '{stamp.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z'"


def _conform(result: pa.Table, schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    # DataFusion may hand back string views or large types; give callers the
    # declared schema so pandas sees the same dtypes whatever engine read it.
    fields = [schema.field(c) for c in columns] if columns else list(schema)
    arrays = [result[f.name].cast(f.type) for f in fields]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
