"""Tests of the Python client against a real `rollstore serve`.

They need ROLLSTORE_TEST_URL (and, as the server is started,
ROLLSTORE_TEST_TOKEN, ROLLSTORE_TEST_DIRECT_URL, ROLLSTORE_TEST_DATA_DIR,
ROLLSTORE_TEST_MAX_UPLOADS): `go test ./cmd/rollstore -run
TestPythonClient` builds the binary, serves a temporary folder with those
settings, puts an OpenAPI-validating proxy in front of it
(ROLLSTORE_TEST_URL) and runs `python3 -m unittest discover -s tests` here.
"""

import hashlib
import http.client
import io
import itertools
import os
import socket
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rollstore  # noqa: E402
from rollstore.errors import error_from_response, parse_retry_after  # noqa: E402

URL = os.environ.get("ROLLSTORE_TEST_URL", "")
DIRECT = os.environ.get("ROLLSTORE_TEST_DIRECT_URL", URL)
TOKEN = os.environ.get("ROLLSTORE_TEST_TOKEN") or None
DATA_DIR = os.environ.get("ROLLSTORE_TEST_DATA_DIR", "")
MAX_UPLOADS = int(os.environ.get("ROLLSTORE_TEST_MAX_UPLOADS", "0"))

try:
    import pyarrow  # noqa: F401
    import pyarrow.ipc  # noqa: F401

    HAVE_PYARROW = True
except ImportError:
    HAVE_PYARROW = False

needs_server = unittest.skipUnless(URL, "ROLLSTORE_TEST_URL is not set: run `go test ./cmd/rollstore -run TestPythonClient`")

_counter = itertools.count()


def fresh_table(c, partitions=None):
    name = "py_%d_%d" % (os.getpid(), next(_counter))
    c.create_table(name, partitions=partitions)
    return name


def payload_of(seed, n):
    """Deterministic test bytes."""
    out = bytearray()
    block = hashlib.sha256(seed.encode()).digest()
    while len(out) < n:
        out += block
        block = hashlib.sha256(block).digest()
    return bytes(out[:n])


def sha(b):
    return hashlib.sha256(b).hexdigest()


AWKWARD_IDS = [
    "run-1/step-0", ".", "..", "...", "a/../b", "../../other/rollouts/secret", "%", "%2F", "100%25",
    "with space", "plus+sign", "q?x=1&y=2", "hash#frag", "semi;colon", "ünïcødé/日本語", "emoji-🦀",
    "trailing/", "/leading", "back\\slash", 'quote"d', "~tilde", "*",
]


class Offline(unittest.TestCase):
    """What needs no server."""

    def test_path_escape(self):
        for s, want in [("a/b", "a%2Fb"), (".", "%2E"), ("..", "%2E%2E"), ("a.b", "a.b"), ("%", "%25"),
                        ("sp ace", "sp%20ace"), ("日本", "%E6%97%A5%E6%9C%AC"), ("q?x#y", "q%3Fx%23y")]:
            self.assertEqual(rollstore.path_escape(s), want)
            self.assertEqual(urllib.parse.unquote(rollstore.path_escape(s)), s)

    def test_retry_after(self):
        self.assertEqual(parse_retry_after("3"), 3.0)
        self.assertIsNone(parse_retry_after(None))
        self.assertIsNone(parse_retry_after("soon"))
        now = 1767323045.0  # Fri, 02 Jan 2026 03:04:05 GMT
        self.assertAlmostEqual(parse_retry_after("Fri, 02 Jan 2026 03:04:35 GMT", now), 30.0)
        self.assertEqual(parse_retry_after("Fri, 02 Jan 2026 03:00:00 GMT", now), 0.0)

    def test_error_classes(self):
        e = error_from_response(404, {"X-Request-Id": "h"}, b'{"error":{"code":"not_found","message":"m","request_id":"r"}}',
                                "GET", "http://x/y")
        self.assertIsInstance(e, rollstore.NotFound)
        self.assertEqual((e.status, e.code, e.message, e.request_id), (404, "not_found", "m", "r"))
        e = error_from_response(503, {"Retry-After": "7"}, b"<html>proxy</html>", "GET", "u")
        self.assertIsInstance(e, rollstore.Overloaded)
        self.assertEqual((e.code, e.retry_after), ("", 7.0))
        self.assertIn("proxy", e.message)
        e = error_from_response(418, {}, b'{"error":{"code":"teapot","message":"m","request_id":"r","line":3}}', "GET", "u")
        self.assertIs(type(e), rollstore.APIError)
        self.assertEqual((e.line, e.row), (3, None))
        self.assertIn("418 teapot: m (request r)", str(e))

    def test_refuses_bad_urls(self):
        for u in ["", "localhost:8080", "ftp://h", "http://", "http://h/?q=1"]:
            with self.assertRaises(ValueError):
                rollstore.Client(u)

    def test_cut_stream_raises(self):
        # A payload that ends before its Content-Length (the server cuts
        # the connection when a read fails mid-stream) must not look
        # complete. A real server does not do it on demand: a socket does.
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        self.addCleanup(srv.close)

        def serve():
            conn, _ = srv.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: application/octet-stream\r\n"
                             b"ETag: \"x\"\r\n\r\n" + b"a" * 40)
        th = threading.Thread(target=serve)
        th.start()
        with rollstore.Client("http://127.0.0.1:%d" % srv.getsockname()[1]) as c:
            p = c.payload("t", "x")
            self.assertEqual((p.size, p.length), (100, 100))
            with self.assertRaises(http.client.IncompleteRead):
                p.read()
            p.close()
        th.join()

    def test_put_refuses_str_payloads(self):
        with self.assertRaises(TypeError):
            rollstore.Client("http://127.0.0.1:1").put("t", "a", "text", rollout_id="r")


@needs_server
class ServerTest(unittest.TestCase):
    def setUp(self):
        self.c = rollstore.Client(URL, token=TOKEN, timeout=30)
        self.addCleanup(self.c.close)


class Tables(ServerTest):
    def test_tables(self):
        c = self.c
        t = fresh_table(c)
        self.assertIn(t, c.tables())
        with self.assertRaises(rollstore.Conflict) as cm:
            c.create_table(t)
        self.assertEqual(cm.exception.code, "table_exists")
        self.assertTrue(cm.exception.request_id)
        for bad in [".hidden", "a/b", "x y", "é"]:
            with self.assertRaises(rollstore.InvalidArgument):
                c.create_table(bad)
        st = c.table(t)
        self.assertEqual((st["name"], st["version"], st["rows"], st["pending_rows"]), (t, 0, 0, 0))
        c.drop_table(t)
        self.assertNotIn(t, c.tables())
        with self.assertRaises(rollstore.NotFound) as cm:
            c.table(t)
        self.assertEqual(cm.exception.code, "table_not_found")
        with self.assertRaises(rollstore.NotFound):
            c.drop_table(t)

    def test_probes_and_metrics(self):
        self.assertTrue(self.c.health())
        self.assertTrue(self.c.ready())
        self.assertIn("rollstore_http_request_duration_seconds", self.c.metrics())


class Rollouts(ServerTest):
    def test_awkward_ids_round_trip(self):
        c = self.c
        t = fresh_table(c)
        for i, id in enumerate(AWKWARD_IDS):
            data = payload_of(id, 1 + i * 500)
            rec = c.put(t, id, data, rollout_id="run-%d" % (i % 3), problem_id="p", sequence=i, role="policy",
                        reward=0.25, policy_version="v1", metadata={"i": i, "id": id}, content_type="application/x-test")
            self.assertTrue(rec.created)
            self.assertEqual((rec.id, rec.payload_size, rec.payload_sha256, rec.content_type, rec.sequence),
                             (id, len(data), sha(data), "application/x-test", i))
            got = c.get(t, id)
            self.assertEqual((got.id, got.rollout_id, got.problem_id, got.role, got.reward, got.policy_version),
                             (id, "run-%d" % (i % 3), "p", "policy", 0.25, "v1"))
            self.assertEqual(got.metadata, {"i": i, "id": id})
            self.assertIsNone(got.created)
            self.assertEqual(c.read_payload(t, id), data, id)
        # "../../other/rollouts/secret" stayed an id of t.
        self.assertEqual(sorted(r.id for r in c.list(t)), sorted(AWKWARD_IDS))

    def test_retry_and_conflict(self):
        c = self.c
        t = fresh_table(c)
        data = payload_of("r", 100)
        self.assertTrue(c.put(t, "a", data, rollout_id="r", metadata={"a": 1, "b": 2}).created)
        again = c.put(t, "a", data, rollout_id="r", metadata={"b": 2, "a": 1})
        self.assertFalse(again.created)
        with self.assertRaises(rollstore.Conflict) as cm:
            c.put(t, "a", b"other", rollout_id="r", metadata={"a": 1, "b": 2})
        self.assertEqual(cm.exception.code, "conflict")
        self.assertEqual(c.read_payload(t, "a"), data)
        with self.assertRaises(rollstore.InvalidArgument):
            c.put(t, "b", b"x", rollout_id="")
        with self.assertRaises(rollstore.NotFound) as cm:
            c.put(t + "_absent", "b", b"x", rollout_id="r")
        self.assertEqual(cm.exception.code, "table_not_found")

    def test_streamed_uploads(self):
        c = self.c
        t = fresh_table(c)
        big = payload_of("big", 3 << 20)  # past the 1 MiB inline limit: its own object
        # A regular file, from its position: Content-Length.
        with tempfile.TemporaryFile() as f:
            f.write(big)
            f.seek(1000)
            self.assertEqual(c.put(t, "file", f, rollout_id="s").payload_sha256, sha(big[1000:]))
        self.assertEqual(c.put(t, "bytesio", io.BytesIO(big), rollout_id="s").payload_size, len(big))

        # An iterable of chunks and a pipe-like reader: chunked.
        def chunks():
            for i in range(0, len(big), 100_000):
                yield big[i:i + 100_000]
        self.assertEqual(c.put(t, "chunked", chunks(), rollout_id="s").payload_sha256, sha(big))
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the writer end, as a producer process would be
            os.close(r)
            with os.fdopen(w, "wb") as out:
                out.write(big[:200_000])
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as pipe:
            self.assertEqual(c.put(t, "pipe", pipe, rollout_id="s").payload_sha256, sha(big[:200_000]))
        os.waitpid(pid, 0)
        # An unsized stream with its size given.
        self.assertEqual(c.put(t, "sized", io.BufferedReader(io.BytesIO(big[:5000])), rollout_id="s", size=5000).payload_size, 5000)
        self.assertEqual(c.put(t, "empty", None, rollout_id="s").payload_size, 0)
        self.assertEqual(c.read_payload(t, "empty"), b"")
        for id, want in [("file", big[1000:]), ("bytesio", big), ("chunked", big), ("pipe", big[:200_000]), ("sized", big[:5000])]:
            self.assertEqual(c.read_payload(t, id), want, id)
        # A payload past the inline limit is an object of its own, which
        # payload_ref names: under a local store, a file of the data folder
        # holding exactly the payload. An inline one has none.
        ref = c.get(t, "bytesio").payload_ref
        self.assertTrue(ref.startswith(t + "/"), ref)
        if DATA_DIR:
            with open(os.path.join(DATA_DIR, ref), "rb") as f:
                self.assertEqual(f.read(), big)
        self.assertEqual(c.get(t, "sized").payload_ref, "")

    def test_payload_digest_sent_and_checked(self):
        import rollstore.client as rc
        c = self.c
        t = fresh_table(c)
        big = payload_of("digest", 2 << 20)
        sent = []
        real = rc._digest

        def spy(body, n):
            d = real(body, n)
            sent.append(d)
            return d
        rc._digest = spy
        try:
            self.assertEqual(c.put(t, "bytes", big[:500], rollout_id="d").payload_sha256, sha(big[:500]))
            with tempfile.TemporaryFile() as f:
                f.write(big)
                f.seek(10)
                self.assertEqual(c.put(t, "file", f, rollout_id="d").payload_sha256, sha(big[10:]))
        finally:
            rc._digest = real
        import base64
        self.assertEqual(sent, ["sha-256=:" + base64.b64encode(hashlib.sha256(b).digest()).decode() + ":" for b in (big[:500], big[10:])])
        # A payload that is not what the client hashed is refused, and the
        # id stays free.
        rc._digest = lambda body, n: real(b"other bytes", None)
        try:
            for id, body in [("small", big[:500]), ("large", big)]:
                with self.assertRaises(rollstore.InvalidArgument):
                    c.put(t, id, body, rollout_id="d")
                with self.assertRaises(rollstore.NotFound):
                    c.get(t, id)
        finally:
            rc._digest = real
        self.assertTrue(c.put(t, "large", big, rollout_id="d").created)

    def test_payload_ranges_and_streaming(self):
        c = self.c
        t = fresh_table(c)
        big = payload_of("ranges", 2 << 20)
        n = len(big)
        rec = c.put(t, "r", big, rollout_id="r", content_type="image/png")
        for kw, first, end in [(dict(offset=0, length=1), 0, 1), (dict(offset=10, length=20), 10, 30),
                               (dict(offset=n - 100), n - 100, n), (dict(offset=n - 5, length=1000), n - 5, n),
                               (dict(last=30), n - 30, n), (dict(last=n + 5), 0, n)]:
            with c.payload(t, "r", **kw) as p:
                self.assertEqual(p.read(), big[first:end], kw)
                self.assertEqual((p.partial, p.offset, p.length, p.size), (True, first, end - first, n), kw)
                self.assertEqual(p.etag, '"%s"' % rec.payload_sha256)
                self.assertEqual(p.content_type, "image/png")
        with self.assertRaises(rollstore.RangeNotSatisfiable) as cm:
            c.payload(t, "r", offset=n)
        self.assertEqual(cm.exception.code, "range_not_satisfiable")
        with self.assertRaises(ValueError):
            c.payload(t, "r", offset=0, length=0)
        with self.assertRaises(rollstore.NotModified):
            c.payload(t, "r", if_none_match='"%s"' % rec.payload_sha256)
        self.assertEqual(c.read_payload(t, "r", if_none_match='"other"'), big)

        # Streamed in small reads, as a file object: never whole in memory.
        with c.payload(t, "r") as p:
            self.assertFalse(p.partial)
            self.assertEqual(p.size, n)
            h, buf, got = hashlib.sha256(), bytearray(64 << 10), 0
            while True:
                k = p.readinto(buf)
                if not k:
                    break
                h.update(buf[:k])
                got += k
            self.assertEqual((got, h.hexdigest()), (n, rec.payload_sha256))
        with io.BufferedReader(c.payload(t, "r", offset=0, length=100)) as b:
            self.assertEqual(b.read(10), big[:10])
            self.assertEqual(b.read(), big[10:100])
        # A stream closed half way leaves the client usable.
        p = c.payload(t, "r")
        self.assertEqual(p.read(1000), big[:1000])
        p.close()
        self.assertEqual(c.get(t, "r").payload_size, n)

        with self.assertRaises(rollstore.NotFound) as cm:
            c.payload(t, "absent")
        self.assertEqual(cm.exception.code, "not_found")
        with self.assertRaises(rollstore.NotFound) as cm:
            c.get(t, "absent")
        self.assertEqual(cm.exception.code, "not_found")

    def test_list_paging(self):
        c = self.c
        t = fresh_table(c)
        for i in range(25):
            c.put(t, "id-%02d" % i, b"x", rollout_id="r%d" % (i % 2), problem_id="p%d" % (i % 3))
        page = c.list_page(t)
        self.assertEqual(([r.id for r in page.records], page.next_page_token), (["id-%02d" % i for i in range(25)], ""))
        ids, sizes, tokens, token = [], [], [], None
        while True:
            page = c.list_page(t, rollout_id="r1", limit=5, page_token=token)
            ids += [r.id for r in page.records]
            sizes.append(len(page.records))
            if not page.next_page_token:
                break
            self.assertNotIn(page.next_page_token, tokens)
            tokens.append(page.next_page_token)
            token = page.next_page_token
        self.assertEqual(ids, ["id-%02d" % i for i in range(1, 25, 2)])
        self.assertEqual(sizes, [5, 5, 2])  # 12 records in pages of 5
        want = ["id-%02d" % i for i in range(0, 25, 3)]
        sizes = []
        list_page = c.list_page

        def spy(*a, **kw):
            page = list_page(*a, **kw)
            sizes.append(len(page.records))
            return page

        c.list_page = spy  # counts the pages list() fetches
        try:
            self.assertEqual([r.id for r in c.list(t, problem_id="p0", limit=2)], want)
            self.assertEqual(sizes, [2, 2, 2, 2, 1])
            # From a page token, as list_page takes it.
            first = list_page(t, problem_id="p0", limit=2)
            self.assertEqual([r.id for r in c.list(t, problem_id="p0", limit=2, page_token=first.next_page_token)],
                             want[2:])
            # page_size, the former name of limit, still works, with a DeprecationWarning.
            del sizes[:]
            with self.assertWarns(DeprecationWarning) as cm:
                it = c.list(t, problem_id="p0", page_size=4)
            self.assertIn("limit", str(cm.warning))
            self.assertEqual(cm.filename, __file__)  # points at the caller
            self.assertEqual([r.id for r in it], want)
            self.assertEqual(sizes, [4, 4, 1])
            with self.assertRaises(TypeError):
                c.list(t, limit=2, page_size=2)
        finally:
            del c.list_page
        with self.assertRaises(rollstore.InvalidArgument):
            c.list_page(t, page_token="%%garbage")
        with self.assertRaises(rollstore.NotFound):
            list(c.list(t + "_absent"))

    def test_batch(self):
        c = self.c
        t = fresh_table(c, partitions=1)  # one partition: a batch is all or nothing
        items = [rollstore.BatchItem("b/%02d" % i, "batch", payload_of("b%d" % i, i * 700), sequence=i, content_type="text/plain")
                 for i in range(10)]
        res = c.put_batch(t, items)
        self.assertEqual((res.created, res.existing, len(res.records)), (10, 0, 10))
        self.assertEqual((res.records[4].id, res.records[4].payload_size, res.records[4].payload_sha256, res.records[4].created),
                         ("b/04", 2800, sha(payload_of("b4", 2800)), True))
        res = c.put_batch(t, items)
        self.assertEqual((res.created, res.existing), (0, 10))
        self.assertEqual(c.read_payload(t, "b/07"), payload_of("b7", 4900))
        self.assertEqual(c.get(t, "b/07").content_type, "text/plain")
        # Dicts work too; a conflicting item rejects the batch, naming its line.
        bad = [{"id": "b/new", "rollout_id": "batch", "payload": b"new"},
               {"id": "b/03", "rollout_id": "batch", "payload": b"other"}]
        with self.assertRaises(rollstore.Conflict) as cm:
            c.put_batch(t, bad)
        self.assertEqual((cm.exception.code, cm.exception.line), ("conflict", 2))
        with self.assertRaises(rollstore.NotFound):
            c.get(t, "b/new")

    def test_arrow_batch_from_a_scan(self):
        # A scan's Arrow stream, with payloads, is a valid Arrow batch: the
        # columns are matched by name.
        c = self.c
        src, dst = fresh_table(c), fresh_table(c)
        for i in range(5):
            c.put(src, "a/%d" % i, payload_of("a%d" % i, i * 3000), rollout_id="arrow", reward=i / 2)
        with c.scan(src, payloads=True) as s:
            stream = s.read()
        res = c.put_batch_arrow(dst, stream)
        self.assertEqual(res.created, 5)
        for i in range(5):
            self.assertEqual(c.read_payload(dst, "a/%d" % i), payload_of("a%d" % i, i * 3000))
            self.assertEqual(c.get(dst, "a/%d" % i).reward, i / 2)
        with self.assertRaises(rollstore.InvalidArgument):
            c.put_batch_arrow(dst, b"not an arrow stream")

    def test_scan_stream(self):
        c = self.c
        t = fresh_table(c)
        ids = ["s/%d" % i for i in range(6)]
        for i, id in enumerate(ids):
            c.put(t, id, payload_of(id, 100 + i), rollout_id="scan")
            if i == 2:
                self.assertEqual(c.merge(t)["version"], 1)  # half in the base, half in the WAL
        with c.scan(t) as s:
            plain = s.read()
        with c.scan(t, payloads=True) as s:
            full = s.read()
        with c.scan(t, version=1) as s:
            pinned = s.read()
        for stream in (plain, full, pinned):
            # An Arrow IPC stream: messages behind the continuation marker,
            # closed by the end-of-stream marker.
            self.assertTrue(stream.startswith(b"\xff\xff\xff\xff"))
            self.assertTrue(stream.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00"))
        for i, id in enumerate(ids):
            self.assertIn(id.encode(), plain)
            self.assertIn(payload_of(id, 100 + i), full)
            self.assertNotIn(payload_of(id, 100 + i), plain)
            self.assertEqual(id.encode() in pinned, i <= 2, id)
        with self.assertRaises(rollstore.NotFound) as cm:
            c.scan(t, version=99)
        self.assertEqual(cm.exception.code, "version_not_found")

    @unittest.skipUnless(HAVE_PYARROW, "pyarrow is not installed")
    def test_scan_table_with_pyarrow(self):
        c = self.c
        t = fresh_table(c)
        for i in range(4):
            c.put(t, "p/%d" % i, payload_of("p%d" % i, 10 * i), rollout_id="pa")
        table = c.scan_table(t, payloads=True)
        self.assertEqual(table.num_rows, 4)
        self.assertEqual(table.column("id").to_pylist(), ["p/%d" % i for i in range(4)])
        self.assertEqual(table.column("payload").to_pylist()[3], payload_of("p3", 30))
        self.assertEqual(c.put_batch_arrow(fresh_table(c), table.select(["id", "rollout_id", "payload"])).created, 4)

    @unittest.skipIf(HAVE_PYARROW, "pyarrow is installed: scan_table works")
    def test_scan_table_without_pyarrow_says_so(self):
        t = fresh_table(self.c)
        with self.assertRaises(ImportError) as cm:
            self.c.scan_table(t)
        self.assertIn("pyarrow", str(cm.exception))

    def test_merge_versions_pinned_and_gone(self):
        # The server keeps one base version (--retain-versions 1 --retain-age 0s).
        c = self.c
        t = fresh_table(c)
        c.put(t, "a", b"aaa", rollout_id="r")
        m = c.merge(t)
        self.assertEqual((m["version"], m["rows"]), (1, 1))
        self.assertEqual([v["version"] for v in c.versions(t)], [1])
        self.assertEqual(c.get(t, "a", version=1).id, "a")
        self.assertEqual(c.read_payload(t, "a", version=1), b"aaa")
        c.put(t, "b", b"bbb", rollout_id="r")
        with self.assertRaises(rollstore.NotFound) as cm:
            c.get(t, "b", version=1)
        self.assertEqual(cm.exception.code, "not_found")
        self.assertEqual([r.id for r in c.list(t, version=1)], ["a"])
        self.assertEqual(c.merge(t)["version"], 2)
        self.assertEqual([v["version"] for v in c.versions(t)], [2])
        with self.assertRaises(rollstore.Gone) as cm:
            c.get(t, "a", version=1)
        self.assertEqual(cm.exception.code, "version_gone")
        with self.assertRaises(rollstore.Gone):
            c.read_payload(t, "a", version=1)
        with self.assertRaises(rollstore.NotFound) as cm:
            c.get(t, "a", version=99)
        self.assertEqual(cm.exception.code, "version_not_found")
        st = c.table(t)
        self.assertEqual((st["version"], st["rows"]), (2, 2))


@needs_server
class Auth(unittest.TestCase):
    @unittest.skipUnless(TOKEN, "the server runs without --auth-token-file")
    def test_bearer_token(self):
        anon = rollstore.Client(URL)
        self.addCleanup(anon.close)
        with self.assertRaises(rollstore.Unauthorized) as cm:
            anon.tables()
        self.assertEqual(cm.exception.code, "unauthorized")
        with rollstore.Client(URL, token=TOKEN + "x") as wrong, self.assertRaises(rollstore.Unauthorized):
            wrong.tables()
        self.assertTrue(anon.health())
        self.assertTrue(anon.ready())
        with rollstore.Client(URL, token=TOKEN) as c:
            self.assertIsInstance(c.tables(), list)


@needs_server
class Overload(unittest.TestCase):
    @unittest.skipUnless(MAX_UPLOADS, "ROLLSTORE_TEST_MAX_UPLOADS is not set")
    def test_overloaded_with_retry_after(self):
        c = rollstore.Client(URL, token=TOKEN)
        self.addCleanup(c.close)
        t = fresh_table(c)
        # Hold every upload slot (--max-concurrent-uploads) with uploads
        # that sent their headers and one chunk of body, straight to the
        # server.
        u = urllib.parse.urlsplit(DIRECT)
        held = []
        for i in range(MAX_UPLOADS):
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            conn.putrequest("PUT", "/v1/tables/%s/rollouts/held-%d" % (t, i))
            conn.putheader("Rollstore-Record", '{"rollout_id":"held"}')
            conn.putheader("Transfer-Encoding", "chunked")
            if TOKEN:
                conn.putheader("Authorization", "Bearer " + TOKEN)
            conn.endheaders()
            conn.send(b"5\r\nfirst\r\n")
            held.append(conn)
        try:
            # Wait until the server counts them all (a state, not a guess).
            deadline = time.monotonic() + 20
            while "rollstore_http_requests_in_flight %d" % MAX_UPLOADS not in c.metrics():
                self.assertLess(time.monotonic(), deadline, "the held uploads were never all in flight")
                time.sleep(0.02)
            # One more upload is refused, with Retry-After ...
            with self.assertRaises(rollstore.Overloaded) as cm:
                c.put(t, "one-more", b"refused", rollout_id="r")
            self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.retry_after), (503, "overloaded", 1.0))
            self.assertIn("uploads", cm.exception.message)
            # ... while reads keep the request slots uploads cannot take.
            with self.assertRaises(rollstore.NotFound):
                c.get(t, "held-0")  # not stored until its body ends
            self.assertEqual(c.tables().count(t), 1)
            self.assertTrue(c.health())  # probes are not limited
        finally:
            for conn in held:
                conn.send(b"4\r\nrest\r\n0\r\n\r\n")
            for conn in held:
                resp = conn.getresponse()
                self.assertEqual(resp.status, 201, resp.read())
                conn.close()
        self.assertEqual(c.read_payload(t, "held-0"), b"firstrest")


if __name__ == "__main__":
    unittest.main()
