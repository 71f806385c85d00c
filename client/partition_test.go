package client

import (
	"fmt"
	"testing"

	"github.com/rollstore/rollstore/engine"
)

// The client's copy of the partition function agrees with the engine's.
func TestPartitionOfMatchesTheService(t *testing.T) {
	for i := range 2000 {
		id := fmt.Sprintf("run-%d/step-%d-ü", i%37, i)
		for _, n := range []int{1, 3, 16, 256, 1024} {
			if got, want := PartitionOf(id, n), engine.PartitionOf(id, n); got != want {
				t.Fatalf("PartitionOf(%q, %d) = %d, the engine says %d", id, n, got, want)
			}
		}
	}
}
