"""How a table is committed to: appends, fenced commits, block rewrites, files written elsewhere.

Every write path here shares one commit protocol: a fence read before the
rows were derived is checked in the commit (``_check_fence``), and the
commit carries the fence it leaves (``next_fence``) as the table's app
transaction; an unfenced write that loses a race reads again and retries
(``races``). Block rewrites read the id blocks a change touches, fold it in
with Arrow (``blocks``) and write them back in one commit; files a worker
wrote are committed as add and remove actions (``commit_files``).
"""

from __future__ import annotations

import functools
from typing import Any

import pyarrow as pa
from deltalake import (
    ColumnProperties,
    CommitProperties,
    DeltaTable,
    QueryBuilder,
    Transaction,
    WriterProperties,
)
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, RemoveAction

from ..blocks import blocks_dataset, blocks_predicate, upserted, with_columns
from ..errors import FenceMoved, LakeError, first_line
from ..schemas import PARTITIONS, TABLES
from . import layout
from .files import DataFile, Staged, is_local, now_ms, parquet_layout, partition_files
from .log import block_of
from .upserts import races

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


def next_fence(fence: int) -> int:
    """The fence a commit fenced at ``fence`` leaves: it carries ``fence + 1`` as its version.

    Every fenced commit moves its table's fence by one, so a writer that
    read fence ``f`` and committed knows the table is at ``f + 1`` with
    nobody else's commit in between. The one place that counts it.
    """
    return fence + 1


class Writes:
    """``Lake``'s writes (see the module's docstring); ``tables.Lake`` holds the rest."""

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
            table = self.delta(name)
            self._check_fence(name, table, fence)
            write_deltalake(
                table or self.path(name),
                data,
                mode="append",
                partition_by=PARTITIONS.get(name),
                storage_options=self.storage_options,
                writer_properties=writer_properties(name),
                commit_properties=commit_properties(name, metadata, fence),
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
            table = self.delta(name)
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
                writer_properties=writer_properties(name),
                commit_properties=commit_properties(name, metadata, fence),
            )
            return result

        return self._committed(name, write, fence)

    def commit_files(
        self, name: str, staged: Staged, metadata, *, fence: int | None = None, claim=None
    ) -> bool:
        """Commit data files written elsewhere (``files``, on a worker); False if none.

        A rewrite commits only on the version its files were read at (else ``FenceMoved``);
        ``claim`` (the id counter read, the last id used) moves the counter in the same commit.
        """
        if not staged.adds and not staged.removes and claim is None:
            return False

        def write() -> None:
            table = self.delta(name)
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
                actions,
                "append",
                table.schema(),
                PARTITIONS.get(name),
                commit_properties=commit_properties(name, metadata, fence, claim),
            )
            table.update_incremental()  # the object stays at its version otherwise

        self._committed(name, write, fence)
        return True

    def blocks_at(self, name: str, blocks: Any, version: int) -> tuple[pa.Table, list[DataFile]]:
        """The rows of some id blocks at ``version``, and the files that hold them."""
        table = self.snapshot(name, version, self.delta(name))
        predicate = blocks_predicate(blocks)
        base = table.table_uri.removeprefix("file://").rstrip("/") + "/"
        paths = [u.removeprefix("file://").removeprefix(base) for u in table.file_uris(predicate)]
        if any("://" in p or p.startswith("/") for p in paths):  # a log's own spelling: ask it
            wanted = set(pa.array(blocks).to_pylist())
            paths = [p for p, b in partition_files(table, "id_block").items() if b in wanted]
        held = [DataFile(p, 0, {"id_block": str(block_of(p, {}))}, "", 0) for p in paths]
        return self._read_blocks(name, table, predicate), held

    def read_blocks(self, name: str, blocks: Any, columns: list[str] | None = None) -> pa.Table:
        """The rows of some id blocks (or their ``columns``), as the table holds them now."""
        table = self.delta(name)
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


@functools.cache
def writer_properties(name: str) -> WriterProperties:
    """How a table's Parquet files are written (``files.parquet_layout``, a worker's too).

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


def commit_properties(name: str, metadata: dict[str, str] | None, fence: int | None, claim=None):
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
        held.append(Transaction(FENCES[name], next_fence(fence)))
    if not held:
        return CommitProperties(custom_metadata=metadata or {})
    return CommitProperties(
        custom_metadata=metadata or {}, app_transactions=held, max_commit_retries=0
    )
