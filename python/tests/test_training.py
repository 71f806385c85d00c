"""Tests of rollstore.training.FeedDataset: the split of a table's
partitions over ranks and data-loader workers, its commits and resumes
against a real `rollstore serve` (see test_client.py), and, where torch is
importable, inside a real torch DataLoader with worker processes.

TestPythonClient (cmd/rollstore) runs this file a second time with the
python3 that test/python/install-torch.sh found or installed (Debian's
python3-torch) when the python3 on PATH has no torch.
"""

import collections
import itertools
import os
import subprocess
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rollstore  # noqa: E402
from rollstore import training  # noqa: E402

URL = os.environ.get("ROLLSTORE_TEST_URL", "")
TOKEN = os.environ.get("ROLLSTORE_TEST_TOKEN") or None

try:
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

needs_server = unittest.skipUnless(URL, "ROLLSTORE_TEST_URL is not set: run `go test ./cmd/rollstore -run TestPythonClient`")
needs_torch = unittest.skipUnless(HAVE_TORCH, "torch is not installed: the DataLoader tests were not run "
                                              "(test/python/install-torch.sh installs Debian's python3-torch)")

PARTITIONS = 8
RANKS, WORKERS = 2, 2

_counter = itertools.count()


class Split(unittest.TestCase):
    """What needs no server."""

    def test_ranks_and_workers_split_the_partitions_disjointly_and_completely(self):
        for partitions in (1, 3, 4, 8, 13):
            seen = collections.Counter()
            for r in range(RANKS):
                for k in range(WORKERS):
                    mine = training.split_partitions(partitions, r, RANKS, k, WORKERS)
                    self.assertTrue(all(p % (RANKS * WORKERS) == r * WORKERS + k for p in mine))
                    seen.update(mine)
            self.assertEqual(seen, collections.Counter(range(partitions)))

    def test_rank_and_world_size_default_to_the_environment(self):
        with mock.patch.dict(os.environ, {"RANK": "3", "WORLD_SIZE": "4"}):
            ds = training.FeedDataset("http://127.0.0.1:9", "t", "g")
            self.assertEqual((ds.rank, ds.world_size), (3, 4))
            ds = training.FeedDataset("http://127.0.0.1:9", "t", "g", rank=1, world_size=2)
            self.assertEqual((ds.rank, ds.world_size), (1, 2))
        with mock.patch.dict(os.environ, {}, clear=True):
            ds = training.FeedDataset("http://127.0.0.1:9", "t", "g")
            self.assertEqual((ds.rank, ds.world_size), (0, 1))
        with self.assertRaises(ValueError):
            training.FeedDataset("http://127.0.0.1:9", "t", "g", rank=2, world_size=2)
        with self.assertRaises(ValueError):
            training.FeedDataset("http://127.0.0.1:9", "t", "")

    def test_imports_and_iterates_without_torch(self):
        # A python without torch: the module imports, and the dataset is a
        # plain iterable (torch is made unimportable in a child process).
        code = ("import sys; sys.modules['torch'] = None\n"
                "import rollstore.training as t\n"
                "ds = t.FeedDataset('http://127.0.0.1:9', 't', 'g', rank=1, world_size=2)\n"
                "assert [b.__name__ for b in type(ds).__mro__] == ['FeedDataset', '_FeedDataset', 'object']\n"
                "assert iter(ds) is not None\n"
                "print('ok')\n")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual((out.returncode, out.stdout.strip()), (0, "ok"), out.stderr)

    @needs_torch
    def test_is_a_torch_iterable_dataset_when_torch_is_there(self):
        self.assertTrue(issubclass(training.FeedDataset, IterableDataset))


@needs_server
class Dataset(unittest.TestCase):
    def setUp(self):
        self.c = rollstore.Client(URL, token=TOKEN, timeout=30)
        self.t = "pytrain_%d_%d" % (os.getpid(), next(_counter))
        self.c.create_table(self.t, partitions=PARTITIONS)
        self.ids = []

    def tearDown(self):
        self.c.drop_table(self.t)
        self.c.close()

    def put(self, n, prefix="r"):
        ids = ["%s-%03d" % (prefix, len(self.ids) + i) for i in range(n)]
        self.c.put_batch(self.t, [{"id": i, "rollout_id": "ro", "payload": i.encode()} for i in ids])
        self.ids += ids
        return ids

    def dataset(self, rank, **kw):
        return training.FeedDataset(self.c, self.t, "learner", rank=rank, world_size=RANKS, wait=0,
                                    stop_at_end=True, max_rows=3, **kw)

    def test_each_worker_of_each_rank_reads_its_own_partitions_and_commits_them(self):
        ids = self.put(48)
        self.assertEqual({rollstore.partition_of(i, PARTITIONS) for i in ids}, set(range(PARTITIONS)))
        got = {}
        for r in range(RANKS):
            for k in range(WORKERS):
                rows = list(self.dataset(r).iter_worker(k, WORKERS))
                got[r, k] = rows
                self.assertTrue(rows)
                for row in rows:
                    self.assertEqual(row["partition"] % (RANKS * WORKERS), r * WORKERS + k, row["id"])
        all_ids = [row["id"] for rows in got.values() for row in rows]
        self.assertEqual(len(all_ids), len(set(all_ids)), "a row went to two workers")
        self.assertEqual(sorted(all_ids), sorted(ids))
        # Each worker committed its partitions as it went, to the end.
        g = self.c.consumer(self.t, "learner")
        counts = collections.Counter(rollstore.partition_of(i, PARTITIONS) for i in ids)
        self.assertEqual({int(p): c["offset"] for p, c in g["committed"].items()}, dict(counts))
        self.assertEqual(g["lag_rows"], 0)
        # Started again, the workers resume after their commits.
        new = self.put(12, prefix="later")
        again = [row["id"] for r in range(RANKS) for k in range(WORKERS)
                 for row in self.dataset(r).iter_worker(k, WORKERS)]
        self.assertEqual(sorted(again), sorted(new))

    def test_a_worker_stopped_early_resumes_at_its_last_commit(self):
        ids = self.put(30)
        one = dict(rank=0, world_size=1, wait=0, stop_at_end=True, max_rows=3, commit_lag=2)
        it = training.FeedDataset(self.c, self.t, "alone", **one).iter_worker()
        # Answers of exactly 3 rows here (one segment each is not assured,
        # but max_rows bounds them): the 13th row is of the fifth answer or
        # later; the first two answers were committed, two behind.
        taken = [next(it)["id"] for _ in range(13)]
        it.close()
        rest = [row["id"] for row in training.FeedDataset(self.c, self.t, "alone", **one)]
        # At least once: no row lost; at most the last commit_lag + 1
        # answers handed out come again, and the committed ones do not.
        self.assertEqual(set(taken) | set(rest), set(ids))
        self.assertLessEqual(len(set(taken) & set(rest)), 9)
        self.assertTrue(set(taken[:6]).isdisjoint(rest), "a committed answer came again")
        self.assertEqual(len(rest), len(set(rest)))

    def test_start_latest_reads_only_rows_appended_after_it_for_a_new_consumer(self):
        self.put(10)
        ds = training.FeedDataset(URL, self.t, "fresh", rank=0, world_size=1, token=TOKEN, wait=0,
                                  stop_at_end=True, start="latest")
        self.assertEqual(list(ds), [])
        new = self.put(5, prefix="later")
        self.assertEqual(sorted(row["id"] for row in ds), sorted(new))

    @needs_torch
    def test_torch_dataloader_workers_of_two_ranks_split_the_table(self):
        ids = self.put(48)
        seen = {}
        for r in range(RANKS):
            ds = training.FeedDataset(URL, self.t, "torch", rank=r, world_size=RANKS, token=TOKEN, wait=0,
                                      stop_at_end=True, max_rows=4)
            loader = DataLoader(ds, batch_size=None, num_workers=WORKERS)
            rows = list(loader)
            # Which worker read a row shows in its partition.
            workers = {row["partition"] % (RANKS * WORKERS) for row in rows}
            self.assertEqual(workers, {r * WORKERS + k for k in range(WORKERS)}, "rank %d" % r)
            for row in rows:
                seen.setdefault(row["id"], []).append(r)
        self.assertEqual(sorted(seen), sorted(ids))
        self.assertEqual([i for i, ranks in seen.items() if len(ranks) > 1], [], "rows read twice")
        g = self.c.consumer(self.t, "torch")
        self.assertEqual(g["lag_rows"], 0)
        self.assertTrue(torch.__version__)

    @needs_torch
    def test_learner_loop_of_the_readme_trains(self):
        # The README's code, as it is, on this table; its FeedDataset stops
        # at the end (the README's runs on) and its client has the token.
        readme = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
        with open(readme, encoding="utf-8") as f:
            text = f.read()
        code = text.split("\n## Learner loop\n", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
        self.assertLess(len(code.strip().splitlines()), 20)
        # The repository's README shows the same loop.
        top = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "README.md")
        if os.path.exists(top):
            with open(top, encoding="utf-8") as f:
                shown = f.read().split("\n## Learner loop\n", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
            self.assertEqual(shown, code, "README.md's learner loop differs from python/README.md's")
        code = code.replace("http://rollstore:8080", URL).replace('"rollouts"', repr(self.t))
        self.assertIn(repr(self.t), code)
        ids = ["r-%03d" % i for i in range(70)]
        self.c.put_batch(self.t, [{"id": i, "rollout_id": "ro", "reward": (n % 5) / 4, "payload": i.encode() * (n % 9)}
                                  for n, i in enumerate(ids)])
        self.c.put(self.t, "big", b"\xff" * 4096, rollout_id="ro")  # more than the answer carries (max_bytes)
        real = training.FeedDataset
        with mock.patch.object(training, "FeedDataset",
                               lambda *a, **kw: real(*a, stop_at_end=True, wait=0, max_bytes=2048, **kw)), \
                mock.patch.object(rollstore, "Client", lambda url: rollstore.client.Client(url, token=TOKEN)):
            ns = {}
            exec(compile(code, "README.md (Learner loop)", "exec"), ns)
        self.assertEqual(self.c.consumer(self.t, "learner")["lag_rows"], 0)
        self.assertTrue(torch.isfinite(ns["loss"]))


if __name__ == "__main__":
    unittest.main()
