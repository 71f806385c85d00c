"""Python client of rollstore, the store of reinforcement-learning rollouts.

Standard library only; pyarrow, if installed, turns scans into
pyarrow.Table (Client.scan_table).

    import rollstore
    c = rollstore.Client("http://127.0.0.1:8080")
    rec = c.get("demo", "run-1/step-0")
    data = c.read_payload("demo", "run-1/step-0")
"""

__version__ = "0.1.0"

from .client import (MEDIA_ARROW, MEDIA_NDJSON, BatchItem, BatchRecord, BatchResult, Client, Page, Payload,
                     Record, partition_of, path_escape)
from .errors import (APIError, Conflict, Gone, InvalidArgument, NotFound, NotModified, Overloaded,
                     RangeNotSatisfiable, RollstoreError, Unauthorized, parse_retry_after)

__all__ = [
    "__version__",
    "Client", "Record", "Page", "Payload", "BatchItem", "BatchRecord", "BatchResult", "path_escape",
    "partition_of",
    "MEDIA_ARROW", "MEDIA_NDJSON",
    "RollstoreError", "APIError", "NotModified", "InvalidArgument", "Unauthorized", "NotFound", "Conflict",
    "Gone", "RangeNotSatisfiable", "Overloaded", "parse_retry_after",
]
