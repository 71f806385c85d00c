package client

// PartitionOf is the partition of id in a table of n partitions (n >= 1):
// FNV-1a (64 bits) of the id's UTF-8 bytes, modulo n. It is the function
// the service routes writes by (docs/format.md), so a client can group ids
// by partition.
func PartitionOf(id string, n int) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return int(h % uint64(n))
}
