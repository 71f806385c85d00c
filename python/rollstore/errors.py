"""Errors of the rollstore client.

Every answer other than the one asked for raises an APIError subclass
chosen by its HTTP status, mirroring the Go client's sentinels; branch on
the class, or on ``code`` (stable), never on ``message``. Transport
failures (refused connections, timeouts, cut streams) are the standard
library's OSError and http.client exceptions.
"""

import email.utils
import json
import time
from typing import Optional


class RollstoreError(Exception):
    """Base of the client's own errors."""


class APIError(RollstoreError):
    """The server answered with an error.

    status: the HTTP status; code: rollstore's error code ("" if the body
    was not rollstore's JSON, e.g. a proxy's page); message; request_id: the
    id the server logged the request under; retry_after: seconds to wait
    (503s) or None; line / row: the rejected item of a batch (NDJSON line
    from 1, Arrow row from 0) or None.
    """

    def __init__(self, status: int, code: str, message: str, request_id: str = "",
                 retry_after: Optional[float] = None, line: Optional[int] = None,
                 row: Optional[int] = None, method: str = "", url: str = ""):
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.retry_after = retry_after
        self.line = line
        self.row = row
        self.method = method
        self.url = url
        text = "%s %s: %d" % (method, url, status)
        if code:
            text += " " + code
        if message:
            text += ": " + message
        if request_id:
            text += " (request %s)" % request_id
        super().__init__(text)


class NotModified(APIError):
    """304: if_none_match matched the payload's ETag."""


class InvalidArgument(APIError):
    """400: the request was refused as invalid; nothing changed."""


class Unauthorized(APIError):
    """401: a missing or wrong bearer token."""


class NotFound(APIError):
    """404: no such record (not_found), table (table_not_found) or version (version_not_found)."""


class Conflict(APIError):
    """409: the id holds other content (conflict), or the table exists (table_exists)."""


class Gone(APIError):
    """410: the pinned base version was collected (version_gone), or a feed cursor expired (CursorExpired)."""


class RangeNotSatisfiable(APIError):
    """416: the byte range starts at or past the end of the payload."""


class Overloaded(APIError):
    """503: not now (overloaded, throttled, draining, read_only, ...); retry after retry_after seconds."""


class BadCursor(InvalidArgument):
    """400 bad_cursor: a feed cursor that does not decode, or names partitions the table does not have."""


class GroupNotFound(NotFound):
    """404 group_not_found: no consumer group of that name."""


class FeedUnsupported(Conflict):
    """409 feed_unsupported: the table has no partitions, so no feed."""


class Rebalanced(Conflict):
    """409 rebalanced: a commit of a group member whose assignment changed
    (a member joined or left); nothing was stored. Read the feed again: it
    starts from the group's committed positions."""


class CursorExpired(Gone):
    """410 cursor_expired: the cursor is older than the feed's retention, or
    of a table since dropped and created again. oldest_cursor is the oldest
    cursor still valid (for the same partitions): resume from it, knowing
    the rows in between are gone, or start over."""

    def __init__(self, *args, oldest_cursor: str = "", **kw):
        super().__init__(*args, **kw)
        self.oldest_cursor = oldest_cursor


# Codes that refine the class of their status (each a subclass of it).
_BY_CODE = {
    "bad_cursor": BadCursor,
    "group_not_found": GroupNotFound,
    "feed_unsupported": FeedUnsupported,
    "rebalanced": Rebalanced,
    "cursor_expired": CursorExpired,
}

_BY_STATUS = {
    304: NotModified,
    400: InvalidArgument,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    410: Gone,
    416: RangeNotSatisfiable,
    503: Overloaded,
}


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Retry-After as seconds: an integer, or an HTTP date; None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(int(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_from_response(status: int, headers, body: bytes, method: str, url: str) -> APIError:
    """The APIError of an answer; a body that is not rollstore's JSON becomes the message."""
    cls = _BY_STATUS.get(status, APIError)
    request_id = headers.get("X-Request-Id", "") or ""
    retry_after = parse_retry_after(headers.get("Retry-After"))
    try:
        doc = json.loads(body.decode("utf-8"))
        detail = doc["error"]
        code = detail["code"]
        if not isinstance(code, str) or not code:
            raise ValueError("no code")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        text = body.decode("utf-8", "replace").strip()
        if len(text) > 300:
            text = text[:300] + "…"
        return cls(status, "", text, request_id, retry_after, method=method, url=url)
    sub = _BY_CODE.get(code)
    if sub is not None and issubclass(sub, cls):
        cls = sub
    kw = {}
    if cls is CursorExpired:
        kw["oldest_cursor"] = detail.get("oldest_cursor") or doc.get("oldest_cursor") or ""
    return cls(status, code, detail.get("message", ""), detail.get("request_id") or request_id,
               retry_after, detail.get("line"), detail.get("row"), method=method, url=url, **kw)
