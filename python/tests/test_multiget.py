"""Tests of get_many and of listing by id prefix and start_after, against a
real `rollstore serve` (see test_client.py: `go test ./cmd/rollstore -run
TestPythonClient` starts it and sets ROLLSTORE_TEST_URL)."""

import itertools
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rollstore  # noqa: E402

URL = os.environ.get("ROLLSTORE_TEST_URL", "")
TOKEN = os.environ.get("ROLLSTORE_TEST_TOKEN") or None

needs_server = unittest.skipUnless(URL, "ROLLSTORE_TEST_URL is not set: run `go test ./cmd/rollstore -run TestPythonClient`")

_counter = itertools.count()


@needs_server
class MultiGet(unittest.TestCase):
    def setUp(self):
        self.c = rollstore.Client(URL, token=TOKEN, timeout=30)
        self.t = "pymg_%d_%d" % (os.getpid(), next(_counter))
        self.c.create_table(self.t)

    def tearDown(self):
        self.c.drop_table(self.t)
        self.c.close()

    def put(self, id, payload=b"x"):
        return self.c.put(self.t, id, payload, rollout_id="r-" + id)

    def test_get_many_in_order_with_absent_ids(self):
        ids = ["run-1/step-0", "..", "ünïcødé/日本語", "q?x=1&y=2", "100%25"]
        for i, id in enumerate(ids):
            self.put(id, b"p" * (i + 1))
        version = self.c.merge(self.t)["version"]
        self.put("late")
        ask = ["late", "absent"] + ids + ["late"]
        got = self.c.get_many(self.t, ask)
        self.assertEqual(len(got), len(ask))
        self.assertIsNone(got[1])
        for id, rec in zip(ask, got):
            if id == "absent":
                continue
            self.assertIsNotNone(rec, id)
            self.assertEqual((rec.id, rec.rollout_id), (id, "r-" + id))
        self.assertEqual(got[2 + 4].payload_size, 5)
        self.assertEqual(self.c.get_many(self.t, []), [])
        self.assertEqual(self.c.get_many(self.t, ["x", "y"]), [None, None])

        # Pinned: the version before "late" was written.
        pinned = self.c.get_many(self.t, ["late", ids[0]], version=version)
        self.assertIsNone(pinned[0])
        self.assertEqual(pinned[1].id, ids[0])
        # The server retains one version: the next merge collects it.
        self.c.merge(self.t)
        with self.assertRaises(rollstore.Gone):
            self.c.get_many(self.t, [ids[0]], version=version)

    def test_get_many_refusals_and_chunks(self):
        with self.assertRaises(rollstore.InvalidArgument):
            self.c.get_many(self.t, ["ok", ""])
        with self.assertRaises(rollstore.NotFound):
            self.c.get_many(self.t + "_none", ["a"])
        with self.assertRaises(TypeError):
            self.c.get_many(self.t, [1])
        self.put("k-1234")
        ask = ["k-%04d" % i for i in range(rollstore.Client.MAX_LOOKUP_IDS + 300)]
        got = self.c.get_many(self.t, ask)
        self.assertEqual(len(got), len(ask))
        self.assertEqual([i for i, r in enumerate(got) if r is not None], [1234])

    def test_list_prefix_and_start_after(self):
        ids = []
        for p in ("a/", "b/", "b/c/", "bb"):
            for i in range(4):
                ids.append("%s%d" % (p, i))
                self.put(ids[-1])
            if p == "b/":
                self.c.merge(self.t)
        ids.sort()
        for prefix, after in [("b/", None), ("b/", "b/2"), ("b", "b/c/1"), (None, "b/c/3"), ("zz", None),
                              ("b/c/", "a")]:
            want = [i for i in ids if i.startswith(prefix or "") and i > (after or "")]
            got = [r.id for r in self.c.list(self.t, prefix=prefix, start_after=after, limit=3)]
            self.assertEqual(got, want, (prefix, after))
        page = self.c.list_page(self.t, prefix="b/", limit=2)
        self.assertEqual([r.id for r in page.records], ["b/0", "b/1"])
        self.assertTrue(page.next_page_token)
        nxt = self.c.list_page(self.t, prefix="b/", limit=2, page_token=page.next_page_token)
        self.assertEqual([r.id for r in nxt.records], ["b/2", "b/3"])
        # A token continues only the listing that issued it.
        with self.assertRaises(rollstore.InvalidArgument):
            self.c.list_page(self.t, prefix="a/", limit=2, page_token=page.next_page_token)
        # Other filters still apply.
        got = [r.id for r in self.c.list(self.t, prefix="b/", rollout_id="r-b/c/2")]
        self.assertEqual(got, ["b/c/2"])


if __name__ == "__main__":
    unittest.main()
