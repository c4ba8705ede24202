"""What the commands share: the lake they open, its storage options, JSON output, errors.

``cli.py`` and ``cli_search.py`` both take these, so a lake is opened and an
error worded one way by every command.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer._click.globals import get_current_context

from . import settings
from .catalog import Catalog
from .sellers import seller_name
from .terminal import say_error

LakeOption = Annotated[
    str | None,
    typer.Option(
        "--lake",
        envvar=settings.LAKE_ENV,
        help=f"Lake folder or URI (default: ${settings.LAKE_ENV}, else ./lake).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]
#: Whose items a command writes (the default seller's when none is named).
SellerOption = Annotated[
    str | None,
    typer.Option(
        "--seller",
        help="The seller whose items these are: 1 to 64 letters, digits, '.', '-' or '_' "
        "(default: the default seller).",
        show_default=False,
    ),
]
#: Whose items a command reads (every seller's when none is named).
SellerFilter = Annotated[
    str | None,
    typer.Option(
        "--seller", help="Only this seller's rows (default: every seller's).", show_default=False
    ),
]
#: The commands that list a table's rows (records, rejects, warnings, history) print one
#: JSON object per row, JSON Lines, so a long listing streams into ``jq`` or a loader.
RowsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON object per row (JSON Lines).")
]
StrictValues = Annotated[
    bool,
    typer.Option(
        "--strict-values",
        help="Refuse an item for a value that would be dropped or repaired (a warning).",
    ),
]
AlwaysJson = Annotated[
    bool,
    typer.Option("--json", help="Prints JSON either way; accepted like every command's --json."),
]


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print one error line and return the exit to raise."""
    say_error(message)
    return typer.Exit(code)


StorageOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--storage-option",
        metavar="KEY=VALUE",
        help="An object-store setting for the lake, repeatable (e.g. "
        "AWS_ENDPOINT_URL=http://127.0.0.1:8333); the standard AWS_* variables "
        "are read too. Never printed.",
    ),
]


def storage_options(given: list[str] | None) -> dict[str, str]:
    """``--storage-option KEY=VALUE`` texts as a dict; a text without ``=`` is refused unseen."""
    options = {}
    for text in given or []:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            # The text is not shown: it may be a secret typed without its key.
            raise fail("--storage-option takes KEY=VALUE; one was given without '='")
        options[key.strip()] = value
    return options


def open_catalog(lake: str | None, storage_option: list[str] | None = None) -> Catalog:
    """The lake a command opens; ``--storage-option`` counts before or after the command."""
    context = get_current_context(silent=True)
    given_first = (context.obj if context is not None else None) or {}
    options = {**given_first, **storage_options(storage_option)}
    if lake is not None and not lake.strip():
        raise fail("--lake is empty; name a lake folder or an s3:// URI", 2)
    return Catalog(lake, storage_options=options or None)


def read_seller(catalog: Catalog, seller: str | None) -> str | None:
    """The seller a read names (``--seller``), checked, or None for every seller's rows.

    A seller with nothing in the lake reads as empty, as any filter that matches
    nothing does, and stderr says why: a mistyped seller is told, never taken
    for a seller without rows (docs/sellers.md).
    """
    if seller is None:
        return None
    seller = seller_name(seller)
    if catalog.lake.exists() and not catalog.has_seller(seller):
        print(f"catalog-lake: seller {seller!r} has no items in this lake", file=sys.stderr)
    return seller
