"""The change feed of a partitioned table (GET /v1/tables/{table}/feed):
its rows in acknowledgement order per partition, from a cursor, as
records or Arrow record batches, with consumer-group commits."""

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Union

from .errors import GroupNotFound, NotFound, Rebalanced

MEDIA_JSON = "application/json"
MEDIA_ARROW = "application/vnd.apache.arrow.stream"

# How much longer than its wait a long poll may take before its socket
# read times out: the server answers at the deadline, plus the time to
# read what it found.
_POLL_SLACK = 30.0


@dataclass
class FeedPage:
    """One answer of the feed.

    rows: the records (dicts), or with as_arrow the pyarrow.RecordBatch
    objects; count: how many rows; cursor: where the next answer starts;
    lag_rows: rows acknowledged in the partitions read after cursor, as of
    this read; partitions: the partitions read (a group member's
    assignment); epoch and rebalanced: the group's, for a member.
    """

    rows: List[Any]
    count: int
    cursor: str
    lag_rows: Optional[int] = None
    partitions: List[int] = field(default_factory=list)
    epoch: Optional[int] = None
    rebalanced: bool = False

    @property
    def at_end(self) -> bool:
        """No row, and none left to read as of this answer."""
        return self.count == 0 and not self.lag_rows


def _seconds(wait: float) -> str:
    """wait as the decimal seconds the API reads, to the millisecond."""
    if wait < 0:
        raise ValueError("wait must be >= 0 seconds")
    text = "%.3f" % wait
    return text.rstrip("0").rstrip(".") or "0"


def _int_list(text: Optional[str]) -> List[int]:
    return [int(p) for p in text.split(",") if p.strip()] if text else []


def _decode_row(row: Dict[str, Any]) -> Dict[str, Any]:
    """A JSON row with its carried payload as bytes."""
    if isinstance(row.get("payload"), str):
        row["payload"] = base64.b64decode(row["payload"])
    return row


class Feed:
    """An iterator over a table's feed (see Client.feed).

    Iterating it yields records (dicts: the record's fields as GET
    .../rollouts/{id} answers them, plus partition, offset, acked_at, and
    payload as bytes when carried, else payload_url), or with as_arrow
    pyarrow.RecordBatch objects; pages() yields whole answers (FeedPage).
    It asks the server for the next answer only when the previous one has
    been handed out entirely, long-polling up to wait seconds when there is
    nothing new.

    cursor is where the feed stands: the next answer's cursor once the last
    row (or batch) of an answer has been handed out; while one is partly
    handed out, the cursor of its start (at_page_end tells which). A new
    Feed from cursor continues without gap or duplicate when taken at a
    page end; from inside a page it delivers that page's rows again (at
    least once, never a gap).

    Consumer groups: with group and member, the server assigns this member
    its partitions, and each request commits the cursor it sends (the
    previous answer's, whose rows were all handed out before the next was
    asked for) unless commit=False; commit() commits the current cursor
    explicitly, close() leaves the group; with stop_at_end, the cursor of
    the last answer is committed when the iteration ends there (the
    consumer asked for more after the last row). With group and no member, the
    feed reads as a named consumer: the partitions given (default all),
    starting where the consumer committed (the server starts the partitions
    the cursor lacks there), committing as it goes the same way (per
    partition, forward only), so that several processes can each read and
    commit their own partitions of one name.
    """

    def __init__(self, client, table: str, cursor: Optional[str] = None, group: Optional[str] = None,
                 member: Optional[str] = None, partitions: Optional[Iterable[int]] = None, wait: float = 10.0,
                 max_rows: Optional[int] = 1000, max_bytes: Optional[int] = None,
                 payloads: Union[int, str, None] = 0, columns: Optional[Iterable[str]] = None,
                 rollout_id: Optional[str] = None, problem_id: Optional[str] = None,
                 policy_version: Optional[str] = None, as_arrow: bool = False, stop_at_end: bool = False,
                 commit: bool = True):
        if member is not None and group is None:
            raise ValueError("rollstore: a feed member needs its group")
        if member is not None and partitions is not None:
            raise ValueError("rollstore: a group member reads the partitions the group assigns it: no partitions=")
        if partitions is not None:
            partitions = list(partitions)
            if not partitions:
                raise ValueError("rollstore: partitions=[] names no partition to read")
        if payloads is not None and payloads != "all" and (not isinstance(payloads, int) or payloads < 0):
            raise ValueError("rollstore: payloads is a byte budget (int >= 0) or 'all'")
        if as_arrow:
            try:
                import pyarrow.ipc  # noqa: F401
            except ImportError as e:
                raise ImportError("rollstore: feed(as_arrow=True) needs pyarrow (pip install 'rollstore[arrow]'); "
                                  "without it, iterate the feed's records (dicts)") from e
        self.table, self.group, self.member = table, group, member
        self.cursor: Optional[str] = cursor
        # The partitions asked for (None: the cursor's, else all), and the
        # ones the last answer read.
        self._asked: Optional[List[int]] = sorted(set(int(p) for p in partitions)) if partitions is not None else None
        self.partitions: List[int] = list(self._asked or [])
        self.wait, self.as_arrow, self.stop_at_end, self.auto_commit = wait, as_arrow, stop_at_end, commit
        self.lag_rows: Optional[int] = None
        self.epoch: Optional[int] = None
        self.rebalanced = False
        self.at_page_end = True
        self._client = client
        self._query: Dict[str, Any] = {
            "max_rows": max_rows, "max_bytes": max_bytes, "payloads": payloads or None,
            "wait": _seconds(wait) if wait else None,
            "columns": ",".join(columns) if columns is not None else None,
            "rollout_id": rollout_id, "problem_id": problem_id, "policy_version": policy_version,
        }
        # A named consumer (group, no member): the cursor it last committed.
        self._committed: Optional[str] = None
        self._closed = False
        self._gen: Optional[Iterator[Any]] = None

    @property
    def named_consumer(self) -> bool:
        return self.group is not None and self.member is None

    # Iteration.

    def __iter__(self) -> "Feed":
        return self

    def __next__(self):
        if self._gen is None:
            self._gen = self._items()
        return next(self._gen)

    def _items(self) -> Iterator[Any]:
        for page in self._answers():
            if not page.rows:
                self.cursor, self.at_page_end = page.cursor, True
                continue
            self.at_page_end = False
            last = len(page.rows) - 1
            for i, item in enumerate(page.rows):
                if i == last:
                    self.cursor, self.at_page_end = page.cursor, True
                yield item

    def pages(self) -> Iterator[FeedPage]:
        """Whole answers, empty ones too (each long poll that found
        nothing); cursor moves to a page's cursor as it is handed out."""
        for page in self._answers():
            self.cursor, self.at_page_end = page.cursor, True
            yield page

    def _answers(self) -> Iterator[FeedPage]:
        while not self._closed:
            page = self._fetch()
            yield page
            if self.stop_at_end and page.at_end:
                # Asked for more after the last row: everything handed out
                # is processed, up to this answer's cursor.
                if self.auto_commit and self.group is not None:
                    self._commit_final()
                return

    def _fetch(self) -> FeedPage:
        q = dict(self._query)
        q["cursor"] = self.cursor
        if self.member is not None:
            q["group"], q["member"] = self.group, self.member
            q["commit"] = "true" if self.auto_commit else "false"
        else:
            if self._asked is not None:
                q["partitions"] = ",".join(str(p) for p in self._asked)
            if self.group is not None:
                # A named consumer: the server commits the cursor sent (if
                # asked) and starts the partitions it lacks at the
                # consumer's committed positions.
                q["group"] = self.group
                q["commit"] = "true" if self.auto_commit else "false"
                if self.auto_commit and self.cursor and self.cursor != "latest":
                    self._committed = self.cursor
        headers, data = self._client._feed_get(self.table, q, MEDIA_ARROW if self.as_arrow else MEDIA_JSON,
                                               timeout=self.wait + _POLL_SLACK)
        page = self._arrow_page(headers, data) if self.as_arrow else self._json_page(headers, data)
        self.lag_rows, self.epoch, self.rebalanced = page.lag_rows, page.epoch, page.rebalanced
        if page.partitions:
            self.partitions = page.partitions
        return page

    def _json_page(self, headers, data: bytes) -> FeedPage:
        doc = json.loads(data)
        rows = [_decode_row(r) for r in doc.get("rows") or []]
        return FeedPage(rows, len(rows), doc.get("cursor") or headers.get("Rollstore-Cursor", ""),
                        doc.get("lag_rows", _header_int(headers, "Rollstore-Lag-Rows")),
                        doc.get("partitions") or _int_list(headers.get("Rollstore-Partitions")),
                        doc.get("epoch", _header_int(headers, "Rollstore-Group-Epoch")),
                        bool(doc.get("rebalanced", headers.get("Rollstore-Rebalanced") == "true")))

    def _arrow_page(self, headers, data: bytes) -> FeedPage:
        import pyarrow.ipc

        reader = pyarrow.ipc.open_stream(data)
        batches = [b for b in reader if b.num_rows > 0]
        meta = reader.schema.metadata or {}
        cursor = headers.get("Rollstore-Cursor") or meta.get(b"rollstore.cursor", b"").decode("ascii")
        return FeedPage(batches, sum(b.num_rows for b in batches), cursor,
                        _header_int(headers, "Rollstore-Lag-Rows"),
                        _int_list(headers.get("Rollstore-Partitions")),
                        _header_int(headers, "Rollstore-Group-Epoch"),
                        headers.get("Rollstore-Rebalanced") == "true")

    # Commits.

    def _commit_named(self) -> None:
        if self.cursor and self.cursor != "latest" and self.cursor != self._committed:
            self._client.commit(self.table, self.group, self.cursor)
            self._committed = self.cursor

    def _commit_final(self) -> None:
        if self.named_consumer:
            self._commit_named()
            return
        try:
            self.commit()
        except Rebalanced:
            pass  # the member's partitions moved on: others commit them

    def commit(self) -> Optional[Dict[str, Any]]:
        """Commit cursor (everything handed out so far is processed) for
        the group; returns the group (a dict, as GET .../consumers/{group}),
        or None when nothing was read yet. A member whose assignment changed
        gets Rebalanced: reading on starts from the group's committed
        positions."""
        if self.group is None:
            raise ValueError("rollstore: commit() needs a feed of a consumer group (group=)")
        if not self.cursor or self.cursor == "latest":
            return None
        g = self._client.commit(self.table, self.group, self.cursor, member=self.member)
        if self.named_consumer:
            self._committed = self.cursor
        return g

    def close(self) -> None:
        """Stop; a group member leaves its group (its partitions go to the
        others at once). It commits nothing: call commit() first to record
        the rows handed out since the last request."""
        if self._closed:
            return
        self._closed = True
        if self._gen is not None:
            self._gen.close()
        if self.member is not None:
            try:
                self._client.leave_group(self.table, self.group, self.member)
            except NotFound:
                pass  # the group, or the member, is gone already

    def __enter__(self) -> "Feed":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _header_int(headers, name: str) -> Optional[int]:
    v = headers.get(name)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None
