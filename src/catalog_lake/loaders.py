"""How a sync file reaches its search engine: each engine's documented requests (issue 43).

``sync TARGET --apply URL`` sends the files a sync just wrote to the engine's
index at ``URL`` before the cursor moves, so a failed load is sent again by
the next sync (every request here is an idempotent upsert or delete). The
requests are the ones docs/search.md lists for each engine, over plain HTTP
with httpx: the engines' own clients would add their HTTP stacks to every
install of a data pipeline, for a handful of documented calls.

``URL`` names the index: ``https://APP-dsn.algolia.net/1/indexes/products``,
``http://host:7700/indexes/products`` (Meilisearch),
``http://host:8108/collections/products`` (Typesense), or
``http://host:9200/products`` (Elasticsearch, OpenSearch). Credentials come
from the environment, never from arguments: ``ALGOLIA_APPLICATION_ID`` and
``ALGOLIA_API_KEY``, ``MEILISEARCH_API_KEY``, ``TYPESENSE_API_KEY``,
``ELASTICSEARCH_API_KEY`` (an ``ApiKey`` credential; OpenSearch takes the
same variable, or none on a trusted network).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from .errors import CatalogLakeError, UsageError

#: Seconds a request may take: a 1,000-record Algolia batch, a whole full export's bulk.
TIMEOUT = httpx.Timeout(30.0, read=300.0)
#: Attempts at a request the engine answered 429 or 5xx, or that did not reach it.
ATTEMPTS = 5
#: A request body holds at most this many lines and bytes: Meilisearch and Elasticsearch
#: refuse bodies over 100 MB by default (``http_payload_size_limit``,
#: ``http.max_content_length``), and a full export of a large catalog is more.
BODY_LINES = 10_000
BODY_BYTES = 50 * 1024 * 1024


class EngineError(CatalogLakeError):
    """A search engine refused a load, or could not be reached; the cursor did not move."""


def apply(fmt: str, url: str, documents: str | None, deletes: str | None, read: Reader) -> dict:
    """Send a sync's files to ``fmt``'s index at ``url``; what was sent.

    ``documents`` and ``deletes`` are the files' places (None: not written),
    read through ``read`` (a local path or an object-store URI).

    Raises:
        UsageError: a format no engine loads (``jsonl``), or a URL that is not http(s).
        EngineError: the engine refused a request, or did not answer after retries.
    """
    headers = check(fmt, url)
    with httpx.Client(timeout=TIMEOUT, headers=headers) as client:
        sent = _LOADERS[fmt](_Engine(client, url.rstrip("/")), documents, deletes, read)
    return {"engine": fmt, "url": url, **sent}


def check(fmt: str, url: str) -> dict[str, str]:
    """Refuse, before anything is written, a load that cannot be made; its credentials.

    Raises:
        UsageError: a format no engine loads (``jsonl``), a URL that is not
            http(s), or credentials the engine needs that are not set.
    """
    if fmt not in _LOADERS:
        raise UsageError(
            f"apply loads an engine's format ({', '.join(_LOADERS)}); {fmt} has no engine",
            "apply",
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"apply takes the index's http(s) URL; got {url!r}", "apply")
    return _headers(fmt)


Reader = Callable[[str], str]


class _Engine:
    """One index's HTTP endpoint: each request retried on 429, 5xx and no answer."""

    def __init__(self, client: httpx.Client, url: str) -> None:
        self.client = client
        self.url = url

    def send(self, method: str, path: str, **request: Any) -> httpx.Response:
        try:
            for attempt in Retrying(
                retry=retry_if_exception(_transient),
                stop=stop_after_attempt(ATTEMPTS),
                wait=wait_exponential_jitter(initial=0.5, max=10),
                reraise=True,
            ):
                with attempt:
                    answer = self.client.request(method, f"{self.url}{path}", **request)
                    if answer.status_code == 429 or answer.status_code >= 500:
                        answer.raise_for_status()
        except httpx.HTTPStatusError as exc:
            raise EngineError(
                f"{method} {self.url}{path} answered {exc.response.status_code} "
                f"{ATTEMPTS} times; the next sync sends the same files again"
            ) from None
        except httpx.TransportError as exc:
            raise EngineError(
                f"{method} {self.url}{path} could not be reached ({exc}); the next sync sends "
                "the same files again"
            ) from None
        if answer.status_code >= 400:
            raise EngineError(
                f"{method} {self.url}{path} answered {answer.status_code}: "
                f"{answer.text[:300].strip()}"
            )
        return answer


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code == 429 or exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError)


def _headers(fmt: str) -> dict[str, str]:
    """The engine's credentials, from the environment (never printed)."""
    env = os.environ
    if fmt == "algolia":
        missing = [k for k in ("ALGOLIA_APPLICATION_ID", "ALGOLIA_API_KEY") if not env.get(k)]
        if missing:
            raise UsageError(f"apply to Algolia needs {' and '.join(missing)} set", "apply")
        return {"X-Algolia-Application-Id": env["ALGOLIA_APPLICATION_ID"],
                "X-Algolia-API-Key": env["ALGOLIA_API_KEY"]}  # fmt: skip
    if fmt == "meilisearch" and env.get("MEILISEARCH_API_KEY"):
        return {"Authorization": f"Bearer {env['MEILISEARCH_API_KEY']}"}
    if fmt == "typesense":
        if not env.get("TYPESENSE_API_KEY"):
            raise UsageError("apply to Typesense needs TYPESENSE_API_KEY set", "apply")
        return {"X-TYPESENSE-API-KEY": env["TYPESENSE_API_KEY"]}
    if fmt in ("elasticsearch", "opensearch") and env.get("ELASTICSEARCH_API_KEY"):
        return {"Authorization": f"ApiKey {env['ELASTICSEARCH_API_KEY']}"}
    return {}


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _algolia(engine: _Engine, documents: str | None, deletes: str | None, read: Reader) -> dict:
    """One ``POST /batch`` per line: each line is a batch body (upserts and deletes)."""
    bodies = _lines(read(documents)) if documents else []
    for body in bodies:
        engine.send("POST", "/batch", content=body, headers={"Content-Type": "application/json"})
    return {"requests": len(bodies)}


def _meilisearch(engine: _Engine, documents: str | None, deletes: str | None, read: Reader) -> dict:
    """NDJSON documents by ``object_id``, then the deleted ids (both are queued tasks)."""
    tasks = []
    for body in _bodies(_lines(read(documents)) if documents else []):
        answer = engine.send(
            "POST", "/documents", params={"primaryKey": "object_id"},
            content=body, headers={"Content-Type": "application/x-ndjson"},
        )  # fmt: skip
        tasks.append(answer.json().get("taskUid"))
    if deletes:
        answer = engine.send(
            "POST", "/documents/delete-batch", content=read(deletes),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        tasks.append(answer.json().get("taskUid"))
    return {"requests": len(tasks), "tasks": tasks}


def _typesense(engine: _Engine, documents: str | None, deletes: str | None, read: Reader) -> dict:
    """JSONL ``import?action=upsert`` (each line answered alone), then a delete by ids."""
    requests = 0
    for body in _bodies(_lines(read(documents)) if documents else []):
        answer = engine.send(
            "POST", "/documents/import", params={"action": "upsert"},
            content=body, headers={"Content-Type": "text/plain"},
        )  # fmt: skip
        requests += 1
        failed = [r for r in map(json.loads, _lines(answer.text)) if not r.get("success")]
        if failed:
            raise EngineError(f"Typesense refused {len(failed)} document(s): {failed[0]}")
    if deletes:
        for ids in _chunks(json.loads(read(deletes)), 1_000):
            engine.send("DELETE", "/documents", params={"filter_by": f"id:[{','.join(ids)}]"})
            requests += 1
    return {"requests": requests}


def _search_index(
    engine: _Engine, documents: str | None, deletes: str | None, read: Reader
) -> dict:
    """``POST /_bulk`` in bodies of whole actions; an item error fails the load."""
    lines = _lines(read(documents)) if documents else []
    requests = 0
    for body in _bodies(lines, pairs=True):
        answer = engine.send(
            "POST", "/_bulk", content=body, headers={"Content-Type": "application/x-ndjson"}
        )
        requests += 1
        result = answer.json()
        if result.get("errors"):
            bad = next(i for i in result["items"] for a in i.values() if a.get("error"))
            raise EngineError(f"the bulk load refused an action: {json.dumps(bad)[:300]}")
    return {"requests": requests}


def _bodies(lines: list[str], *, pairs: bool = False) -> Iterator[str]:
    """Request bodies of at most ``BODY_LINES`` lines and about ``BODY_BYTES`` bytes.

    ``pairs``: ``_bulk`` lines, where an ``index`` action and its document go together.
    """
    body: list[str] = []
    size = 0
    for line in lines:
        body.append(line)
        size += len(line) + 1  # characters: a bound, not an exact count, is what is needed
        # Our action lines begin so (``exports._lines``); a document never does.
        whole = not (pairs and line.startswith('{"index":'))
        if whole and (len(body) >= BODY_LINES or size >= BODY_BYTES // 4):
            yield "\n".join(body) + "\n"
            body, size = [], 0
    if body:
        yield "\n".join(body) + "\n"


def _chunks(values: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


_LOADERS = {
    "algolia": _algolia,
    "meilisearch": _meilisearch,
    "typesense": _typesense,
    "elasticsearch": _search_index,
    "opensearch": _search_index,
}

__all__ = ["EngineError", "apply", "check"]
