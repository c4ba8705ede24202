"""A sync target: a folder or object-store prefix that follows one lake (issue 41).

A target holds the files ``changes.sync`` exports and a small manifest,
``.catalog-lake-target.json``, that says which lake it follows: the lake's
URI and identity (``Lake.identity``, its records table's Delta id), and the
format. The manifest is a dotfile, so a shell glob of the exports passes it
by. A sync from any other lake is refused, so two lakes never write into one
folder and no export file name collides. A target is named by its resolved
place (``key``): ``exports/search`` typed in two working folders is two
targets, with a cursor each.
"""

from __future__ import annotations

import json
import posixpath
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
from pyarrow import fs

from .errors import LakeError, UsageError, first_line
from .lake import is_local

#: The manifest's name inside a target.
MANIFEST = ".catalog-lake-target.json"
#: Object stores a target may name; any other ``scheme://`` is refused in one line.
SCHEMES = ("file", "s3", "gs", "abfs", "az")

Writer = Callable[[IO[str]], Any]


@dataclass(frozen=True)
class Target:
    """Where a sync writes: a local folder (absolute) or an object-store prefix."""

    key: str

    @classmethod
    def of(cls, text: str) -> Target:
        """The target ``text`` names, resolved; an empty or unknown one is a ``UsageError``."""
        given = str(text).strip()
        if not given:
            raise UsageError("the sync target is empty; name a folder or an s3:// prefix", "target")
        scheme, sep, _ = given.partition("://")
        if sep and scheme.lower() not in SCHEMES:
            raise UsageError(
                f"sync target {given!r}: {scheme}:// is not a storage this can write "
                f"(use a folder, or one of {', '.join(s + '://' for s in SCHEMES)})",
                "target",
            )
        if sep and scheme.lower() != "file":
            return cls(given.rstrip("/"))
        return cls(Path(given.removeprefix("file://")).expanduser().resolve().as_posix())

    @property
    def local(self) -> bool:
        """Whether the target is a folder of this machine."""
        return is_local(self.key)

    def join(self, name: str) -> str:
        """A file's place in the target."""
        return posixpath.join(self.key, name)

    def manifest(self) -> dict[str, Any] | None:
        """The target's manifest, or None where none was written yet."""
        text = self._read(self.join(MANIFEST))
        if text is None:
            return None
        try:
            manifest = json.loads(text)
            manifest["lake_id"]
        except (ValueError, TypeError, KeyError):
            raise LakeError(
                f"{self.join(MANIFEST)} is not a catalog-lake sync manifest; move it away, or "
                "sync into another target"
            ) from None
        return manifest

    def claim(
        self,
        lake_uri: str,
        lake_id: str,
        fmt: str,
        now: datetime,
        *,
        full: bool = False,
        seller: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """The target's manifest for this lake and format, and whether it is new (written now).

        The manifest says the target's format from its first file on, so a
        target whose first load failed (files written, no cursor yet) still
        refuses another format. ``full`` starts the target again, in ``fmt``.

        A target is one seller's records, or every seller's (``seller`` None),
        from its first file on: a sync of another seller into it is refused.

        Raises:
            UsageError: the manifest names another lake, another seller, or
                another format without ``full``.
        """
        manifest = self.manifest()
        if manifest is not None:
            if manifest["lake_id"] != lake_id:
                raise UsageError(
                    f"sync target {self.key} follows another lake ({manifest.get('lake')}, id "
                    f"{manifest['lake_id']}), not this one ({lake_uri}, id {lake_id}); sync into "
                    f"another target, or empty this one first if this lake replaces that one",
                    "target",
                )
            if manifest.get("seller") != seller:
                held = manifest.get("seller") or "every seller"
                raise UsageError(
                    f"sync target {self.key} holds the records of {held}, not of "
                    f"{seller or 'every seller'}; sync into another target",
                    "seller",
                )
            if manifest.get("format", fmt) == fmt:
                return manifest, False
            if not full:
                raise UsageError(
                    f"{self.key} was synced as {manifest['format']}, not {fmt}; use another "
                    "target for another format, or start this one again with full",
                    "full",
                )
        manifest = {
            "lake": lake_uri,
            "lake_id": lake_id,
            "format": fmt,
            "created_at": now.isoformat(),
            **({"seller": seller} if seller is not None else {}),
        }
        text = json.dumps(manifest, indent=2) + "\n"
        self.write(self.join(MANIFEST), lambda out: out.write(text))
        return manifest, True

    def remove(self, path: str) -> None:
        """Delete a file of the target, if it is there."""
        if self.local:
            Path(path.removeprefix("file://")).unlink(missing_ok=True)
            return
        filesystem, key = self._filesystem(path)
        try:
            filesystem.delete_file(key)
        except FileNotFoundError:
            pass
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"cannot delete {path}: {first_line(exc)}") from None

    def write(self, path: str, write: Writer) -> None:
        """Write one file whole, so a loader never reads half of it.

        ``write(out)`` writes its text. A local file is written beside its place
        and moved in; an object is written to a scratch file first, then put at
        once.
        """
        if self.local:
            local = Path(path.removeprefix("file://"))
            local.parent.mkdir(parents=True, exist_ok=True)
            partial = local.with_name(local.name + ".partial")
            try:
                with partial.open("w", encoding="utf-8") as out:
                    write(out)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            partial.replace(local)
            return
        filesystem, key = self._filesystem(path)
        with tempfile.TemporaryDirectory() as scratch:
            body = Path(scratch) / "body"
            with body.open("w", encoding="utf-8") as out:
                write(out)
            try:
                with body.open("rb") as source, filesystem.open_output_stream(key) as out:
                    shutil.copyfileobj(source, out)
            except (OSError, pa.ArrowException) as exc:
                raise LakeError(f"cannot write {path}: {first_line(exc)}") from None

    def read(self, path: str) -> str:
        """A file of the target, whole, as text."""
        text = self._read(path)
        if text is None:
            raise LakeError(f"{path} is gone from its target")
        return text

    def _read(self, path: str) -> str | None:
        if self.local:
            try:
                return Path(path.removeprefix("file://")).read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
            except (OSError, UnicodeDecodeError) as exc:
                raise LakeError(f"cannot read {path}: {exc}") from None
        filesystem, key = self._filesystem(path)
        try:
            if filesystem.get_file_info(key).type == fs.FileType.NotFound:
                return None
            with filesystem.open_input_stream(key) as stream:
                return stream.read().decode("utf-8", errors="replace")
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"cannot read {path}: {first_line(exc)}") from None

    @staticmethod
    def _filesystem(path: str) -> tuple[fs.FileSystem, str]:
        try:
            return fs.FileSystem.from_uri(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise UsageError(f"sync target {path}: {first_line(exc)}", "target") from None


__all__ = ["MANIFEST", "Target"]
