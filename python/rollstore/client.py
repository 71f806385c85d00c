"""The rollstore HTTP client (standard library only)."""

import base64
import hashlib
import http.client
import io
import json
import os
import stat
import threading
import urllib.parse
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from .errors import error_from_response
from .feed import Feed

MEDIA_NDJSON = "application/x-ndjson"
MEDIA_ARROW = "application/vnd.apache.arrow.stream"

def partition_of(id: str, partitions: int) -> int:
    """The partition of id in a table of `partitions` partitions.

    FNV-1a (64 bits) of the id's UTF-8 bytes, modulo the count: the same
    function the service uses (docs/format.md), so a client can group ids
    by partition, e.g. to send each to its owner.
    """
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    h = 14695981039346656037
    for b in id.encode("utf-8"):
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h % partitions


# How much of an error answer is read.
_MAX_ERROR_BODY = 64 << 10
# Socket reads and writes of bodies.
_BLOCK = 64 << 10


def path_escape(s: str) -> str:
    """Encode s as one URL path segment, as the Go client does.

    Everything but unreserved characters is percent-encoded ('/' too), and
    an s made only of dots becomes %2E..., so that no client, proxy or
    router takes it for a dot segment and removes it.
    """
    if s and s.strip(".") == "":
        return "%2E" * len(s)
    return urllib.parse.quote(s, safe="")


@dataclass(frozen=True)
class Record:
    """A stored record's metadata.

    created is set by put only: True when the record was new (201), False
    for an identical retry of a stored one (200).
    """

    id: str
    rollout_id: str
    sequence: int
    created_at: str  # RFC 3339, as the server wrote it
    payload_size: int
    payload_sha256: str  # hex; the payload's ETag is it, quoted
    problem_id: str = ""
    role: str = ""
    content_type: str = ""
    reward: Optional[float] = None
    policy_version: str = ""
    metadata: Any = None
    # For a payload stored as an object of its own (above the server's
    # inline limit): that object's full name in the store, the blob name in
    # the container or the path under the local data folder. "" if inline.
    payload_ref: str = ""
    created: Optional[bool] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any], created: Optional[bool] = None) -> "Record":
        return cls(
            id=d["id"], rollout_id=d["rollout_id"], sequence=d.get("sequence", 0),
            created_at=d.get("created_at", ""), payload_size=d["payload_size"],
            payload_sha256=d["payload_sha256"], problem_id=d.get("problem_id", ""),
            role=d.get("role", ""), content_type=d.get("content_type", ""),
            reward=d.get("reward"), policy_version=d.get("policy_version", ""),
            metadata=d.get("metadata"), payload_ref=d.get("payload_ref", ""), created=created,
        )


@dataclass(frozen=True)
class Page:
    """One page of a listing; next_page_token is "" on the last."""

    records: List[Record]
    next_page_token: str = ""


@dataclass
class BatchItem:
    """One record of a batch, its payload in memory."""

    id: str
    rollout_id: str
    payload: bytes = b""
    problem_id: Optional[str] = None
    sequence: Optional[int] = None
    role: Optional[str] = None
    reward: Optional[float] = None
    policy_version: Optional[str] = None
    metadata: Any = None
    created_at: Optional[str] = None
    content_type: Optional[str] = None


@dataclass(frozen=True)
class BatchRecord:
    id: str
    created: bool
    payload_size: int
    payload_sha256: str


@dataclass(frozen=True)
class BatchResult:
    """created new records and existing identical retries, records in batch order."""

    created: int
    existing: int
    records: List[BatchRecord] = field(default_factory=list)


def _fields(rollout_id, problem_id, sequence, role, reward, policy_version, metadata, created_at) -> Dict[str, Any]:
    """The record fields as the server reads them, unset ones left out."""
    out: Dict[str, Any] = {"rollout_id": rollout_id}
    for k, v in (("problem_id", problem_id), ("sequence", sequence), ("role", role), ("reward", reward),
                 ("policy_version", policy_version), ("metadata", metadata), ("created_at", created_at)):
        if v is not None:
            out[k] = v
    return out


def _length(body) -> Tuple[Any, Optional[int]]:
    """The body to send and its length, None when unknown (sent chunked)."""
    if body is None:
        return b"", 0
    if isinstance(body, str):
        raise TypeError("a payload is bytes or a binary file, not str: encode it first")
    if isinstance(body, (bytes, bytearray)):
        return body, len(body)
    if isinstance(body, memoryview):
        return body, body.nbytes
    if isinstance(body, io.BytesIO):
        return body, body.getbuffer().nbytes - body.tell()
    if hasattr(body, "read"):
        try:
            st = os.fstat(body.fileno())
            if stat.S_ISREG(st.st_mode):
                return body, st.st_size - body.tell()
        except (AttributeError, OSError, io.UnsupportedOperation):
            pass
        return body, None
    if isinstance(body, Iterable):
        return body, None
    raise TypeError("a payload is bytes, a binary file or an iterable of bytes, not %s" % type(body).__name__)


def _digest(body, n: Optional[int]) -> Optional[str]:
    """RFC 9530 Repr-Digest of the payload as it will be sent, when it can be
    computed without consuming it: bytes in memory, or a seekable file of
    known length (hashed from its position, then rewound). The server
    refuses a payload whose bytes do not hash to it, so a payload damaged
    on its way is never stored. Streams of unknown length go without."""
    h = hashlib.sha256()
    if isinstance(body, (bytes, bytearray, memoryview)):
        h.update(body)
    elif isinstance(body, io.BytesIO):
        h.update(body.getbuffer()[body.tell():])
    elif n is not None and hasattr(body, "seek") and hasattr(body, "tell"):
        try:
            start = body.tell()
            left = n
            while left > 0:
                chunk = body.read(min(left, 1 << 20))
                if not chunk:
                    break
                h.update(chunk)
                left -= len(chunk)
            body.seek(start)
        except (OSError, io.UnsupportedOperation):
            return None
    else:
        return None
    return "sha-256=:" + base64.b64encode(h.digest()).decode("ascii") + ":"


def _set_timeout(conn, timeout: float) -> None:
    """Set an http.client connection's socket timeout, also of the socket
    it already has (a reused keep-alive connection)."""
    conn.timeout = timeout
    if conn.sock is not None:
        conn.sock.settimeout(timeout)


class _Stream(io.RawIOBase):
    """A response body read as it arrives.

    A body that ends before its Content-Length raises
    http.client.IncompleteRead rather than looking complete (http.client
    itself only notices that in read() without a size).
    """

    def __init__(self, client: "Client", conn, resp: http.client.HTTPResponse):
        super().__init__()
        self._client, self._conn, self._resp = client, conn, resp
        length = resp.getheader("Content-Length")
        self._left = int(length) if length is not None and resp.getheader("Transfer-Encoding") is None else None
        self._got = 0

    def readable(self) -> bool:
        return True

    def _account(self, n: int, asked: int) -> None:
        self._got += n
        if self._left is not None:
            self._left -= n
            if n == 0 and asked > 0 and self._left > 0:
                raise http.client.IncompleteRead(b"", self._left)

    def readinto(self, b) -> int:
        if self.closed:
            raise ValueError("read of a closed stream")
        if self._left == 0:
            return 0
        n = self._resp.readinto(b) or 0
        self._account(n, len(b))
        return n

    def read(self, size: Optional[int] = -1) -> bytes:
        if size is None or size < 0:
            chunks = []
            while True:
                chunk = self.read(_BLOCK)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
        if self._left == 0 or size == 0:
            return b""
        data = self._resp.read(size)
        self._account(len(data), size)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed:
            if self._left == 0 and not self._resp.isclosed():
                self._resp.read()  # nothing left: this lets http.client finish the answer
            # A connection is reused only once its answer was read whole.
            if self._resp.isclosed():
                self._client._release(self._conn, self._resp)
            else:
                self._resp.close()
                self._conn.close()
        super().close()


class Payload(_Stream):
    """A payload's bytes, streamed; a binary file object (read, readinto,
    iteration via io.BufferedReader(p), context manager).

    size is the whole payload's size, offset and length the part this read
    returns, partial whether it is a byte range (206).
    """

    def __init__(self, client, conn, resp):
        super().__init__(client, conn, resp)
        self.content_type = resp.getheader("Content-Type", "")
        self.etag = resp.getheader("ETag", "")
        self.last_modified = resp.getheader("Last-Modified", "")
        self.request_id = resp.getheader("X-Request-Id", "")
        self.partial = resp.status == 206
        length = int(resp.getheader("Content-Length", "0"))
        if self.partial:
            spec = resp.getheader("Content-Range", "")
            try:
                unit, rest = spec.split(" ", 1)
                span, size = rest.split("/", 1)
                first, last = span.split("-", 1)
                self.offset, self.length, self.size = int(first), int(last) - int(first) + 1, int(size)
            except ValueError:
                self.close()
                raise http.client.HTTPException("a 206 with Content-Range %r" % spec)
        else:
            self.offset, self.length, self.size = 0, length, length


class Client:
    """A client of one rollstore server; safe to share between threads
    (each thread keeps its own keep-alive connection).

    url: e.g. "http://127.0.0.1:8080" (a path prefix is kept); token: the
    bearer token of a server started with --auth-token-file; timeout: the
    socket timeout in seconds.
    """

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 60.0,
                 user_agent: str = "rollstore-python-client"):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("rollstore: url %r: want http:// or https:// and a host" % url)
        if u.query or u.fragment:
            raise ValueError("rollstore: url %r: no query or fragment allowed" % url)
        self._https = u.scheme == "https"
        self._host, self._port = u.hostname, u.port
        self._prefix = u.path.rstrip("/")
        self._token, self._timeout, self._agent = token, timeout, user_agent
        self._local = threading.local()
        self.url = url

    # Connections.

    def _new_connection(self):
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self._timeout, blocksize=_BLOCK)

    def _take(self):
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            return conn, True
        return self._new_connection(), False

    def _release(self, conn, resp) -> None:
        if resp.will_close or getattr(self._local, "conn", None) is not None:
            conn.close()
        else:
            self._local.conn = conn

    def close(self) -> None:
        """Close this thread's idle connection."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # Requests.

    def _request(self, method: str, path: str, query: Optional[Dict[str, Any]] = None,
                 headers: Optional[Dict[str, str]] = None, body=None, ok=(200,), stream: bool = False,
                 timeout: Optional[float] = None):
        """Send a request; returns (response, body bytes), or (response,
        connection) with stream. An answer not in ok raises its APIError.
        timeout, if longer than the client's, is this request's socket
        timeout (a long poll answers only after its wait)."""
        q = {k: v for k, v in (query or {}).items() if v is not None}
        target = self._prefix + path + ("?" + urllib.parse.urlencode(q) if q else "")
        h = {"User-Agent": self._agent, "Accept-Encoding": "identity"}
        if self._token:
            h["Authorization"] = "Bearer " + self._token
        h.update(headers or {})
        # A stale keep-alive connection fails before the server read
        # anything: a body that can be sent again is, once.
        replayable = body is None or isinstance(body, (bytes, bytearray, memoryview))
        for attempt in (0, 1):
            conn, reused = self._take()
            try:
                if timeout is not None and timeout > self._timeout:
                    _set_timeout(conn, timeout)
                conn.request(method, target, body=body, headers=h)
                resp = conn.getresponse()
                if timeout is not None and timeout > self._timeout:
                    _set_timeout(conn, self._timeout)
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                if reused and replayable and attempt == 0:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
        if resp.status not in ok:
            data = resp.read(_MAX_ERROR_BODY) if method != "HEAD" else b""
            if resp.isclosed():
                self._release(conn, resp)
            else:
                conn.close()
            raise error_from_response(resp.status, resp.headers, data, method, self.url.rstrip("/") + target)
        if stream:
            return resp, conn
        try:
            data = resp.read()
        except BaseException:
            conn.close()
            raise
        self._release(conn, resp)
        return resp, data

    def _json(self, method: str, path: str, query=None, ok=(200,)):
        resp, data = self._request(method, path, query, ok=ok)
        return resp, (json.loads(data) if data else None)

    # Probes.

    def health(self) -> bool:
        """True if the process is alive (GET /healthz)."""
        self._request("GET", "/healthz")
        return True

    def ready(self) -> bool:
        """True if the server takes traffic (GET /readyz); Overloaded if not."""
        self._request("GET", "/readyz")
        return True

    def metrics(self) -> str:
        """The Prometheus text exposition (GET /metrics)."""
        return self._request("GET", "/metrics")[1].decode("utf-8")

    # Tables.

    def tables(self) -> List[str]:
        return self._json("GET", "/v1/tables")[1]["tables"]

    def create_table(self, name: str, partitions: Optional[int] = None) -> None:
        """Create a table; Conflict (code table_exists) if it exists.
        partitions (1..1024, default the server's --partitions) is fixed for
        the table's life; a batch is all or nothing within a partition."""
        self._request("PUT", "/v1/tables/" + path_escape(name), {"partitions": partitions}, ok=(201,))

    def table(self, name: str) -> Dict[str, Any]:
        """A table's status: base version, rows, pending generations per shard."""
        return self._json("GET", "/v1/tables/" + path_escape(name))[1]

    def drop_table(self, name: str) -> None:
        self._request("DELETE", "/v1/tables/" + path_escape(name), ok=(204,))

    def versions(self, table: str) -> List[Dict[str, Any]]:
        """Retained base versions, oldest first."""
        return self._json("GET", "/v1/tables/%s/versions" % path_escape(table))[1]["versions"]

    def merge(self, table: str) -> Dict[str, Any]:
        """Seal the open generation and run one merge pass."""
        return self._json("POST", "/v1/tables/%s/merge" % path_escape(table))[1]

    # Rollouts.

    @staticmethod
    def _rollout(table: str, id: str) -> str:
        return "/v1/tables/%s/rollouts/%s" % (path_escape(table), path_escape(id))

    def put(self, table: str, id: str, payload=None, *, rollout_id: str, problem_id: Optional[str] = None,
            sequence: Optional[int] = None, role: Optional[str] = None, reward: Optional[float] = None,
            policy_version: Optional[str] = None, metadata: Any = None, created_at: Optional[str] = None,
            content_type: Optional[str] = None, size: Optional[int] = None) -> Record:
        """Store one rollout; the answer comes once it is durable.

        payload: bytes, a binary file (streamed from its position; regular
        files and BytesIO with Content-Length, others chunked), an iterable
        of bytes (chunked), or None for an empty payload. size gives the
        length of a stream that cannot tell it. Record.created is False for
        an identical retry; other content under the id raises Conflict.
        The payload's SHA-256 travels with it (Repr-Digest) when it can be
        computed without consuming the payload: bytes and seekable files.
        """
        body, n = _length(payload)
        if size is not None:
            n = size
        fields = _fields(rollout_id, problem_id, sequence, role, reward, policy_version, metadata, created_at)
        headers = {"Rollstore-Record": json.dumps(fields, ensure_ascii=True, separators=(",", ":"))}
        if content_type:
            headers["Content-Type"] = content_type
        if n is not None:
            headers["Content-Length"] = str(n)
        digest = _digest(body, n)
        if digest is not None:
            headers["Repr-Digest"] = digest
        resp, data = self._request("PUT", self._rollout(table, id), headers=headers, body=body, ok=(200, 201))
        return Record.from_json(json.loads(data), created=resp.status == 201)

    def get(self, table: str, id: str, version: Optional[int] = None) -> Record:
        """A record's metadata; version pins a base version (Gone once collected)."""
        return Record.from_json(self._json("GET", self._rollout(table, id), {"version": version})[1])

    def payload(self, table: str, id: str, offset: Optional[int] = None, length: Optional[int] = None,
                last: Optional[int] = None, version: Optional[int] = None,
                if_none_match: Optional[str] = None) -> Payload:
        """Open a payload for streaming: whole, or length bytes from offset
        (to the end if length is None), or the last `last` bytes.

        A range past the end raises RangeNotSatisfiable; if_none_match equal
        to the payload's ETag raises NotModified. Close the stream (or use
        it in a with block).
        """
        headers = {}
        if last is not None:
            if offset is not None or length is not None or last <= 0:
                raise ValueError("last is a positive count of final bytes, without offset or length")
            headers["Range"] = "bytes=-%d" % last
        elif offset is not None or length is not None:
            start = offset or 0
            if start < 0 or (length is not None and length <= 0):
                raise ValueError("offset must be >= 0 and length > 0")
            headers["Range"] = "bytes=%d-%s" % (start, "" if length is None else str(start + length - 1))
        if if_none_match:
            headers["If-None-Match"] = if_none_match
        resp, conn = self._request("GET", self._rollout(table, id) + "/payload", {"version": version},
                                   headers=headers, ok=(200, 206), stream=True)
        return Payload(self, conn, resp)

    def read_payload(self, table: str, id: str, **kw) -> bytes:
        """A payload's bytes (or a range of them, as payload() takes)."""
        with self.payload(table, id, **kw) as p:
            return p.read()

    def list_page(self, table: str, rollout_id: Optional[str] = None, problem_id: Optional[str] = None,
                  policy_version: Optional[str] = None, limit: Optional[int] = None,
                  page_token: Optional[str] = None, version: Optional[int] = None, *,
                  prefix: Optional[str] = None, start_after: Optional[str] = None) -> Page:
        """One page of records in id order (limit: default 100, at most 1000),
        optionally only ids starting with prefix and greater than start_after
        (the server seeks to them: a listing under a prefix costs what the
        rows under it cost, not the table)."""
        q = {"prefix": prefix or None, "start_after": start_after or None, "rollout_id": rollout_id,
             "problem_id": problem_id, "policy_version": policy_version,
             "limit": limit, "page_token": page_token or None, "version": version}
        d = self._json("GET", "/v1/tables/%s/rollouts" % path_escape(table), q)[1]
        return Page([Record.from_json(r) for r in d["records"]], d.get("next_page_token", ""))

    def list(self, table: str, rollout_id: Optional[str] = None, problem_id: Optional[str] = None,
             policy_version: Optional[str] = None, limit: Optional[int] = None,
             version: Optional[int] = None, *, page_token: Optional[str] = None,
             prefix: Optional[str] = None, start_after: Optional[str] = None,
             page_size: Optional[int] = None) -> Iterator[Record]:
        """Every matching record in id order, fetching pages of limit
        records as it goes (from page_token, if given); prefix and
        start_after as in list_page.

        page_size is the former name of limit, deprecated.
        """
        if page_size is not None:
            if limit is not None:
                raise TypeError("list() takes limit or its deprecated name page_size, not both")
            warnings.warn("rollstore: Client.list(page_size=) is deprecated: use limit=, "
                          "the name of the API parameter and of list_page()", DeprecationWarning, stacklevel=2)
            limit = page_size
        return self._list(table, rollout_id, problem_id, policy_version, limit, version, page_token, prefix, start_after)

    def _list(self, table, rollout_id, problem_id, policy_version, limit, version, token, prefix,
              start_after) -> Iterator[Record]:
        while True:
            page = self.list_page(table, rollout_id, problem_id, policy_version, limit, token, version,
                                  prefix=prefix, start_after=start_after)
            yield from page.records
            if not page.next_page_token:
                return
            token = page.next_page_token

    def put_batch(self, table: str, items: Iterable[Union[BatchItem, Dict[str, Any]]]) -> BatchResult:
        """Store records all or nothing, as one NDJSON batch (built in
        memory; the server bounds it by --max-batch-body). A bad item raises
        with .line naming it (from 1, in items order) and stores nothing.
        """
        lines = []
        for it in items:
            d = dict(it) if isinstance(it, dict) else {k: getattr(it, k) for k in BatchItem.__dataclass_fields__}
            payload = d.pop("payload", b"") or b""
            line = {k: v for k, v in d.items() if v is not None}
            line["payload"] = base64.b64encode(bytes(payload)).decode("ascii")
            lines.append(json.dumps(line, separators=(",", ":")))
        body = ("\n".join(lines) + "\n").encode("utf-8")
        return self._post_batch(table, MEDIA_NDJSON, body)

    def put_batch_arrow(self, table: str, data) -> BatchResult:
        """Store a batch given as an Arrow IPC stream (bytes or a binary
        file), or a pyarrow Table or RecordBatch (needs pyarrow), whose
        columns are matched to the table schema by name (id and rollout_id
        required). A bad row raises with .row naming it (from 0)."""
        if hasattr(data, "schema") and hasattr(data, "num_rows"):
            import pyarrow as pa  # only a pyarrow object gets here

            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, data.schema) as w:
                w.write(data)
            data = sink.getvalue().to_pybytes()
        return self._post_batch(table, MEDIA_ARROW, data)

    def _post_batch(self, table: str, media: str, data) -> BatchResult:
        body, n = _length(data)
        headers = {"Content-Type": media}
        if n is not None:
            headers["Content-Length"] = str(n)
        _, raw = self._request("POST", "/v1/tables/%s/rollouts" % path_escape(table), headers=headers,
                               body=body, ok=(200, 201))
        d = json.loads(raw)
        return BatchResult(d["created"], d["existing"], [BatchRecord(**r) for r in d["records"]])

    # Scans.

    def scan(self, table: str, version: Optional[int] = None, payloads: bool = False) -> _Stream:
        """The table as a raw Arrow IPC stream (a binary file object): read
        it with any Arrow reader, or see scan_table. A stream the server
        had to cut raises instead of ending early."""
        q = {"version": version, "payloads": "true" if payloads else None}
        resp, conn = self._request("GET", "/v1/tables/%s/scan" % path_escape(table), q, stream=True)
        return _Stream(self, conn, resp)

    def scan_table(self, table: str, version: Optional[int] = None, payloads: bool = False):
        """The table as a pyarrow.Table (needs pyarrow)."""
        try:
            import pyarrow.ipc
        except ImportError as e:
            raise ImportError("rollstore: scan_table needs pyarrow (pip install 'rollstore[arrow]'); "
                              "scan() returns the raw Arrow IPC stream without it") from e
        with self.scan(table, version, payloads) as s:
            return pyarrow.ipc.open_stream(s).read_all()

    # Multi-id get and listing by id prefix (added after the methods above,
    # which they parallel).

    # How many ids get_many sends in one request: the server's default
    # --max-lookup-ids.
    MAX_LOOKUP_IDS = 1000

    def get_many(self, table: str, ids: Iterable[str], version: Optional[int] = None) -> List[Optional[Record]]:
        """Many records' metadata (POST /v1/tables/{table}/lookup): one entry
        per id, in the order of ids, the Record or None when the table
        holds no such record (an absent id is never an error). version pins
        every lookup to one base version (Gone once collected). More than
        MAX_LOOKUP_IDS ids are sent as several requests, one after another.
        """
        ids = list(ids)
        if any(not isinstance(i, str) for i in ids):
            raise TypeError("ids are str")
        out: List[Optional[Record]] = []
        path = "/v1/tables/%s/lookup" % path_escape(table)
        for start in range(0, len(ids), self.MAX_LOOKUP_IDS):
            chunk = ids[start:start + self.MAX_LOOKUP_IDS]
            body = json.dumps({"ids": chunk}, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            _, raw = self._request("POST", path, {"version": version},
                                   headers={"Content-Type": "application/json", "Content-Length": str(len(body))},
                                   body=body)
            results = json.loads(raw)["results"]
            if len(results) != len(chunk):
                raise http.client.HTTPException("%d results for %d ids" % (len(results), len(chunk)))
            out.extend(Record.from_json(r["record"]) if r.get("found") else None for r in results)
        return out

    # The change feed and consumer groups (partitioned tables only; a table
    # without partitions answers FeedUnsupported).

    def feed(self, table: str, cursor: Optional[str] = None, group: Optional[str] = None,
             member: Optional[str] = None, partitions: Optional[Iterable[int]] = None, wait: float = 10.0,
             max_rows: Optional[int] = 1000, max_bytes: Optional[int] = None, payloads: Union[int, str, None] = 0,
             columns: Optional[Iterable[str]] = None, rollout_id: Optional[str] = None,
             problem_id: Optional[str] = None, policy_version: Optional[str] = None, as_arrow: bool = False,
             stop_at_end: bool = False, commit: bool = True) -> Feed:
        """The table's feed from cursor (None: the oldest retained row;
        "latest": rows acknowledged from now on), as an iterator of records
        or, with as_arrow, pyarrow.RecordBatch objects; see rollstore.Feed.

        partitions: the ones to read (default: the cursor's, else all);
        wait: seconds a request long-polls when there is nothing new;
        max_rows, max_bytes: the bounds of one answer; payloads: a byte
        budget of payloads carried inline per answer ("all": up to
        max_bytes; the others carry payload_url); columns: a projection;
        rollout_id, problem_id, policy_version: filters applied by the
        server; stop_at_end: stop at the first answer with no row and no
        lag instead of polling on; group and member, commit: see Feed.
        An expired cursor raises CursorExpired (with oldest_cursor).
        """
        return Feed(self, table, cursor=cursor, group=group, member=member, partitions=partitions, wait=wait,
                    max_rows=max_rows, max_bytes=max_bytes, payloads=payloads, columns=columns,
                    rollout_id=rollout_id, problem_id=problem_id, policy_version=policy_version,
                    as_arrow=as_arrow, stop_at_end=stop_at_end, commit=commit)

    def _feed_get(self, table: str, query: Dict[str, Any], accept: str, timeout: float):
        """One feed request: (headers, body bytes)."""
        resp, data = self._request("GET", "/v1/tables/%s/feed" % path_escape(table), query,
                                   headers={"Accept": accept}, timeout=timeout)
        return resp.headers, data

    def _consumers_path(self, table: str, group: Optional[str] = None) -> str:
        p = "/v1/tables/%s/consumers" % path_escape(table)
        return p if group is None else p + "/" + path_escape(group)

    def consumers(self, table: str) -> List[Dict[str, Any]]:
        """The table's consumer groups (dicts: group, epoch, members,
        committed, lag_rows, lag_seconds, partitions)."""
        return self._json("GET", self._consumers_path(table))[1]["consumers"]

    def consumer(self, table: str, group: str) -> Dict[str, Any]:
        """One consumer group, with its lag; GroupNotFound if there is none."""
        return self._json("GET", self._consumers_path(table, group))[1]

    def commit(self, table: str, group: str, cursor: str, member: Optional[str] = None) -> Dict[str, Any]:
        """Commit cursor's positions for group: everything before them is
        processed. Without member (a named consumer) per partition and
        forward only; a member's commit is refused with Rebalanced unless
        the cursor is of its current assignment. Returns the group."""
        doc: Dict[str, Any] = {"cursor": cursor}
        if member is not None:
            doc["member"] = member
        body = json.dumps(doc, separators=(",", ":")).encode("utf-8")
        _, raw = self._request("POST", self._consumers_path(table, group) + "/commit", body=body,
                               headers={"Content-Type": "application/json", "Content-Length": str(len(body))})
        return json.loads(raw)

    def leave_group(self, table: str, group: str, member: str) -> None:
        """Remove member from group (its partitions are reassigned)."""
        self._request("DELETE", self._consumers_path(table, group) + "/members/" + path_escape(member), ok=(204,))

    def delete_consumer(self, table: str, group: str) -> None:
        """Delete a consumer group and its committed positions."""
        self._request("DELETE", self._consumers_path(table, group), ok=(204,))
