package engine

// Bounds (doc.go, "Back-pressure and bounds"): a merge backlog refuses
// appends, never reads; payload reads reserve from an in-flight byte
// budget; resident snapshots are bounded by the cache and reload when
// evicted.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/objstore/memory"
)

// A merge backlog slows writers, never readers: past the bound appends
// are refused with ErrBackpressure (an ErrOverloaded, so 503 with
// Retry-After), while every kind of read still answers.
func TestBackpressureRefusesAppendsNotReads(t *testing.T) {
	store := memory.New()
	cfg := testConfig("s0")
	cfg.WriteMaxPendingGens = 2
	w := newEnv(t, store, cfg)
	w.put("base", 10)
	w.merge()
	for g := 0; g < 3; g++ {
		walRow(t, w, fmt.Sprintf("wal-%d", g), 10)
	}
	ctx := context.Background()
	_, err := w.tb.Append(ctx, Record{ID: "next", RolloutID: "r"}, strings.NewReader("x"), 1)
	if !errors.Is(err, ErrBackpressure) || !errors.Is(err, ErrOverloaded) {
		t.Fatalf("append past the backlog bound: %v", err)
	}
	if got := w.db.Stats().AppendBackpressure.Load(); got != 1 {
		t.Fatalf("back-pressure count %d", got)
	}
	r := newEnv(t, store, testConfig(""))
	for g := 0; g < 3; g++ {
		r.mustRead(fmt.Sprintf("wal-%d", g), 10)
	}
	r.mustRead("base", 10)
	if _, err := r.tb.Get(ctx, "absent", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent id under back-pressure: %v", err)
	}
	if st, err := w.tb.Status(ctx); err != nil || st.Backpressure == "" {
		t.Fatalf("status does not report the back-pressure: %+v, %v", st, err)
	}
	w.merge()
	w.put("next", 1)
	w.mustRead("next", 1)
}

func TestPayloadBudget(t *testing.T) {
	cfg := testConfig("s0")
	cfg.MaxPayloadInFlight = 100 << 10
	e := newEnv(t, memory.New(), cfg)
	e.put("a", 80<<10)
	e.put("b", 80<<10)
	e.put("huge", 300<<10)
	ctx := context.Background()
	p, err := e.tb.OpenPayload(ctx, "a", 0, -1, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.tb.OpenPayload(ctx, "b", 0, -1, ReadOptions{}); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("second read within budget: %v", err)
	}
	// A ranged read reserves only its range.
	q, err := e.tb.OpenPayload(ctx, "b", 0, 10<<10, ReadOptions{})
	if err != nil {
		t.Fatalf("small range refused: %v", err)
	}
	q.Close()
	p.Close()
	// A scan reserves from the same budget: refused while a read holds it.
	hold, err := e.tb.OpenPayload(ctx, "a", 0, -1, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.tb.Scan(ctx, io.Discard, ScanOptions{WithPayloads: true}); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("scan past the budget: %v", err)
	}
	hold.Close()
	if err := e.tb.Scan(ctx, io.Discard, ScanOptions{WithPayloads: true}); err != nil {
		t.Fatalf("scan alone: %v", err)
	}
	// A payload larger than the whole budget is still readable alone.
	e.mustRead("huge", 300<<10)
	if e.db.InFlightPayloadBytes() != 0 {
		t.Fatal("budget leaked")
	}
}

// Resident snapshots are bounded: with a tiny cache, opening many tables
// evicts the least recently refreshed ones' snapshots, and reads of those
// tables simply reload.
func TestResidentSnapshotsBounded(t *testing.T) {
	cfg := testConfig("s0")
	cfg.CacheBytes = 16 << 20 // resident: 1 MiB
	store := memory.New()
	db := openDB(t, store, cfg)
	ctx := context.Background()
	var tables []*Table
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("t%d", i)
		if err := db.CreateTable(ctx, name); err != nil {
			t.Fatal(err)
		}
		tb, err := db.Table(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tables = append(tables, tb)
		if err := tb.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := db.resident.Len(); got != 3 {
		t.Fatalf("%d resident, want 3", got)
	}
	db.resident.Add(&Table{}, &snapshot{}, cfg.CacheBytes/2) // something bigger arrives
	for _, tb := range tables {
		if tb.snap.Load() != nil {
			t.Fatalf("%s kept its snapshot past the bound", tb.Name())
		}
		if _, err := tb.Get(ctx, "absent", ReadOptions{}); !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
}
