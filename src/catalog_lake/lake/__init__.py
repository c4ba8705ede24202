"""The storage room: the only code that talks to Delta Lake (docs/design.md, "The lake").

``tables`` opens, creates, upgrades, reads and keeps up the tables
(``Lake``); ``writes`` commits to them; ``log`` reads what was committed
since a version; ``files`` writes data files with their statistics;
``layout`` checks a stored layout against today's; ``upserts`` decides what
an upsert writes; ``reads`` reads rows, versions and scans.
"""

from .files import is_local
from .tables import LAKE_ERRORS, STORE_ERRORS, Lake
from .upserts import races
from .writes import FENCES, IDS, next_fence

__all__ = [
    "FENCES",
    "IDS",
    "LAKE_ERRORS",
    "STORE_ERRORS",
    "Lake",
    "is_local",
    "next_fence",
    "races",
]
