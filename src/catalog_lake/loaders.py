"""How a sync file reaches its search engine: each engine's documented requests.

``sync TARGET --apply URL`` sends the files a sync just wrote to the engine's
index at ``URL`` before the cursor moves, so a failed load is sent again by
the next sync (every request here is an idempotent upsert or delete). The
requests are the ones docs/search.md lists for each engine, over plain HTTP
with httpx: the engines' own clients would add their HTTP stacks to every
install of a data pipeline, for a handful of documented calls.

``URL`` names the index: ``https://APP-dsn.algolia.net/1/indexes/products``,
``http://host:7700/indexes/products`` (Meilisearch),
``http://host:8108/collections/catalog-lake-records`` (Typesense), or
``http://host:9200/products`` (Elasticsearch, OpenSearch). Credentials come
from the environment (``CREDENTIALS``); an Elasticsearch or OpenSearch user
and password may also be given in the URL, as those engines document.

Every input is hostile here, the engine's answers included:

- only the engine's documented success counts as a load. A redirect is not
  followed, so credentials never go to another host, and it fails the load;
- no credential reaches a message: every text shown passes ``Secrets.hide``,
  and an answer is quoted only in part;
- every request has an overall deadline, and an answer is read only up to
  ``ANSWER_BYTES``;
- Meilisearch's queued tasks are waited for (bounded): a task that fails
  later fails the sync, so the cursor stays and the range is sent again.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import anyio
import httpx
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
    wait_exponential_jitter,
)

from .errors import CatalogLakeError, UsageError

#: Seconds each step of a request may wait: to connect, to send a chunk, for the next byte.
TIMEOUT = httpx.Timeout(30.0)
#: Seconds one request may take in all, its answer read whole: a server that trickles its
#: answer a byte at a time never ends a sync's wait otherwise.
DEADLINE = 300.0
#: Bytes of an engine's answer read at most: a bulk answer for 10,000 actions is about
#: 2 MB, and an answer past this is refused unread rather than held in memory.
ANSWER_BYTES = 16 * 1024 * 1024
#: Characters of an engine's answer a message quotes, after every secret is taken out.
QUOTED = 200
#: Attempts at a request the engine answered 429 or 5xx, or that did not reach it.
ATTEMPTS = 5
#: Seconds a sync waits for Meilisearch to process the tasks it queued.
TASKS_DEADLINE = 600.0
#: A request body holds at most this many lines and bytes: Meilisearch and Elasticsearch
#: refuse bodies over 100 MB by default (``http_payload_size_limit``,
#: ``http.max_content_length``), and a full export of a large catalog is more.
BODY_LINES = 10_000
BODY_BYTES = 50 * 1024 * 1024
#: Longest index URL taken (browsers and proxies commonly stop at 2,048).
URL_CHARS = 2_048
#: Each engine's credentials, from the environment: (variable, header, how it is sent).
CREDENTIALS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "algolia": (
        ("ALGOLIA_APPLICATION_ID", "X-Algolia-Application-Id", "{}"),
        ("ALGOLIA_API_KEY", "X-Algolia-API-Key", "{}"),
    ),
    "meilisearch": (("MEILISEARCH_API_KEY", "Authorization", "Bearer {}"),),
    "typesense": (("TYPESENSE_API_KEY", "X-TYPESENSE-API-KEY", "{}"),),
    "elasticsearch": (("ELASTICSEARCH_API_KEY", "Authorization", "ApiKey {}"),),
}
CREDENTIALS["opensearch"] = CREDENTIALS["elasticsearch"]
#: Variables an engine cannot be loaded without.
REQUIRED = {
    "algolia": ("ALGOLIA_APPLICATION_ID", "ALGOLIA_API_KEY"),
    "typesense": ("TYPESENSE_API_KEY",),
}
#: Basic-auth credentials for Elasticsearch and OpenSearch, when the URL carries none.
USER, PASSWORD = "ELASTICSEARCH_USERNAME", "ELASTICSEARCH_PASSWORD"
#: The variables whose values no message may show, whichever engine is loaded.
SECRET_VARIABLES = (
    "ALGOLIA_API_KEY",
    "MEILISEARCH_API_KEY",
    "TYPESENSE_API_KEY",
    "ELASTICSEARCH_API_KEY",
    PASSWORD,
)
#: What the path of each engine's index URL looks like, after any proxy prefix.
PATHS = {
    "algolia": ("/1/indexes/NAME", re.compile(r"(?P<base>.*)/1/indexes/[^/]+")),
    "meilisearch": ("/indexes/NAME", re.compile(r"(?P<base>.*)/indexes/[^/]+")),
    "typesense": ("/collections/NAME", re.compile(r"(?P<base>.*)/collections/[^/]+")),
    "elasticsearch": ("/NAME", re.compile(r"(?P<base>.*)/[^/_][^/]*")),
}
PATHS["opensearch"] = PATHS["elasticsearch"]
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", re.ASCII)


class EngineError(CatalogLakeError):
    """A search engine refused a load, or could not be reached; the cursor did not move."""


@dataclass(frozen=True)
class Secrets:
    """Every credential of a load, as it could appear in a text: hidden from all shown."""

    values: tuple[str, ...] = ()

    def hide(self, text: str) -> str:
        """``text`` with every secret replaced by ``***`` (longest first)."""
        for secret in self.values:
            text = text.replace(secret, "***")
        return text

    def quote(self, text: str) -> str:
        """Part of an engine's answer, fit to show: secrets hidden, one line, ``QUOTED`` long."""
        shown = " ".join(self.hide(text).split())
        return shown if len(shown) <= QUOTED else shown[:QUOTED] + "…"


@dataclass(frozen=True)
class Index:
    """A checked index URL: where requests go, how it is shown, and its credentials."""

    fmt: str
    url: str  # without userinfo: the credentials travel in headers
    shown: str  # the URL as every message and answer shows it
    base: str  # the engine's root, before the index's own path (Meilisearch's tasks)
    headers: dict[str, str] = field(repr=False)
    auth: tuple[str, str] | None = field(repr=False)
    secrets: Secrets = field(repr=False)


def apply(fmt: str, url: str, documents: str | None, deletes: str | None, read: Reader) -> dict:
    """Send a sync's files to ``fmt``'s index at ``url``; what was sent (``check``, ``load``)."""
    return load(check(fmt, url), documents, deletes, read)


def load(index: Index, documents: str | None, deletes: str | None, read: Reader) -> dict:
    """Send a sync's files to a checked index; what was sent.

    ``documents`` and ``deletes`` are the files' places (None: not written),
    read through ``read`` (a local path or an object-store URI).

    Raises:
        EngineError: the engine refused a request, gave no documented success,
            or did not answer in time after retries.
    """
    sent = anyio.run(_load, index, documents, deletes, read)
    return {"engine": index.fmt, "url": index.shown, **sent}


def check(fmt: str, url: str) -> Index:
    """Refuse, before anything is written, a load that cannot be made; the index to load.

    The URL must be a plain http(s) URL of the engine's index: a host name of
    ASCII labels or an IP literal, a numeric port, no spaces, control or
    invisible characters, no query or fragment, and the engine's documented
    path (``PATHS``). Its user and password, where given, are taken out of
    it and sent as basic auth.

    Raises:
        UsageError: a format no engine loads (``jsonl``), a URL that is none of
            the above, or credentials the engine needs that are not set.
    """
    if fmt not in _LOADERS:
        raise UsageError(
            f"apply loads an engine's format ({', '.join(_LOADERS)}); {fmt} has no engine",
            "apply",
        )
    text = url if isinstance(url, str) else ""
    parts = _split(text)
    secrets = _url_secrets(parts)
    shown = _shown(parts, text, secrets)

    def refuse(why: str) -> UsageError:
        return UsageError(f"apply takes the index's http(s) URL; {shown!r} {why}", "apply")

    if len(text) > URL_CHARS:
        raise refuse(f"is longer than {URL_CHARS:,} characters")
    if not text or any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in text):
        raise refuse("is empty or holds spaces, control or invisible characters")
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise refuse("is not an http:// or https:// URL with a host")
    _check_host(parts, refuse)
    try:
        parts.port  # noqa: B018 - urllib checks the port when it is read
    except ValueError:
        raise refuse("has a port that is not a number from 1 to 65535") from None
    if parts.port == 0:
        raise refuse("has a port that is not a number from 1 to 65535")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise refuse("has a query or a fragment; name the index alone")
    shape, pattern = PATHS[fmt]
    path = parts.path.rstrip("/")
    matched = pattern.fullmatch(path)
    if matched is None or "%" in path:
        raise refuse(f"does not name an index as {fmt} does: its path ends in {shape}")
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc += f":{parts.port}" if parts.port is not None else ""
    clean = urlunsplit((parts.scheme, netloc, path, "", ""))
    try:
        httpx.URL(clean)
    except httpx.InvalidURL as exc:
        raise refuse(f"cannot be sent ({exc})") from None
    headers, auth, env_secrets = _credentials(fmt, parts)
    base = urlunsplit((parts.scheme, netloc, matched.group("base"), "", ""))
    return Index(fmt, clean, shown, base, headers, auth, Secrets(_longest(secrets + env_secrets)))


def refuse_userinfo(url: str | None, parameter: str) -> None:
    """Refuse an index URL that carries a password where it would be stored.

    A Prefect flow keeps its parameters in its server's database and shows
    them in its UI: credentials go in the worker's environment instead.

    Raises:
        UsageError: ``url`` holds a user or password.
    """
    parts = _split(url or "")
    if parts is not None and (parts.username or parts.password):
        raise UsageError(
            f"{parameter} holds a user and password, which Prefect would store with the run; "
            f"set {USER} and {PASSWORD} in the worker's environment instead",
            parameter,
        )


Reader = Callable[[str], str]


def _split(text: str):
    try:
        return urlsplit(text)
    except ValueError:  # a broken IPv6 literal
        return None


def _url_secrets(parts) -> tuple[str, ...]:
    """The URL's password and user:password, as typed and as sent (Basic base64)."""
    if parts is None or (not parts.username and not parts.password):
        return ()
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    typed = parts.netloc.rpartition("@")[0]
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    return tuple(s for s in (typed, password, parts.password or "", basic) if s)


def _shown(parts, text: str, secrets: tuple[str, ...]) -> str:
    """The URL as messages show it: userinfo as ``***``, at most 200 characters, one line.

    The userinfo goes by its place in the text, so a URL too broken to parse
    shows no password either.
    """
    text = _USERINFO.sub("***@", text, count=1)
    text = Secrets(_longest(secrets)).hide(text)
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= 200 else text[:200] + "…"


#: What stands between ``scheme://`` and the last ``@`` before the path: a user and password.
_USERINFO = re.compile(r"(?<=://)[^/?#]*@")


def _check_host(parts, refuse: Callable[[str], UsageError]) -> None:
    host = parts.hostname or ""
    if "[" in parts.netloc:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise refuse("has a broken IPv6 address") from None
        return
    if not host.isascii():
        raise refuse("has a host that is not ASCII; give an international name as xn--…")
    labels = host.rstrip(".").split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise refuse("has a host that is not a DNS name (labels of 1-63 letters, digits, -)")


def _credentials(fmt: str, parts) -> tuple[dict[str, str], tuple[str, str] | None, tuple]:
    """The engine's headers and basic auth from the environment and the URL (never shown)."""
    env = os.environ
    missing = [name for name in REQUIRED.get(fmt, ()) if not env.get(name)]
    if missing:
        raise UsageError(f"apply to {fmt} needs {' and '.join(missing)} set", "apply")
    headers = {
        header: form.format(env[name]) for name, header, form in CREDENTIALS[fmt] if env.get(name)
    }
    # Every engine's secrets, not only this one's: none may show, whatever is echoed.
    secrets = [env[name] for name in SECRET_VARIABLES if env.get(name)]
    auth = None
    if parts.username or parts.password:
        auth = (unquote(parts.username or ""), unquote(parts.password or ""))
    elif fmt in ("elasticsearch", "opensearch") and env.get(USER) and env.get(PASSWORD):
        auth = (env[USER], env[PASSWORD])
    if env.get(USER) and env.get(PASSWORD):
        secrets.append(base64.b64encode(f"{env[USER]}:{env[PASSWORD]}".encode()).decode())
    return headers, auth, tuple(secrets)


def _longest(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted({v for v in values if v}, key=len, reverse=True))


# --- requests -----------------------------------------------------------------------


class _Transient(Exception):
    """An answer worth asking again for: 429 or 5xx."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclass
class _Engine:
    """One index's HTTP endpoint: each request bounded in time and size, retried when busy."""

    client: httpx.AsyncClient
    index: Index

    async def send(
        self, method: str, path: str, *, expect: int, base: bool = False, **request: Any
    ) -> str:
        """The text of the engine's answer, once it answered ``expect`` (its documented success).

        ``path`` follows the index URL, or the engine's root with ``base``.
        """
        url = (self.index.base if base else self.index.url) + path
        where = f"{method} {self.index.shown if not base else self.index.base}{path}"
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(
                    lambda e: isinstance(e, _Transient | httpx.TransportError)
                ),
                stop=stop_after_attempt(ATTEMPTS),
                wait=wait_exponential_jitter(initial=0.5, max=10),
                reraise=True,
            ):
                with attempt:
                    status, headers, text = await self._exchange(method, url, where, request)
        except _Transient as exc:
            raise self._error(
                f"{where} answered {exc.status} {ATTEMPTS} times; the next sync sends the same "
                "files again"
            ) from None
        except httpx.TransportError as exc:
            raise self._error(
                f"{where} could not be reached ({type(exc).__name__}: {exc}); the next sync "
                "sends the same files again"
            ) from None
        if 300 <= status < 400:
            location = self.index.secrets.quote(headers.get("location", "nowhere"))
            raise self._error(
                f"{where} answered {status}, a redirect to {location}: a load follows no "
                "redirect, so the engine's credentials go only where --apply says; give it "
                "the index's own URL"
            )
        if status != expect:
            said = self.index.secrets.quote(text) or "an empty answer"
            raise self._error(
                f"{where} answered {status}, not the {expect} the engine answers a load it "
                f"took: {said}"
            )
        return text

    async def _exchange(
        self, method: str, url: str, where: str, request: dict
    ) -> tuple[int, httpx.Headers, str]:
        """One request, its answer read whole within ``DEADLINE`` and ``ANSWER_BYTES``."""
        try:
            with anyio.fail_after(DEADLINE):
                async with self.client.stream(method, url, **request) as answer:
                    if answer.status_code == 429 or answer.status_code >= 500:
                        raise _Transient(answer.status_code)
                    length = answer.headers.get("content-length", "")
                    if length.isdigit() and int(length) > ANSWER_BYTES:
                        raise self._too_long(where)
                    body = bytearray()
                    async for chunk in answer.aiter_bytes():
                        body += chunk
                        if len(body) > ANSWER_BYTES:
                            raise self._too_long(where)
                    return answer.status_code, answer.headers, body.decode("utf-8", "replace")
        except TimeoutError:
            raise self._error(
                f"{where} did not answer in full within {DEADLINE:g} s; the next sync sends "
                "the same files again"
            ) from None

    def _too_long(self, where: str) -> EngineError:
        return self._error(
            f"{where} answered more than {ANSWER_BYTES:,} bytes, far more than a load's "
            "answer; it was not read"
        )

    def _error(self, message: str) -> EngineError:
        return EngineError(self.index.secrets.hide(message))

    def parsed(self, text: str, what: str) -> dict[str, Any]:
        """An answer that must be a JSON object, as the engine documents it."""
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            said = self.index.secrets.quote(text) or "an empty answer"
            raise self._error(
                f"{self.index.shown} answered {what} with something other than the engine's "
                f"JSON object: {said}"
            )
        return value


async def _load(index: Index, documents: str | None, deletes: str | None, read: Reader) -> dict:
    async with httpx.AsyncClient(
        timeout=TIMEOUT,
        headers=index.headers,
        auth=index.auth,
        follow_redirects=False,
    ) as client:
        return await _LOADERS[index.fmt](_Engine(client, index), documents, deletes, read)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


async def _algolia(engine: _Engine, documents: str | None, deletes: str | None, read: Reader):
    """One ``POST /batch`` per line: each line is a batch body (upserts and deletes).

    Algolia answers 200 with the batch's ``taskID``: the batch is stored and
    will be applied (its ``waitTask`` only says when).
    """
    bodies = _lines(read(documents)) if documents else []
    for body in bodies:
        text = await engine.send(
            "POST",
            "/batch",
            expect=200,
            content=body,
            headers={"Content-Type": "application/json"},
        )
        if not isinstance(engine.parsed(text, "a batch").get("taskID"), int):
            raise engine._error(f"{engine.index.shown} answered a batch without its taskID")
    return {"requests": len(bodies)}


async def _meilisearch(engine: _Engine, documents: str | None, deletes: str | None, read: Reader):
    """NDJSON documents by ``object_id``, then the deleted ids; then their tasks, waited for.

    Meilisearch answers 202 and queues the work: a queued task can still fail
    (a document it refuses), so the load counts only once every task it
    queued has ``succeeded`` (``GET /tasks?uids=...``).
    """
    tasks: list[int] = []
    for body in _bodies(_lines(read(documents)) if documents else []):
        text = await engine.send(
            "POST",
            "/documents",
            expect=202,
            params={"primaryKey": "object_id"},
            content=body,
            headers={"Content-Type": "application/x-ndjson"},
        )
        tasks.append(_task(engine, text))
    if deletes:
        text = await engine.send(
            "POST",
            "/documents/delete-batch",
            expect=202,
            content=read(deletes),
            headers={"Content-Type": "application/json"},
        )
        tasks.append(_task(engine, text))
    for chunk in _chunks(tasks, 100):
        await _tasks_done(engine, chunk)
    return {"requests": len(tasks), "tasks": tasks}


def _task(engine: _Engine, text: str) -> int:
    uid = engine.parsed(text, "a queued load").get("taskUid")
    if not isinstance(uid, int):
        raise engine._error(f"{engine.index.shown} queued a load without its taskUid")
    return uid


async def _tasks_done(engine: _Engine, uids: list[int]) -> None:
    """Wait, at most ``TASKS_DEADLINE``, for Meilisearch to finish ``uids``; any failure fails."""
    params = {"uids": ",".join(map(str, uids))}

    async def statuses() -> dict[int, dict]:
        text = await engine.send("GET", "/tasks", expect=200, base=True, params=params)
        results = engine.parsed(text, "its tasks").get("results")
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise engine._error(f"{engine.index.base}/tasks answered without its results")
        return {r.get("uid"): r for r in results}

    def pending(found: dict[int, dict]) -> bool:
        return any(
            found.get(uid, {}).get("status") in (None, "enqueued", "processing") for uid in uids
        )

    try:
        async for attempt in AsyncRetrying(
            retry=retry_if_result(pending),
            stop=stop_after_delay(TASKS_DEADLINE),
            wait=wait_exponential(multiplier=0.1, max=5),
        ):
            with attempt:
                found = await statuses()
            if not attempt.retry_state.outcome.failed:
                attempt.retry_state.set_result(found)
    except RetryError:
        raise engine._error(
            f"Meilisearch had not finished task(s) {', '.join(map(str, uids))} after "
            f"{TASKS_DEADLINE:g} s; the next sync sends the same files again"
        ) from None
    for uid in uids:
        task = found[uid]
        if task.get("status") != "succeeded":
            error = task.get("error") or {}
            said = engine.index.secrets.quote(
                f"{error.get('message', '')} ({error.get('code', task.get('status'))})"
            )
            raise engine._error(
                f"Meilisearch task {uid} {task.get('status')}: {said}; the next sync sends the "
                "same files again"
            )


async def _typesense(engine: _Engine, documents: str | None, deletes: str | None, read: Reader):
    """JSONL ``import?action=upsert`` (each line answered alone), then a delete by ids."""
    requests = 0
    for body in _bodies(_lines(read(documents)) if documents else []):
        text = await engine.send(
            "POST",
            "/documents/import",
            expect=200,
            params={"action": "upsert"},
            content=body,
            headers={"Content-Type": "text/plain"},
        )
        requests += 1
        answers = [_json_or_none(line) for line in _lines(text)]
        if len(answers) != body.count("\n") or not all(isinstance(a, dict) for a in answers):
            raise engine._error(
                f"{engine.index.shown} answered an import of {body.count(chr(10))} documents "
                f"with something other than a line for each: {engine.index.secrets.quote(text)}"
            )
        failed = [a for a in answers if a.get("success") is not True]
        if failed:
            said = engine.index.secrets.quote(json.dumps(failed[0], ensure_ascii=False))
            raise engine._error(f"Typesense refused {len(failed)} document(s): {said}")
    if deletes:
        for ids in _chunks(json.loads(read(deletes)), 1_000):
            text = await engine.send(
                "DELETE", "/documents", expect=200, params={"filter_by": f"id:[{','.join(ids)}]"}
            )
            if not isinstance(engine.parsed(text, "a delete").get("num_deleted"), int):
                raise engine._error(f"{engine.index.shown} answered a delete without num_deleted")
            requests += 1
    return {"requests": requests}


async def _search_index(engine: _Engine, documents: str | None, deletes: str | None, read: Reader):
    """``POST /_bulk`` in bodies of whole actions; an action's error fails the load."""
    lines = _lines(read(documents)) if documents else []
    requests = 0
    for body in _bodies(lines, pairs=True):
        text = await engine.send(
            "POST",
            "/_bulk",
            expect=200,
            content=body,
            headers={"Content-Type": "application/x-ndjson"},
        )
        requests += 1
        result = engine.parsed(text, "a bulk load")
        items = result.get("items")
        if not isinstance(result.get("errors"), bool) or not isinstance(items, list):
            raise engine._error(
                f"{engine.index.shown} answered a bulk load without errors and items"
            )
        if result["errors"]:
            bad = next(
                (
                    i
                    for i in items
                    if isinstance(i, dict)
                    for a in i.values()
                    if isinstance(a, dict) and a.get("error")
                ),
                None,
            )
            said = (
                engine.index.secrets.quote(json.dumps(bad, ensure_ascii=False))
                if bad
                else ("it named no action's error")
            )
            raise engine._error(f"the bulk load refused an action: {said}")
    return {"requests": requests}


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


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


def _chunks(values: list, size: int) -> Iterator[list]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


_LOADERS = {
    "algolia": _algolia,
    "meilisearch": _meilisearch,
    "typesense": _typesense,
    "elasticsearch": _search_index,
    "opensearch": _search_index,
}

__all__ = ["EngineError", "Index", "Secrets", "apply", "check", "load", "refuse_userinfo"]
