// Partitions: the stable hash that gives every id of a partitioned table
// its one home, and the rendezvous hash that spreads partitions among live
// writers.

package engine

import (
	"fmt"
	"hash/fnv"
)

// MaxPartitions bounds a table's partitions: each is a shard with its own
// head, which a scan or a merge visits.
const MaxPartitions = 1024

// DefaultPartitions is the partition count of a table created without one.
const DefaultPartitions = 16

// PartitionOf is the partition of id in a table of n partitions: FNV-1a
// (64 bits) of the id's UTF-8 bytes, modulo n. It is part of the format
// (docs/format.md): clients compute it to send a write to its owner.
func PartitionOf(id string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(id))
	return int(h.Sum64() % uint64(n))
}

// PartitionName is partition i's shard name: its head, generations and
// seal records live under wal/<name>/.
func PartitionName(i int) string { return fmt.Sprintf("p%04d", i) }

// partitionIndex parses a partition's shard name (false for the shards of
// a table without partitions, which are named for their writers).
func partitionIndex(shard string) (int, bool) {
	var i int
	if len(shard) != 5 || shard[0] != 'p' {
		return 0, false
	}
	if _, err := fmt.Sscanf(shard[1:], "%04d", &i); err != nil {
		return 0, false
	}
	return i, true
}

// rendezvous picks, among writers, the owner of partition p: the writer
// whose hash with p is highest. Every process that sees the same writers
// picks the same owner, and a writer joining or leaving moves only the
// partitions it wins or held.
func rendezvous(p string, writers []string) string {
	var best string
	var bestScore uint64
	for _, w := range writers {
		h := fnv.New64a()
		h.Write([]byte(w))
		h.Write([]byte{0})
		h.Write([]byte(p))
		// FNV's high bits mix poorly for short inputs that differ at the
		// end; a final avalanche (splitmix64's) spreads them.
		s := mix64(h.Sum64())
		if best == "" || s > bestScore || (s == bestScore && w < best) {
			best, bestScore = w, s
		}
	}
	return best
}

func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}
