"""The service's keys: each bound to one seller and a few actions (docs/service.md, "Keys").

A key is shown once, when it is made; the lake keeps only its SHA-256 in the
``access_keys`` table, with its seller, actions, creation time and optional
expiry. A key has 256 random bits, so a plain digest is as safe to keep as a
slow password hash, and costs microseconds per request instead of tens of
milliseconds. The key's id is part of the key's text, so a request names the
one row to compare with (in constant time), and a log line can name a key
without holding it.

The table is append-only, as ``cursors`` is: a revocation is a second row for
the key, so two operators making and revoking keys at once never conflict.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from .errors import LakeError, UsageError
from .lake import STORE_ERRORS, Lake
from .schemas import ACCESS_KEYS
from .sellers import seller_name

#: What a key may be allowed to do; every endpoint but ``/healthz`` needs one of them.
ACTIONS = ("push", "delete", "read", "search")
#: A key's text: ``clk_``, its id (16 hex digits, shown by ``keys list``), ``_``, its secret.
KEY = re.compile(r"clk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
KEY_ID = re.compile(r"[0-9a-f]{16}")
#: The longest note a key may carry (who it is for).
MAX_NOTE_CHARS = 200


@dataclass(frozen=True)
class AccessKey:
    """One key as the lake holds it: never the key itself."""

    key_id: str
    seller: str
    actions: frozenset[str]
    key_sha256: str
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    note: str | None = None

    def state(self, now: datetime) -> str:
        """``active``, ``revoked`` or ``expired`` at ``now``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"

    def listed(self, now: datetime) -> dict[str, Any]:
        """What ``keys list`` shows of the key: everything but its digest."""
        return {
            "key_id": self.key_id,
            "seller": self.seller,
            "actions": [a for a in ACTIONS if a in self.actions],
            "state": self.state(now),
            "created_at": self.created_at.isoformat(),
            "expires_at": None if self.expires_at is None else self.expires_at.isoformat(),
            "revoked_at": None if self.revoked_at is None else self.revoked_at.isoformat(),
            "note": self.note,
        }


def actions_of(given: str | Iterable[str]) -> frozenset[str]:
    """The actions named (``push,delete`` or a list), each from ``ACTIONS``, at least one."""
    names = given.split(",") if isinstance(given, str) else list(given)
    names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in names if n not in ACTIONS]
    if unknown or not names:
        raise UsageError(
            f"actions {','.join(unknown) or '(none)'!r} unknown; a key allows one or more of "
            f"{', '.join(ACTIONS)}",
            "actions",
        )
    return frozenset(names)


def digest(key: str) -> str:
    """The SHA-256 the lake keeps of a key."""
    return hashlib.sha256(key.encode()).hexdigest()


def create(
    lake: Lake,
    seller: str,
    actions: str | Iterable[str],
    *,
    now: datetime,
    expires_at: datetime | None = None,
    note: str | None = None,
) -> tuple[str, AccessKey]:
    """Make a key for ``seller``: its text (shown once, kept nowhere) and what the lake keeps.

    A seller need not have items yet: a new seller's first push needs a key.

    Raises:
        UsageError: a seller, an action, an expiry or a note out of bounds.
    """
    seller = seller_name(seller)
    allowed = actions_of(actions)
    if expires_at is not None and expires_at <= now:
        raise UsageError(f"expires_at {expires_at.isoformat()} is not after now", "expires_at")
    if note is not None and (len(note) > MAX_NOTE_CHARS or not note.isprintable()):
        raise UsageError(f"note: printable text of at most {MAX_NOTE_CHARS} characters", "note")
    key_id = secrets.token_hex(8)
    text = f"clk_{key_id}_{secrets.token_urlsafe(32)}"
    made = AccessKey(key_id, seller, allowed, digest(text), now, expires_at, None, note)
    _append(lake, made, "keys create")
    return text, made


def revoke(lake: Lake, key_id: str, *, now: datetime) -> AccessKey:
    """Revoke a key by its id, for good; revoking it again changes nothing.

    Raises:
        UsageError: ``key_id`` is not a key id.
        LakeError: the lake has no such key.
    """
    if not KEY_ID.fullmatch(key_id or ""):
        raise UsageError(f"{key_id!r} is not a key id (16 hex digits, see keys list)", "key_id")
    found = load(lake).get(key_id)
    if found is None:
        raise LakeError(f"no key {key_id} in {lake.uri}; nothing was revoked")
    if found.revoked_at is not None:
        return found
    revoked = replace(found, revoked_at=now)
    _append(lake, revoked, "keys revoke")
    return revoked


def load(lake: Lake) -> dict[str, AccessKey]:
    """Every key the lake holds, by id, in its latest state (a revocation wins)."""
    if lake.version("access_keys") is None:
        return {}
    try:
        rows = lake.read("access_keys").to_pylist()
    except STORE_ERRORS as exc:
        raise LakeError(f"cannot read the keys of {lake.uri}: {exc}") from exc
    found: dict[str, AccessKey] = {}
    for row in sorted(rows, key=lambda r: r["revoked_at"] is not None):
        found[row["key_id"]] = AccessKey(**{**row, "actions": frozenset(row["actions"])})
    return found


def verify(keys: dict[str, AccessKey], presented: str, now: datetime) -> AccessKey | None:
    """The active key ``presented`` is, or None: unknown, wrong, revoked or expired."""
    match = KEY.fullmatch(presented)
    if match is None:
        return None
    found = keys.get(match.group(1))
    if found is None or not hmac.compare_digest(found.key_sha256, digest(presented)):
        return None
    return found if found.state(now) == "active" else None


class Keyring:
    """The keys as a server holds them: read again only when the table has a new version.

    It opens its own ``Lake`` object, so that checking for new keys never
    shares a table handle with the thread that writes items.
    """

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.lake = Lake(uri, storage_options)
        self.keys: dict[str, AccessKey] = {}
        self.version: int | None = None

    def refresh(self) -> bool:
        """Read the keys again if they changed; whether they did."""
        version = self.lake.version("access_keys")
        if version == self.version and version is not None:
            return False
        self.keys = load(self.lake)
        self.version = version
        return True


def _append(lake: Lake, key: AccessKey, operation: str) -> None:
    row = {**asdict(key), "actions": sorted(key.actions)}
    table = pa.Table.from_pylist([row], schema=ACCESS_KEYS)
    try:
        lake.append("access_keys", table, {"catalog_lake.operation": operation})
    except STORE_ERRORS as exc:
        raise LakeError(f"cannot write the keys of {lake.uri}: {exc}") from exc


def utc(value: str, parameter: str = "expires") -> datetime:
    """An ISO date or date-time as an instant (UTC where it names no zone)."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(
            f"{parameter} {value!r} is not an ISO date or date-time", parameter
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


__all__ = ["ACTIONS", "AccessKey", "Keyring", "actions_of", "create", "load", "revoke", "verify"]
