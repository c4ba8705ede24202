"""What the command line prints: tables, JSON, progress and one-line errors.

Results go to stdout (a rich table on a terminal, one JSON object per
line with ``--json``), problems to stderr as one plain line that is easy
to grep. Kept apart from ``cli`` so the commands read as what they do.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from .errors import ErrorCode, UsageError, one_line

out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)


def say_error(message: str) -> None:
    """One plain line on stderr: no wrapping, no markup, easy to grep."""
    print(f"catalog-lake: error: {one_line(message)}", file=sys.stderr)


def print_json(data: Any) -> None:
    """JSON on stdout: highlighted on a terminal, plain and indented when piped."""
    out.print_json(json.dumps(data, ensure_ascii=False, default=str)) if out.is_terminal else print(
        json.dumps(data, ensure_ascii=False, default=str, indent=2)
    )


def show(frame: pd.DataFrame, as_json: bool, title: str) -> None:
    """A frame as one JSON object per line, or as a rich table titled ``title``."""
    if as_json:
        for row in frame.to_dict(orient="records"):
            print(
                json.dumps({k: plain(v) for k, v in row.items()}, ensure_ascii=False, default=str)
            )
        return
    table = Table(title=title, show_lines=False)
    for column in frame.columns:
        table.add_column(str(column), overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(cell(v) for v in row))
    out.print(table)


def plain(value: Any) -> Any:
    """A cell as plain JSON data: numpy lists to lists, missing to None, times to ISO text."""
    if hasattr(value, "tolist"):
        return plain(value.tolist())
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if value is None or (isinstance(value, float) and value != value) or value is pd.NA:
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return value


def cell(value: Any) -> str:
    """A cell as table text: lists joined with commas, missing as empty."""
    value = plain(value)
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def listed(frame, request_id, code, limit, as_json, column, said, title) -> None:
    """``rejects`` and ``warnings``: items of one push or code, as JSON or as a table.

    A code that no item could carry is a usage error that lists the codes,
    rather than an empty table that looks like good news.
    """
    if code and code not in set(ErrorCode):
        raise UsageError(
            f"code {code!r} is no error code; the codes are: {', '.join(ErrorCode)}", "code"
        )
    if request_id:
        frame = frame[frame["request_id"] == request_id]
    if code:
        frame = frame[frame["codes"].map(lambda codes: code in list(codes))]
    if as_json:
        show(frame.head(limit), True, "")
        return
    view = pd.DataFrame(
        {
            "request_id": frame["request_id"],
            "index": frame["index"],
            "client_item_id": frame["client_item_id"],
            column: frame[column].map(lambda entries: "; ".join(map(said, entries))),
        }
    )
    show(view.head(limit), False, f"{title} ({counted(min(limit, len(frame)), len(frame))})")


def counted(shown: int, total: int) -> str:
    """A listing's title count: the rows shown, and the total when the list was cut."""
    return f"{shown:,}" if shown == total else f"{shown:,} of {total:,}"


def refused(error: dict[str, Any]) -> str:
    """One error in a few words: its code and message."""
    return f"{error['code']}: {error['message']}"


def done(warning: dict[str, Any]) -> str:
    """One warning in a few words: the field, the value as sent, what was done (--json: all)."""
    sent = json.dumps(warning["value"], ensure_ascii=False)
    if warning["action"] == "repaired":
        return f"{warning['field']} {sent} repaired to {json.dumps(warning['repaired_to'])}"
    return f"{warning['field']} {sent} dropped ({warning['code']})"


class IngestProgress:
    """Progress for ingest: a rich bar on a terminal, plain lines otherwise.

    The bar measures feed bytes: half of a file's as its batches are parsed,
    half as they are written, so it moves once per batch at least (not once
    per 20,000-item commit) and can show an ETA. It counts items twice: those
    read (parsed) so far, which moves from the first part of the first file on,
    and those stored, whose rate it shows; a run's first commit comes only
    after its first group of 20,000 items is read and checked (issue 41).
    """

    def __init__(self) -> None:
        self.bar: Any = None
        self.task = None
        self.items = 0
        #: Items read so far, and of each file (its latest ``parsed`` event).
        self.read = 0
        self.parsed: dict[str, int] = {}
        #: Bytes of each file the bar has been advanced by (``_advance``).
        self.shown: dict[str, float] = {}
        self.started = time.perf_counter()
        #: An ingest's reading and committing threads both report (``groups._pipeline``),
        #: sometimes of the same file: one event at a time, so no count is lost.
        self.lock = threading.Lock()

    def __enter__(self):
        if sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TextColumn(
                    "{task.fields[read]} read, {task.fields[items]} stored, "
                    "{task.fields[rate]} items/s"
                ),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.bar.start()
        self.started = time.perf_counter()
        return self

    def __call__(self, event: str, **info: Any) -> None:
        """Take one event of the run (``plan``, ``read``, ``batch``, ``file``) and show it."""
        with self.lock:
            self._take(event, info)

    def _take(self, event: str, info: dict[str, Any]) -> None:
        if event == "batch" and not info.get("already_stored"):
            self.items += info["items"]
        elif event == "parsed":
            self.read += info["items"] - self.parsed.get(info["file"], 0)
            self.parsed[info["file"]] = info["items"]
        rate = f"{self.items / max(time.perf_counter() - self.started, 1e-9):,.0f}"
        if self.bar is None:
            if event == "plan":
                print(plan_line(info), file=sys.stderr)
            elif event == "file":
                print(f"{file_line(info)} ({rate} items/s)", file=sys.stderr)
            return
        if event == "plan":
            self.task = self.bar.add_task(
                f"{info['files']:,} files",
                total=info.get("bytes") or None,
                read="0",
                items="0",
                rate="0",
            )
        elif self.task is not None:
            self.bar.update(
                self.task,
                advance=self._advance(event, info),
                read=f"{self.read:,}",
                items=f"{self.items:,}",
                rate=rate,
            )

    def _advance(self, event: str, info: dict[str, Any]) -> float:
        """Bytes of the bar a file's event earns: half as its batches are parsed, half as written.

        So a file of one 20,000-item group moves the bar once per batch while it
        is parsed, not once when its single commit lands.
        """
        size = info.get("bytes") or 0
        shown = self.shown.get(info.get("file"), 0.0)
        if event == "parsed":
            target = size * 0.5 * info["items"] / max(info["total"], 1)
        elif event == "batch":
            target = shown + size * 0.5 / max(info.get("batches") or 1, 1)
        elif event == "file":
            target = size
        else:
            return 0.0
        target = min(max(target, shown), size)
        self.shown[info["file"]] = target
        return target - shown

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


#: The logger that receives what native libraries wrote to standard error (``native_stderr``).
NATIVE_LOG = "catalog_lake.native"


@contextlib.contextmanager
def native_stderr() -> Iterator[None]:
    """Keep what native libraries write to standard error off the terminal, and log it.

    delta-rs and object_store are Rust: a panic that they catch and turn into
    an error (a full disk's ``Already shut down``) still prints its message,
    and with ``RUST_BACKTRACE`` set a backtrace, straight to file descriptor 2,
    before the command's own one-line error (issue 42). So while a command
    runs, descriptor 2 is a temporary file and Python's ``sys.stderr`` (our
    errors, the progress bar, a traceback) writes to the terminal's own copy.
    Afterwards what was captured is logged at debug level on ``NATIVE_LOG``
    (``CATALOG_LAKE_LOG_LEVEL=DEBUG`` shows it), and shown as it was when the
    command ended in an exception we did not foresee. A process killed outright
    leaves the file in the temporary folder, named ``catalog-lake-native-*``.
    """
    sys.stderr.flush()
    handle, path = tempfile.mkstemp(prefix="catalog-lake-native-", suffix=".log")
    terminal = os.dup(2)
    python_stderr = sys.stderr
    sys.stderr = open(  # noqa: SIM115 - closed below, after descriptor 2 is put back
        os.dup(terminal),
        "w",
        encoding=python_stderr.encoding or "utf-8",
        errors="backslashreplace",
        buffering=1,
    )
    os.dup2(handle, 2)
    unforeseen = False
    try:
        yield
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:
        unforeseen = True
        raise
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)
        os.close(terminal)
        sys.stderr.close()
        sys.stderr = python_stderr
        os.close(handle)
        captured = Path(path).read_text(encoding="utf-8", errors="replace")
        Path(path).unlink(missing_ok=True)
        if captured.strip():
            logging.getLogger(NATIVE_LOG).debug("native libraries wrote: %s", captured.rstrip())
            if unforeseen:
                sys.stderr.write(captured)


def file_line(info: dict[str, Any]) -> str:
    """One file's outcome, as the CLI and the flow's log say it: ``a.json: ingested, 1 item``."""
    again = info.get("already_stored") or 0
    note = f", {again:,} already stored by an interrupted run" if again else ""
    return f"{info['file']}: {info['status']}, {count(info['items'], 'item')}{note}"


def count(number: int, noun: str) -> str:
    """``1 item``, ``2 items``: a count with its noun."""
    return f"{number:,} {noun}" + ("" if number == 1 else "s")


def plan_line(info: dict[str, Any]) -> str:
    """``N file(s) to ingest, M skipped: why`` for the plain progress output."""
    line = f"{info['files']:,} file(s) to ingest, {info['skipped']:,} skipped"
    reasons = info.get("reasons") or {}
    if reasons:
        line += ": " + "; ".join(f"{n:,} {reason}" for reason, n in reasons.items())
    return line
