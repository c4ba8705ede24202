"""The service: the library over HTTP, every key bound to one seller (docs/service.md).

``create_app`` makes a FastAPI app over one ``Catalog``; ``catalog-lake serve``
runs it in uvicorn. Each request is the library's own call, made for the
seller of the request's key (``access``), never for a seller the request
names. What this module adds is the door: keys, limits, one error shape and
one thread that owns the lake.

That thread (``Lane``) is the only code that touches the ``Catalog``: pushes,
deletes, reads and searches run there one at a time, so the search index and
the key index have one owner, as in a CLI process. Pushes that arrive while
it is busy wait in ``Batcher`` and are written together by
``Catalog.push_many``: one commit per table per seller for all of them, each
push keeping its own request id, response and idempotency key. Prefect flows
writing the same lake beside the server stay safe through the fenced commits
every writer makes (docs/design.md, "Writers").
"""

import asyncio
import logging
import math
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from limits import parse as parse_rate
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import __version__, access
from .catalog import Catalog
from .errors import CatalogLakeError, LakeError, NoLakeError, PushError, UsageError, first_line
from .lake import reads
from .lane import Batcher, Lane
from .parse import parse_push
from .push import PushRequest
from .search import storefront_filters

log = logging.getLogger(__name__)

#: How often the server looks for new or revoked keys (seconds).
KEYS_REFRESH = 1.0
#: Upserts and deletes one ``/v1/changes`` page holds at most.
MAX_CHANGES_PAGE = 1_000
#: Why a push was refused, and the status that says so.
_STATUS_OF_REASON = {
    "payload_too_large": 413,
    "too_many_items": 413,
    "idempotency_conflict": 409,
    "lake_write_failed": 503,
}


@dataclass(frozen=True)
class Limits:
    """The limits a server enforces and publishes at ``/v1/limits``."""

    max_body_bytes: int = 32 * 1024 * 1024
    max_items_per_push: int = 10_000
    #: Requests per key, as the ``limits`` package writes a rate: ``20/second``,
    #: ``1000/minute``; None: no limit.
    rate_limit: str | None = None

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1 or self.max_items_per_push < 1:
            raise UsageError("max_body_bytes and max_items_per_push must be at least 1")
        if self.rate_limit is not None:
            try:
                parse_rate(self.rate_limit)
            except ValueError:
                raise UsageError(
                    f"rate_limit {self.rate_limit!r} is not a rate such as 20/second or "
                    "1000/minute",
                    "rate_limit",
                ) from None

    def published(self) -> dict[str, Any]:
        """The limits as ``GET /v1/limits`` answers them."""
        from . import settings

        return {
            "max_body_bytes": self.max_body_bytes,
            "max_items_per_push": self.max_items_per_push,
            "max_item_bytes": settings.MAX_ITEM_BYTES,
            "max_ids_per_delete": self.max_items_per_push,
            "rate_limit": self.rate_limit,
            "rate_limit_scope": "key",
            "max_hits_per_page": _max_hits(),
            "max_changes_page": MAX_CHANGES_PAGE,
        }


class ServiceError(Exception):
    """A request answered with ``status`` and ``{"error": {"code", "message"}}``."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


# --- the HTTP door ---------------------------------------------------------------------


class ErrorBody(BaseModel):
    """What every refusal answers: a stable ``code`` and a one-line ``message``."""

    code: str
    message: str


class ErrorAnswer(BaseModel):
    """The one shape of every error answer."""

    error: ErrorBody


class PushAnswer(BaseModel):
    """The push response of SPEC 2.7, exactly as ``Catalog.push`` answers."""

    model_config = ConfigDict(extra="allow")
    catalog_push_request_id: str
    catalog_push_received_product_count: str
    catalog_push_success_product_count: str
    catalog_push_failed_product_count: str
    items: list[dict[str, str | None]]
    catalog_push_failed_items: list[dict[str, Any]]
    catalog_push_warning_items: list[dict[str, Any]]


class DeleteAnswer(BaseModel):
    """The delete answer, exactly as ``Catalog.delete`` gives it (docs/lifecycle.md)."""

    model_config = ConfigDict(extra="allow")
    catalog_delete_request_id: str
    catalog_delete_received_count: str
    items: list[dict[str, Any]]


class DeleteBody(BaseModel):
    """``POST /v1/delete``'s body: the seller's ``client_item_id``s to delete."""

    model_config = ConfigDict(extra="forbid")
    ids: list[str]


class SearchAnswer(BaseModel):
    """Hits, their count, facet counts and the time taken, as ``Catalog.search`` answers."""

    model_config = ConfigDict(extra="allow")
    hits: list[dict[str, Any]]
    nb_hits: int
    facets: dict[str, dict[str, int]]


class ChangesAnswer(BaseModel):
    """One page of the seller's change feed between two records versions."""

    since: int
    until: int
    upserts: list[dict[str, Any]]
    deletes: list[str]
    next_after: str | None


class HealthAnswer(BaseModel):
    """The server is up."""

    status: str


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    described = {
        400: "The request is malformed.",
        401: "No key, an unknown key, or a revoked or expired one.",
        403: "The key lacks the action.",
        404: "No such item for the key's seller.",
        409: "An Idempotency-Key reused with other content.",
        413: "The body, or its item count, is over the limit.",
        422: "The request is not what the endpoint takes.",
        429: "The key's rate is exceeded; Retry-After says when to try again.",
        503: "The lake cannot be written or read now; retry later.",
    }
    return {s: {"model": ErrorAnswer, "description": described[s]} for s in statuses}


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps(data, default=str, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, status, headers=headers, media_type="application/json")


def _refusal(status: int, code: str, message: str, headers: dict[str, str] | None = None):
    return _json({"error": {"code": code, "message": message}}, status, headers)


def _problems(errors: Any, within: str = "") -> str:
    """Pydantic's errors as one line: where, and what, for the first three."""
    problems = []
    for error in list(errors)[:3]:
        where = ".".join(str(part) for part in (within, *error.get("loc", ())) if part != "")
        problems.append(f"{where or 'request'}: {error.get('msg', 'invalid')}")
    return "; ".join(problems) or "invalid request"


def _max_hits() -> int:
    from .search import MAX_HITS_PER_PAGE

    return MAX_HITS_PER_PAGE


def create_app(
    catalog: Catalog,
    limits: Limits | None = None,
    *,
    keys_refresh: float = KEYS_REFRESH,
    clock: Callable[[], datetime] | None = None,
    repair: bool = True,
) -> FastAPI:
    """The service over ``catalog``: every route of docs/service.md.

    At start it finishes pushes a killed server left half-written
    (``Catalog.repair``), so a client's retry under the same
    ``Idempotency-Key`` gets the original answer. Keys are read at start and
    again whenever their table changes (checked every ``keys_refresh``
    seconds): a revoked key stops working within that time.
    """
    limits = limits or Limits()
    clock = clock or (lambda: datetime.now(UTC))
    lane = Lane(catalog)
    batcher = Batcher(lane)
    keyring = access.Keyring(catalog.lake.uri, catalog.lake.storage_options)
    keyring.refresh()  # now, so that an app run without its start (a test harness) has keys
    rates = MovingWindowRateLimiter(MemoryStorage())
    rate = parse_rate(limits.rate_limit) if limits.rate_limit else None

    async def watch_keys() -> None:
        while True:
            await asyncio.sleep(keys_refresh)
            try:
                await asyncio.to_thread(keyring.refresh)
            except CatalogLakeError as exc:  # keep the keys we have; say so once per try
                log.warning("cannot read the keys again: %s", exc)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if repair and catalog.lake.exists():
            repaired = await lane.run(catalog.repair)
            if repaired:
                log.warning("finished %d interrupted push(es) at start", len(repaired))
        await asyncio.to_thread(keyring.refresh)
        watcher = asyncio.create_task(watch_keys())
        try:
            yield
        finally:
            watcher.cancel()
            lane.close()

    app = FastAPI(
        title="catalog-lake",
        version=__version__,
        description="Push, delete, read and search a catalog lake; every key is one seller's.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    bearer = HTTPBearer(auto_error=False, description="A key from `catalog-lake keys create`.")

    def allowed(action: str):
        def check(
            credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
        ) -> access.AccessKey:
            if credentials is None:
                raise ServiceError(401, "unauthorized", "send a key: Authorization: Bearer KEY")
            key = access.verify(keyring.keys, credentials.credentials, clock())
            if key is None:
                raise ServiceError(401, "unauthorized", "the key is unknown, revoked or expired")
            if action not in key.actions:
                raise ServiceError(403, "forbidden", f"this key may not {action}")
            if rate is not None and not rates.hit(rate, key.key_id):
                reset = rates.get_window_stats(rate, key.key_id).reset_time
                wait = max(1, math.ceil(reset - time.time()))
                raise ServiceError(
                    429,
                    "rate_limited",
                    f"over {limits.rate_limit} for this key; retry in {wait} s",
                    {"Retry-After": str(wait)},
                )
            return key

        return check

    Pushing = Annotated[access.AccessKey, Depends(allowed("push"))]
    Deleting = Annotated[access.AccessKey, Depends(allowed("delete"))]
    Reading = Annotated[access.AccessKey, Depends(allowed("read"))]
    Searching = Annotated[access.AccessKey, Depends(allowed("search"))]
    IdempotencyKey = Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=256)
    ]
    body_schema = {"type": "object", "required": ["items"]}
    body_schema["properties"] = {"items": {"type": "array", "items": {"type": "object"}}}

    @app.exception_handler(ServiceError)
    async def refused(_request: Request, exc: ServiceError) -> Response:
        return _refusal(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> Response:
        return _refusal(422, "invalid_request", _problems(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        codes = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}
        code = codes.get(exc.status_code, "http_error")
        return _refusal(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def failed(_request: Request, exc: Exception) -> Response:
        log.error("request failed", exc_info=exc)  # the server's log, never the client's
        return _refusal(500, "internal_error", "the server failed this request; see its log")

    @app.get("/healthz", response_model=HealthAnswer, tags=["service"])
    async def healthz() -> Response:
        """The server is up; needs no key."""
        return _json({"status": "ok"})

    @app.get("/v1/limits", tags=["service"], responses=_errors(401, 403, 429))
    async def get_limits(_key: Reading) -> Response:
        """The limits in force: body size, items per push, the rate per key."""
        return _json(limits.published())

    @app.post(
        "/v1/push",
        response_model=PushAnswer,
        responses=_errors(400, 401, 403, 409, 413, 422, 429, 503),
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": body_schema}},
            }
        },
        tags=["items"],
    )
    async def push(
        request: Request,
        key: Pushing,
        idempotency_key: IdempotencyKey = None,
        dry_run: bool = False,
        strict: bool = False,
    ) -> Response:
        """Upload new products or update existing ones: the spec's push response."""
        parsed = await asyncio.to_thread(_parsed, await request.body())
        if len(parsed.items) > limits.max_items_per_push:
            raise ServiceError(
                413,
                "too_many_items",
                f"{len(parsed.items):,} items, over the limit of "
                f"{limits.max_items_per_push:,} per push; send them in several pushes",
            )
        request_ = PushRequest(
            parsed,
            source=f"service key {key.key_id}",
            idempotency_key=idempotency_key,
            strict=strict,
            seller=key.seller,
        )
        try:
            if dry_run:
                answer = (await lane.run(catalog.push_many, [request_], dry_run=True))[0]
            else:
                answer = await batcher.push(request_, len(parsed.items))
        except PushError as exc:
            raise _push_refusal(exc) from None
        except CatalogLakeError as exc:  # the lake could not be read or written at all
            raise ServiceError(503, "lake_unavailable", first_line(exc)) from None
        return _json(answer)

    @app.post(
        "/v1/delete",
        response_model=DeleteAnswer,
        responses=_errors(400, 401, 403, 404, 409, 413, 422, 429, 503),
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": DeleteBody.model_json_schema()}},
            }
        },
        tags=["items"],
    )
    async def delete(
        request: Request,
        key: Deleting,
        idempotency_key: IdempotencyKey = None,
        dry_run: bool = False,
    ) -> Response:
        """Delete the key's seller's items by ``client_item_id``: the delete answer."""
        # Read after the key is checked, as a push's: no caller without a key learns more.
        try:
            body = DeleteBody.model_validate_json(await request.body())
        except ValidationError as exc:
            raise ServiceError(422, "invalid_request", _problems(exc.errors(), "body")) from None
        if len(body.ids) > limits.max_items_per_push:
            raise ServiceError(
                413,
                "too_many_items",
                f"{len(body.ids):,} ids, over the limit of {limits.max_items_per_push:,}",
            )
        try:
            answer = await lane.run(
                _delete,
                catalog,
                body.ids,
                idempotency_key=idempotency_key,
                dry_run=dry_run,
                source=f"service key {key.key_id}",
                seller=key.seller,
            )
        except PushError as exc:
            raise _push_refusal(exc) from None
        except LakeError as exc:
            raise ServiceError(503, "lake_unavailable", first_line(exc)) from None
        except CatalogLakeError as exc:
            raise ServiceError(422, "invalid_request", str(exc)) from None
        return _json(answer)

    @app.get(
        "/v1/items/{client_item_id}",
        responses=_errors(401, 403, 404, 429, 503),
        tags=["items"],
    )
    async def item(client_item_id: str, key: Reading) -> Response:
        """The key's seller's record of this item; 404 if it has none."""
        found = await lane.run(_record, catalog, client_item_id, key.seller)
        if found is None:
            raise ServiceError(404, "not_found", "no such item")
        return _json(found)

    @app.get(
        "/v1/search",
        response_model=SearchAnswer,
        responses=_errors(401, 403, 422, 429, 503),
        tags=["search"],
    )
    async def search(
        key: Searching,
        q: Annotated[str, Query(max_length=1_000)] = "",
        on_sale: bool = False,
        in_stock: bool = False,
        price: Annotated[str | None, Query(max_length=100)] = None,
        inventory: Annotated[str | None, Query(max_length=100)] = None,
        category: Annotated[list[str] | None, Query(max_length=100)] = None,
        tag: Annotated[list[str] | None, Query(max_length=100)] = None,
        brand: Annotated[list[str] | None, Query(max_length=100)] = None,
        facet: Annotated[list[str] | None, Query(max_length=20)] = None,
        page: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
        hits_per_page: Annotated[int, Query(ge=1, le=1_000_000)] = 20,
        all_variants: bool = False,
    ) -> Response:
        """Search the key's seller's records, as ``catalog-lake search`` does."""
        filters = storefront_filters(
            on_sale=on_sale,
            in_stock=in_stock,
            price=price,
            inventory=inventory,
            categories=category,
            tags=tag,
            brands=brand,
        )
        found = await lane.run(
            _search,
            catalog,
            q,
            filters=filters,
            facets=list(facet or []),
            page=page,
            hits_per_page=hits_per_page,
            distinct=not all_variants,
            seller=key.seller,
        )
        return _json(found)

    @app.get(
        "/v1/changes",
        response_model=ChangesAnswer,
        responses=_errors(401, 403, 422, 429, 503),
        tags=["search"],
    )
    async def changes(
        key: Reading,
        since: Annotated[str, Query(min_length=1, max_length=64)],
        until: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
        after: Annotated[str | None, Query(pattern=r"^[0-9]{1,19}$")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_CHANGES_PAGE)] = MAX_CHANGES_PAGE,
    ) -> Response:
        """The key's seller's changes after ``since``: upserted records and deleted ids.

        A page holds at most ``limit`` operations, by service id; ``next_after``
        names the next page (ask again with ``after`` and the same ``until``).
        """
        page = await lane.run(_changes, catalog, since, until, after, limit, key.seller)
        return _json(page)

    return app


class BodyLimit:
    """ASGI middleware: a body over ``limit`` bytes is refused (413) before it is read whole.

    A declared ``Content-Length`` over the limit is answered before any of the
    body is read; a body sent without one (chunked) is counted as it arrives,
    and refused at the first chunk past the limit. Every route is covered, the
    delete's JSON body too.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    def refusal(self) -> ServiceError:
        """The 413 of a body past the limit."""
        return ServiceError(
            413, "payload_too_large", f"the body is over the limit of {self.limit:,} bytes"
        )

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        """Pass the request on, its body counted; or answer 413 (or 400) at once."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            refused = (
                self.refusal()
                if declared.isdigit()
                else ServiceError(400, "bad_request", "Content-Length is not a number")
            )
            answer = _refusal(refused.status, refused.code, refused.message)
            answer.headers["Connection"] = "close"
            return await answer(scope, receive, send)
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise self.refusal()  # answered by the app's handler, in the one shape
            return message

        return await self.app(scope, counted, send)


def _parsed(body: bytes):
    try:
        return parse_push(body)
    except PushError as exc:
        raise _push_refusal(exc) from None


def _push_refusal(exc: PushError) -> ServiceError:
    status = _STATUS_OF_REASON.get(exc.reason, 422)
    code = exc.reason if status != 503 else "lake_unavailable"
    return ServiceError(status, code, exc.detail)


def _guarded(call: Callable[[], Any]) -> Any:
    """A read's library errors as answers: a question out of bounds (422), a lake that fails."""
    try:
        return call()
    except UsageError as exc:
        raise ServiceError(422, "invalid_request", str(exc)) from None
    except NoLakeError:
        return None
    except CatalogLakeError as exc:
        raise ServiceError(503, "lake_unavailable", first_line(exc)) from None


def _delete(catalog: Catalog, ids: list[str], *, seller: str, **asked: Any) -> dict[str, Any]:
    """``Catalog.delete`` for the key's seller; a seller with no items at all is 404."""
    if not catalog.has_seller(seller):  # nothing of anyone's is read or deleted
        raise ServiceError(404, "not_found", "this seller has no items")
    return catalog.delete(ids, seller=seller, **asked)


def _record(catalog: Catalog, client_item_id: str, seller: str) -> dict[str, Any] | None:
    """The seller's current record of one item, or None."""

    def read() -> Any:
        return reads.select(
            catalog.lake, "records", seller=seller, equals={"client_item_id": client_item_id}
        )

    found = _guarded(read)
    if found is None or found.num_rows == 0:
        return None
    return found.slice(0, 1).to_pylist()[0]


def _search(catalog: Catalog, query: str, **asked: Any) -> dict[str, Any]:
    found = _guarded(lambda: catalog.search(query, **asked))
    if found is None:  # no lake yet: nothing to find
        return {"hits": [], "nb_hits": 0, "facets": {}, "page": asked["page"]}
    return found


def _changes(
    catalog: Catalog, since: str, until: str | None, after: str | None, limit: int, seller: str
) -> dict[str, Any]:
    try:
        found = _guarded(lambda: catalog.changes(_version(since), _version(until), seller=seller))
    except ServiceError as exc:
        if exc.status == 503:  # a version or time the records never had
            raise ServiceError(422, "invalid_request", exc.message) from None
        raise
    if found is None:
        raise ServiceError(422, "invalid_request", "the lake has no records yet")
    floor = int(after) if after is not None else -1
    upserts = found.upserts
    upsert_ids = pc.cast(upserts["object_id"], pa.int64())
    deletes = pc.cast(found.deletes, pa.int64())
    # Every operation by service id, upserts and deletes together, after ``after``.
    merged = pa.table(
        {
            "id": pa.concat_arrays([upsert_ids.combine_chunks(), deletes]),
            "row": pa.concat_arrays(
                [pa.array(range(len(upsert_ids)), pa.int64()), pa.repeat(-1, len(deletes))]
            ),
        }
    )
    merged = merged.filter(pc.greater(merged["id"], floor)).sort_by("id").slice(0, limit + 1)
    more = merged.num_rows > limit
    merged = merged.slice(0, limit)
    is_upsert = pc.greater_equal(merged["row"], 0)
    rows = upserts.take(merged["row"].filter(is_upsert)).to_pylist()
    return {
        "since": found.since,
        "until": found.until,
        "upserts": rows,
        "deletes": pc.cast(merged["id"].filter(pc.invert(is_upsert)), pa.string()).to_pylist(),
        "next_after": str(merged["id"][-1].as_py()) if more and merged.num_rows else None,
    }


def _version(value: str | None) -> int | str | None:
    return int(value) if value is not None and value.isdigit() else value


__all__ = ["BodyLimit", "Limits", "ServiceError", "create_app"]
