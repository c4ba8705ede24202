"""Dask workers: groups of feed files read, parsed, validated and typed away from the lake.

A worker never opens the lake. It returns what the one committer (the
ingest's own process, ``feeds.ingest_files``) needs to write a group: the
pushes' raw texts and the checked rows in Arrow, without decoded items.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .errors import PushError
from .push import PushRequest, ShippedCheck, check_requests
from .sources import (
    PARSE_ITEMS,
    FeedFile,
    FileBatches,
    collector_paused,
    file_batches,
    parse_together,
)

#: Where a local Dask scheduler serves HTTP: a free port on this machine.
LOCAL_HTTP = "127.0.0.1:0"


@dataclass
class CheckedFiles:
    """What ``check_files`` made of some feed files, ready for ``Catalog.push_many``."""

    pushes: list[int | str]  # per file: its number of pushes, or why it is invalid
    requests: list[PushRequest]  # payloads are ``ParsedPush.received_only()``
    checked: ShippedCheck | None


def check_files(files: list[FeedFile], batch_size: int, strict: bool = False) -> CheckedFiles:
    """Read, parse, validate and type some feed files: a group's work that needs no lake.

    Runs on a Dask worker (``feeds.ingest_files``); what it returns is what the
    committer needs, without the decoded items, its rows in Arrow.
    """
    pushes: list[int | str] = []
    requests: list[PushRequest] = []
    with collector_paused(collect=True):
        read: list[FileBatches | str] = []
        for feed in files:
            try:
                read.append(file_batches(feed, batch_size, strict))
            except (PushError, OSError) as exc:
                read.append(str(exc))
        # Small files are parsed together, as an ingest in one process parses them.
        parse_together([one for one in read if not isinstance(one, str)], PARSE_ITEMS)
        for one in read:
            if isinstance(one, str):  # unreadable: why
                pushes.append(one)
                continue
            try:
                file_requests = list(one.pushes())
            except PushError as exc:
                pushes.append(str(exc))
                continue
            pushes.append(len(file_requests))
            requests += file_requests
        checked = None
        if requests:
            requests, group = check_requests(requests)
            checked = ShippedCheck.of(group)
    return CheckedFiles(pushes, requests, checked)


@contextmanager
def dask_client(workers: int = 0, address: str | None = None, client: Any = None):
    """A Dask client for one run: the one given, one to ``address``, or a ``LocalCluster``.

    The local cluster has ``workers`` processes of one thread each (the
    work is Python and Arrow, bound by the GIL) and is closed with the run.
    Workers only parse, validate and type; they never open the lake.
    """
    if client is not None:
        yield client
        return
    from distributed import Client, LocalCluster

    if address:
        with Client(address) as connected:
            yield connected
        return
    with (
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
