"""A push as a plan: what each table receives and what each push answers, before any write.

``Catalog`` writes the plan in the documented order (docs/design.md, "Write
order"); everything here is pure: a group of checked pushes in, rows and
responses out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa

from . import sellers
from .cells import Cells
from .errors import PushError
from .items import typed_items
from .parse import ParsedPush, Texts, combine, parse_push, payload_from_raw
from .records import Batch
from .schemas import RAW, REJECTS, WARNINGS
from .sellers import DEFAULT_SELLER
from .summary import push_response
from .validate import Validation, validate
from .validate import client_ids as client_ids_of


@dataclass(frozen=True)
class Push:
    """One push on its way through ``Catalog._ingest``: the payload and where it came from."""

    parsed: ParsedPush
    request_id: str
    received_at: datetime
    started: float
    source: str | None
    flow_run_id: str | None = None
    idempotency_key: str | None = None
    replay: bool = False
    #: Refuse items for warnings too (``Catalog.push(strict=True)``).
    strict: bool = False
    #: The payload's content digest, when the payload is on a Dask worker (``staged``).
    content: str | None = None
    #: The seller whose items these are (``sellers``).
    seller: str = DEFAULT_SELLER

    @property
    def claim(self) -> str | None:
        """The idempotency key as the lake claims it: a key is one seller's, never another's."""
        if self.idempotency_key is None:
            return None
        return sellers.keys([self.idempotency_key], self.seller)[0].as_py()

    @cached_property
    def digest(self) -> str:
        """SHA-256 of the items as received and how strictly they are judged.

        An idempotency key is bound to both: a strict retry under a key a lenient
        push used must not return the lenient answer (issue 26).
        """
        content = self.content or self.parsed.digest()
        if not self.strict:
            return content
        return hashlib.sha256(f"strict:{content}".encode()).hexdigest()

    def reparsed(self) -> Push:
        """This push with its cells laid out again from its raw texts (checked elsewhere)."""
        parsed = parse_push(payload_from_raw(self.parsed.item_json))
        return dataclasses.replace(self, parsed=parsed)


@dataclass(frozen=True)
class PushRequest:
    """One push of a group given to ``Catalog.push_many``.

    ``payload`` is what ``Catalog.push`` takes (a dict, JSON text or bytes)
    or a ``ParsedPush`` already made by ``parse_push``.
    """

    payload: Any
    source: str | None = None
    idempotency_key: str | None = None
    strict: bool = False
    seller: str = DEFAULT_SELLER


@dataclass
class Checked:
    """A group of pushes validated and typed: all of a push's work that needs no lake or clock.

    ``feeds`` computes it on Dask workers while the committing process writes
    the previous group (``check_group``); ``Catalog.push_many`` takes it for
    exactly the requests it was computed from.
    """

    checked: Validation
    client_ids: pd.Series
    keep: pd.Series  # passed and not superseded by a later push of the group
    typed: Batch  # typed_items of the kept rows, in order


@dataclass
class Derived:
    """What a batch of items becomes, before anything is written."""

    checked: Validation
    client_ids: pd.Series
    items: Batch
    records: Batch


def check_group(
    parsed: ParsedPush, groups: pd.Series, strict: bool | np.ndarray = False
) -> Checked:
    """Validate a group of pushes and type the items that will be stored.

    ``groups`` names each item's push: duplicates are judged within a push,
    and across pushes the last valid occurrence wins (``keep``), as it would
    have if the pushes came one after another. ``strict`` is one flag, or
    one per item (``validate``). Pure: no lake, no clock, so it can run in
    another process.
    """
    checked = validate(parsed, groups=groups, strict=strict)
    client_ids = client_ids_of(checked.frame)
    passed = checked.passed
    superseded = pd.Series(False, index=passed.index)
    superseded[passed] = client_ids[passed].duplicated(keep="last")
    keep = passed & ~superseded
    typed = typed_items(checked.frame.filter(pl.Series(keep.to_numpy())))
    # The validated cells are not needed past this point (and are costly to ship).
    checked = Validation(
        frame=checked.frame.filter(pl.Series([False] * len(keep))),
        errors=checked.errors,
        size=len(keep),
        warnings=checked.warnings,
    )
    return Checked(checked, client_ids, keep, typed)


def check_requests(requests: list[PushRequest]) -> tuple[list[PushRequest], Checked]:
    """``check_group`` of parsed pushes, made ahead of ``Catalog.push_many``; pushes made light.

    The requests' payloads are ``ParsedPush`` objects. What comes back is
    each request with its payload's ``received_only`` form (the texts, the
    errors and the content digest, not the cells), and the group's check:
    the pair ``push_many(requests, checked=checked)`` takes. A check costs
    most of a group's Python time and needs no lake, so an ingest makes it
    while the previous group is committed (``feeds``), or on a Dask worker
    (``workers.check_files``); the cells, the group's largest part, are freed
    before the commit instead of after it.
    """
    parsed = combine([request.payload for request in requests])
    sizes = [len(request.payload.item_json) for request in requests]
    groups = pd.Series(np.repeat(np.arange(len(requests)), sizes))
    strict = np.repeat([request.strict for request in requests], sizes).astype(bool)
    checked = check_group(parsed, groups, strict)
    light = [dataclasses.replace(r, payload=r.payload.received_only()) for r in requests]
    return light, checked


@dataclass
class ShippedCheck:
    """A ``Checked`` in Arrow, as it travels from a Dask worker to the committer.

    Only columns cross: the typed rows as one Arrow table, client ids and
    the keep mask as arrays, and the errors, which are few. The cells were
    dropped after typing (``check_group``).
    """

    typed: pa.Table
    client_ids: pa.Array
    keep: pa.Array
    errors: dict[int, list[dict[str, Any]]]
    size: int
    warnings: dict[int, list[dict[str, Any]]]

    @classmethod
    def of(cls, checked: Checked) -> ShippedCheck:
        """Pack a check for the trip."""
        return cls(
            checked.typed.as_table(),
            pa.array(checked.client_ids.to_numpy(dtype=object), pa.string()),
            pa.array(checked.keep.to_numpy(dtype=bool)),
            checked.checked.errors,
            checked.checked.size,
            checked.checked.warnings,
        )

    def unpacked(self) -> Checked:
        """The check as ``Catalog.push_many`` takes it."""
        return Checked(
            Validation(
                frame=Cells(pl.DataFrame(), pl.DataFrame()),
                errors=self.errors,
                size=self.size,
                warnings=self.warnings,
            ),
            pd.Series(self.client_ids.to_numpy(zero_copy_only=False), dtype=object),
            pd.Series(self.keep.to_numpy(zero_copy_only=False), dtype=bool),
            Batch.of_table(self.typed),
        )


def failures(pushes: list[Push], checked: Checked) -> list[list[dict[str, Any]]]:
    """Each push's failed items, numbered within the push (what ``rejects`` receives)."""
    return _by_push(pushes, checked, checked.checked.errors, "errors")


def warned(pushes: list[Push], checked: Checked) -> list[list[dict[str, Any]]]:
    """Each push's items stored with warnings, numbered within the push (``warnings`` table)."""
    return _by_push(pushes, checked, checked.checked.warnings, "warnings")


def _by_push(pushes: list[Push], checked: Checked, found: dict, key: str) -> list[list[dict]]:
    offsets = _offsets(pushes)
    client_list = checked.client_ids.tolist()
    by_push: list[list[dict[str, Any]]] = [[] for _ in pushes]
    for index, entries in found.items():
        number = int(np.searchsorted(offsets, index, side="right")) - 1
        within = index - int(offsets[number])
        by_push[number].append(
            {"index": within, "client_item_id": _str_or_none(client_list[index]), key: entries}
        )
    return by_push


def _offsets(pushes: list[Push]) -> np.ndarray:
    sizes = [len(p.parsed.item_json) for p in pushes]
    return np.concatenate([[0], np.cumsum(sizes)]).astype("int64")


def plan_responses(
    pushes: list[Push],
    checked: Checked,
    items: Batch,
    failed_by_push: list[list[dict[str, Any]]],
    warned_by_push: list[list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Each push's response: its stored items with their service ids, failures and warnings.

    In a dry run an item new to the lake has no id yet: ``items`` says so
    with a null ``object_id``, and the response maps it to null.
    """
    offsets = _offsets(pushes)
    passed = checked.checked.passed.to_numpy(dtype=bool)
    id_of = dict(
        zip(items["client_item_id"].to_pylist(), items["object_id"].to_pylist(), strict=True)
    )
    client_list = [_str_or_none(c) for c in checked.client_ids.tolist()]
    responses = []
    for number, push in enumerate(pushes):
        lo, hi = int(offsets[number]), int(offsets[number + 1])
        stored = [
            (c, id_of[c]) for c, ok in zip(client_list[lo:hi], passed[lo:hi], strict=True) if ok
        ]
        responses.append(
            push_response(
                push.request_id, hi - lo, stored, failed_by_push[number], warned_by_push[number]
            )
        )
    return responses


def raw_rows(
    pushes: list[Push],
    parsed: ParsedPush,
    request_ids: pd.Series,
    received_at: pd.Series,
    passed: np.ndarray,
    client_ids: pd.Series,
) -> pa.Table:
    """Raw-table rows of a group of pushes: every item as received, numbered per push.

    Each row carries its push's source, flow run and idempotency key, which
    ``repair`` gives back to the push it finishes.
    """
    sizes = [len(p.parsed.item_json) for p in pushes]

    def per_item(values: list[str | None]) -> pa.Array:
        return pa.array(np.repeat(np.array(values, dtype=object), sizes), pa.string())

    ids = request_ids.to_numpy(dtype=object)
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.array([], int)
    position = np.arange(len(ids)) - np.repeat(starts, np.diff(np.r_[starts, len(ids)]))
    received = pa.array(received_at, RAW.field("received_at").type)
    return pa.table(
        {
            "request_id": pa.array(ids, pa.string()),
            "index": pa.array(position.astype("int32")),
            "received_at": received,
            "client_item_id": pa.array(client_ids.astype(object), pa.string(), from_pandas=True),
            "passed": pa.array(passed),
            "item_json": Texts.joined([parsed.item_json]).array,
            "received_date": received.cast(pa.date32()),
            "source": per_item([p.source for p in pushes]),
            "flow_run_id": per_item([p.flow_run_id for p in pushes]),
            "idempotency_key": per_item([p.idempotency_key for p in pushes]),
            "strict": pa.array(np.repeat([p.strict for p in pushes], sizes).astype(bool)),
            "operation": pa.nulls(len(ids), pa.string()),  # a push (a delete says "delete")
            "seller": per_item([p.seller for p in pushes]),
        },
        schema=RAW,
    )


def reject_rows(pushes: list[Push], failed_by_push: list[list[dict[str, Any]]]) -> pa.Table:
    """Rejects-table rows: one per failed item, its errors with each value as JSON text."""
    return _item_rows(pushes, failed_by_push, "errors", "rejected_at", REJECTS)


def warning_rows(pushes: list[Push], warned_by_push: list[list[dict[str, Any]]]) -> pa.Table:
    """Warnings-table rows: one per item stored with warnings, each value as JSON text."""
    return _item_rows(pushes, warned_by_push, "warnings", "warned_at", WARNINGS)


def _item_rows(
    pushes: list[Push], by_push: list[list[dict[str, Any]]], key: str, stamp: str, schema
) -> pa.Table:
    """One row per listed item: its codes, and its entries with each value as JSON text.

    A value may be of any JSON type; ``Catalog.rejects`` and ``warnings`` turn it back.
    """
    rows = [
        {
            "request_id": push.request_id,
            "index": item["index"],
            "client_item_id": item["client_item_id"],
            "codes": list(dict.fromkeys(e["code"] for e in item[key])),
            key: [{**e, "value": json.dumps(e["value"], ensure_ascii=False)} for e in item[key]],
            stamp: push.received_at,
            "seller": push.seller,
        }
        for push, items in zip(pushes, by_push, strict=True)
        for item in items
    ]
    return pa.Table.from_pylist(rows, schema=schema)


def strict_of(values: list[bool | None]) -> np.ndarray:
    """Each raw row's strictness; rows from before warnings existed were judged strictly."""
    return np.array([True if v is None else bool(v) for v in values], dtype=bool)


def unfinished(
    raw_requests: list[str],
    raw_keys: list[str | None],
    pushed_requests: set[str],
    pushed_keys: set[str],
) -> list[str]:
    """Request ids in raw (in the order given) that still need ``repair``.

    A push whose request id is in ``pushes`` finished. So did, in effect, one
    that lost the race for its idempotency key to another push of the same
    content (docs/design.md, "Writers"): that push answers for it.
    """
    return [
        request_id
        for request_id, key in zip(raw_requests, raw_keys, strict=True)
        if request_id not in pushed_requests and (key is None or key not in pushed_keys)
    ]


def check_key(key: Any) -> None:
    """Refuse an idempotency key that is not 1 to 256 characters of text."""
    if not isinstance(key, str) or not key.strip() or len(key) > 256:
        raise PushError("invalid_idempotency_key", "idempotency_key must be 1 to 256 characters")


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def write_failed(
    exc: Exception, request_id: str, *, raw_written: bool, pushes: int = 1
) -> PushError:
    """The ``lake_write_failed`` error of a push, saying whether ``repair`` can finish it."""
    what = "this push" if pushes == 1 else f"the {pushes} pushes written together"
    hint = (
        f"; the items reached the raw table, so `catalog-lake repair` can finish {what}"
        if raw_written
        else f"; nothing of {what} was stored"
    )
    return PushError(
        "lake_write_failed", f"cannot write the lake: {exc}{hint}", request_id=request_id
    )
