"""What other writers committed to a table since a version: read from its log, not a snapshot.

A fenced commit that loses its race used to read the table again and redo
its work: the ids, the rows, the Parquet files. Most of the time the winner
wrote other items in other id blocks, and nothing of ours needs redoing.
Whether it did is in the few commit files written since our read
(``_delta_log/<version>.json``, one JSON action a line: the files added and
removed and their id blocks), and in the keys of the files they added. So
a lost race costs what was committed since, not what the table holds
(issue 45: the serial part of a commit, small and independent of the
lake's size).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import sellers, settings
from .files import joined

_BLOCK = re.compile(r"(?:^|/)id_block=(\d+)/")


@dataclass
class Since:
    """The commits after a version: the files they added and removed, by id block."""

    version: int  # the last commit read
    added: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    removed: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)

    def rewritten(self) -> set[int]:
        """The id blocks any of the commits removed a file from (a rewrite, a delete, a compaction).

        A block that only gained files kept every row it had: rows of new items,
        appended, change nothing another writer wrote of its own items.
        """
        blocks = {block_of(path, partition) for path, partition in self.removed}
        return {block for block in blocks if block is not None}


def block_of(path: str, partition: dict | None) -> int | None:
    """A file's id block: its partition value, or its folder's name (``id_block=N/``)."""
    value = (partition or {}).get("id_block")
    if value is None and (found := _BLOCK.search(path)):
        value = found.group(1)
    return None if value is None else int(value)


def concerns(since: Since, added: pa.Table, keys: pa.Array, blocks: set[int]) -> bool:
    """Whether the commits ``since`` touched rows of ours.

    They did when they rewrote one of our id ``blocks``, or added a file
    holding one of our ``keys`` (``added``: their keys, ``keys_added``).
    """
    if blocks & since.rewritten():
        return True
    return bool(pc.any(pc.is_in(keys, value_set=added["client_item_id"])).as_py())


def read_since(filesystem, root: str, version: int) -> Since:
    """Every commit of the table at ``root`` after ``version``, up to its latest."""
    since = Since(version)
    while True:
        path = joined(root, f"_delta_log/{since.version + 1:020d}.json")
        try:
            with filesystem.open_input_stream(path) as stream:
                text = stream.read().decode()
        except (FileNotFoundError, OSError):
            return since
        for line in text.splitlines():
            action = json.loads(line) if line.strip() else {}
            for kind, into in (("add", since.added), ("remove", since.removed)):
                if kind in action:
                    into.append((action[kind]["path"], action[kind].get("partitionValues") or {}))
        since.version += 1


def keys_added(filesystem, root: str, since: Since) -> pa.Table:
    """The keys and ids of the items (or records) the commits' files added.

    An item's key is its ``client_item_id`` and seller as one text
    (``sellers.keys``); files written before sellers have no seller column,
    and hold the default seller's items.
    """
    parts = []
    for path, _ in since.added:
        with pq.ParquetFile(filesystem.open_input_file(joined(root, path))) as file:
            names = file.schema_arrow.names
            wanted = ["client_item_id", "object_id", *(["seller"] if "seller" in names else [])]
            found = file.read(columns=wanted)
        parts.append(
            pa.table({"client_item_id": sellers.row_keys(found), "object_id": found["object_id"]})
        )
    empty = pa.table({"client_item_id": pa.array([], "string"), "object_id": pa.array([], "int64")})
    table = pa.concat_tables(parts) if parts else empty
    # A block rewritten holds its old keys again: each key once.
    table = table.group_by("client_item_id").aggregate([("object_id", "max")])
    table = table.rename_columns(["client_item_id", "object_id"])
    return table.append_column("id_block", pc.divide(table["object_id"], settings.ID_BLOCK_SIZE))
