"""The one thread that uses a served ``Catalog``, and the pushes that wait for it.

``service.py`` runs every call that touches the lake through ``Lane``: the
library's key index, search index and table handles have one user, as in a
CLI process. Pushes that arrive while the lane is busy wait in ``Batcher`` and
are written together by ``Catalog.push_many`` (docs/design.md, "The service").
"""

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .catalog import Catalog
from .errors import PushError
from .push import PushRequest

#: Items written together at most, when pushes queue up while the lake is busy.
MAX_GROUP_ITEMS = 20_000


class Lane:
    """The one thread that uses the ``Catalog``: its calls run there, one at a time."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.executor: ThreadPoolExecutor | None = None

    async def run(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` on the lane, awaited."""
        if self.executor is None:  # started by the first call after each start of the app
            self.executor = ThreadPoolExecutor(1, thread_name_prefix="catalog-lake-lane")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: call(*args, **kwargs))

    def close(self) -> None:
        """Finish what was given to the lane, then stop its thread."""
        executor, self.executor = self.executor, None
        if executor is not None:
            executor.shutdown(wait=True)


class Batcher:
    """Pushes that arrive while the lane is busy, written together when it is free.

    Nothing waits on a timer: the first push goes at once, and those that came
    in during its commit go in the next group. A group is one seller's (the
    library writes one seller per group), and one push whose group fails for a
    push-level reason (an idempotency key reused with other content) is
    written again alone, so each push gets its own answer, as it would have
    alone.
    """

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.waiting: list[tuple[PushRequest, int, asyncio.Future]] = []
        self.draining = False
        self.task: asyncio.Task | None = None

    async def push(self, request: PushRequest, items: int) -> dict[str, Any]:
        """Queue one push and await its response (or its ``PushError``)."""
        answer = asyncio.get_running_loop().create_future()
        self.waiting.append((request, items, answer))
        if not self.draining:
            self.draining = True
            self.task = asyncio.create_task(self._drain())  # held: a task may not be collected
        return await answer

    async def _drain(self) -> None:
        try:
            while self.waiting:
                group = self._next_group()
                try:
                    answers = await self.lane.run(_write_group, self.lane.catalog, group[0])
                except BaseException as exc:  # the lane itself failed: every push hears it
                    answers = [exc] * len(group[1])
                for future, answer in zip(group[1], answers, strict=True):
                    if future.done():
                        continue  # its client went away; the push was still written
                    if isinstance(answer, BaseException):
                        future.set_exception(answer)
                    else:
                        future.set_result(answer)
        finally:
            self.draining = False

    def _next_group(self) -> tuple[list[PushRequest], list[asyncio.Future]]:
        """The first waiting push's seller's pushes, in order, up to ``MAX_GROUP_ITEMS``.

        Another seller's pushes wait for the next group, keeping their order;
        once one of the seller's pushes does not fit, the later ones wait too,
        so that a seller's pushes are always written in the order they came.
        """
        seller = self.waiting[0][0].seller
        taken: list[tuple[PushRequest, int, asyncio.Future]] = []
        left: list[tuple[PushRequest, int, asyncio.Future]] = []
        items, full = 0, False
        for entry in self.waiting:
            if entry[0].seller == seller and not full:
                full = bool(taken) and items + entry[1] > MAX_GROUP_ITEMS
                if not full:
                    taken.append(entry)
                    items += entry[1]
                    continue
            left.append(entry)
        self.waiting = left
        return [e[0] for e in taken], [e[2] for e in taken]


def _write_group(catalog: Catalog, requests: list[PushRequest]) -> list[Any]:
    """One seller's queued pushes written together; each push alone if the group is refused."""
    try:
        return catalog.push_many(requests)
    except PushError as exc:
        if len(requests) == 1:
            return [exc]
    answers: list[Any] = []
    for request in requests:
        try:
            answers.append(catalog.push_many([request])[0])
        except PushError as exc:
            answers.append(exc)
    return answers


__all__ = ["MAX_GROUP_ITEMS", "Batcher", "Lane"]
