"""catalog-lake: product feeds in, validated flat search records out, on Delta Lake."""

# First: settings sets Polars' allocator before anything imports Polars (POLARS_MALLOC_CONF).
from . import settings  # noqa: F401, I001
from .catalog import Catalog
from .check import check
from .errors import (
    CatalogLakeError,
    ErrorCode,
    IngestError,
    LakeError,
    NoLakeError,
    PushError,
    SearchError,
    UsageError,
)
from .push import PushRequest
from .records import Synonyms
from .summary import DRY_RUN_KEY, FAILED_ITEMS_KEY, RESPONSE_KEYS, WARNING_ITEMS_KEY, push_response

__all__ = [
    "PushRequest",
    "DRY_RUN_KEY",
    "FAILED_ITEMS_KEY",
    "RESPONSE_KEYS",
    "WARNING_ITEMS_KEY",
    "Catalog",
    "CatalogLakeError",
    "ErrorCode",
    "IngestError",
    "LakeError",
    "NoLakeError",
    "PushError",
    "SearchError",
    "Synonyms",
    "UsageError",
    "check",
    "push_response",
]
__version__ = "0.4.0"
