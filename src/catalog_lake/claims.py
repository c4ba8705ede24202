"""What the pushes table already holds: each request id and idempotency key, claimed once.

The ``pushes`` table is written last by every push (``store.commit_group``),
so a key is only "used" once its push completed. A push under a key that is
stored answers with the stored response; under the same key with other
content it is refused (``idempotency_conflict``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from . import sellers
from .errors import PushError
from .lake import Lake
from .literals import quote
from .push import Push


def earlier_pushes(lake: Lake, pushes: list[Push]) -> tuple[int, dict[str, Earlier]]:
    """The pushes table's fence, and the pushes already stored under these pushes' keys.

    The keys live in the ``pushes`` table, written last by every push, so
    a key is only "used" once its push completed. The fence is read
    first: a push under one of these keys that lands after this read
    makes our pushes commit fail, and it is looked at then
    (``store._claimed``).
    """
    _, fence = lake.fence("pushes")
    keys = sorted({p.idempotency_key for p in pushes if p.idempotency_key is not None})
    return fence, stored(lake, keys=keys)


def stored(
    lake: Lake,
    *,
    keys: list[str] = (),
    request_ids: list[str] = (),  # type: ignore[assignment]
) -> dict[str, Earlier]:
    """Stored pushes by claimed key (``Push.claim``) and by request id (the first of each)."""
    clauses = []
    if keys:
        clauses.append(f"idempotency_key IN ({', '.join(quote(k) for k in keys)})")
    if request_ids:
        clauses.append(f"request_id IN ({', '.join(quote(r) for r in request_ids)})")
    if not clauses:
        return {}
    found = lake.read(
        "pushes",
        "SELECT request_id, idempotency_key, payload_sha256, response_json, seller "
        f'FROM "pushes" WHERE {" OR ".join(clauses)} ORDER BY received_at',
    ).to_pylist()
    by_key: dict[str, Earlier] = {}
    for row in found:
        earlier = Earlier(row["request_id"], row["payload_sha256"], row["response_json"])
        by_key.setdefault(f"request:{row['request_id']}", earlier)
        if row["idempotency_key"] is not None:
            # A key is one seller's: another seller's push under it is another push.
            claim = sellers.keys([row["idempotency_key"]], row["seller"])[0].as_py()
            by_key.setdefault(f"key:{claim}", earlier)
    return by_key


@dataclass(frozen=True)
class Earlier:
    """A stored push: its request id, payload digest and response (as JSON text)."""

    request_id: str
    digest: str
    response_json: str

    @property
    def response(self) -> dict[str, Any]:
        """The response it answered, which a retry under its key answers again."""
        return json.loads(self.response_json)


def idempotent(
    pushes: list[Push], earlier: dict[str, Earlier]
) -> tuple[list[dict[str, Any] | None], list[int], dict[str, int]]:
    """Which pushes to carry out, and the stored answers of those whose key was used.

    Returns the responses known so far (a stored push under the same key
    and payload answers for one), the numbers of the pushes to carry out,
    and, per key, the first push of the group that uses it (a key repeated
    within the group takes that push's answer).

    Raises:
        PushError: a key was used, here or before, with a different payload.
    """
    responses: list[dict[str, Any] | None] = [None] * len(pushes)
    todo: list[int] = []
    first_with_key: dict[str, int] = {}
    for number, push in enumerate(pushes):
        key = push.claim  # the key as its seller's (``Push.claim``)
        if key is None:
            todo.append(number)
            continue
        stored = earlier.get(f"key:{key}")
        digest = stored.digest if stored is not None else None
        if key in first_with_key:
            digest = pushes[first_with_key[key]].digest
        if digest is not None and digest != push.digest:
            raise conflict(push.idempotency_key)
        if stored is not None:
            responses[number] = stored.response
        elif key not in first_with_key:
            first_with_key[key] = number
            todo.append(number)
    return responses, todo, first_with_key


def conflict(key: str, *, after_write: bool = False) -> PushError:
    """The refusal of a key used for other content (``after_write``: found at the last commit)."""
    if after_write:
        return PushError(
            "idempotency_conflict",
            f"idempotency_key {key!r} was stored by another push with a different payload "
            "while this one was being written; this push's raw, rejects and item rows were "
            "written but it is not recorded as a push. Use a new key for new content",
        )
    return PushError(
        "idempotency_conflict",
        f"idempotency_key {key!r} was already used for a different payload (or for the "
        "same items judged with another strict setting); use a new key for new content",
    )


__all__ = ["Earlier", "conflict", "earlier_pushes", "idempotent", "stored"]
