"""The commands that feed search engines and search: export, changes, sync, search, settings.

They write what an engine loads (docs/search.md): a whole export, the changes
between two versions, a sync that remembers its place, the index settings;
and ``search`` asks the embedded index. ``cli.py`` adds them to its ``app``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from .cli_options import (
    AlwaysJson,
    JsonOption,
    LakeOption,
    SellerFilter,
    StorageOptions,
    fail,
    open_catalog,
    read_seller,
)
from .errors import UsageError
from .exports import FILTER_VALUE_BYTES, MAX_RECORD_BYTES
from .terminal import count, print_json

app = typer.Typer()


OutputOption = Annotated[
    str, typer.Option("--output", help="A file to write, or - for standard output.")
]
FormatOption = Annotated[
    str, typer.Option("--format", help="jsonl, or an engine as index-settings names it.")
]


@contextlib.contextmanager
def written(output: str):
    """A file written beside ``output`` and moved into place: no half file for a loader."""
    partial = Path(f"{output}.partial")
    try:
        with partial.open("w", encoding="utf-8") as handle:
            yield handle
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(output)


def to_output(output: str | None, write):
    """``write(stream)`` to standard output (``-``) or to a file that appears once complete.

    ``None``: nothing to write, so no file (``write`` still runs, into nothing).
    """
    if output is None:
        return write(io.StringIO())
    if output == "-":
        return write(sys.stdout)
    with written(output) as handle:
        return write(handle)


SummaryJson = Annotated[
    bool,
    typer.Option(
        "--json", help="Print a JSON summary on standard output; the data goes to --output FILE."
    ),
]


MaxRecordBytes = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=MAX_RECORD_BYTES,
        help="Largest record, in UTF-8 bytes of its JSON; longer texts are trimmed to fit "
        "(default: the engine's own, 10000 for algolia; none for the others).",
    ),
]


def say_fitted(summary: dict, *, deleted: bool = False) -> None:
    """On stderr, the records trimmed to fit their budget and those left out.

    ``deleted``: the records left out are deleted from the engine (a range of
    changes), not only missing from a whole export.
    """
    budget = summary["max_record_bytes"]
    if summary["trimmed"]:
        ids = ", ".join(summary["trimmed_ids"][:10])
        print(
            f"{count(summary['trimmed'], 'record')} trimmed to {budget:,} bytes: {ids}",
            file=sys.stderr,
        )
    if summary["too_large"]:
        ids = ", ".join(summary["too_large_ids"][:10])
        fate = "left out and deleted from the engine" if deleted else "left out"
        print(
            f"{count(summary['too_large'], 'record')} {fate}, over {budget:,} bytes even "
            f"trimmed: {ids}",
            file=sys.stderr,
        )
    if summary.get("long_filter_values"):
        ids = ", ".join(summary["long_filter_values_ids"][:10])
        print(
            f"{count(summary['long_filter_values'], 'record')} with a filter value over "
            f"Meilisearch's {FILTER_VALUE_BYTES} bytes, which it filters by their first "
            f"{FILTER_VALUE_BYTES}: {ids}",
            file=sys.stderr,
        )


def summary_on_stdout(as_json: bool, output: str) -> None:
    """With ``--json`` the summary takes standard output, so the data needs a file."""
    if as_json and output == "-":
        raise fail(
            "--json prints a summary on standard output: name the data's file with --output", 2
        )


@app.command()
def export(
    engine: FormatOption,
    output: OutputOption = "-",
    as_of: Annotated[
        str | None,
        typer.Option("--as-of", metavar="WHEN", help="Table version number or ISO timestamp."),
    ] = None,
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    max_record_bytes: MaxRecordBytes = None,
    seller: SellerFilter = None,
    as_json: SummaryJson = False,
) -> None:
    """Write every record in a search engine's import format (docs/search.md, "Search engines")."""
    summary_on_stdout(as_json, output)
    catalog = open_catalog(lake, storage_option)
    seller = read_seller(catalog, seller)
    report = to_output(
        output,
        lambda stream: catalog.export(
            engine, stream, as_of, max_record_bytes=max_record_bytes, seller=seller
        ),
    )
    summary = report.summary()
    if as_json:
        print_json(
            {"format": engine, **summary, "output": output, "as_of": as_of, "seller": seller}
        )
        return
    sys.stdout.flush()
    if output != "-":
        print(f"{report.records:,} records written to {output}", file=sys.stderr)
    say_fitted(summary)


@app.command()
def changes(
    since: Annotated[
        str, typer.Option("--since", help="Records version or ISO time the changes start after.")
    ],
    until: Annotated[
        str | None, typer.Option("--until", help="Records version or ISO time (default: now).")
    ] = None,
    engine: FormatOption = "jsonl",
    output: OutputOption = "-",
    deletes_output: Annotated[
        str | None,
        typer.Option(help="Where meilisearch and typesense deletions go (a JSON array of ids)."),
    ] = None,
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    max_record_bytes: MaxRecordBytes = None,
    seller: SellerFilter = None,
    as_json: SummaryJson = False,
) -> None:
    """Write the records upserted and deleted between two versions, one operation per object."""
    from .changes import SEPARATE_DELETES, write_changes
    from .exports import require_format

    summary_on_stdout(as_json, output)
    catalog = open_catalog(lake, storage_option)
    require_format(engine)
    if deletes_output and engine not in SEPARATE_DELETES:
        raise UsageError(
            f"--deletes-output is for {' and '.join(SEPARATE_DELETES)}, whose deletions go "
            f"in a request of their own; {engine} writes them in --output with the upserts",
            "deletes_output",
        )
    found = catalog.changes(since, until, seller=read_seller(catalog, seller))
    # An engine that takes documents apart refuses an empty payload: no file for no upserts.
    if engine in SEPARATE_DELETES and not found.upserts.num_rows and output != "-":
        output = None

    def write(stream, side=None):
        return write_changes(found, engine, stream, side, max_record_bytes=max_record_bytes)

    if deletes_output:
        with written(deletes_output) as side:
            fitted = to_output(output, lambda stream: write(stream, side))
    else:
        fitted = to_output(output, write)
    summary = fitted.summary()
    if as_json:
        print_json(
            {
                "format": engine,
                "since": found.since,
                "until": found.until,
                "upserts": found.upserts.num_rows - summary["too_large"],
                "deletes": len(found.deletes) + summary["too_large"],  # left out: deleted
                "trimmed": summary["trimmed"],
                "too_large": summary["too_large"],
                "output": output,
                "deletes_output": deletes_output,
                "seller": seller,
            }
        )
        return
    say_fitted(summary, deleted=True)
    sys.stdout.flush()  # the changes first, then the count, in a pipe too
    upserts = found.upserts.num_rows - summary["too_large"]
    print(
        f"versions {found.since} to {found.until}: {upserts:,} upserts, "
        f"{len(found.deletes) + summary['too_large']:,} deletes"
        + ("" if output is not None else " (no upserts: no documents file written)"),
        file=sys.stderr,
    )


@app.command()
def sync(
    target: Annotated[str, typer.Argument(help="A folder or s3:// prefix for the export files.")],
    engine: FormatOption = "jsonl",
    full: Annotated[
        bool, typer.Option("--full", help="Export every record again and restart the cursor.")
    ] = False,
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    max_record_bytes: MaxRecordBytes = None,
    apply: Annotated[
        str | None,
        typer.Option(
            "--apply",
            metavar="INDEX_URL",
            help="Load the new files into the engine's index at this URL before the cursor "
            "moves (credentials from the engine's variables: docs/search.md).",
        ),
    ] = None,
    seller: Annotated[
        str | None,
        typer.Option(
            "--seller",
            help="A target of this seller's records alone (default: every seller's); "
            "a target keeps the seller it was first synced with.",
            show_default=False,
        ),
    ] = None,
    as_json: AlwaysJson = False,
) -> None:
    """Export the changes since TARGET's cursor to a new file there, then advance the cursor."""
    report = open_catalog(lake, storage_option).sync(
        target,
        engine,
        full=full,
        max_record_bytes=max_record_bytes,
        apply=apply,
        seller=seller,
    )
    print_json(report)


@app.command()
def search(
    query: Annotated[
        str, typer.Argument(help="Words to search for (the last may be partial).")
    ] = "",
    on_sale: Annotated[bool, typer.Option("--on-sale", help="Only records on sale.")] = False,
    in_stock: Annotated[bool, typer.Option("--in-stock", help="Only records in stock.")] = False,
    price: Annotated[str | None, typer.Option(help="A price range, LOW..HIGH.")] = None,
    inventory: Annotated[str | None, typer.Option(help="A stock range, LOW..HIGH.")] = None,
    category: Annotated[
        list[str] | None, typer.Option("--category", help="In this category (repeat: any of).")
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="With this tag (any of).")] = None,
    brand: Annotated[
        list[str] | None, typer.Option("--brand", help="Of this brand (any of).")
    ] = None,
    facet: Annotated[
        list[str] | None, typer.Option("--facet", help="Count hits per value of this column.")
    ] = None,
    page: Annotated[int, typer.Option(min=0, help="Page, from 0.")] = 0,
    hits_per_page: Annotated[int, typer.Option(min=1, help="Hits per page.")] = 20,
    all_variants: Annotated[
        bool, typer.Option("--all-variants", help="Every variant, not one per group.")
    ] = False,
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    seller: SellerFilter = None,
    as_json: JsonOption = False,
) -> None:
    """Search the records as a storefront would: ranked hits, facets, one per variant group."""
    from .search import storefront_filters

    filters = storefront_filters(
        on_sale=on_sale,
        in_stock=in_stock,
        price=price,
        inventory=inventory,
        categories=category,
        tags=tag,
        brands=brand,
    )
    catalog = open_catalog(lake, storage_option)
    found = catalog.search(
        query,
        filters=filters,
        facets=list(facet or []),
        page=page,
        hits_per_page=hits_per_page,
        distinct=not all_variants,
        seller=read_seller(catalog, seller),
    )
    if as_json:
        print_json(found)
        return
    hits = found["nb_hits"]
    print(f"{hits:,} hit{'' if hits == 1 else 's'} ({found['processing_time_ms']} ms)")
    for number, hit in enumerate(found["hits"], start=page * hits_per_page + 1):
        sale = f" (was {hit['mrp']:g})" if hit["on_sale"] else ""
        print(f"{number:>3}. [{hit['object_id']}] {hit['product_name']}  {hit['price']:g}{sale}")
    for name, counts in found["facets"].items():
        listed_counts = ", ".join(f"{value} {count}" for value, count in counts.items())
        print(f"{name}: {listed_counts}")


@app.command("index-settings")
def index_settings(
    engine: Annotated[
        str,
        typer.Option(
            "--format", help="algolia, meilisearch, typesense, elasticsearch or opensearch."
        ),
    ],
    output: OutputOption = "-",
    as_json: SummaryJson = False,
) -> None:
    """Write a search engine's index settings from SPEC 2.1's attribute roles (no lake needed).

    Searched attributes in priority order, displayed ones, filters and facets,
    custom ranking on sales, likes and inventory, and one result per
    variant_group_id, in the engine's own settings format.
    """
    from .exports import index_settings as settings_of

    summary_on_stdout(as_json, output)
    settings_ = settings_of(engine)
    text = json.dumps(settings_, indent=2, ensure_ascii=False) + "\n"
    if output == "-":
        sys.stdout.write(text)
        return
    with written(output) as handle:
        handle.write(text)
    if as_json:
        print_json({"format": engine, "output": output, "settings": sorted(settings_)})
