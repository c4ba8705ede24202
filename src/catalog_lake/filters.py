"""A user's filter (``--where``, ``query_records(where=...)``): one expression, allow-listed.

The text is parsed by sqlglot and compiled to a Polars expression from an
allow-list: comparisons, ``AND``/``OR``/``NOT``, ``IN`` and ``BETWEEN`` over
literals, ``LIKE``/``ILIKE``, ``IS [NOT] NULL``, ``array_contains`` and
``lower``/``upper``/``length``, over the table's own columns. Anything else (a
subquery, a table function such as ``read_csv``, another statement) is refused
by name before anything runs, so a filter can read no file and reach no
network. Its size and nesting are bounded, so a hostile text costs
milliseconds, not the machine's memory. A literal compared with a column takes
the column's type: ``updated_at > '2026-11-25'`` compares times (a date-time
without an offset is UTC), ``object_id = '5'`` numbers.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from .errors import LakeError, UsageError

#: The longest filter text accepted (characters).
MAX_WHERE_CHARS = 4_096
#: The deepest nesting of a filter's parts (parentheses, NOT, AND/OR chains).
MAX_WHERE_DEPTH = 32
#: The most parts (columns, literals, operators) one filter may have.
MAX_WHERE_NODES = 512

ALLOWED = (
    "comparisons (= != <> < <= > >=), AND, OR, NOT, IN (literals), BETWEEN, LIKE, ILIKE, "
    "IS [NOT] NULL, array_contains(list, value), lower(), upper(), length()"
)

_COMPARE = {
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
}
_TEXT_FUNCTIONS = {
    exp.Lower: lambda e: e.str.to_lowercase(),
    exp.Upper: lambda e: e.str.to_uppercase(),
}


#: The range of a 64-bit whole number: service ids, counts and ``length()`` are compared as one.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def compile_where(text: str, schema: pa.Schema) -> pl.Expr:
    """``text`` as a Polars filter over ``schema``'s columns, or a one-line ``LakeError``."""
    if len(text) > MAX_WHERE_CHARS:
        raise _refused(text, f"it is {len(text):,} characters long; at most {MAX_WHERE_CHARS:,}")
    if _paren_depth(text) > MAX_WHERE_DEPTH:
        raise _refused(text, f"it nests deeper than {MAX_WHERE_DEPTH} levels")
    try:
        tree = sqlglot.parse_one(text, read="duckdb")
    except (ParseError, TokenError) as exc:
        why = _why(exc)
        raise UsageError(f"where {text!r} is not one SQL expression: {why}", "where") from None
    except RecursionError:
        raise _refused(text, f"it nests deeper than {MAX_WHERE_DEPTH} levels") from None
    nodes = 0
    for node in tree.walk():
        nodes += 1
        if nodes > MAX_WHERE_NODES:
            raise _refused(text, f"it has more than {MAX_WHERE_NODES} parts")
        if node.depth > MAX_WHERE_DEPTH:
            raise _refused(text, f"it nests deeper than {MAX_WHERE_DEPTH} levels")
    return _Compiler(text, schema).condition(tree)


def _why(exc: Exception) -> str:
    """Sqlglot's parse error in the user's terms: what is wrong, and at which column."""
    found = (getattr(exc, "errors", None) or [{}])[0]
    where = f" at column {found['col']}" if found.get("col") else ""
    description = str(found.get("description") or exc)
    if "Required keyword" in description:
        return f"an operator is missing what it compares{where}"
    return f"{description.strip().splitlines()[0].rstrip('.')}{where}"


def _paren_depth(text: str) -> int:
    """The deepest parenthesis nesting outside quoted text (checked before parsing)."""
    depth = deepest = 0
    for part in re.split(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")", text):
        if part.startswith(("'", '"')):
            continue
        for char in part:
            if char == "(":
                depth += 1
                deepest = max(deepest, depth)
            elif char == ")":
                depth -= 1
    return deepest


def _refused(text: str, why: str) -> UsageError:
    shown = text if len(text) <= 80 else text[:77] + "..."
    return UsageError(f"where {shown!r} is refused: {why}", "where")


class _Compiler:
    """Walks one parsed filter; every node kind it does not name is refused."""

    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.schema = schema

    def refuse(self, node: exp.Expression) -> LakeError:
        what = node.sql(dialect="duckdb")
        what = what if len(what) <= 60 else what[:57] + "..."
        kind = type(node).__name__
        return _refused(
            self.text, f"{kind} ({what}) is not allowed; a filter is one expression of {ALLOWED}"
        )

    def condition(self, node: exp.Expression) -> pl.Expr:
        if isinstance(node, exp.Paren):
            return self.condition(node.this)
        if isinstance(node, exp.And):
            return self.condition(node.left) & self.condition(node.right)
        if isinstance(node, exp.Or):
            return self.condition(node.left) | self.condition(node.right)
        if isinstance(node, exp.Not):
            return ~self.condition(node.this)
        if type(node) in _COMPARE:
            left, right = self.pair(node.left, node.right)
            return _COMPARE[type(node)](left, right)
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return self.value(node.this)[0].is_null()
        if isinstance(node, exp.In):
            if node.args.get("query") is not None or node.args.get("unnest") is not None:
                raise self.refuse(node)
            column, kind = self.value(node.this)
            values = [self.literal(v, kind) for v in node.expressions]
            return column.is_in(pl.lit(pl.Series(values, dtype=_polars(kind)), allow_object=False))
        if isinstance(node, exp.Between):
            column, kind = self.value(node.this)
            low = pl.lit(self.literal(node.args["low"], kind), dtype=_polars(kind))
            high = pl.lit(self.literal(node.args["high"], kind), dtype=_polars(kind))
            return column.is_between(low, high, closed="both")
        if isinstance(node, (exp.Like, exp.ILike)):
            column, kind = self.value(node.this)
            if not pa.types.is_string(kind):
                raise _refused(self.text, f"{node.key.upper()} needs a text column")
            pattern = self.literal(node.expression, pa.string())
            flags = "(?is)" if isinstance(node, exp.ILike) else "(?s)"
            return column.str.contains(flags + _like_regex(str(pattern)))
        if isinstance(node, exp.ArrayContains):
            column, kind = self.value(node.this)
            if not pa.types.is_list(kind):
                raise _refused(self.text, "array_contains needs a list column (tags, categories)")
            wanted = self.literal(node.expression, kind.value_type)
            return column.list.contains(pl.lit(wanted, dtype=_polars(kind.value_type)))
        if isinstance(node, (exp.Column, exp.Boolean)):
            value, kind = self.value(node)
            if not pa.types.is_boolean(kind):
                raise _refused(self.text, f"{node.sql()} is not true or false on its own")
            return value
        raise self.refuse(node)

    def pair(self, left: exp.Expression, right: exp.Expression) -> tuple[pl.Expr, pl.Expr]:
        """Two sides of a comparison; a literal takes the other side's type."""
        if _is_literal(left) and not _is_literal(right):
            b, kind = self.value(right)
            return pl.lit(self.literal(left, kind), dtype=_polars(kind)), b
        if _is_literal(right) and not _is_literal(left):
            a, kind = self.value(left)
            return a, pl.lit(self.literal(right, kind), dtype=_polars(kind))
        return self.value(left)[0], self.value(right)[0]

    def value(self, node: exp.Expression) -> tuple[pl.Expr, pa.DataType]:
        """A column (or a text function of one) and its Arrow type."""
        if isinstance(node, exp.Paren):
            return self.value(node.this)
        if isinstance(node, exp.Column):
            if node.table or not isinstance(node.this, exp.Identifier):
                raise self.refuse(node)
            name = node.name
            if name not in self.schema.names:
                raise UsageError(
                    f"unknown column {name!r} in where {self.text!r}; "
                    f"known: {', '.join(self.schema.names)}",
                    "where",
                )
            kind = self.schema.field(name).type
            if pa.types.is_decimal(kind):  # money in items: compared as the number it is
                return pl.col(name).cast(pl.Float64), pa.float64()
            return pl.col(name), kind
        if isinstance(node, exp.Boolean):
            return pl.lit(node.this), pa.bool_()
        if type(node) in _TEXT_FUNCTIONS or isinstance(node, exp.Length):
            inner, kind = self.value(node.this)
            if not pa.types.is_string(kind):
                raise _refused(self.text, f"{node.key}() needs a text column")
            if isinstance(node, exp.Length):
                return inner.str.len_chars().cast(pl.Int64), pa.int64()
            return _TEXT_FUNCTIONS[type(node)](inner), pa.string()
        if _is_literal(node):
            kind = pa.string() if node.is_string else pa.float64()
            return pl.lit(self.literal(node, kind)), kind
        raise self.refuse(node)

    def literal(self, node: exp.Expression, kind: pa.DataType) -> Any:
        """A literal read as a value of ``kind``, or a one-line error saying why it cannot be."""
        if isinstance(node, exp.Paren):
            return self.literal(node.this, kind)
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Boolean):
            text = "true" if node.this else "false"
        elif isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
            text = "-" + node.this.name
        elif isinstance(node, exp.Literal):
            text = node.name
        else:
            raise self.refuse(node)
        try:
            return _typed(text, kind)
        except OverflowError:
            raise _refused(
                self.text,
                f"{text!r} is out of range: a whole number here lies between "
                f"{INT64_MIN:,} and {INT64_MAX:,}",
            ) from None
        except (ValueError, TypeError):
            raise _refused(self.text, f"{text!r} is not a {_described(kind)}") from None


def _is_literal(node: exp.Expression) -> bool:
    if isinstance(node, exp.Paren):
        return _is_literal(node.this)
    return isinstance(node, (exp.Literal, exp.Null)) or (
        isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal)
    )


def _typed(text: str, kind: pa.DataType) -> Any:
    if pa.types.is_timestamp(kind):
        stamp = pd.Timestamp(text)
        if pd.isna(stamp):
            raise ValueError(text)
        stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
        return stamp.to_pydatetime()
    if pa.types.is_date(kind):
        return date.fromisoformat(text)
    if pa.types.is_integer(kind):
        number = float(text)
        if not number.is_integer():
            raise ValueError(text)
        whole = int(text) if re.fullmatch(r"-?\d+", text) else int(number)
        if not INT64_MIN <= whole <= INT64_MAX:  # every whole column and length() is 64-bit
            raise OverflowError(text)
        return whole
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        number = float(text)
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError(text)
        return number
    if pa.types.is_boolean(kind):
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise ValueError(text)
        return lowered == "true"
    return text


def _polars(kind: pa.DataType) -> pl.DataType:
    if pa.types.is_timestamp(kind):
        return pl.Datetime("us", "UTC")
    if pa.types.is_date(kind):
        return pl.Date
    if pa.types.is_integer(kind):
        return pl.Int64
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return pl.Float64
    if pa.types.is_boolean(kind):
        return pl.Boolean
    return pl.String


def _described(kind: pa.DataType) -> str:
    if pa.types.is_timestamp(kind):
        return "date or date-time (2026-11-25, 2026-11-25T18:00:00+05:30)"
    if pa.types.is_integer(kind):
        return "whole number"
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return "number"
    if pa.types.is_boolean(kind):
        return "true or false"
    return str(kind)


def _like_regex(pattern: str) -> str:
    """SQL LIKE (``%`` any run, ``_`` one character) as an anchored regular expression."""
    parts = [".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern]
    return "^" + "".join(parts) + "$"
