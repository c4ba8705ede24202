"""One exception hierarchy and the per-item error codes.

A push fails as a whole only when the payload itself is unusable or the lake
cannot be written; everything else is a per-item error that rides in the push
response (SPEC 7: partial failure is reported by the failed count).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

#: Terminal colour codes, which delta-rs puts in its error texts.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: Causes the store words obscurely, and what fixes each (README, "Operations").
_FIXES = {
    "URL scheme is not allowed": (
        "the object store's endpoint is plain http://, which needs AWS_ALLOW_HTTP=true in the "
        "environment (or --storage-option AWS_ALLOW_HTTP=true)"
    ),
}


def one_line(message: str) -> str:
    """An error text as one plain line, with the fix appended where the cause is known.

    Errors from the store arrive as several indented lines with colour codes
    (delta-rs's error chains); a log line or a terminal wants one line that
    says what to do.
    """
    text = " ".join(_ANSI.sub("", message).split())
    fixes = [fix for cause, fix in _FIXES.items() if cause in text and fix not in text]
    return "; ".join([text, *fixes])


def first_line(exc: Exception) -> str:
    """An error's first line, for one-line messages."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class ErrorCode(StrEnum):
    """Why one item was rejected; stable strings that callers can switch on."""

    MISSING_REQUIRED_FIELD = "missing_required_field"
    INVALID_TYPE = "invalid_type"
    INVALID_STRING = "invalid_string"
    INVALID_TEXT = "invalid_text"
    INVALID_IDENTIFIER = "invalid_identifier"
    TEXT_TOO_LONG = "text_too_long"
    INVALID_BOOLEAN = "invalid_boolean"
    INVALID_DURATION = "invalid_duration"
    INVALID_COUNT = "invalid_count"
    INVALID_PRICE = "invalid_price"
    INVALID_DATE = "invalid_date"
    INVALID_DISCOUNT_WINDOW = "invalid_discount_window"
    PRICE_ABOVE_MRP = "price_above_mrp"
    INVALID_URL = "invalid_url"
    INVALID_LIST = "invalid_list"
    INVALID_NUMBER = "invalid_number"
    TOO_MANY_VALUES = "too_many_values"
    DUPLICATE_KEY = "duplicate_key"
    DUPLICATE_IN_PUSH = "duplicate_in_push"
    ITEM_TOO_LARGE = "item_too_large"
    #: A delete named a client_item_id the lake never stored (issue 27).
    UNKNOWN_ITEM = "unknown_item"


class CatalogLakeError(Exception):
    """Base of every error this package raises on purpose; its message is one line."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*(one_line(a) if isinstance(a, str) else a for a in args))


class PushError(CatalogLakeError):
    """A push that could not be carried out at all; nothing of it was stored.

    ``reason`` is a short machine-readable word (``invalid_payload``,
    ``too_many_items``, ``payload_too_large``, ``lake_write_failed``, ...) and
    ``detail`` the human explanation, which ends with the fix when one is known.
    """

    def __init__(self, reason: str, detail: str, *, request_id: str | None = None) -> None:
        self.reason = reason
        self.detail = one_line(detail)
        self.request_id = request_id
        super().__init__(f"push refused ({reason}): {self.detail}")

    def __reduce__(self):
        # Crosses process boundaries (a spawned writer, a Dask worker) as itself, not as
        # a TypeError from unpickling with the one-argument default.
        return (_push_error, (self.reason, self.detail, self.request_id))


def _push_error(reason: str, detail: str, request_id: str | None) -> PushError:
    return PushError(reason, detail, request_id=request_id)


class LakeError(CatalogLakeError):
    """The lake could not be read, or holds something this version cannot use."""


class UsageError(CatalogLakeError):
    """A call that cannot be carried out as asked: an argument is wrong, missing or out of range.

    The message names the library's own parameters as Python spells them
    (``as_of``, ``where``, ``max_share``); ``parameters`` lists the ones it names,
    the first being the one at fault (``parameter``). A front end words them its
    own way: the CLI prints its flags (``--as-of``) and exits 2, as for its own
    usage errors (``worded``). The class, not the message text, says it is usage.
    """

    def __init__(self, message: str, *parameters: str) -> None:
        super().__init__(message)
        self.parameters = parameters
        self.parameter = parameters[0] if parameters else None

    def worded(self, spelling: dict[str, str]) -> str:
        """The message with each named parameter spelled as ``spelling`` has it.

        Only the first unquoted mention of each is respelled: the same word may
        come again inside the value the caller gave, which is quoted as given.
        """
        text = str(self)
        for name in self.parameters:
            if name in spelling:
                text = re.sub(
                    rf"(?<![\w'\"-]){re.escape(name)}(?![\w'\"-])", spelling[name], text, count=1
                )
        return text

    def __reduce__(self):
        # Crosses process boundaries (a Dask worker) as its own class, with its parameters.
        return (_usage_error, (type(self), str(self), self.parameters))


def _usage_error(kind: type[UsageError], message: str, parameters: tuple[str, ...]) -> UsageError:
    return kind(message, *parameters)


class SearchError(UsageError):
    """A search that cannot be run as asked (a filter, a facet or a page out of bounds)."""


class IngestError(CatalogLakeError):
    """An ingest run finished, but some feed files failed; ``summary`` is the run summary.

    Everything else of the run was stored and recorded; the message names the
    files that failed and why, so a scheduled run ends failed and alerts. Files
    that failed in an earlier run and are still unchanged count too
    (``summary.run_failed``).
    """

    def __init__(self, summary: dict) -> None:
        self.summary = summary
        failed = [
            f"{f['path']} ({f['status']}): {f['error']}" for f in summary["files"]["failed"]
        ] + [
            f"{path} (failed before and unchanged)"
            for path in summary["files"].get("still_failing", [])
        ]
        named = "; ".join(failed[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        super().__init__(f"{len(failed)} feed file(s) failed: {named}{more}")

    def __reduce__(self):
        return (IngestError, (self.summary,))


class FenceMoved(LakeError):
    """Another writer committed to a fenced table after this one read it.

    What was derived from the old snapshot (service ids, the idempotency
    check) may be stale, so the writer reads again and retries; it surfaces
    only when every retry lost (docs/design.md, "Writers").
    """


class NoLakeError(LakeError):
    """There is no lake at the path or URI given: nothing to read, repair or maintain."""


def item_error(field: str, code: ErrorCode, message: str, value: Any = None) -> dict[str, Any]:
    """Build one entry of ``catalog_push_failed_items[*].errors``."""
    return {"field": field, "code": str(code), "message": message, "value": value}


def item_warning(
    field: str, code: ErrorCode, message: str, value: Any, action: str, repaired_to: Any = None
) -> dict[str, Any]:
    """Build one entry of ``catalog_push_warning_items[*].warnings``.

    ``action`` is ``dropped`` (the item is stored without the value) or
    ``repaired`` (stored as ``repaired_to``, the value's one reading).
    """
    return {
        "field": field,
        "code": str(code),
        "message": message,
        "value": value,
        "action": action,
        "repaired_to": repaired_to,
    }
