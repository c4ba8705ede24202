"""A full refresh: a feed that is the whole catalog deletes what it no longer carries.

After an ingest run marked ``full_refresh`` has stored every file, the items
of its scope (``Refresh.scope``) that the run did not carry are deleted, in
delete requests (``deletes.delete``), unless the guards stop it: more than
``max_delete_share`` of the scope at once, or in a day. A refresh is one
seller's (``sellers``): it never deletes another seller's items, whatever
the paths (docs/lifecycle.md, "Lifecycle").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .deletes import DELETE_BATCH, REQUEST_KEY, delete
from .errors import UsageError
from .literals import quote, sql_timestamp
from .sellers import DEFAULT_SELLER, sql_filter
from .sources import place_of
from .store import Catalog

#: The largest share of its scope a refresh deletes unless told otherwise: a feed
#: that lost a fifth of the catalog overnight is more likely truncated than true.
DEFAULT_MAX_DELETE_SHARE = 0.2
#: Ids a refresh's report lists one by one; the rest are counted.
LISTED_IDS = 10_000
SCOPES = ("source", "all")


#: How ``ingest`` (the CLI's and the flows') names each of ``Refresh``'s fields.
REFRESH_PARAMETERS = {
    "scope": "refresh_scope",
    "category": "refresh_category",
    "max_share": "max_delete_share",
    "allow_mass_delete": "allow_mass_delete",
    "max_daily_share": "max_delete_share_per_day",
}


@dataclass(frozen=True)
class Refresh:
    """A full-catalog refresh: which stored items it may delete, and how many at most.

    ``scope="source"`` (the default): the items whose last push came from a
    file of the ingested source (folder or prefix), so one seller's feed
    folder never deletes another's. ``"all"``: every item of the lake.
    ``category`` narrows either to one ``lake_category``.

    ``max_share`` bounds one run; runs add up (five runs that each drop 19%
    delete 66 of 100 items). ``max_daily_share``, when set, also bounds what
    refreshes of the same source deleted in the last 24 hours together with
    this run, as a share of the scope they had (issue 42).
    """

    scope: str = "source"
    category: str | None = None
    max_share: float = DEFAULT_MAX_DELETE_SHARE
    allow_mass_delete: bool = False
    max_daily_share: float | None = None

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise UsageError(f"scope takes {' or '.join(SCOPES)}; got {self.scope!r}", "scope")
        if not 0 <= self.max_share <= 1:
            raise UsageError(f"max_share is a share from 0 to 1; got {self.max_share}", "max_share")
        if self.max_daily_share is not None and not 0 <= self.max_daily_share <= 1:
            raise UsageError(
                f"max_daily_share is a share from 0 to 1; got {self.max_daily_share}",
                "max_daily_share",
            )


#: A refusal is read in a flow's summary and in a terminal: it names the flow's parameter
#: and the CLI's flag, since the library cannot know which of the two will read it.
_MASS_DELETE_SHARE = "max_delete_share (--max-delete-share)"
_DAILY_DELETE_SHARE = "max_delete_share_per_day (--max-delete-share-per-day)"


def refresh(
    catalog: Catalog,
    how: Refresh,
    *,
    source: str,
    run_id: str,
    failed_files: list[str],
    seen: set[str],
    unchanged: list[tuple[str, str]],
    paths: list[str] = (),  # type: ignore[assignment]
    dry_run: bool = False,
    flow_run_id: str | None = None,
    seller: str = DEFAULT_SELLER,
) -> dict[str, Any]:
    """Delete the items of the refresh's scope that the run did not carry, if it is safe.

    The scope is ``seller``'s items alone, and the guards count them alone:
    one seller's refresh never deletes another's items, whatever the paths.

    ``seen`` are the ids the run's pushes carried, ``unchanged`` the (path,
    checksum) of the source's files skipped as already ingested (their items
    are part of the catalog too), ``failed_files`` the files that failed or
    were not read, ``paths`` every file of the source this run found. A run
    with a failed file, or that would delete more than ``how.max_share`` of
    its scope without ``how.allow_mass_delete``, deletes nothing and says why.
    """
    report: dict[str, Any] = {
        "scope": how.scope + (f", lake_category = {how.category}" if how.category else ""),
        "source": source,
        "seller": seller,
        "max_delete_share": how.max_share,
    }
    if failed_files:
        shown = ", ".join(failed_files[:3]) + (" ..." if len(failed_files) > 3 else "")
        return report | _stopped(
            f"{len(failed_files)} file(s) of the run failed or were not read ({shown}); a "
            "refresh deletes only after every file was stored, so nothing was deleted"
        )
    if not catalog.lake.exists():
        return report | {
            "status": "nothing_to_delete",
            "in_scope": 0,
            "to_delete": 0,
            "deleted": 0,
            "ids": [],
        }
    if seller != DEFAULT_SELLER and not catalog.lake.has("items", "seller", seller):
        return report | _stopped(
            f"seller {seller!r} has no items in this lake: a refresh deletes only the items of "
            "the seller it names, so nothing was deleted"
        )
    carried = set(seen) | _carried_before(catalog, source, unchanged, seller)
    in_scope = _scope(catalog, how, source, paths, seller)
    gone = sorted(set(in_scope) - carried)
    report |= {"in_scope": len(in_scope), "to_delete": len(gone), "ids": gone[:LISTED_IDS]}
    share = len(gone) / len(in_scope) if in_scope else 0.0
    if gone and share > how.max_share and not how.allow_mass_delete:
        return report | _stopped(
            f"the refresh would delete {len(gone):,} of the {len(in_scope):,} items in its scope "
            f"({share:.0%}), more than the {how.max_share:.0%} allowed; nothing was deleted. "
            "A truncated feed looks like this; if the catalog really shrank, run again with "
            f"allow_mass_delete (--allow-mass-delete), or raise {_MASS_DELETE_SHARE}"
        )
    if gone and how.max_daily_share is not None and not how.allow_mass_delete:
        since = catalog.clock() - timedelta(hours=24)
        earlier = _deleted_by_refreshes(catalog, source, since, seller)
        daily = (earlier + len(gone)) / (len(in_scope) + earlier)
        report["deleted_last_24h"] = earlier
        if daily > how.max_daily_share:
            return report | _stopped(
                f"with the {earlier:,} items that refreshes of this source deleted in the last "
                f"24 hours, the refresh would delete {earlier + len(gone):,} of "
                f"{len(in_scope) + earlier:,} in a day ({daily:.0%}), more than the "
                f"{how.max_daily_share:.0%} allowed per day; nothing was deleted. If the catalog "
                "really shrank, run again with allow_mass_delete (--allow-mass-delete), or "
                f"raise {_DAILY_DELETE_SHARE}"
            )
    if not gone:
        return report | {"status": "nothing_to_delete", "deleted": 0}
    if dry_run:
        return report | {"status": "dry_run", "deleted": 0}
    responses = [
        delete(
            catalog,
            gone[start : start + DELETE_BATCH],
            idempotency_key=f"refresh:{run_id}:{number}",
            source=f"refresh:{source}",
            flow_run_id=flow_run_id,
            seller=seller,
        )
        for number, start in enumerate(range(0, len(gone), DELETE_BATCH))
    ]
    deleted = sum(1 for r in responses for entry in r["items"] if entry["status"] == "deleted")
    return report | {
        "status": "deleted",
        "deleted": deleted,
        "request_ids": [r[REQUEST_KEY] for r in responses],
    }


def _deleted_by_refreshes(catalog: Catalog, source: str, since: datetime, seller: str) -> int:
    """Items of ``seller`` that refreshes of ``source`` deleted since ``since``."""
    rows = catalog.lake.read(
        "pushes",
        f"SELECT response_json FROM \"pushes\" WHERE operation = 'delete' AND source = "
        f"{quote(f'refresh:{source}')} AND received_at >= {sql_timestamp(since)} "
        f"AND {sql_filter(seller)}",
    )["response_json"].to_pylist()
    return sum(
        entry.get("status") == "deleted" for text in rows for entry in json.loads(text)["items"]
    )


def _stopped(reason: str) -> dict[str, Any]:
    return {"status": "stopped", "reason": reason, "deleted": 0}


def _scope(catalog: Catalog, how: Refresh, source: str, paths: list[str], seller: str) -> list[str]:
    """The live items of ``seller`` that a refresh of ``source`` may delete."""
    where = ["deleted_at IS NULL", sql_filter(seller)]
    if how.category is not None:
        where.append(f"lake_category = {quote(how.category)}")
    items = catalog.lake.read(
        "items", f'SELECT client_item_id, request_id FROM "items" WHERE {" AND ".join(where)}'
    )
    if how.scope == "all":
        return items["client_item_id"].to_pylist()
    files = catalog.lake.read(
        "files",
        f'SELECT path, request_ids FROM "files" WHERE source = {quote(source)} '
        f"AND {sql_filter(seller)}",
    )
    recorded = pc.list_flatten(files["request_ids"]).cast(pa.string()).to_pylist()
    # A push of a run killed before it recorded its files, finished by `repair`, is known
    # by its batch key, which names the file's place: its items are in scope too.
    places = {place_of(source, p) for p in [*files["path"].to_pylist(), *paths]}
    keyed = catalog.lake.read(
        "pushes", f'SELECT request_id, idempotency_key FROM "pushes" WHERE {sql_filter(seller)}'
    ).to_pylist()
    batches = [
        r["request_id"]
        for r in keyed
        if (r["idempotency_key"] or "").startswith("file:")
        and r["idempotency_key"].split(":")[1] in places
    ]
    # A run that lost the race for a batch's key to a run beside it (two refreshes of one
    # folder at once) had already written the batch's items under its own request id, which
    # no pushes row names: raw keeps that id's key, so its items stay in scope (issue 42).
    known = {*recorded, *(r["request_id"] for r in keyed)}
    orphans = sorted(set(items["request_id"].cast(pa.string()).to_pylist()) - known)
    batches += _raw_batches(catalog, orphans, places)
    from_source = pa.array(sorted({*recorded, *batches}), pa.string())
    mine = pc.is_in(items["request_id"].cast(pa.string()), from_source)
    return items["client_item_id"].filter(mine).to_pylist()


def _raw_batches(catalog: Catalog, request_ids: list[str], places: set[str]) -> list[str]:
    """Those of ``request_ids`` whose raw rows carry a batch key of one of ``places``."""
    found: list[str] = []
    for start in range(0, len(request_ids), 500):
        listed = ", ".join(quote(r) for r in request_ids[start : start + 500])
        rows = catalog.lake.read(
            "raw",
            f'SELECT DISTINCT request_id, idempotency_key FROM "raw" WHERE request_id IN '
            f"({listed}) AND idempotency_key LIKE 'file:%'",
        ).to_pylist()
        found += [r["request_id"] for r in rows if r["idempotency_key"].split(":")[1] in places]
    return found


def _carried_before(
    catalog: Catalog, source: str, unchanged: list[tuple[str, str]], seller: str
) -> set[str]:
    """The ids of the source's files this run skipped as already ingested and unchanged."""
    if not unchanged:
        return set()
    files = catalog.lake.read(
        "files",
        f'SELECT path, checksum, request_ids FROM "files" WHERE source = {quote(source)} '
        f"AND status = 'ingested' AND {sql_filter(seller)}",
    ).to_pylist()
    wanted = set(unchanged)
    request_ids = sorted(
        {r for row in files if (row["path"], row["checksum"]) in wanted for r in row["request_ids"]}
    )
    carried: set[str] = set()
    for start in range(0, len(request_ids), 500):
        listed = ", ".join(quote(r) for r in request_ids[start : start + 500])
        rows = catalog.lake.read(
            "raw",
            f'SELECT DISTINCT client_item_id FROM "raw" WHERE request_id IN ({listed}) '
            "AND operation IS NULL AND client_item_id IS NOT NULL",
        )
        carried.update(rows["client_item_id"].cast(pa.string()).to_pylist())
    return carried
