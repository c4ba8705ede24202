"""SQL literals for the lake's DataFusion reads: every value a query names is quoted here.

Values come from validated items, request ids and the clock, never from a
user's text (a user's filter is compiled by ``filters``, not quoted).
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd


def quote(value: str) -> str:
    """A SQL string literal; values come from validated items or request ids."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_timestamp(value: datetime) -> str:
    """A SQL timestamp literal in UTC (a naive datetime is taken as UTC)."""
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return f"TIMESTAMP '{stamp.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z'"
