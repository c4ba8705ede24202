"""Sellers: one lake for many, whose ``client_item_id``s may collide and whose items never mix.

Every item belongs to one seller, named by short text (``SELLER``). An item is
the pair ``(seller, client_item_id)``: two sellers may both send ``SKU-1``, and
each gets its own service id. Inside the lake the pair is one text, the item's
*key* (``keys``): its ``client_item_id`` for the default seller, as every lake
written before sellers keyed it, so such a lake needs no rewrite; and
``seller`` + ``SEPARATOR`` + ``client_item_id`` for any other. The separator
is a control character, which no ``client_item_id`` may hold
(``invalid_identifier``), so no two pairs share a key.

Rows written before sellers existed have no seller (null): they are the
default seller's.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .errors import UsageError

#: The seller of every item pushed without one, and of every item of an older lake.
DEFAULT_SELLER = "default"
#: A seller's name: 1 to 64 ASCII letters, digits, dots, dashes and underscores.
SELLER = re.compile(r"[A-Za-z0-9._-]{1,64}", re.ASCII)
#: Between a seller and a ``client_item_id`` in an item's key (see the module's docstring).
SEPARATOR = "\x1f"


def seller_name(given: Any, parameter: str = "seller") -> str:
    """The seller ``given`` names (None: the default seller), checked.

    Raises:
        UsageError: not 1 to 64 characters of ``[A-Za-z0-9._-]``.
    """
    if given is None:
        return DEFAULT_SELLER
    if isinstance(given, str) and SELLER.fullmatch(given):
        return given
    shown = repr(given) if not isinstance(given, str) or len(given) <= 80 else repr(given[:80])
    raise UsageError(
        f"seller {shown} is not a seller's name: 1 to 64 letters, digits, '.', '-' or '_'",
        parameter,
    )


def keys(client_ids: Any, sellers: Any) -> pa.Array:
    """Each item's key in the lake, from its ``client_item_id`` and its seller (vectorized).

    ``sellers`` is one name for every item, or an array of them (null: the
    default seller).
    """
    if isinstance(client_ids, pa.ChunkedArray):
        ids = client_ids.combine_chunks().cast(pa.string())
    elif isinstance(client_ids, pa.Array):
        ids = client_ids.cast(pa.string())
    else:
        ids = pa.array(list(client_ids), pa.string())
    if sellers is None or isinstance(sellers, str):
        if sellers is None or sellers == DEFAULT_SELLER:
            return ids
        return pc.binary_join_element_wise(pa.scalar(sellers), ids, SEPARATOR)
    if isinstance(sellers, pa.ChunkedArray):
        names = sellers.combine_chunks()
    elif isinstance(sellers, pa.Array):
        names = sellers
    else:
        names = pa.array(list(sellers), pa.string())
    names = pc.fill_null(names.cast(pa.string()), DEFAULT_SELLER)
    default = pc.equal(names, DEFAULT_SELLER)
    joined = pc.binary_join_element_wise(names, ids, SEPARATOR)
    return pc.if_else(default, ids, joined)


def of_rows(table: pa.Table) -> pa.Array:
    """The seller of each row of a table (the default seller where it has none)."""
    if "seller" not in table.column_names:
        return pa.repeat(pa.scalar(DEFAULT_SELLER, pa.string()), table.num_rows)
    return pc.fill_null(table["seller"].combine_chunks().cast(pa.string()), DEFAULT_SELLER)


def row_keys(table: pa.Table) -> pa.Array:
    """The key of each row of a table with ``client_item_id`` (and ``seller``, if any)."""
    sellers = table["seller"] if "seller" in table.column_names else None
    return keys(table["client_item_id"], sellers)


def sql_filter(seller: str | None) -> str:
    """A SQL condition for one seller's rows (the default seller's include rows with none)."""
    if seller is None:
        return "TRUE"
    if seller == DEFAULT_SELLER:
        return f"(seller IS NULL OR seller = '{DEFAULT_SELLER}')"
    return f"seller = '{seller}'"  # a checked name: letters, digits, '.', '-', '_'


def with_seller(filters: Any, seller: str) -> Any:
    """Search ``filters`` (a dict, a list of them, or None) keeping ``seller``'s records alone."""
    if filters is None:
        return {"seller": [seller]}
    if isinstance(filters, dict):
        return {**filters, "seller": [seller]}
    return [{**one, "seller": [seller]} for one in filters]


__all__ = [
    "DEFAULT_SELLER",
    "SELLER",
    "SEPARATOR",
    "keys",
    "of_rows",
    "row_keys",
    "seller_name",
    "sql_filter",
    "with_seller",
]
