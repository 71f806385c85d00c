"""Python client of rollstore, the store of reinforcement-learning rollouts.

Standard library only; pyarrow, if installed, turns scans into
pyarrow.Table (Client.scan_table) and the feed into record batches.
Client.feed follows a table's change feed; rollstore.training.FeedDataset
feeds it to a PyTorch DataLoader.

    import rollstore
    c = rollstore.Client("http://127.0.0.1:8080")
    rec = c.get("demo", "run-1/step-0")
    data = c.read_payload("demo", "run-1/step-0")
"""

__version__ = "0.1.0"

from .client import (MEDIA_ARROW, MEDIA_NDJSON, BatchItem, BatchRecord, BatchResult, Client, Page, Payload,
                     Record, partition_of, path_escape)
from .errors import (APIError, BadCursor, Conflict, CursorExpired, FeedUnsupported, Gone, GroupNotFound,
                     InvalidArgument, NotFound, NotModified, Overloaded, RangeNotSatisfiable, Rebalanced,
                     RollstoreError, Unauthorized, parse_retry_after)
from .feed import Feed, FeedPage

__all__ = [
    "__version__",
    "Client", "Record", "Page", "Payload", "BatchItem", "BatchRecord", "BatchResult", "path_escape",
    "partition_of",
    "MEDIA_ARROW", "MEDIA_NDJSON",
    "RollstoreError", "APIError", "NotModified", "InvalidArgument", "Unauthorized", "NotFound", "Conflict",
    "Gone", "RangeNotSatisfiable", "Overloaded", "parse_retry_after",
    "Feed", "FeedPage", "CursorExpired", "BadCursor", "FeedUnsupported", "Rebalanced", "GroupNotFound",
]
