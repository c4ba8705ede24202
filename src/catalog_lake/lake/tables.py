"""The lake's tables: opened, created, upgraded, read and kept up; ``Lake`` is the one door.

One Delta table per folder under the lake URI (``schemas.TABLES``). This
module opens a table once per ``Lake`` and keeps it current, creates the
tables and upgrades their stored layout (``layout`` decides), reads rows
through DataFusion's ``QueryBuilder`` or pyarrow datasets rather than
``to_pyarrow_table``, which can abort the interpreter at exit (delta-rs
issue 2184), and compacts, checkpoints and vacuums. How a table is written
is ``writes`` (a base of ``Lake``), what an upsert decides ``upserts``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, Field, QueryBuilder
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from pyarrow.fs import LocalFileSystem, PyFileSystem

from ..errors import FenceMoved, LakeError, NoLakeError, first_line
from ..literals import quote
from ..schemas import ADDED_COLUMNS, PARTITIONS, TABLES
from . import layout
from .files import is_local
from .log import Since, read_since
from .upserts import Upserts, races
from .writes import FENCES, IDS, Writes, commit_properties, writer_properties

#: Commits a ``DeltaTable`` object may see before ``Lake.delta`` opens it afresh.
REOPEN_AFTER_COMMITS = 50

_log = logging.getLogger(__name__)


#: What the store itself raises on a failed read or write: deltalake's errors, the file system's.
STORE_ERRORS = (DeltaError, OSError)
#: What a failed lake read or write raises: the store's errors and ours. Callers catch
#: these without importing deltalake, which only this module does.
LAKE_ERRORS = (*STORE_ERRORS, LakeError)


class Lake(Writes, Upserts):
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
        return self.delta("pushes") is not None

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

    def delta(self, name: str) -> DeltaTable | None:
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
        table = self.delta(name)
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
        tables = {name: self.delta(name) for name in TABLES}
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
                layout.require_compatible(
                    name,
                    layout.stored_schema(existing),
                    schema,
                    list(metadata.partition_columns),
                    metadata.description,
                    self.uri,
                )
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
                if self.delta(name) is not None:
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
                current = self.delta(name)
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
                        writer_properties=writer_properties(name),
                        commit_properties=commit_properties(
                            name, {"catalog_lake.upgrade": f"retyped {stale(current)}"}, fence
                        ),
                    )
                except CommitFailedError as exc:
                    self._tables.pop(name, None)
                    raise FenceMoved(f"another writer changed {name!r}: {first_line(exc)}") from exc
                _log.info("upgraded %r in %s: %s retyped", name, self.uri, stale(current))

    def filesystem(self, name: str) -> tuple[Any, str]:
        """A pyarrow filesystem holding table ``name`` (the lake's own store), and its folder."""
        if is_local(self.uri):
            return LocalFileSystem(), self.path(name).removeprefix("file://")
        return PyFileSystem(DeltaStorageHandler(self.path(name), self.storage_options)), ""

    def since(self, name: str, version: int) -> Since:
        """What was committed to table ``name`` after ``version`` (``log``)."""
        return read_since(*self.filesystem(name), version)

    def id_counter(self) -> int:
        """The last service id handed out, as the items table's counter ``IDS`` holds it.

        As this object last read the table: a commit that moves the counter checks it.
        """
        table = self._tables.get("items") or self.delta("items")
        return (table.transaction_version(IDS) or 0) if table is not None else 0

    def largest_id(self) -> int | None:
        """The largest ``object_id`` in ``items``, from the log's file statistics.

        The log's, so a lake on an object store is not read whole for one
        number; None when a file was written without statistics.
        """
        table = self.delta("items")
        if table is None:
            return 0
        largest = pa.table(table.get_add_actions(flatten=True)).column("max.object_id")
        return int(pc.max(largest).as_py() or 0) if largest.null_count == 0 else None

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
            table = self.delta(name)
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
        redone), as ``files`` promises, once they are older than the
        retention. ``keep_versions`` keeps every file of those versions
        (the ``sync`` cursors' snapshots), whatever their age.
        """
        table = self.delta(name)
        if table is None:
            return {}
        done: dict[str, Any] = {}
        if compact:  # a compaction that loses a race to a writer reads the table again

            def compacted() -> dict[str, Any]:
                return self.delta(name).optimize.compact(  # type: ignore[union-attr]
                    writer_properties=writer_properties(name)
                )

            metrics = self._committed(name, compacted, None)
            done["files_added"] = metrics.get("numFilesAdded", 0)
            done["files_removed"] = metrics.get("numFilesRemoved", 0)
        if vacuum:
            latest = self.delta(name)
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

        ``sql`` is a whole SELECT over a table registered under ``name``. A
        column added since the table was written (``ADDED_COLUMNS``; the
        first write adds it) reads as null, in ``sql`` too: an older lake is
        read as it is, and a reader never writes.
        """
        table = self.delta(name)
        if table is None:
            self.require()  # no lake at all: say so rather than read nothing
            return TABLES[name].empty_table()
        query = sql or f'SELECT * FROM "{name}"'
        stored = set(layout.stored_schema(table).names)
        missing = [field for field in TABLES[name] if field.name not in stored]
        registered = f"{name}__stored" if missing else name
        if missing:
            nulls = ", ".join(f'{_null_of(f.type)} AS "{f.name}"' for f in missing)
            query = f'WITH "{name}" AS (SELECT *, {nulls} FROM "{registered}") {query}'
        reader = QueryBuilder().register(registered, table).execute(query)
        result = pa.RecordBatchReader.from_stream(reader).read_all()
        if sql is None:
            return layout.conform(result, TABLES[name])
        return layout.plain_strings(result)

    def history(self, name: str, limit: int = 20) -> list[dict[str, Any]]:
        """The latest commits of a table: version, time, operation, metrics."""
        table = self.delta(name)
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
        table = self.delta("records")
        return None if table is None else table.metadata().id

    def version(self, name: str, *, refresh: bool = True) -> int | None:
        """Current Delta version of a table, None before its first commit.

        ``refresh=False``: the version this process last read or wrote,
        without asking the store (right after a commit of its own).
        """
        table = self.delta(name) if refresh or name not in self._tables else self._tables[name]
        return None if table is None else table.version()


def _null_of(kind: pa.DataType) -> str:
    """SQL for a null of ``kind``: typed for text, whose comparisons must plan."""
    return "CAST(NULL AS VARCHAR)" if kind == pa.string() else "NULL"
