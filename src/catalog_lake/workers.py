"""The Dask side of an ingest: a client for the run, and the chain of groups it commits.

Workers never open the lake to commit: they check groups of feed files and
write their data files (``staged``). The coordinator, the ingest's own
process, gives each group its service ids and commits the groups in feed
order through the write order (``store.commit_group``), with ``Chain``.

Groups are a chain: a group's ids are given before the group before it
commits (the index holds them, ``Keys.reserve``), so its items commit is
fenced at the fence that commit leaves. A group holding items the lake
already has rewrites their id blocks: its worker reads them at the version
the commits before it left, so the chain is drained first. When a commit of
the chain fails (another writer won a fence, a worker was lost for good), the
chain breaks: the index is forgotten, every group planned on it is planned
again, and the failed group is finished as a crash would be, by
``Catalog.repair`` from its committed ``raw`` rows, or is written in this
process from its files when nothing of it was committed. Ids a broken chain
held and never committed are not handed out again: gaps. The states, with
their failure paths, are drawn in docs/design.md ("A group's chain").
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from . import sellers
from .claims import earlier_pushes
from .errors import FenceMoved, PushError
from .lake import LAKE_ERRORS
from .push import Push
from .sellers import DEFAULT_SELLER
from .sources import FeedFile
from .staged import (
    CheckedFiles,
    Outline,
    Plan,
    Written,
    WrittenGroup,
    check_files,
    outline,
    write_group,
)
from .store import Catalog, commit_group

#: Where a local Dask scheduler serves HTTP: a free port on this machine.
LOCAL_HTTP = "127.0.0.1:0"
#: Dask settings of a run's own ``LocalCluster``, whose scheduler runs in this process: the
#: process that commits. Its system monitor (disk and network counters, read twice a
#: second for a dashboard nobody opens), its 20 ms loop tick (a check for a blocked loop)
#: and work stealing (groups are handed out two per worker, in feed order) took about
#: 0.1 s of the committer's CPU per 100,000 items (``python -m bench.scale``).
QUIET_SCHEDULER = {
    "distributed.admin.system-monitor.disk": False,
    "distributed.admin.system-monitor.host-cpu": False,
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.admin.tick.interval": "500ms",
    "distributed.scheduler.work-stealing": False,
}


@contextmanager
def dask_client(workers: int = 0, address: str | None = None, client: Any = None):
    """A Dask client for one run: the one given, one to ``address``, or a ``LocalCluster``.

    The local cluster has ``workers`` processes of one thread each (the
    work is Python and Arrow, bound by the GIL) and is closed with the run;
    its scheduler shares this process's CPU, so it runs quiet (``QUIET_SCHEDULER``).
    Workers check groups and write their data files; they never commit.
    """
    if client is not None:
        yield client
        return
    import dask
    from distributed import Client, LocalCluster

    if address:
        with Client(address) as connected:
            yield connected
        return
    with (
        dask.config.set(QUIET_SCHEDULER),
        LocalCluster(
            n_workers=max(1, workers),
            threads_per_worker=1,
            processes=True,
            # The scheduler serves HTTP whatever this says; on a free port, two runs at
            # once do not fight over 8787 (and warn about it).
            dashboard_address=LOCAL_HTTP,
        ) as cluster,
        Client(cluster) as local,
    ):
        yield local


def checked_in_order(
    chunks: list[list[FeedFile]], batch_size: int, strict: bool, client: Any
) -> Iterator[tuple[list[FeedFile], CheckedFiles | None]]:
    """Each group of files with what a worker made of it, in feed order.

    Groups must be written in feed order (a later file's update must win),
    so results are taken in submission order. Two groups per worker are in
    flight at a time, and the next are submitted before a result is handed
    over: no worker idles while the caller writes, and results never pile
    up faster than they are written. A group whose worker failed comes with
    None, for the caller to read and check itself.
    """
    ahead = 2 * max(1, len(client.scheduler_info().get("workers", {})))
    upcoming = iter(chunks)
    in_flight: deque[tuple[list[FeedFile], Any]] = deque()

    def submit() -> None:
        while len(in_flight) < ahead and (chunk := next(upcoming, None)) is not None:
            in_flight.append(
                (chunk, client.submit(check_files, chunk, batch_size, strict, pure=False))
            )

    submit()
    while in_flight:
        chunk, future = in_flight.popleft()
        try:
            outcome = future.result()
        except Exception:  # noqa: BLE001 - a lost worker costs speed, not the group
            outcome = None
        finally:
            future.release()
        submit()
        yield chunk, outcome


@dataclass
class Group:
    """A group on its way: its files, the worker's check, and once planned, its writes."""

    chunk: list[FeedFile]
    checked: Any  # the future of ``check_files``, held on its worker
    outline: Any  # the future of ``outline``, then the Outline
    pushes: list[Push] = field(default_factory=list)
    written: Any = None  # the future of ``write_group``
    epoch: int = -1
    object_id: np.ndarray = field(default_factory=lambda: np.zeros(0, "int64"))  # its ids


@dataclass
class Done:
    """A group's outcome, in feed order: its responses, or what the caller must write itself."""

    chunk: list[FeedFile]
    outline: Outline | None
    responses: list[dict[str, Any]] | None = None  # written here; one per push
    error: str | None = None  # the lake refused the group: every file of it failed
    fallback: CheckedFiles | None = None  # write it in process, as checked
    again: bool = False  # write it in process from its files (the worker was lost)
    written: Written | None = None  # what its worker handed back (the benchmark weighs it)


class Chain:
    """The coordinator's side: groups planned, written on workers and committed in order."""

    def __init__(
        self,
        catalog: Catalog,
        client: Any,
        strict: bool,
        flow_run_id: str | None,
        seller: str = DEFAULT_SELLER,
    ):
        self.catalog, self.client = catalog, client
        self.strict, self.flow_run_id, self.seller = strict, flow_run_id, seller
        self.epoch = 0
        #: The records table's version and fence the next group's records commit at.
        self.records_at: tuple[int | None, int] = (None, 0)
        self.pending: deque[Group] = deque()
        self.ahead = 2 * max(1, len(client.scheduler_info().get("workers", {})))

    def run(self, chunks: list[list[FeedFile]], batch_size: int) -> Iterator[Done]:
        """Every group's outcome, in feed order; at most ``ahead`` groups checked ahead."""
        self.catalog.lake.ensure(again=False)
        upcoming = iter(chunks)
        checks: deque[Group] = deque()

        def submit() -> None:
            while (
                len(checks) + len(self.pending) < 2 * self.ahead
                and (chunk := next(upcoming, None)) is not None
            ):
                future = self.client.submit(check_files, chunk, batch_size, self.strict, pure=False)
                checks.append(Group(chunk, future, self.client.submit(outline, future, pure=False)))

        submit()
        while checks or self.pending:
            if checks and len(self.pending) < self.ahead:
                group = checks.popleft()
                submit()
                yield from self._plan(group)
                continue
            yield self._commit(self.pending.popleft())
            submit()

    def _plan(self, group: Group) -> Iterator[Done]:
        """Take a group's outline, give it ids and send it to be written; or settle it here."""
        if any(g.epoch != self.epoch for g in self.pending):
            yield from self._drain()  # planned on a forgotten index: each is planned again
        try:
            group.outline = group.outline.result()
        except Exception:  # noqa: BLE001 - a lost worker costs speed, not the group
            yield from self._drain()
            yield Done(group.chunk, None, again=True)
            return
        if not group.outline.requests:  # every file was unusable
            yield from self._drain()
            yield Done(group.chunk, group.outline)
            return
        group.pushes = self._pushes(group.outline)
        try:
            yield from self._send(group)
        except (FenceMoved, *LAKE_ERRORS):  # another writer moved the items fence
            self._break()
            yield from self._drain()
            yield from self._send(group)
        self.pending.append(group)

    def _send(self, group: Group) -> Iterator[Done]:
        """Give the group its ids and send them to its worker, to write its files.

        A group with items the lake holds rewrites their blocks, so the
        groups before it are committed first (a drain that breaks the chain
        gives the ids again).
        """
        lake, keys = self.catalog.lake, self.catalog.keys
        while True:
            epoch = self.epoch
            if not any(g.epoch == epoch for g in self.pending):  # the chain starts here
                self.records_at = lake.fence("records")  # read before the ids
            item_keys = sellers.keys(group.outline.client_ids, self.seller)
            object_id, known = keys.reserve(item_keys, group.outline.first)
            group.object_id = object_id
            versions = None
            if known.any():
                yield from self._drain()
                if self.epoch != epoch:
                    continue
                versions = {name: lake.version(name) for name in ("items", "records")}
            plan = Plan(
                lake.uri,
                lake.storage_options,
                [p.request_id for p in group.pushes],
                [p.received_at for p in group.pushes],
                self.flow_run_id,
                object_id,
                known,
                self.catalog.synonyms,
                versions,
                self.seller,
            )
            group.written = self.client.submit(write_group, group.checked, plan, pure=False)
            group.epoch = epoch
            return

    def _drain(self) -> Iterator[Done]:
        while self.pending:
            yield self._commit(self.pending.popleft())

    def _break(self) -> None:
        """The chain's ids cannot all land: forget the index; planned groups are planned again."""
        self.catalog.keys.forget()
        self.epoch += 1

    def _pushes(self, found: Outline) -> list[Push]:
        """The group's pushes as ``Catalog.push_many`` makes them: ids, times, in order."""
        started, pushes = time.perf_counter(), []
        for request in found.requests:
            received_at = self.catalog.clock()
            if pushes and received_at <= pushes[-1].received_at:
                received_at = pushes[-1].received_at + timedelta(microseconds=1)
            pushes.append(
                Push(
                    None,
                    str(uuid.uuid4()),
                    received_at,
                    started,
                    request.source,
                    self.flow_run_id,
                    request.idempotency_key,
                    strict=request.strict,
                    content=request.digest,
                    seller=self.seller,
                )
            )
        return pushes

    def _commit(self, group: Group) -> Done:
        """Commit a written group in the write order; on a failure, finish it as a crash is."""
        catalog, found = self.catalog, group.outline
        if group.epoch != self.epoch:  # planned on an index that was forgotten
            self._cancel(group.written)
            try:
                list(self._send(group))  # only stale groups are pending: nothing to drain
            except (FenceMoved, *LAKE_ERRORS) as exc:
                self._break()
                return Done(group.chunk, found, error=str(exc))
        try:
            written: Written = group.written.result()
        except Exception:  # noqa: BLE001 - lost for good: its files are read again here
            self._break()
            return Done(group.chunk, found, again=True)
        finally:
            self._cancel(group.written)
        try:
            fence, earlier = earlier_pushes(catalog.lake, group.pushes)
        except LAKE_ERRORS as exc:
            self._break()
            return Done(group.chunk, found, error=str(exc), written=written)
        if earlier:  # a resumed run: some batches landed before; the in-process path knows
            self._break()
            return Done(group.chunk, found, fallback=group.checked.result(), written=written)
        metadata = {"catalog_lake.request_id": group.pushes[0].request_id}
        if len(group.pushes) > 1:
            metadata["catalog_lake.pushes"] = str(len(group.pushes))
        sizes = np.array([r.size for r in found.requests], dtype="int64")
        item_keys = sellers.keys(found.client_ids, self.seller)
        files = WrittenGroup(group.pushes, sizes, metadata, written, item_keys, group.object_id)
        try:
            committed = commit_group(catalog, files, fence, self.records_at)
        except (FenceMoved, *LAKE_ERRORS, pa.ArrowException, PushError) as exc:
            self._break()
            if not files.journaled:
                return Done(group.chunk, found, error=str(exc), written=written)
            return self._repaired(group, written)
        self.records_at = committed.records_at
        group.checked.release()
        return Done(group.chunk, found, responses=committed.responses, written=written)

    def _repaired(self, group: Group, written: Written) -> Done:
        """A group whose ``raw`` rows landed and whose commits did not all: repaired from them."""
        try:
            repaired = self.catalog.repair(metrics=False)
        except (PushError, *LAKE_ERRORS) as exc:
            return Done(group.chunk, group.outline, error=str(exc), written=written)
        by_id = {r.get("catalog_push_request_id"): r for r in repaired}
        responses = [by_id.get(p.request_id) for p in group.pushes]
        if any(r is None for r in responses):
            error = "the group was not finished by repair: run catalog-lake repair"
            return Done(group.chunk, group.outline, error=error, written=written)
        group.checked.release()
        return Done(group.chunk, group.outline, responses=responses, written=written)

    @staticmethod
    def _cancel(future: Any) -> None:
        if future is not None:
            future.release()
