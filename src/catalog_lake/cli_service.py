"""The service's commands: ``serve``, and ``keys create``, ``keys list`` and ``keys revoke``.

``serve`` runs ``service.create_app`` in uvicorn; the keys commands write and
read the lake's ``access_keys`` table (``access``). ``cli.py`` adds both.
"""

from __future__ import annotations

import signal
import sys
from datetime import UTC, datetime
from typing import Annotated

import typer

from . import access
from .cli_options import JsonOption, LakeOption, StorageOptions, open_catalog
from .terminal import print_json

app = typer.Typer()
keys_app = typer.Typer(
    name="keys",
    help="Make, list and revoke the service's keys; each is bound to one seller.",
    no_args_is_help=True,
)


@app.command()
def serve(
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8080,
    rate_limit: Annotated[
        str | None,
        typer.Option(help="Requests per key, e.g. 20/second or 1000/minute (default: none)."),
    ] = None,
    max_body_bytes: Annotated[int, typer.Option(min=1, help="Largest request body, in bytes.")] = 32
    * 1024
    * 1024,
    max_items_per_push: Annotated[
        int, typer.Option(min=1, help="Most items in one push (and ids in one delete).")
    ] = 10_000,
    access_log: Annotated[
        bool, typer.Option("--access-log", help="Log every request on stderr.")
    ] = False,
) -> None:
    """Serve push, delete, read and search over HTTP (docs/service.md); Ctrl-C stops it."""
    import uvicorn

    from .service import Limits, create_app

    limits = Limits(
        max_body_bytes=max_body_bytes,
        max_items_per_push=max_items_per_push,
        rate_limit=rate_limit,
    )
    catalog = open_catalog(lake, storage_option)
    print(
        f"catalog-lake: serving {catalog.lake.uri} on http://{host}:{port} "
        "(GET /healthz, /openapi.json)",
        file=sys.stderr,
        flush=True,
    )
    # uvicorn stops gracefully on SIGTERM as on Ctrl-C, then raises the signal again with
    # the handler it found. SIGTERM's default handler would end the process there, before
    # the command's own clean-up (``terminal.native_stderr`` leaves its file in the temporary
    # folder): so SIGTERM ends it as Ctrl-C does, and the command returns, exit status 0.
    previous = signal.signal(signal.SIGTERM, _as_ctrl_c)
    try:
        uvicorn.run(
            create_app(catalog, limits),
            host=host,
            port=port,
            log_level="warning",
            access_log=access_log,
            server_header=False,
            timeout_graceful_shutdown=10,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)


def _as_ctrl_c(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@keys_app.command("create")
def keys_create(
    seller: Annotated[
        str, typer.Option("--seller", help="The one seller the key reads and writes.")
    ],
    actions: Annotated[
        str,
        typer.Option("--actions", help=f"Comma-separated, of {','.join(access.ACTIONS)}."),
    ] = ",".join(access.ACTIONS),
    expires: Annotated[
        str | None,
        typer.Option("--expires", help="When it stops working: an ISO date or date-time (UTC)."),
    ] = None,
    note: Annotated[str | None, typer.Option("--note", help="Who or what it is for.")] = None,
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    as_json: JsonOption = False,
) -> None:
    """Make a key and print it, once: the lake keeps only its digest."""
    catalog = open_catalog(lake, storage_option)
    expires_at = None if expires is None else access.utc(expires)
    text, made = access.create(
        catalog.lake, seller, actions, now=datetime.now(UTC), expires_at=expires_at, note=note
    )
    if as_json:
        print_json({"key": text, **made.listed(datetime.now(UTC))})
        return
    print(text)
    print(
        f"key {made.key_id} for seller {made.seller!r} "
        f"({','.join(a for a in access.ACTIONS if a in made.actions)}): shown once, "
        "keep it secret",
        file=sys.stderr,
    )


@keys_app.command("list")
def keys_list(
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    as_json: JsonOption = False,
) -> None:
    """List the keys: id, seller, actions, state; never a key itself."""
    catalog = open_catalog(lake, storage_option)
    now = datetime.now(UTC)
    rows = [k.listed(now) for k in access.load(catalog.lake).values()]
    rows.sort(key=lambda r: (r["created_at"], r["key_id"]))
    if as_json:
        print_json(rows)
        return
    if not rows:
        print("no keys", file=sys.stderr)
    for row in rows:
        until = f" until {row['expires_at']}" if row["expires_at"] else ""
        print(
            f"{row['key_id']}  {row['seller']}  {','.join(row['actions'])}  {row['state']}{until}"
        )


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id, as keys list shows it.")],
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
) -> None:
    """Revoke a key for good; a running server refuses it within a second."""
    catalog = open_catalog(lake, storage_option)
    revoked = access.revoke(catalog.lake, key_id, now=datetime.now(UTC))
    print(f"key {revoked.key_id} of seller {revoked.seller!r}: revoked", file=sys.stderr)
