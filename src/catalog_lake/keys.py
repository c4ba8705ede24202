"""The only owner of service ids: every stored ``client_item_id`` with its id, kept current.

A service id is numeric text the lake gives a ``client_item_id`` the first time
it is stored, and keeps for good. New ids come from one counter, the items
table's app transaction ``lake.IDS``: counted on in the items commit that
stores them, or held first in a commit of their own (``_fresh``), so no two
writers ever hand out one id.
The index of stored keys is read once per catalog and kept current by its
own pushes; a local lake also keeps a key snapshot beside the tables, so a
new process reads only the blocks that changed since it was saved.

Any number of writers may store at once: the index carries the items
table's fence number, read before its keys, and the items commit that stores
new keys is fenced with it (``Lake.fence``), so one key never gets two ids.
A writer that another beat gets ``FenceMoved`` and reads what the winner
committed (``absorb``): when the winner stored none of its keys, its ids,
rows and files still hold and are committed again; otherwise it forgets the
index and gives its ids again. Ids held and never stored are gaps.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from . import sellers, settings
from .errors import FenceMoved
from .lake import Lake, is_local, races, reads
from .lake.files import Staged
from .lake.log import Since, concerns, keys_added
from .lake.reads import BlocksScan
from .records import Batch
from .schemas import TS
from .sellers import DEFAULT_SELLER

#: Files a cold key lookup may read past the lake's key snapshot before it saves a new one.
KEYS_RESAVE_FILES = 64


@dataclass(frozen=True)
class KeyIndex:
    """client_item_id, object_id and id_block of every stored item, at one items-table version.

    ``fence`` is the items table's fence number at ``version``, read before
    the keys: a commit fenced with it fails if any id was allocated since.
    """

    version: int | None
    table: pa.Table
    max_id: int
    fence: int = 0


class Keys:
    """The key index of one lake, read once and kept current by the pushes made through it."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self._index: KeyIndex | None = None
        #: Groups given ids by ``reserve`` whose items commit has not landed yet.
        self._held = 0
        #: Ids this catalog holds from the lake's counter and has not stored yet (``_fresh``).
        self._spare = np.empty(0, dtype="int64")
        #: The counter as read and the last id, for ids counted but not held (``claim``).
        self.claim: tuple[int, int] | None = None
        #: Whether another writer took new ids under ours: from then on, ids are held first.
        self._contended = False

    @property
    def fence(self) -> int:
        """The items table's fence number the last ``assign`` allocated from."""
        return self._index.fence if self._index is not None else 0

    def forget(self) -> None:
        """Drop the index: the next lookup reads it again (after a write that failed midway).

        Ids ``reserve`` held for groups that did not land are dropped with it.
        """
        self._index = None
        self._held = 0

    def snapshot(self) -> pa.Table | None:
        """The keys a new process would load (snapshot plus changed blocks); None without one."""
        snapshot = load_snapshot(self.lake)
        return None if snapshot is None else self.from_files(snapshot)[0]

    def assign(
        self,
        items: Batch,
        request_ids: pd.Series,
        received_at: pd.Series,
        first: pd.DataFrame,
        hold: bool = False,
        seller: str = DEFAULT_SELLER,
        held: bool = False,
    ) -> Batch:
        """Give every item of ``seller`` its service id: the stored one, or a new one.

        ``hold``: new ids come from the lake's id counter (``_fresh``), for a
        write whose items commit carries ``claim``; ``held``: they are held
        from it in a commit of their own first, for a write whose commit
        cannot (a backfill's upsert). With neither (a dry run), a new item
        gets a stand-in after the largest stored id, which nothing may
        store: the counter never gave it, so a writer would be given it
        again. Only ids are looked up: an update leaves ``first_seen_at``,
        ``likes`` and ``sales`` as stored (``blocks.KEPT_ON_UPDATE``).
        """
        index = self.index()
        if hold or held:
            fresh = partial(self._fresh, floor=index.max_id, hold=held)
        else:
            fresh = _after(index.max_id)
        positions = first["position"].to_numpy()
        keys = sellers.keys(items["client_item_id"], seller)
        object_id, new = _ids(index, keys, positions, fresh)
        return with_ids(items, object_id, new, first["at"], received_at, request_ids, seller)

    def reserve(self, keys: pa.Array, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ids for a group whose rows are written elsewhere (a Dask worker), held at once.

        ``keys`` are the items' keys (``sellers.keys``).

        Like ``assign``, but the new keys join the index now, before their
        items commit, so the next group of the same ingest finds them and
        its ids follow on. The index keeps its fence: the group's items
        commit is fenced at the fence the commits of this chain before it
        left (``store.commit_group``), and ``landed`` takes each. Any failure must
        ``forget`` the index, which drops every id held and not landed.
        Returns each row's id and whether it is new.
        """
        index = self.index()
        object_id, new = _ids(
            index, keys, positions, partial(self._fresh, floor=index.max_id, hold=True)
        )
        self._spare = self._spare[int(new.sum()) :]  # given now: the next group's follow on
        self._held += 1 if len(object_id) else 0
        if new.any():
            added = pa.table(
                {
                    "client_item_id": pa.array(keys).filter(pa.array(new)),
                    "object_id": pa.array(object_id[new]),
                    "id_block": pa.array(object_id[new] // settings.ID_BLOCK_SIZE),
                }
            ).cast(index.table.schema)
            table = pa.concat_tables([index.table, added])
            if table["client_item_id"].num_chunks > 64:
                table = table.combine_chunks()
            max_id = max(index.max_id, int(object_id[new].max()))
            self._index = KeyIndex(index.version, table, max_id, index.fence)
        return object_id, ~new

    @property
    def version(self) -> int | None:
        """The items table's version the index was last brought to."""
        return self._index.version if self._index is not None else None

    def _fresh(self, count: int, floor: int, hold: bool = False) -> np.ndarray:
        """The next ``count`` new ids, from the lake's one counter (``lake.IDS``).

        Alone, a writer counts them on from the counter and its items commit
        moves the counter (``claim``): one commit, as before the counter. Once
        another writer took ids under it (``absorb`` finds the counter moved),
        or when ids must be known before any commit (``hold``: a Dask chain),
        the writer holds its ids first, in a commit of their own
        (``_reserved``): then a lost race leaves its ids, rows and files
        right. Held ids are used first; ids held and never stored are gaps.
        ``floor`` is the largest id of the index the caller looked its keys
        up in: the index is never read again here.
        """
        self.claim = None
        if count == 0:
            return np.empty(0, dtype="int64")
        if not (hold or self._contended or len(self._spare)):
            base = self.lake.id_counter()
            start = max(base, floor) + 1
            self.claim = (base, start + count - 1)
            return np.arange(start, start + count, dtype="int64")
        if len(self._spare) < count:
            need = count - len(self._spare)
            floor = max(floor, int(self._spare.max()) if len(self._spare) else 0)
            start = self._reserved(need, floor)
            self._spare = np.concatenate([self._spare, np.arange(start, start + need)])
        return self._spare[:count]

    def _reserved(self, count: int, floor: int) -> int:
        """The first of ``count`` ids held in a commit of their own, on the counter as read."""
        for attempt in races():
            with attempt:
                base = self.lake.id_counter()
                top = max(base, floor)
                self.lake.commit_files("items", Staged(), None, claim=(base, top + count))
                return top + 1
        raise AssertionError("unreachable: the last lost race is raised")

    def catch_up(self) -> int | None:
        """Move the id counter past every stored id; the id it moved to, None if it was not behind.

        A backfill before 2026-12-05 stored an item new to the lake (one
        whose push died after its raw commit) under a stand-in id the
        counter never gave, which a writer counting from the counter could
        be given again (``catalog-lake check``: "a service id above the
        lake's id counter"). A lake whose counter never moved (0, from
        before the counter) is left as it is: its writers count from the
        largest stored id.
        """
        top = None
        for attempt in races():
            with attempt:
                base = self.lake.id_counter()
                if not base:
                    return None
                top = top if top is not None else self._largest_stored()
                if top <= base:
                    return None
                self.lake.commit_files("items", Staged(), None, claim=(base, top))
                return top
        raise AssertionError("unreachable: the last lost race is raised")

    def _largest_stored(self) -> int:
        """The largest stored id: from the log's file statistics, else from the key index."""
        largest = self.lake.largest_id()
        return largest if largest is not None else self.index().max_id

    def absorb(self, since: Since, fence: int, keys: pa.Array, blocks: set[int]) -> bool:
        """Bring the index past a lost race without reading it again; False if it concerns us.

        ``since`` is what was committed after the index's version. When it
        stored none of our ``keys`` and rewrote none of our ``blocks``
        (``lake.log.concerns``), the writer's ids, rows and files still
        hold: the index takes the keys the winner added, and its fence.
        """
        cached = self._index
        if cached is None:
            return False
        if self.claim is not None and self.lake.id_counter() != self.claim[0]:
            self._contended = True  # our counted ids may be taken: hold ids from now on
            return False
        added = keys_added(*self.lake.filesystem("items"), since).cast(cached.table.schema)
        if concerns(since, added, keys, blocks):
            return False
        known = cached.table["client_item_id"]  # one vectorized pass; the set is what was added
        held = known.filter(pc.is_in(known, value_set=added["client_item_id"]))
        fresh = added.filter(pc.invert(pc.is_in(added["client_item_id"], value_set=held)))
        table = pa.concat_tables([cached.table, fresh]) if fresh.num_rows else cached.table
        top = pc.max(fresh["object_id"]).as_py() if fresh.num_rows else None
        self._index = KeyIndex(since.version, table, max(cached.max_id, top or 0), fence)
        return True

    def index(self) -> KeyIndex:
        """Every stored client_item_id with its id, read once and then kept current.

        A long-lived catalog (a service, a flow task pushing many groups)
        would otherwise read the whole key column of the items table for
        every push. The copy is checked against the table's version and
        fence, so another writer's commit makes us read it again; our own
        pushes add their new keys to it (``landed``). Reading it again
        starts from the lake's key snapshot, when there is one
        (``from_files``). The fence is read first: keys read afterwards are
        at least as new, so an id allocated in between fails the commit
        instead of being handed out twice.
        """
        version, fence = self.lake.fence("items")
        cached = self._index
        # Keys change only in fenced commits: an unfenced one (compaction, likes, an id
        # reservation) moves the version, never the keys.
        if cached is not None and cached.fence == fence and version is not None:
            return cached
        if self._held:  # ids are held for groups not landed: they were allocated from it
            raise FenceMoved(f"another writer committed to 'items' (fence {fence})")
        if is_local(self.lake.uri):
            table, scan = self.from_files(load_snapshot(self.lake))
            if scan.files_read > KEYS_RESAVE_FILES:
                save_snapshot(self.lake, KeySnapshot(scan.version, scan.files, table))
        else:
            columns = ["client_item_id", "object_id", "seller"]
            table = _keyed(reads.scan(self.lake, "items", columns))
            blocks = pc.divide(table["object_id"], settings.ID_BLOCK_SIZE)  # ids are positive
            table = table.append_column("id_block", blocks)
        max_id = pc.max(table["object_id"]).as_py() if table.num_rows else None
        self._index = KeyIndex(version, table, int(max_id or 0), fence)
        return self._index

    def from_files(self, snapshot: KeySnapshot | None) -> tuple[pa.Table, BlocksScan]:
        """The items table's keys, read from its files where they changed since ``snapshot``.

        A million-item lake's key column is 500 files: 400-500 ms to read,
        paid by every new process's first push (a CLI push, a flow task)
        however small. The snapshot, one Arrow file, loads in a few
        milliseconds, and only the blocks rewritten since it was saved are
        read from the table, so a cold push costs what changed, not what
        is stored.
        """
        known = snapshot.files if snapshot is not None else None
        columns = ["client_item_id", "object_id", "seller"]
        scan = reads.blocks_scan(self.lake, "items", columns, known)
        rows = _keyed(scan.rows)
        if snapshot is None:
            return rows, scan
        kept = snapshot.table
        if scan.touched:
            touched = pa.array(sorted(scan.touched), pa.int64())
            kept = kept.filter(pc.invert(pc.is_in(kept["id_block"], value_set=touched)))
        return pa.concat_tables([kept.cast(rows.schema), rows]), scan

    def save(self) -> None:
        """Save the lake's key snapshot as of now (after an ingest run; local lakes only).

        Made from the table's files (the last snapshot plus the blocks
        changed since), never from the keys this catalog added along the
        way, so a snapshot is only ever as right as the table itself.
        """
        if not is_local(self.lake.uri):
            return
        table, scan = self.from_files(load_snapshot(self.lake))
        if scan.version is not None:
            save_snapshot(self.lake, KeySnapshot(scan.version, scan.files, table))

    def landed(self, items: Batch | None, fence: int) -> None:
        """A fenced items commit of ours landed and left ``fence``: the index is at its version.

        That commit carried the index's fence, so the table is now at the
        version it made, with nobody else's ids in between. ``items`` are
        the group's items with their ids (``assign``): their new keys join
        the index now. None: a group whose keys joined it when their ids
        were given (``reserve``).
        """
        cached, self._index = self._index, None
        if items is None:
            self._held = max(0, self._held - 1)
            new = None
        else:
            new = pa.table(
                {
                    "client_item_id": sellers.keys(items["client_item_id"], items["seller"]),
                    "object_id": items["object_id"],
                    "id_block": items["id_block"],
                }
            )
            new = new.filter(pc.invert(items["known"]))
            self._spare = self._spare[new.num_rows :]  # ``assign(hold=True)`` took the first
        if cached is None:
            return
        version = self.lake.version("items", refresh=False)
        if new is None or not new.num_rows:
            self._index = KeyIndex(version, cached.table, cached.max_id, fence)
            return
        table = pa.concat_tables([cached.table, new.cast(cached.table.schema)])
        if table["client_item_id"].num_chunks > 64:
            table = table.combine_chunks()
        max_id = max(cached.max_id, pc.max(new["object_id"]).as_py())
        self._index = KeyIndex(version, table, max_id, fence)


def _ids(
    index: KeyIndex, client_ids: Any, positions: np.ndarray, fresh
) -> tuple[np.ndarray, np.ndarray]:
    """Each key's stored id, or a ``fresh`` one in order of ``positions``; and which are new."""
    n = len(client_ids)
    probe = pa.table(
        {
            "client_item_id": pa.array(client_ids).cast(pa.string()),
            "_row": pa.array(np.arange(n), pa.int64()),
        }
    )
    # Arrow builds its hash table on the right side: the push's keys, not the lake's.
    found = index.table.join(probe, "client_item_id", join_type="inner")
    object_id = np.zeros(n, dtype="int64")
    object_id[found["_row"].to_numpy()] = found["object_id"].to_numpy()
    new = object_id == 0  # service ids start at 1
    order = np.argsort(positions[new], kind="stable")
    given = np.empty(int(new.sum()), dtype="int64")
    given[order] = fresh(len(given))
    object_id[new] = given
    return object_id, new


def _after(largest: int):
    """Stand-in ids after the largest stored one, for what is never written."""
    return lambda count: np.arange(largest + 1, largest + 1 + count, dtype="int64")


def with_ids(
    items: Batch,
    object_id: np.ndarray,
    new: np.ndarray,
    first_at: pd.Series,
    received_at: pd.Series,
    request_ids: pd.Series,
    seller: str = DEFAULT_SELLER,
) -> Batch:
    """Typed item rows with their service ids and the columns a push sets (pure).

    Only ids are looked up: an update leaves ``first_seen_at``, ``likes``
    and ``sales`` as stored (``blocks.KEPT_ON_UPDATE``).
    """
    n = len(items)
    return items.with_columns(
        object_id=pa.array(object_id),
        id_block=pa.array(object_id // settings.ID_BLOCK_SIZE),
        known=pa.array(~new),
        first_seen_at=_instants(first_at),
        likes=pa.array(np.zeros(n, dtype="int64")),
        sales=pa.array(np.zeros(n, dtype="int64")),
        updated_at=_instants(received_at),
        request_id=pa.array(request_ids.to_numpy(dtype=object), pa.string()),
        seller=pa.repeat(pa.scalar(seller, pa.string()), n),
    )


def _keyed(rows: pa.Table) -> pa.Table:
    """Rows of ``client_item_id``, ``object_id`` (and ``id_block``) with the items' keys.

    The index holds each item's key (``sellers.keys``) in its ``client_item_id``
    column: the default seller's is the ``client_item_id`` itself, so a key
    snapshot saved before sellers still holds every key.
    """
    keyed = rows.set_column(
        rows.schema.get_field_index("client_item_id"),
        "client_item_id",
        sellers.row_keys(rows),
    )
    return keyed.drop_columns(["seller"]) if "seller" in keyed.column_names else keyed


def _instants(values: pd.Series) -> pa.Array:
    """A column of instants as Arrow UTC microseconds (``.array``: never a Timestamp per row)."""
    return pa.array(pd.Series(values.array).astype("datetime64[us, UTC]"), TS)


# --- the key snapshot: a local lake's keys by id block, kept beside its tables --------------

#: The file in a local lake keeping the items table's keys by id block (``save_snapshot``).
KEYS_FILE = "_catalog_lake.keys.arrow"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeySnapshot:
    """Some columns of a table, with ``id_block``, as of ``version`` and its ``files``."""

    version: int
    files: dict[str, int]
    table: pa.Table


def load_snapshot(lake: Lake) -> KeySnapshot | None:
    """The saved key snapshot of a local lake, or None (none saved, or unreadable).

    A snapshot that cannot be read is only a slower start: the keys are
    then read from the table, and the next save replaces the file.
    """
    if not is_local(lake.uri):
        return None
    path = Path(lake.uri.removeprefix("file://")) / KEYS_FILE
    try:
        with pa.memory_map(str(path)) as source:
            table = ipc.open_file(source).read_all()
        meta = table.schema.metadata or {}
        files = {str(p): int(b) for p, b in json.loads(meta[b"files"]).items()}
        expected = pa.schema(
            [
                ("client_item_id", pa.string()),
                ("object_id", pa.int64()),
                ("id_block", pa.int64()),
            ]
        )
        keys = table.select(expected.names).cast(expected)
        return KeySnapshot(int(meta[b"version"]), files, keys)
    except FileNotFoundError:
        return None
    except (OSError, KeyError, ValueError, TypeError, pa.ArrowException) as exc:
        _log.warning("ignoring the key snapshot %s: %s", path, exc)
        return None


def save_snapshot(lake: Lake, snapshot: KeySnapshot) -> None:
    """Keep a snapshot of keys by id block in a local lake, replacing the last one.

    Written to a new file and renamed over the old one, so a reader sees
    either snapshot whole. It is a cache: the tables stay the truth, and
    ``BlocksScan`` re-reads every block whose files differ from it.
    """
    if not is_local(lake.uri):
        return
    path = Path(lake.uri.removeprefix("file://")) / KEYS_FILE
    meta = {"version": str(snapshot.version), "files": json.dumps(snapshot.files)}
    table = snapshot.table.replace_schema_metadata(meta)
    partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    try:
        with pa.OSFile(str(partial), "wb") as sink, ipc.new_file(sink, table.schema) as out:
            out.write_table(table)
        os.replace(partial, path)
    except (OSError, pa.ArrowException) as exc:
        partial.unlink(missing_ok=True)
        _log.warning("cannot save the key snapshot %s: %s", path, exc)
