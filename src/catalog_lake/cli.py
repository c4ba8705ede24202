"""``catalog-lake``: the command line, a thin door onto ``Catalog``.

Every command takes ``--lake`` (or ``$CATALOG_LAKE_URI``), writes results to
stdout and problems to stderr as one line, and never shows a traceback for
an error it understands.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from typer._click.exceptions import NoArgsIsHelpError
from typer.core import TyperGroup

from . import cli_search, cli_service, cli_tables
from .cli_options import (
    AlwaysJson,
    JsonOption,
    LakeOption,
    SellerFilter,
    SellerOption,
    StorageOptions,
    StrictValues,
    fail,
    open_catalog,
    storage_options,
)
from .errors import CatalogLakeError, UsageError
from .lake import STORE_ERRORS
from .refresh import REFRESH_PARAMETERS, Refresh
from .terminal import (
    IngestProgress,
    native_stderr,
    out,
    print_json,
    say_error,
)


class _OneLineErrors(TyperGroup):
    """Every command ends a known failure with one line on stderr, never a traceback.

    A ``CatalogLakeError`` exits 1 with its message; Ctrl-C exits 130 and says
    how to resume (every write is an atomic Delta commit, and a re-run repairs
    what was interrupted and skips what landed).
    """

    def main(self, *args, standalone_mode: bool = True, **kwargs):  # noqa: D102 - see the class
        # The framework's own usage errors (a bad value, an unknown option or command) are
        # one line too, with exit 2, not its boxed panel: so it runs without standalone mode
        # and what it would have printed is printed here. Typer 0.29 vendors click and
        # exports none of its errors but through their base, ``TyperException``.
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except NoArgsIsHelpError as exc:
            exc.show()  # the help, as the framework shows it for a bare command
            code = exc.exit_code
        except typer.TyperException as exc:
            context = getattr(exc, "ctx", None)
            command = context.command_path if context is not None else "catalog-lake"
            say_error(f"{exc.format_message()} (see '{command} --help')")
            code = exc.exit_code
        except typer.Abort:
            print("aborted", file=sys.stderr)
            code = 1
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)

    def get_command(self, ctx, cmd_name):  # noqa: D102 - see the class
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _valueless_flags(command, ctx)
        return command

    def format_help(self, ctx, formatter):  # noqa: D102 - see the class
        _valueless_flags(self, ctx)
        return super().format_help(ctx, formatter)

    def invoke(self, ctx):  # noqa: D102 - see the class
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            say_error(exc.worded(_flags(self, ctx)))
            raise typer.Exit(2) from None
        except CatalogLakeError as exc:
            say_error(str(exc))
            raise typer.Exit(1) from None
        except STORE_ERRORS as exc:
            if _broken_pipe(exc):
                # The reader went away (`catalog-lake export ... | head`): stop quietly, as
                # Unix tools killed by SIGPIPE do, and let nothing more reach the pipe.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise typer.Exit(141) from None
            # The last net: a store error no command foresaw is still one line, not a traceback.
            say_error(f"the lake could not be read or written: {exc}")
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            print("interrupted: run the same command again to resume", file=sys.stderr)
            raise typer.Exit(130) from None


#: Library parameters that the CLI's options call otherwise (``UsageError.parameters``).
_CLI_NAMES = {**REFRESH_PARAMETERS, "deletes": "deletes_output", "client_item_ids": "ids"}


def _flags(group, ctx) -> dict[str, str]:
    """How the command that ran spells each library parameter: ``as_of`` is ``--as-of``."""
    command = group.get_command(ctx, ctx.invoked_subcommand or "")
    if command is None:
        return {}
    flags = {p.name: p.opts[0] for p in command.params if p.opts and p.opts[0].startswith("--")}
    flags |= {lib: flags[cli] for lib, cli in _CLI_NAMES.items() if cli in flags}
    return flags


def _valueless_flags(command, ctx) -> None:
    """Help that reads as click's own: ``--batch-size N``, ``SOURCE``, a flag with no value.

    Typer 0.29 would show ``<int range>``, ``<str>``, ``{source}`` and ``<bool>``:
    an option with no metavar of its own shows ``N`` for a whole number, ``NUMBER``
    for another, else the last word of its name in capitals (``--dask-address
    ADDRESS``).
    """
    for param in [*command.params, command.get_help_option(ctx)]:
        if param is None:
            continue
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif param.param_type_name == "argument":
            # As click writes an argument: SOURCE when required, [QUERY] when not (typer
            # 0.29 writes {source}), and in the list of arguments no type after its name.
            name = param.name.upper() + ("..." if param.nargs != 1 else "")
            param.metavar = param.name.upper()
            param._usage_display_name = lambda name=name, param=param: (
                name if param.required else f"[{name}]"
            )
            param.display_type_rich = lambda ctx: None
        elif param.metavar is None:
            kind = param.bare_type() if hasattr(param, "bare_type") else ""
            word = param.name.rsplit("_", 1)[-1].upper()
            param.metavar = {"int": "N", "float": "NUMBER"}.get(kind, word)


def _broken_pipe(exc: BaseException) -> bool:
    """Whether standard output's reader went away (Python's own error, or Polars' wording)."""
    return isinstance(exc, BrokenPipeError) or "Broken pipe (os error 32)" in str(exc)


app = typer.Typer(
    cls=_OneLineErrors,
    name="catalog-lake",
    help="Push product feeds into a Delta lake of flat search records, and read them back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help, as click writes it: an option and its help on one line where they fit,
    # and no boxes that wrap each option over several lines in a narrow terminal.
    rich_markup_mode=None,
    context_settings={"max_content_width": 120},
)


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        print(f"catalog-lake {version('catalog-lake')}")
        raise typer.Exit()


@app.callback()
def _options(
    ctx: typer.Context,
    storage_option: StorageOptions = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Push product feeds into a Delta lake of flat search records, and read them back."""
    # ``--storage-option`` before the command counts for every lake the command opens: it is
    # kept on the run's context (a command's context inherits ``obj``), not in this module,
    # so two runs in one process (the tests' runner) never see each other's options.
    ctx.obj = storage_options(storage_option)


@app.command()
def push(
    files: Annotated[
        list[str],
        typer.Argument(
            help="Feed files read as ingest reads them (.json, .jsonl, .ndjson, .gz of "
            "either), or - for standard input.",
            show_default=False,
        ),
    ],
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 3 when any item of any push failed.")
    ] = False,
    strict_values: StrictValues = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Answer what each push would, write nothing; a new item's service id is null.",
        ),
    ] = False,
    seller: SellerOption = None,
    as_json: AlwaysJson = False,
) -> None:
    """Push each file as one push and print its push response as JSON."""
    from .sellers import seller_name
    from .sources import read_push

    seller = seller_name(seller)  # before any file is read
    catalog = open_catalog(lake, storage_option)
    whole_failures = 0
    item_failures = 0
    for path in files:
        try:
            parsed = read_push(path)
            response = catalog.push(
                parsed,
                source="-" if path == "-" else path,
                strict=strict_values,
                dry_run=dry_run,
                seller=seller,
            )
        except OSError as exc:
            say_error(f"{path}: {exc.strerror or exc}")
            whole_failures += 1
            continue
        except CatalogLakeError as exc:
            say_error(f"{path}: {exc}")
            whole_failures += 1
            continue
        item_failures += int(response["catalog_push_failed_product_count"])
        print_json(response)
    if whole_failures:
        raise typer.Exit(1)
    if strict and item_failures:
        raise typer.Exit(3)


@app.command()
def ingest(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            help="Folder (or file) of feeds: .json, .jsonl, .ndjson, .gz of any of them, and "
            "deletion lists (.delete.jsonl); or an s3:// prefix."
        ),
    ],
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    pattern: Annotated[str, typer.Option(help="Glob under SOURCE.")] = "**/*",
    batch_size: Annotated[int, typer.Option(min=1, help="Items per push.")] = 1_000,
    group_items: Annotated[
        int, typer.Option(min=1, help="Items of consecutive pushes written in one commit.")
    ] = 20_000,
    force: Annotated[bool, typer.Option(help="Ingest files already ingested unchanged.")] = False,
    workers: Annotated[
        int,
        typer.Option(
            min=0,
            help="Start a Dask LocalCluster of N one-thread workers that check and write "
            "groups while this process commits them (0: none).",
        ),
    ] = 0,
    dask_address: Annotated[
        str | None,
        typer.Option(
            help="A running Dask scheduler (tcp://host:8786) whose workers check groups.",
            envvar="CATALOG_LAKE_DASK_ADDRESS",
        ),
    ] = None,
    strict_values: StrictValues = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Check the feeds and report what a run would store; write nothing.",
        ),
    ] = False,
    full_refresh: Annotated[
        bool,
        typer.Option(
            "--full-refresh",
            help="SOURCE is the whole catalog: after every file is stored, delete the items "
            "of the refresh's scope that it did not carry.",
        ),
    ] = False,
    refresh_scope: Annotated[
        str,
        typer.Option(
            help="source: items last pushed from a file of SOURCE; all: every item.",
        ),
    ] = "source",
    refresh_category: Annotated[
        str | None, typer.Option(help="Only items of this lake_category.")
    ] = None,
    max_delete_share: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="Stop a refresh that would delete more of its scope."),
    ] = 0.2,
    allow_mass_delete: Annotated[
        bool, typer.Option("--allow-mass-delete", help="Delete past --max-delete-share.")
    ] = False,
    max_delete_share_per_day: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Also stop a refresh that, with SOURCE's refreshes of the past 24 hours, "
            "deletes more of its scope (default: none).",
        ),
    ] = None,
    seller: SellerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Push every new or changed feed file under SOURCE, in batches, and summarize the run."""
    from .feeds import ingest as run_ingest
    from .sellers import seller_name
    from .summary import run_failed, summary_markdown

    given = [f"--{name.replace('_', '-')}" for name in REFRESH_OPTIONS if _given(ctx, name)]
    if given and not full_refresh:
        raise fail(f"{', '.join(given)} only apply to a refresh: add --full-refresh", 2)
    seller = seller_name(seller)  # before any file is read
    catalog = open_catalog(lake, storage_option)
    refresh = (
        Refresh(
            refresh_scope,
            refresh_category,
            max_delete_share,
            allow_mass_delete,
            max_delete_share_per_day,
        )
        if full_refresh
        else None
    )
    with IngestProgress() as progress:
        summary = run_ingest(
            catalog,
            source,
            pattern,
            batch_size,
            force,
            progress=progress,
            group_items=group_items,
            workers=workers,
            dask_address=dask_address,
            strict=strict_values,
            dry_run=dry_run,
            refresh=refresh,
            seller=seller,
        )
    if as_json:
        print(json.dumps(summary, ensure_ascii=False, default=str))
    else:
        out.print(summary_markdown(summary), markup=False, highlight=False)
    if run_failed(summary):
        raise typer.Exit(1)


#: ``ingest``'s options that shape a full refresh, and mean nothing without one.
REFRESH_OPTIONS = tuple(REFRESH_PARAMETERS.values())


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the command line (or the environment) set ``name``, not its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


@app.command()
def backfill(
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    since: Annotated[
        str | None, typer.Option(help="Only pushes received at or after (ISO).")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Only pushes received before (ISO).")] = None,
    request_id: Annotated[
        list[str] | None, typer.Option("--request-id", help="Only these pushes (repeatable).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report, write nothing.")] = False,
    seller: SellerFilter = None,
    as_json: AlwaysJson = False,
) -> None:
    """Re-derive items and records from the raw table with today's rules."""
    from .backfill import backfill as run_backfill

    report = run_backfill(
        open_catalog(lake, storage_option),
        since=_when(since),
        until=_when(until),
        request_ids=request_id or None,
        dry_run=dry_run,
        seller=seller,
    )
    print_json(report)


def _when(value: str | None):
    if value is None:
        return None
    try:
        return pd.Timestamp(value).to_pydatetime()
    except ValueError:
        raise fail(f"not an ISO date or date-time: {value!r}", 2) from None


@app.command()
def metrics(
    file: Annotated[
        Path,
        typer.Argument(help="CSV or Parquet with client_item_id, likes, sales (and seller)."),
    ],
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    seller: SellerOption = None,
    as_json: AlwaysJson = False,
) -> None:
    """Update likes and sales of known items; unknown ids are reported, not created."""
    from .metrics import apply_metrics

    report = apply_metrics(open_catalog(lake, storage_option), file, seller)
    print_json(report)


@app.command()
def maintain(
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    retention_hours: Annotated[
        int, typer.Option(min=0, help="Vacuum keeps files this long.")
    ] = 168,
    as_json: AlwaysJson = False,
) -> None:
    """Re-price records whose discount window opened or closed, compact and vacuum."""
    from .maintain import maintain as run_maintain

    report = run_maintain(open_catalog(lake, storage_option), retention_hours=retention_hours)
    print_json(report)


@app.command()
def check(
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    fast: Annotated[
        bool, typer.Option("--fast", help="Skip comparing records with a derivation from raw.")
    ] = False,
    as_json: AlwaysJson = False,
) -> None:
    """Verify the lake's invariants; exit 1 and list violations when any fails."""
    from .check import check as check_lake

    report = check_lake(open_catalog(lake, storage_option), derive=not fast)
    print_json(report)
    if not report["ok"]:
        raise typer.Exit(1)


@app.command()
def repair(
    lake: LakeOption = None, storage_option: StorageOptions = None, as_json: JsonOption = False
) -> None:
    """Finish pushes that were interrupted between table commits, from the raw table.

    Prints each finished push's response; with --json, one JSON list of them
    (``[]`` when nothing was interrupted).
    """
    responses = open_catalog(lake, storage_option).repair()
    if as_json:
        print(json.dumps(responses, ensure_ascii=False, default=str))
        return
    if not responses:
        print("nothing to repair")
    for response in responses:
        print_json(response)


@app.command()
def delete(
    ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="client_item_id values to delete, or - to read them from stdin.",
            show_default=False,
        ),
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option("--from", help="A file of ids, one per line (or - for standard input)."),
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Makes a retry safe, as for a push.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be deleted; write nothing.")
    ] = False,
    lake: LakeOption = None,
    storage_option: StorageOptions = None,
    seller: SellerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete items: their records leave search, their service ids stay reserved.

    Prints one line per id (deleted, already_deleted, superseded or refused
    with its code), or the whole answer with --json. Exits 3 when any id was
    refused.
    """
    given = list(ids or [])
    if from_file is not None or given == ["-"]:
        stdin = from_file is None or str(from_file) == "-"
        name = "standard input" if stdin else str(from_file)
        try:
            data = sys.stdin.buffer.read() if stdin else from_file.read_bytes()  # type: ignore[union-attr]
            text = data.decode("utf-8")
        except OSError as exc:
            raise fail(f"{name}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise fail(
                f"{name}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); "
                "a list of ids is one UTF-8 id per line"
            ) from None
        given = [line.strip() for line in text.splitlines() if line.strip()]
    if not given:
        raise fail("name the ids to delete: catalog-lake delete ID..., --from FILE, or -", 2)
    response = open_catalog(lake, storage_option).delete(
        given, idempotency_key=idempotency_key, dry_run=dry_run, source="cli", seller=seller
    )
    if as_json:
        print_json(response)
    else:
        for entry in response["items"]:
            code = f" ({entry['code']})" if "code" in entry else ""
            service = f" [{entry['object_id']}]" if entry["object_id"] else ""
            print(f"{entry['client_item_id']}{service}: {entry['status']}{code}")
        dry = " (dry run: nothing was written)" if dry_run else ""
        sys.stdout.flush()  # the ids first, then the count, in a pipe too
        print(
            f"{response['catalog_delete_success_count']} of "
            f"{response['catalog_delete_received_count']} done, "
            f"{response['catalog_delete_failed_count']} refused; request "
            f"{response['catalog_delete_request_id']}{dry}",
            file=sys.stderr,
        )
    if int(response["catalog_delete_failed_count"]):
        raise typer.Exit(3)


def main() -> None:
    """Console-script entry point.

    The command's work is done when ``app`` returns or exits, but the
    interpreter then runs full garbage collections over every object alive,
    most of them made by importing pandas, Polars and pyarrow (about 130,000
    after an ingest). They cost 0.2-0.4 s of every command's exit and free
    nothing that the process's end does not (Python does not promise to
    finalize what is still alive at exit, and the commands close what they
    open): so those objects are frozen first (``gc.freeze``), and the
    collections pass them by. The import's objects are frozen before the
    command runs, too: the few full collections a command triggers then walk
    what it made, not what importing made (an ingest's coordinator, with
    workers: 0.10 -> 0.035 s of collections per 100,000 items). Only the
    console script does this, never the library: a long-lived process that
    calls ``Catalog`` keeps its collector whole.
    """
    level = os.environ.get("CATALOG_LAKE_LOG_LEVEL", "").strip().upper()
    if level:
        if level not in logging.getLevelNamesMapping():
            say_error(
                f"CATALOG_LAKE_LOG_LEVEL={level!r} is no log level; use DEBUG, INFO or WARNING"
            )
            sys.exit(2)
        # Its own copy of the terminal's descriptor: descriptor 2 is a file while a command
        # runs (``native_stderr``), and the log belongs on the terminal.
        logging.basicConfig(
            level=level,
            stream=open(os.dup(2), "w", buffering=1),  # noqa: SIM115 - open until exit
            format="%(levelname)s %(name)s: %(message)s",
        )
    gc.freeze()  # what importing made lives as long as the process
    try:
        with native_stderr():
            app()
    except KeyboardInterrupt:
        # Every write is an atomic Delta commit, and a re-run repairs and resumes.
        print("interrupted: run the same command again to resume", file=sys.stderr)
        sys.exit(130)
    finally:
        gc.freeze()


app.add_typer(cli_tables.app)
app.add_typer(cli_search.app)
app.add_typer(cli_service.app)
app.add_typer(cli_service.keys_app)


if __name__ == "__main__":
    main()
