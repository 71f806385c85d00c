package main

import (
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine/layout"
)

// The request breakdowns are only as good as the key classes: if the
// engine's layout changes, this fails instead of the report quietly
// counting "other".
func TestKeyClass(t *testing.T) {
	table, err := layout.ForTable("reads")
	if err != nil {
		t.Fatal(err)
	}
	lay, err := table.Incarnation(layout.NewIncarnationName(time.Unix(1_800_000_000, 0), 7))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := lay.DataFile("00000000000000000001-abcdef")
	idx, _ := lay.DataIndex("00000000000000000001-abcdef")
	pay, _ := lay.Payload("bench-0", 3, "0123456789abcdef")
	for key, want := range map[string]string{
		table.Descriptor():           "descriptor",
		lay.Registry():               "registry",
		lay.Head("bench-0"):          "head",
		lay.Version(7):               "manifest",
		data:                         "data-file",
		idx:                          "data-index",
		lay.Segment("bench-0", 3, 1): "segment",
		lay.Seal("bench-0", 3):       "seal",
		pay:                          "payload-object",
		"not a table key":            "other",
	} {
		if got := keyClass(key); got != want {
			t.Errorf("keyClass(%q) = %q, want %q", key, got, want)
		}
	}
	for prefix, want := range map[string]string{
		lay.WALPrefix():                    "wal/",
		lay.GenerationPrefix("bench-0", 3): "generation/",
		lay.VersionsPrefix():               "versions/",
		lay.DataPrefix():                   "data/",
	} {
		if got := prefixClass(prefix); got != want {
			t.Errorf("prefixClass(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func TestRestOp(t *testing.T) {
	for _, c := range []struct {
		method, url, rangeHdr, want string
	}{
		{"GET", "/acct/c/k", "", "Get Blob"},
		{"GET", "/acct/c/k", "bytes=0-9", "Get Blob (range)"},
		{"HEAD", "/acct/c/k", "", "Get Blob Properties"},
		{"GET", "/acct/c?restype=container&comp=list&prefix=t/wal/", "", "List Blobs"},
		{"PUT", "/acct/c/k?comp=block&blockid=x", "", "Put Block"},
		{"PUT", "/acct/c/k?comp=blocklist", "", "Put Block List"},
		{"PUT", "/acct/c/k", "", "Put Blob"},
		{"PUT", "/acct/c?restype=container", "", "Create Container"},
		{"DELETE", "/acct/c/k", "", "Delete Blob"},
		{"POST", "/acct/c?restype=container&comp=batch", "", "Blob Batch"},
	} {
		req := httptest.NewRequest(c.method, "http://127.0.0.1"+c.url, nil)
		if c.rangeHdr != "" {
			req.Header.Set("x-ms-range", c.rangeHdr)
		}
		if got := restOp(req); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.method, c.url, got, c.want)
		}
	}
}

func TestQuantile(t *testing.T) {
	var s series
	for i := 1; i <= 100; i++ {
		s.add(0, time.Duration(i)*time.Millisecond)
	}
	got := s.summary()
	if got.p50 != 50*time.Millisecond || got.p99 != 99*time.Millisecond || got.max != 100*time.Millisecond || got.n != 100 {
		t.Fatalf("summary = %+v", got)
	}
}

func TestStreamAndPayload(t *testing.T) {
	n, err := io.Copy(io.Discard, newStream("x", 3<<20+17))
	if err != nil || n != 3<<20+17 {
		t.Fatalf("stream gave %d bytes, %v", n, err)
	}
	a, b := payload("id-1", 4096), payload("id-1", 4096)
	if string(a) != string(b) || string(a) == string(payload("id-2", 4096)) {
		t.Fatal("payload must be deterministic per id and differ between ids")
	}
	if got := perUnit(map[string]int64{"Head manifest": 4, "List wal/": 2, "Put seal": 0}, 2); got != "2 Head manifest + 1 List wal/ + <0.01 Put seal" {
		t.Fatalf("perUnit = %q", got)
	}
}
