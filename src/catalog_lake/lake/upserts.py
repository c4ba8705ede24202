"""What an upsert by service id decides, apart from how Delta writes it.

``Lake`` takes these methods (``class Lake(Writes, Upserts)``): an upsert
appends when none of its rows is stored yet and otherwise folds them into
their id blocks; a fenced upsert is retried, reading the fence again, until
no other writer got between (``races``); a staged upsert writes the files
and leaves the commit to the caller. They call only ``Lake``'s own
``append``, ``_rewrite_blocks``, ``blocks_at``, ``filesystem`` and
``fence``, and ``files.write_files``: none imports deltalake.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tenacity import (
    Retrying,
    before_sleep_log,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from .. import settings
from ..blocks import upserted
from ..errors import FenceMoved, LakeError
from ..schemas import PARTITIONS, TABLES
from .files import Staged, write_files

#: Retries are logged on the storage's logger, where the benchmark counts them.
_log = logging.getLogger("catalog_lake.lake")


def races(lost: type[Exception] = FenceMoved, attempts: int | None = None) -> Retrying:
    """Attempts at work that ends in a commit another writer may win: the one retry policy.

    Each attempt reads the table afresh, derives what it commits and commits
    it. ``FenceMoved`` (a fenced commit: ids, unclaimed pushes) or
    ``CommitFailedError`` (an unfenced block rewrite or compaction) starts
    the next attempt after a jittered exponential backoff (20 ms doubling, at
    most 1 s), ``settings.FENCE_ATTEMPTS`` times in all (or ``attempts``: 1
    for work that cannot be done again here); then the last error is raised.
    Each retry is logged at INFO (the benchmark counts them).
    """
    return Retrying(
        retry=retry_if_exception_type(lost),
        stop=stop_after_attempt(attempts or settings.FENCE_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.02, max=1.0),
        before_sleep=before_sleep_log(_log, logging.INFO),
        reraise=True,
    )


class Upserts:
    """``Lake``'s upserts (``upsert``, ``upsert_fenced``); see the module's docstring."""

    def upsert(
        self,
        name: str,
        data: pa.Table,
        metadata: dict[str, str] | None = None,
        known: Any = None,
        fence: int | None = None,
    ) -> dict[str, Any]:
        """Insert new items' rows and replace older versions of known ones.

        ``known`` marks the rows whose id was found in the table just before
        (with ``fence`` read with it, nobody can have added them since
        unless the commit fails): when none is known the rows are
        appended, which neither reads nor rewrites anything. Otherwise the
        id blocks the rows fall in are rewritten whole in one commit
        (``_rewrite_blocks``). A row replaces
        its stored version only when it is at least as new (``blocks.GUARD``),
        so replaying an old push after a crash never rolls an item back, and
        it leaves ``blocks.KEPT_ON_UPDATE`` as stored (``blocks.upserted``).
        Returns the counts, and the ids of incoming rows older than the stored
        ones (``kept_ids``).
        """
        data = data.cast(TABLES[name])
        if data.num_rows == 0:
            return {}
        if known is not None and not np.asarray(known, dtype=bool).any():
            self.append(name, data, metadata, fence)
            return {
                "inserted": data.num_rows,
                "updated": 0,
                "kept": 0,
                "kept_ids": pa.array([], pa.int64()),
            }
        if PARTITIONS.get(name) != ["id_block"]:
            raise LakeError(f"table {name!r} is not kept in id blocks; it cannot be upserted")
        if pc.count_distinct(data["object_id"]).as_py() != data.num_rows:
            raise LakeError(f"an upsert into {name!r} holds one item twice")
        return self._rewrite_blocks(name, data, metadata, fence)

    def upsert_fenced(
        self,
        name: str,
        data: pa.Table,
        metadata: dict[str, str] | None = None,
        known: Any = None,
        fence: int | None = None,
        admit: Any = None,
    ) -> dict[str, Any]:
        """``upsert`` fenced, retried until no other writer got between.

        For rows whose ids are settled (records, after their items commit):
        nothing but ``known`` was derived from an earlier read. A first
        attempt appends rows ``known`` says are new, at ``fence``: the
        table's fence read *before* those ids were settled. Any writer that
        stored the same items since learned of them from that items commit,
        so its commit moved the fence and the append fails rather than add
        a second row. After a lost race every attempt reads and folds the
        blocks at the table's current fence.

        ``admit`` (rows in, the rows still to write out) is asked after the
        fence of each attempt that reads it: a records write drops the rows
        whose item another writer deleted or replaced meanwhile
        (``store.live_records``). A delete moves the records fence, so a
        write that read items before the delete's records commit fails,
        and looks again.
        """
        for attempt in races():
            with attempt:
                first = attempt.retry_state.attempt_number == 1
                if first and fence is not None and known is not None:
                    return self.upsert(name, data, metadata, known=known, fence=fence)
                _, current = self.fence(name)
                rows = data if admit is None else admit(data)
                return self.upsert(name, rows, metadata, fence=current)
        raise AssertionError("unreachable: the last lost race is raised")

    def staged_upsert(
        self, name: str, data: pa.Table, known: Any, version: int | None
    ) -> tuple[Staged, dict[str, Any]]:
        """``upsert``'s data files written and not committed (``Lake.commit_files`` does).

        Rows all new are written as they are; otherwise the id blocks they
        fall in are read at ``version``, folded (``blocks.upserted``) and
        written, and their old files are the ones to remove. The files are
        written before any fence is read again, so a commit race that lost
        costs a commit, not the encoding (``store``, ``staged``).
        """
        data = data.cast(TABLES[name])
        counts: dict[str, Any] = {"kept_ids": pa.array([], pa.int64())}
        staged = Staged()
        if data.num_rows == 0:
            return staged, counts
        if known is not None and np.asarray(known, dtype=bool).any():
            if pc.count_distinct(data["object_id"]).as_py() != data.num_rows:
                raise LakeError(f"an upsert into {name!r} holds one item twice")
            stored, staged.removes = self.blocks_at(name, data["id_block"], version)
            staged.read_version = version
            data, counts = upserted(stored, data, name)
        staged.adds = write_files(*self.filesystem(name), name, data)
        return staged, counts
