"""Tests of Client.feed and the consumer-group routes against a real
`rollstore serve` (see test_client.py: `go test ./cmd/rollstore -run
TestPythonClient` starts it and sets ROLLSTORE_TEST_URL)."""

import collections
import hashlib
import itertools
import json
import os
import re
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rollstore  # noqa: E402
from rollstore.errors import error_from_response  # noqa: E402
from rollstore.feed import _seconds  # noqa: E402

URL = os.environ.get("ROLLSTORE_TEST_URL", "")
TOKEN = os.environ.get("ROLLSTORE_TEST_TOKEN") or None

try:
    import pyarrow  # noqa: F401
    import pyarrow.ipc  # noqa: F401

    HAVE_PYARROW = True
except ImportError:
    HAVE_PYARROW = False

needs_server = unittest.skipUnless(URL, "ROLLSTORE_TEST_URL is not set: run `go test ./cmd/rollstore -run TestPythonClient`")

PARTITIONS = 4
# How long a test waits for what must happen before it fails: a bound, never
# a condition of passing.
BOUND = 60.0
# A long poll's wait: also a bound (the server answers as soon as a row is
# there), within the server's --feed-max-wait.
POLL = 30.0

_counter = itertools.count()


def payload_of(id):
    """Deterministic test bytes of a length that varies with the id."""
    h = hashlib.sha256(id.encode()).digest()
    return (h * 8)[:40 + h[0] % 200]


class Offline(unittest.TestCase):
    """What needs no server."""

    def test_wait_is_sent_as_decimal_seconds(self):
        for wait, want in [(10, "10"), (10.0, "10"), (0.5, "0.5"), (0.25, "0.25"), (1.0004, "1"), (0.001, "0.001"),
                           (0, "0")]:
            self.assertEqual(_seconds(wait), want)
        with self.assertRaises(ValueError):
            _seconds(-1)

    def test_expired_cursor_is_a_typed_gone_with_the_oldest_cursor(self):
        body = json.dumps({"error": {"code": "cursor_expired", "message": "m", "request_id": "r",
                                     "oldest_cursor": "abc"}}).encode()
        e = error_from_response(410, {}, body, "GET", "u")
        self.assertIsInstance(e, rollstore.CursorExpired)
        self.assertIsInstance(e, rollstore.Gone)
        self.assertEqual((e.status, e.code, e.oldest_cursor), (410, "cursor_expired", "abc"))
        # Other codes of the same status keep the status's class.
        e = error_from_response(410, {}, b'{"error":{"code":"version_gone","message":"m","request_id":"r"}}', "GET", "u")
        self.assertIs(type(e), rollstore.Gone)
        for status, code, cls in [(400, "bad_cursor", rollstore.BadCursor), (409, "rebalanced", rollstore.Rebalanced),
                                  (409, "feed_unsupported", rollstore.FeedUnsupported),
                                  (404, "group_not_found", rollstore.GroupNotFound)]:
            body = json.dumps({"error": {"code": code, "message": "m", "request_id": "r"}}).encode()
            self.assertIs(type(error_from_response(status, {}, body, "GET", "u")), cls)

    def test_feed_refuses_inconsistent_arguments(self):
        c = rollstore.Client("http://127.0.0.1:9")
        with self.assertRaises(ValueError):
            c.feed("t", member="m")  # a member without its group
        with self.assertRaises(ValueError):
            c.feed("t", group="g", member="m", partitions=[0])  # the group assigns a member's partitions
        with self.assertRaises(ValueError):
            c.feed("t", partitions=[])
        with self.assertRaises(ValueError):
            c.feed("t", payloads=-1)
        with self.assertRaises(ValueError):
            c.feed("t").commit()  # no group to commit for

    def test_arrow_feed_without_pyarrow_says_what_is_missing(self):
        saved = {k: sys.modules[k] for k in list(sys.modules) if k == "pyarrow" or k.startswith("pyarrow.")}
        sys.modules["pyarrow"] = None  # what an absent package looks like to import
        sys.modules["pyarrow.ipc"] = None
        try:
            with self.assertRaisesRegex(ImportError, "pyarrow"):
                rollstore.Client("http://127.0.0.1:9").feed("t", as_arrow=True)
        finally:
            del sys.modules["pyarrow"], sys.modules["pyarrow.ipc"]
            sys.modules.update(saved)


@needs_server
class Feed(unittest.TestCase):
    def setUp(self):
        self.c = rollstore.Client(URL, token=TOKEN, timeout=30)
        self.t = "pyfeed_%d_%d" % (os.getpid(), next(_counter))
        self.c.create_table(self.t, partitions=PARTITIONS)
        self.put_order = []

    def tearDown(self):
        self.c.drop_table(self.t)
        self.c.close()

    def put(self, n, prefix="r"):
        """Puts n records one after another (so each partition acknowledges
        them in this order); returns their ids."""
        ids = []
        for _ in range(n):
            id = "%s-%03d" % (prefix, len(self.put_order))
            self.c.put(self.t, id, payload_of(id), rollout_id="ro-%d" % (len(self.put_order) % 3),
                       policy_version="v1")
            self.put_order.append(id)
            ids.append(id)
        return ids

    def read_all(self, **kw):
        kw.setdefault("wait", 0)
        f = self.c.feed(self.t, stop_at_end=True, **kw)
        return f, list(f)

    def test_rows_come_in_acknowledgement_order_with_dense_offsets_per_partition(self):
        ids = self.put(20)
        f, rows = self.read_all(max_rows=3)
        self.assertEqual(sorted(r["id"] for r in rows), sorted(ids))
        by_part = collections.defaultdict(list)
        for r in rows:
            self.assertEqual(r["partition"], rollstore.partition_of(r["id"], PARTITIONS), r["id"])
            self.assertIn("acked_at", r)
            self.assertNotIn("payload", r)  # payloads=0 carries none
            self.assertEqual(r["payload_url"], "/v1/tables/%s/rollouts/%s/payload" % (self.t, r["id"]))
            self.assertEqual(r["payload_size"], len(payload_of(r["id"])))
            by_part[r["partition"]].append(r)
        self.assertGreater(len(by_part), 1, "the ids should spread over partitions")
        for p, prow in by_part.items():
            self.assertEqual([r["offset"] for r in prow], list(range(len(prow))), "partition %d" % p)
            self.assertEqual([r["id"] for r in prow], [i for i in ids if rollstore.partition_of(i, PARTITIONS) == p])
        self.assertEqual(f.lag_rows, 0)
        self.assertTrue(f.cursor)

    def test_payloads_are_carried_within_the_budget(self):
        ids = self.put(10)
        _, rows = self.read_all(payloads="all")
        self.assertEqual(len(rows), 10)
        for r in rows:
            self.assertEqual(r["payload"], payload_of(r["id"]))
        budget = 300
        f = self.c.feed(self.t, wait=0, stop_at_end=True, payloads=budget, max_rows=4)
        seen = []
        for page in f.pages():
            carried = [r for r in page.rows if "payload" in r]
            self.assertLessEqual(sum(len(r["payload"]) for r in carried), budget)
            for r in page.rows:
                if "payload" in r:
                    self.assertEqual(r["payload"], payload_of(r["id"]))
                else:
                    self.assertEqual(self.c.read_payload(self.t, r["id"]), payload_of(r["id"]))
            seen += [r["id"] for r in page.rows]
        self.assertEqual(sorted(seen), sorted(ids))

    def test_filters_and_columns_apply_on_the_server(self):
        self.put(12)
        _, rows = self.read_all(rollout_id="ro-1", columns=["rollout_id"])
        want = [i for n, i in enumerate(self.put_order) if n % 3 == 1]
        self.assertEqual(sorted(r["id"] for r in rows), sorted(want))
        for r in rows:
            self.assertEqual(r["rollout_id"], "ro-1")
            self.assertNotEqual(r.get("policy_version"), "v1")  # not projected
            self.assertIn("offset", r)  # the feed's own columns always are

    def test_a_new_feed_from_the_cursor_continues_without_gap_or_duplicate(self):
        ids = self.put(13)
        f = self.c.feed(self.t, wait=0, max_rows=4)
        first = []
        for r in f:
            first.append(r["id"])
            if len(first) >= 5 and f.at_page_end:
                break
        cursor = f.cursor
        g, rest = self.read_all(cursor=cursor)
        got = first + [r["id"] for r in rest]
        self.assertEqual(len(got), len(set(got)), "a row came twice")
        self.assertEqual(sorted(got), sorted(ids))
        # From the end: only what is new.
        new = self.put(3, prefix="later")
        _, more = self.read_all(cursor=g.cursor)
        self.assertEqual(sorted(r["id"] for r in more), sorted(new))
        # The same cursor again reads the same rows: a cursor is a position.
        _, again = self.read_all(cursor=cursor)
        self.assertEqual(sorted(r["id"] for r in again), sorted((set(ids) - set(first)) | set(new)))

    def test_long_poll_returns_a_row_appended_while_it_waits(self):
        self.put(2)
        end, _ = self.read_all()
        got, errors = [], []

        def poll():
            try:
                # From the end: the row appended below is after the cursor
                # whenever the server reads, before its wait or during it.
                # stop_at_end makes an empty answer (the bound passing)
                # end the iteration: the test then fails, it does not hang.
                f = self.c.feed(self.t, cursor=end.cursor, wait=POLL, stop_at_end=True)
                got.extend(itertools.islice(f, 1))
            except BaseException as e:  # reported by the main thread
                errors.append(e)
            finally:
                self.c.close()  # this thread's connection

        th = threading.Thread(target=poll)
        th.start()
        # The row is appended once the server counts the poll as waiting
        # (rollstore_feed_waiting), so that it is there to be woken.
        m = rollstore.Client(URL, token=TOKEN, timeout=30)
        self.addCleanup(m.close)
        deadline = time.monotonic() + BOUND
        while feed_waiting(m) < 1:
            self.assertTrue(th.is_alive(), "the long poll answered before any row was appended: %r" % (errors,))
            self.assertLess(time.monotonic(), deadline, "the long poll never showed in rollstore_feed_waiting")
            time.sleep(0.01)
        self.put(1, prefix="during")
        th.join(POLL + BOUND)
        self.assertFalse(th.is_alive())
        self.assertEqual(errors, [])
        self.assertEqual([r["id"] for r in got], ["during-002"])

    def test_an_expired_cursor_raises_cursor_expired_with_the_oldest_cursor(self):
        self.put(3)
        old, _ = self.read_all()
        # Drop and create the table again: the old cursor is of an
        # incarnation that is gone.
        self.c.drop_table(self.t)
        self.c.create_table(self.t, partitions=PARTITIONS)
        self.put_order = []
        ids = self.put(2)
        with self.assertRaises(rollstore.CursorExpired) as cm:
            next(self.c.feed(self.t, cursor=old.cursor, wait=0))
        e = cm.exception
        self.assertEqual((e.status, e.code), (410, "cursor_expired"))
        self.assertTrue(e.oldest_cursor)
        _, rows = self.read_all(cursor=e.oldest_cursor)
        self.assertEqual(sorted(r["id"] for r in rows), sorted(ids))

    def test_a_malformed_cursor_is_refused(self):
        with self.assertRaises(rollstore.BadCursor) as cm:
            next(self.c.feed(self.t, cursor="not-a-cursor", wait=0))
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "bad_cursor"))

    def test_explicit_partitions_read_only_those(self):
        ids = self.put(16)
        _, rows = self.read_all(partitions=[1, 3])
        self.assertEqual(sorted(r["id"] for r in rows),
                         sorted(i for i in ids if rollstore.partition_of(i, PARTITIONS) in (1, 3)))

    def test_a_second_member_of_the_group_resumes_after_the_commit(self):
        ids = self.put(14)
        f1 = self.c.feed(self.t, group="learners", member="m1", wait=0, max_rows=4)
        first = []
        for r in f1:
            first.append(r)
            if len(first) >= 4 and f1.at_page_end:
                break
        g = f1.commit()
        self.assertEqual(committed_offsets(g), delivered_counts(first))
        f1.close()  # leaves: m2 alone gets every partition
        f2 = self.c.feed(self.t, group="learners", member="m2", wait=0, stop_at_end=True)
        rest = list(f2)
        got = [r["id"] for r in first + rest]
        self.assertEqual(len(got), len(set(got)), "a row came twice")
        self.assertEqual(sorted(got), sorted(ids))
        self.assertEqual(f2.partitions, list(range(PARTITIONS)))
        f2.commit()
        f2.close()
        (group,) = [g for g in self.c.consumers(self.t) if g["group"] == "learners"]
        self.assertEqual(committed_offsets(group), delivered_counts(first + rest))
        self.assertEqual(group["lag_rows"], 0)
        self.assertEqual(group["members"], [])

    def test_the_next_request_commits_the_answer_handed_out_before_it(self):
        self.put(14)
        for auto in (True, False):
            name = "auto-%s" % auto
            f = self.c.feed(self.t, group=name, member="m", wait=0, max_rows=4, commit=auto)
            page = []
            for r in f:
                page.append(r)
                if f.at_page_end:
                    break
            next(f)  # asks for the second answer
            group = self.c.consumer(self.t, name)
            want = delivered_counts(page) if auto else {p: 0 for p in range(PARTITIONS)}
            self.assertEqual(committed_offsets(group), want, "commit=%s" % auto)
            f.close()

    def test_a_named_consumer_commits_and_resumes_per_partition(self):
        ids = self.put(16)
        mine = [0, 2]
        f = self.c.feed(self.t, group="trainer", partitions=mine, wait=0, max_rows=3)
        first = []
        for r in f:
            first.append(r)
            if len(first) >= 3 and f.at_page_end:
                break
        f.commit()
        f.close()
        # Another process of the same name reads the other partitions and
        # commits them; the first one's positions are kept.
        other = self.c.feed(self.t, group="trainer", partitions=[1, 3], wait=0, stop_at_end=True)
        theirs = list(other)
        # Resuming the first: the rows after its commit, none before.
        again = self.c.feed(self.t, group="trainer", partitions=mine, wait=0, stop_at_end=True)
        rest = list(again)
        got = [r["id"] for r in first + rest]
        self.assertEqual(len(got), len(set(got)), "a row came twice")
        self.assertEqual(sorted(got), sorted(i for i in ids if rollstore.partition_of(i, PARTITIONS) in mine))
        # Each commit moved only the partitions it named.
        g = self.c.consumer(self.t, "trainer")
        self.assertEqual(committed_offsets(g), delivered_counts(first + rest + theirs))

    @unittest.skipUnless(HAVE_PYARROW, "pyarrow is not installed: the feed's Arrow answers were not tested")
    def test_arrow_record_batches_carry_the_feed_columns_and_the_cursor(self):
        import pyarrow as pa

        ids = self.put(11)
        f = self.c.feed(self.t, as_arrow=True, wait=0, stop_at_end=True, max_rows=4)
        batches = list(f)
        self.assertTrue(all(isinstance(b, pa.RecordBatch) for b in batches))
        table = pa.Table.from_batches(batches)
        self.assertEqual(sorted(table.column("id").to_pylist()), sorted(ids))
        for name in ("partition", "offset", "acked_at", "payload_url"):
            self.assertIn(name, table.column_names)
        rows = table.select(["id", "partition", "offset"]).to_pylist()
        for p in range(PARTITIONS):
            offs = [r["offset"] for r in rows if r["partition"] == p]
            self.assertEqual(offs, list(range(len(offs))))
        new = self.put(2, prefix="later")
        more = list(self.c.feed(self.t, cursor=f.cursor, as_arrow=True, wait=0, stop_at_end=True))
        self.assertEqual(sorted(pa.Table.from_batches(more).column("id").to_pylist()), sorted(new))


def committed_offsets(group):
    """A group's committed offset per partition (0 where none)."""
    out = {p: 0 for p in range(PARTITIONS)}
    for p, c in (group.get("committed") or {}).items():
        out[int(p)] = c["offset"]
    return out


def delivered_counts(rows):
    """Per partition, the offset after the last row delivered."""
    out = {p: 0 for p in range(PARTITIONS)}
    for r in rows:
        out[r["partition"]] = max(out[r["partition"]], r["offset"] + 1)
    return out


_WAITING = re.compile(r"^rollstore_feed_waiting(?:\{[^}]*\})? ([0-9.e+]+)$", re.M)


def feed_waiting(c):
    """The server's count of long polls waiting now."""
    return sum(float(v) for v in _WAITING.findall(c.metrics()))


if __name__ == "__main__":
    unittest.main()
