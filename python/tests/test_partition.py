"""The partition function clients share with the service (docs/format.md);
no server needed."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rollstore  # noqa: E402

# The same table as engine/partitions_test.go: part of the format.
GOLDEN = [
    ("", 1, 0),
    ("", 16, 5),
    ("", 256, 37),
    ("", 1000, 37),
    ("a", 16, 12),
    ("a", 256, 140),
    ("a", 1000, 996),
    ("rollout-000001", 16, 2),
    ("rollout-000001", 256, 66),
    ("run-1/step-0", 16, 14),
    ("run-1/step-0", 1000, 126),
    ("ü-日本", 16, 1),
    ("ü-日本", 256, 145),
    ("ü-日本", 1000, 113),
]


class PartitionOf(unittest.TestCase):
    def test_matches_the_service(self):
        for id, n, want in GOLDEN:
            self.assertEqual(rollstore.partition_of(id, n), want, (id, n))

    def test_rejects_no_partitions(self):
        with self.assertRaises(ValueError):
            rollstore.partition_of("a", 0)


if __name__ == "__main__":
    unittest.main()
