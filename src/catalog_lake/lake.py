"""The only module that talks to deltalake: the tables, their commits, their upkeep.

One Delta table per folder under the lake URI (``schemas.TABLES``). Writes
are appends, fenced commits (``FENCES``) and rewrites of whole id blocks
(``blocks`` folds the rows); ``reads`` adds filtered and time-travel reads
and scans of a local table's files. Reads go through DataFusion's
``QueryBuilder`` or pyarrow datasets rather than ``to_pyarrow_table``, which
can abort the interpreter at exit (delta-rs issue 2184). One class: its write
paths share one commit protocol (``_committed``, ``_check_fence``, ``races``),
files written by workers included (``commit_files``). What is not Delta is
elsewhere: stored layouts (``layout``), upserts' decisions (``upserts``).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import (
    ColumnProperties,
    CommitProperties,
    DeltaTable,
    Field,
    QueryBuilder,
    Transaction,
    WriterProperties,
)
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import AddAction, RemoveAction
from pyarrow.fs import LocalFileSystem, PyFileSystem

from . import layout
from .blocks import blocks_dataset, blocks_predicate, partition_files, upserted, with_columns
from .commitlog import Since, block_of, read_since
from .datafiles import DataFile, Staged, now_ms, parquet_layout
from .errors import FenceMoved, LakeError, NoLakeError, first_line
from .literals import quote
from .schemas import (
    ADDED_COLUMNS,
    PARTITIONS,
    TABLES,
)
from .upserts import Upserts, races

#: The app transaction that fences each fenced table's commits (docs/design.md, "Writers"):
#: ``items`` because its commits allocate service ids, ``records`` because a new item's
#: record is appended without reading its block, ``pushes`` because its commits claim
#: request ids and idempotency keys.
FENCES = {
    "items": "catalog-lake:items",
    "records": "catalog-lake:records",
    "pushes": "catalog-lake:pushes",
}
#: The items table's app transaction that counts the service ids handed out (``reserve_ids``).
IDS = "catalog-lake:ids"
#: Commits a ``DeltaTable`` object may see before ``Lake.table`` opens it afresh.
REOPEN_AFTER_COMMITS = 50

_log = logging.getLogger(__name__)


def is_local(uri: str) -> bool:
    """Whether a lake URI is a local folder (not an object store)."""
    return "://" not in uri or uri.startswith("file://")


#: What the store itself raises on a failed read or write: deltalake's errors, the file system's.
STORE_ERRORS = (DeltaError, OSError)
#: What a failed lake read or write raises: the store's errors and ours. Callers catch
#: these without importing deltalake, which only this module does.
LAKE_ERRORS = (*STORE_ERRORS, LakeError)


class Lake(Upserts):
    """A folder (or object-store prefix) of Delta tables with fixed schemas."""

    def __init__(self, uri: str | Path, storage_options: dict[str, str] | None = None) -> None:
        if not str(uri).strip():
            raise LakeError("the lake path is empty; name a lake folder or an s3:// URI")
        self.uri = str(uri).rstrip("/") or "/"
        if is_local(self.uri) and Path(self.uri.removeprefix("file://")).is_file():
            raise NoLakeError(f"{self.uri} is a file, not a lake folder")
        self.storage_options = storage_options
        self._tables: dict[str, DeltaTable] = {}
        #: The version of each table this object last checkpointed (see ``checkpoint``).
        self._checkpointed: dict[str, int] = {}
        #: The version each table object was opened at (see ``table``).
        self._opened: dict[str, int] = {}
        #: Whether ``ensure`` ran through this object (and no write failed since).
        self._ensured = False

    def __repr__(self) -> str:  # never show storage options: they may hold secrets
        return f"Lake({self.uri!r})"

    def exists(self) -> bool:
        """Whether a lake was created here (its ``pushes`` table exists)."""
        if is_local(self.uri) and not Path(self.uri.removeprefix("file://")).is_dir():
            return False
        return self.table("pushes") is not None

    def require(self) -> None:
        """Refuse, in one line, to read or repair a lake that does not exist; create nothing.

        Raises:
            NoLakeError: nothing, a file, or a folder without a lake at ``uri``.
        """
        if self.exists():
            return
        folder = Path(self.uri.removeprefix("file://")) if is_local(self.uri) else None
        if folder is not None and folder.exists() and not folder.is_dir():
            raise NoLakeError(f"{self.uri} is a file, not a lake folder")
        where = "folder holds no catalog-lake tables" if folder and folder.is_dir() else None
        raise NoLakeError(
            f"no lake at {self.uri}"
            + (f" (the {where})" if where else "")
            + "; push or ingest a feed to create one, or point --lake at an existing lake"
        )

    def path(self, name: str) -> str:
        """URI of one table of the lake."""
        return f"{self.uri}/{name}"

    def is_latest(self, name: str, version: int | None) -> bool:
        """Whether ``version`` is known, without reading the log, to be table ``name``'s latest.

        Delta numbers commits without gaps: in a folder, two file checks (a log
        read is 1 ms at a million records, of a search's 10). False on a store.
        """
        if version is None or not is_local(self.uri):
            return False
        log = Path(self.path(name).removeprefix("file://")) / "_delta_log"
        return (log / f"{version:020d}.json").exists() and not (
            log / f"{version + 1:020d}.json"
        ).exists()

    def table(self, name: str) -> DeltaTable | None:
        """The Delta table ``name`` at its latest version, or None before its first commit.

        Opened once per ``Lake`` (30-50 ms at a million rows) and brought up to
        date with ``update_incremental`` (5 ms, the commits since). An object's
        commits slow with every commit it has seen (a one-row append: 13 ms
        fresh, 46 ms 250 later), so after ``REOPEN_AFTER_COMMITS`` it is
        checkpointed and opened afresh (300 appends: 31 ms on average, then 17).
        """
        cached = self._tables.get(name)
        if cached is not None and cached.version() - self._opened[name] >= REOPEN_AFTER_COMMITS:
            try:  # two writers checkpointing one version write the same file
                cached.create_checkpoint()
            except (DeltaError, OSError) as exc:  # only slower to open: more log to replay
                _log.debug("no checkpoint of %r before reopening it: %s", name, exc)
            del self._tables[name]
            cached = None
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
        self._opened[name] = table.version()
        return table

    def fence(self, name: str) -> tuple[int | None, int]:
        """A fenced table's version and fence number, read together from its latest snapshot.

        What a writer derives after this (ids, a key check) is committed with
        ``fence=`` this number, and fails with ``FenceMoved`` if anyone else
        committed in between.
        """
        table = self.table(name)
        if table is None:
            return None, 0
        return table.version(), table.transaction_version(FENCES[name]) or 0

    def ensure(self, *, again: bool = True) -> None:
        """Create every table that does not exist yet, with its declared schema.

        ``again=False`` trusts an earlier call through this object (a push's
        hot path), until ``unsure`` says a write failed: the lake may be gone.
        """
        if self._ensured and not again:
            return
        if is_local(self.uri):
            folder = Path(self.uri.removeprefix("file://"))
            folder.mkdir(parents=True, exist_ok=True)
            layout.require_writable(folder)
        tables = {name: self.table(name) for name in TABLES}
        for name, existing in tables.items():  # every table checked before any is changed
            if existing is not None:
                layout.require_not_newer(
                    name, layout.stored_schema(existing), TABLES[name], self.uri
                )
        for name, schema in TABLES.items():
            existing = tables[name]
            if existing is not None:
                self._add_new_columns(name, existing, schema)
                self._retype(name, existing, schema)
                metadata = existing.metadata()
                layout.require_compatible(name, layout.stored_schema(existing), schema,
                                          list(metadata.partition_columns),
                                          metadata.description, self.uri)  # fmt: skip
                continue
            if existing is None:
                self._create(name, schema)
        self._ensured = True

    def _create(self, name: str, schema: pa.Schema) -> None:
        """Create one table, as race-proof as every other commit (issue 26).

        Two first writers of a new lake both find no table; the one whose
        version 0 lands second gets ``CommitFailedError`` ("Protocol changed
        since last commit", 1 push in 40 into fresh S3 lakes). It then finds
        the winner's table and goes on (``races``), as a fenced writer does.
        """
        for attempt in races(CommitFailedError):
            with attempt:
                if self.table(name) is not None:
                    return
                try:
                    DeltaTable.create(
                        self.path(name),
                        schema,
                        mode="ignore",
                        partition_by=PARTITIONS.get(name),
                        storage_options=self.storage_options,
                        name=name,
                        description=layout.description(name),
                        configuration=layout.configuration(name),
                    )
                except CommitFailedError:
                    self._tables.pop(name, None)
                    raise

    def unsure(self) -> None:
        """Forget that ``ensure`` ran: a write failed, and the next one checks the tables."""
        self._ensured = False

    def _add_new_columns(self, name: str, table: DeltaTable, schema: pa.Schema) -> None:
        """Add the columns a newer version declares (``ADDED_COLUMNS``) to an older table."""
        stored = set(layout.stored_schema(table).names)
        missing = [c for c in ADDED_COLUMNS.get(name, ()) if c not in stored]
        if not missing:
            return
        try:
            table.alter.add_columns([Field.from_arrow(schema.field(c)) for c in missing])
        except (DeltaError, OSError) as exc:
            raise LakeError(f"cannot add columns {missing} to table {name!r}: {exc}") from exc

    def _retype(self, name: str, table: DeltaTable, schema: pa.Schema) -> None:
        """Rewrite a table whose columns an earlier version typed otherwise (``RETYPED_COLUMNS``).

        Once per lake, in one commit fenced like every other write of the table:
        a writer that loses the race reads the winner's table, finds it
        upgraded, and goes on. Earlier versions stay readable with ``--as-of``
        (reads cast them to today's schema).
        """
        from deltalake import write_deltalake

        def stale(current: DeltaTable) -> list[str]:
            return layout.retyped(name, layout.stored_schema(current), schema)

        if not stale(table):
            return
        for attempt in races():
            with attempt:
                current = self.table(name)
                if current is None or not stale(current):
                    return
                fence = current.transaction_version(FENCES[name]) or 0 if name in FENCES else None
                rows = self._read_blocks(name, current, "id_block >= 0")
                try:
                    write_deltalake(
                        current,
                        rows,
                        mode="overwrite",
                        schema_mode="overwrite",
                        partition_by=PARTITIONS.get(name),
                        storage_options=self.storage_options,
                        writer_properties=_writer_properties(name),
                        commit_properties=_commit_properties(
                            name, {"catalog_lake.upgrade": f"retyped {stale(current)}"}, fence
                        ),
                    )
                except CommitFailedError as exc:
                    self._tables.pop(name, None)
                    raise FenceMoved(f"another writer changed {name!r}: {first_line(exc)}") from exc
                _log.info("upgraded %r in %s: %s retyped", name, self.uri, stale(current))

    # --- writes -------------------------------------------------------------

    def append(
        self,
        name: str,
        data: pa.Table,
        metadata: dict[str, str] | None = None,
        fence: int | None = None,
    ) -> None:
        """Append rows; with ``fence``, only if no other writer committed since it was read.

        Appends never conflict with each other in Delta (delta-rs retries
        them itself), so an unfenced append always lands.

        Raises:
            FenceMoved: ``fence`` was given and another writer got there first.
        """
        from deltalake import write_deltalake

        if data.num_rows == 0:
            return
        data = data.cast(TABLES[name])

        def write() -> None:
            table = self.table(name)
            self._check_fence(name, table, fence)
            write_deltalake(
                table or self.path(name),
                data,
                mode="append",
                partition_by=PARTITIONS.get(name),
                storage_options=self.storage_options,
                writer_properties=_writer_properties(name),
                commit_properties=_commit_properties(name, metadata, fence),
            )

        self._committed(name, write, fence)

    def _check_fence(self, name: str, table: DeltaTable | None, fence: int | None) -> None:
        """Refuse to commit from a stale read: ``transaction_version`` is ours to check."""
        if fence is None:
            return
        now = (table.transaction_version(FENCES[name]) or 0) if table is not None else 0
        if now != fence:
            raise FenceMoved(
                f"another writer committed to {name!r} since it was read "
                f"(fence {now}, read at {fence})"
            )

    def _committed(self, name: str, write, fence: int | None) -> Any:
        """Run ``write``: fenced, once; unfenced, until it wins a race (``races``)."""
        if fence is not None:
            try:
                return write()
            except CommitFailedError as exc:
                self._tables.pop(name, None)  # read the winner's commit afresh
                raise FenceMoved(
                    f"another writer committed to {name!r} at the same time: {first_line(exc)}"
                ) from exc
        for attempt in races(CommitFailedError):
            with attempt:
                return write()  # inside the attempt: a lost race never gets here
        raise AssertionError("unreachable: the last lost race is raised")

    def fold_blocks(
        self, name: str, blocks: Any, change, metadata: dict[str, str] | None = None
    ) -> Any:
        """Rewrite the id ``blocks`` with ``change(stored rows)``'s rows, fenced, until it lands.

        ``change`` returns the blocks' new rows and a result to hand back;
        it runs again on the winner's rows after a lost race. A fenced
        table's fence moves, so a writer that derived rows from a read
        before this commit derives them again (a delete's tombstones and
        removed records, issue 27).
        """
        predicate = blocks_predicate(blocks)
        for attempt in races():
            with attempt:
                _, current = self.fence(name) if name in FENCES else (None, None)
                return self._overwrite_blocks(
                    name,
                    predicate,
                    lambda table: change(self._read_blocks(name, table, predicate)),
                    metadata,
                    current,
                )
        raise AssertionError("unreachable: the last lost race is raised")

    def _rewrite_blocks(
        self, name: str, data: pa.Table, metadata, fence: int | None = None
    ) -> dict[str, Any]:
        """Read the id blocks ``data`` touches, fold it in with Arrow, and write them back.

        A Delta merge of 5 rows into a million-row table took 170-300 ms (DataFusion
        planning a join); overwriting just the touched blocks (at most
        ``ID_BLOCK_SIZE`` rows each, one commit) costs what the push is worth, and
        keeps a block that small pushes touch one file. A lost commit race re-reads
        the blocks and tries again, unless fenced (docs/design.md, "Table layout").
        """
        predicate = blocks_predicate(data["id_block"])

        def fold(table: DeltaTable) -> tuple[pa.Table, dict[str, int]]:
            return upserted(self._read_blocks(name, table, predicate), data, name)

        return self._overwrite_blocks(name, predicate, fold, metadata, fence)

    def _overwrite_blocks(
        self, name: str, predicate: str, change, metadata, fence: int | None = None
    ) -> Any:
        """Overwrite the id blocks ``predicate`` names with ``change(table)``'s rows, in one commit.

        ``change`` returns the blocks' new rows and a result to hand back.
        Unfenced, a lost commit race (another writer changed the table)
        reads the blocks again and retries (``races``); fenced, it
        raises ``FenceMoved`` for the caller to derive its rows again.
        """
        from deltalake import write_deltalake

        def write() -> Any:
            table = self.table(name)
            if table is None:
                raise LakeError(f"table {name!r} does not exist in {self.uri}; push creates it")
            self._check_fence(name, table, fence)
            rows, result = change(table)
            write_deltalake(
                table,
                rows,
                mode="overwrite",
                predicate=predicate,
                partition_by=PARTITIONS[name],
                storage_options=self.storage_options,
                writer_properties=_writer_properties(name),
                commit_properties=_commit_properties(name, metadata, fence),
            )
            return result

        return self._committed(name, write, fence)

    def filesystem(self, name: str) -> tuple[Any, str]:
        """A pyarrow filesystem holding table ``name`` (the lake's own store), and its folder."""
        if is_local(self.uri):
            return LocalFileSystem(), self.path(name).removeprefix("file://")
        return PyFileSystem(DeltaStorageHandler(self.path(name), self.storage_options)), ""

    def commit_files(
        self, name: str, staged: Staged, metadata, fence: int | None = None, claim=None
    ) -> bool:
        """Commit data files written elsewhere (``datafiles``, on a worker); False if none.

        A rewrite commits only on the version its files were read at (else ``FenceMoved``);
        ``claim`` (the id counter read, the last id used) moves the counter in the same commit.
        """
        if not staged.adds and not staged.removes and claim is None:
            return False

        def write() -> None:
            table = self.table(name)
            if table is None:
                raise LakeError(f"table {name!r} does not exist in {self.uri}; push creates it")
            self._check_fence(name, table, fence)
            if staged.removes and table.version() != staged.read_version:
                raise FenceMoved(f"{name!r} changed since its blocks were read")
            if claim is not None and (table.transaction_version(IDS) or 0) != claim[0]:
                raise FenceMoved("another writer took new ids since ours were counted")
            now = now_ms()
            actions: list[Any] = [
                AddAction(f.path, f.size, f.partition_values, now, True, f.stats)
                for f in staged.adds
            ] + [RemoveAction(f.path, True, now, None, f.partition_values) for f in staged.removes]
            table.create_write_transaction(
                actions, "append", table.schema(), PARTITIONS.get(name),
                commit_properties=_commit_properties(name, metadata, fence, claim),
            )  # fmt: skip
            table.update_incremental()  # the object stays at its version otherwise

        self._committed(name, write, fence)
        return True

    def blocks_at(self, name: str, blocks: Any, version: int) -> tuple[pa.Table, list[DataFile]]:
        """The rows of some id blocks at ``version``, and the files that hold them."""
        table = self.snapshot(name, version, self.table(name))
        predicate = blocks_predicate(blocks)
        base = table.table_uri.removeprefix("file://").rstrip("/") + "/"
        paths = [u.removeprefix("file://").removeprefix(base) for u in table.file_uris(predicate)]
        if any("://" in p or p.startswith("/") for p in paths):  # a log's own spelling: ask it
            wanted = set(pa.array(blocks).to_pylist())
            paths = [p for p, b in partition_files(table, "id_block").items() if b in wanted]
        held = [DataFile(p, 0, {"id_block": str(block_of(p, {}))}, "", 0) for p in paths]
        return self._read_blocks(name, table, predicate), held

    def since(self, name: str, version: int) -> Since:
        """What was committed to table ``name`` after ``version`` (``commitlog``)."""
        return read_since(*self.filesystem(name), version)

    def id_counter(self) -> int:
        """The last service id handed out, as the items table's counter ``IDS`` holds it.

        As this object last read the table: a commit that moves the counter checks it.
        """
        table = self._tables.get("items") or self.table("items")
        return (table.transaction_version(IDS) or 0) if table is not None else 0

    def read_blocks(self, name: str, blocks: Any, columns: list[str] | None = None) -> pa.Table:
        """The rows of some id blocks (or their ``columns``), as the table holds them now."""
        table = self.table(name)
        if table is None or len(blocks) == 0:
            return TABLES[name].empty_table().select(columns or TABLES[name].names)
        return self._read_blocks(name, table, blocks_predicate(blocks), columns)

    def _read_blocks(
        self, name: str, table: DeltaTable, predicate: str, columns: list[str] | None = None
    ) -> pa.Table:
        """Every row stored in the given id blocks, with the table's schema (or ``columns``)."""
        schema = TABLES[name]
        try:
            if is_local(self.uri):
                listed = table.file_uris(file_pruning_predicate=predicate)
                paths = [u.removeprefix("file://") for u in listed]
                if not paths:
                    return schema.empty_table().select(columns or schema.names)
                root = table.table_uri.removeprefix("file://").rstrip("/")
                dataset = blocks_dataset(paths, root, layout.added_fields(name))
                found = dataset.to_table(columns=columns)
            else:  # this snapshot, not a refreshed one: a fenced commit was checked at it
                reader = QueryBuilder().register(name, table)
                selected = ", ".join(f'"{c}"' for c in columns) if columns else "*"
                found = pa.RecordBatchReader.from_stream(
                    reader.execute(f'SELECT {selected} FROM "{name}" WHERE {predicate}')
                ).read_all()
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise LakeError(f"cannot read {name!r} in {self.uri}: {exc}") from exc
        return layout.conform(found, schema, columns)

    def update_matched(
        self,
        name: str,
        data: pa.Table,
        columns: list[str],
        metadata: dict[str, str] | None = None,
    ) -> int:
        """Set ``columns`` of the rows whose ``client_item_id`` is in ``data``; never insert.

        A null in ``data`` keeps the stored value. The rows' blocks are read,
        changed in Arrow and written back with the table's declared schema
        (``_rewrite_blocks``): a Delta merge wrote ``string_view`` columns,
        which pyarrow's own readers could not filter until ``maintain``
        compacted them (delta-rs 4579). Returns the rows changed.
        """
        predicate = blocks_predicate(data["id_block"])

        def change(table: DeltaTable) -> tuple[pa.Table, int]:
            return with_columns(self._read_blocks(name, table, predicate), data, columns)

        return self._overwrite_blocks(name, predicate, change, metadata)

    def checkpoint(self, names: Any = None) -> list[str]:
        """Write a Delta checkpoint of every table with commits since its last one.

        Each commit, and each reader opening a table, replays the log from
        the last checkpoint, and delta-rs writes one only every 100 commits.
        After a bulk load those commits are large (thousands of file
        actions with statistics): a 10-item push into a freshly loaded
        million-item lake measured 393 ms at p50 without a checkpoint and
        345 ms with one. A checkpoint costs 30-50 ms per table.
        """
        done = []
        for name in names or TABLES:
            table = self.table(name)
            if table is None:
                continue
            if self._checkpointed.get(name) == table.version():
                continue
            try:
                table.create_checkpoint()
                self._checkpointed[name] = table.version()
            except (DeltaError, OSError) as exc:
                raise LakeError(f"cannot checkpoint {name!r} in {self.uri}: {exc}") from exc
            done.append(name)
        return done

    def tidy(
        self,
        name: str,
        *,
        compact: bool,
        vacuum: bool,
        retention_hours: int,
        keep_versions: Any = (),
    ) -> dict:
        """Compact small files; vacuum what no kept version names, once past the retention.

        The vacuum is full: besides files that commits removed, it deletes data
        files that no commit ever named (a killed writer's, a worker group
        redone), as ``datafiles`` promises, once they are older than the
        retention. ``keep_versions`` keeps every file of those versions
        (the ``sync`` cursors' snapshots), whatever their age.
        """
        table = self.table(name)
        if table is None:
            return {}
        done: dict[str, Any] = {}
        if compact:  # a compaction that loses a race to a writer reads the table again

            def compacted() -> dict[str, Any]:
                return self.table(name).optimize.compact(  # type: ignore[union-attr]
                    writer_properties=_writer_properties(name)
                )

            metrics = self._committed(name, compacted, None)
            done["files_added"] = metrics.get("numFilesAdded", 0)
            done["files_removed"] = metrics.get("numFilesRemoved", 0)
        if vacuum:
            latest = self.table(name)
            assert latest is not None
            kept = [v for v in keep_versions if self._has_version(name, v, latest)]
            removed = latest.vacuum(
                retention_hours=retention_hours,
                dry_run=False,
                enforce_retention_duration=False,
                full=True,
                keep_versions=kept or None,
            )
            done["files_vacuumed"] = len(removed)
        return done

    def _has_version(self, name: str, version: int, latest: DeltaTable) -> bool:
        """Whether the log still holds ``version`` (vacuum refuses to keep one it lacks)."""
        if version > latest.version():
            return False
        try:
            self.snapshot(name, version, latest)
        except (DeltaError, OSError):
            return False  # its log was cleaned up: no reader can load it, nothing to keep
        return True

    # --- reads --------------------------------------------------------------

    def read(self, name: str, sql: str | None = None) -> pa.Table:
        """Rows of a table as Arrow with its declared schema; ``sql`` may filter.

        ``sql`` is a whole SELECT over a table registered under ``name``.
        """
        table = self.table(name)
        if table is None:
            self.require()  # no lake at all: say so rather than read nothing
            return TABLES[name].empty_table()
        reader = QueryBuilder().register(name, table).execute(sql or f'SELECT * FROM "{name}"')
        result = pa.RecordBatchReader.from_stream(reader).read_all()
        if sql is None:
            return layout.conform(result, TABLES[name])
        return layout.plain_strings(result)

    def history(self, name: str, limit: int = 20) -> list[dict[str, Any]]:
        """The latest commits of a table: version, time, operation, metrics."""
        table = self.table(name)
        if table is None:
            self.require()
            return []
        return table.history(limit)

    def has(self, name: str, column: str, value: str) -> bool:
        """Whether any row of ``name`` has ``column`` equal to ``value``."""
        sql = f'SELECT 1 FROM "{name}" WHERE "{column}" = {quote(value)} LIMIT 1'
        return self.read(name, sql).num_rows > 0

    def snapshot(self, name: str, version: int, latest: DeltaTable) -> DeltaTable:
        """Table ``name`` as it was at ``version``: ``latest`` (open) when that is its version."""
        if version == latest.version():
            return latest
        return DeltaTable(self.path(name), version=version, storage_options=self.storage_options)

    def identity(self) -> str | None:
        """The lake's identity: its ``records`` table's Delta id, None before it exists.

        A path names a place, not a lake: a lake deleted and made again at the
        same path has a new id. What follows one lake from outside it (a sync
        target's manifest, a search index) keeps this id and refuses or rebuilds
        on any other (issues 41 and 42).
        """
        table = self.table("records")
        return None if table is None else table.metadata().id

    def version(self, name: str, *, refresh: bool = True) -> int | None:
        """Current Delta version of a table, None before its first commit.

        ``refresh=False``: the version this process last read or wrote,
        without asking the store (right after a commit of its own).
        """
        table = self.table(name) if refresh or name not in self._tables else self._tables[name]
        return None if table is None else table.version()


@functools.cache
def _writer_properties(name: str) -> WriterProperties:
    """How a table's Parquet files are written (``datafiles.parquet_layout``, a worker's too).

    The codec is always named: given properties without one, delta-rs would
    write uncompressed files.
    """
    how = parquet_layout(name)
    columns = {
        column: ColumnProperties(
            dictionary_enabled=False if column in how.plain else None,
            statistics_enabled=None if column in how.statistics else "NONE",
        )
        for column in TABLES[name].names
        if column in how.plain or column not in how.statistics
    }
    return WriterProperties(
        compression=how.codec, compression_level=how.level, column_properties=columns or None
    )


def _commit_properties(name: str, metadata: dict[str, str] | None, fence: int | None, claim=None):
    """A commit's metadata; a fenced commit also carries the next fence number.

    A fenced commit must land at the version right after the snapshot its
    fence was checked in, or not at all (``max_commit_retries=0``): it then
    rests on one atomic step, the conditional put that creates the commit
    file, rather than also on delta-rs's conflict checker noticing the
    other writer's app transaction when it moves a commit to a later
    version. A lost race costs one more attempt (``races``). A ``claim`` of
    new ids (the counter read, its new value) is fenced the same way (``keys``).
    """
    held = [Transaction(IDS, claim[1])] if claim is not None else []
    if fence is not None:
        held.append(Transaction(FENCES[name], fence + 1))
    if not held:
        return CommitProperties(custom_metadata=metadata or {})
    return CommitProperties(
        custom_metadata=metadata or {}, app_transactions=held, max_commit_retries=0
    )
