package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/memory"
)

// maintainDB opens a writer DB on a fresh memory store with the tables
// given, each holding one sealed generation of rows rows.
func maintainDB(t *testing.T, rows int, tables ...string) *engine.DB {
	t.Helper()
	ctx := context.Background()
	cfg := engine.DefaultConfig()
	cfg.Shard = "w0"
	cfg.Partitions = 1 // one generation per flush
	cfg.ReclaimGrace = 0
	cfg.LeaseDuration = -1
	db, err := engine.Open(memory.New(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	for _, name := range tables {
		if err := db.CreateTable(ctx, name); err != nil {
			t.Fatal(err)
		}
		appendSealed(t, db, name, rows)
	}
	return db
}

func appendSealed(t *testing.T, db *engine.DB, name string, rows int) {
	t.Helper()
	ctx := context.Background()
	tb, err := db.Table(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		id := fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano(), i)
		body := []byte("payload " + id)
		rec := engine.Record{ID: id, RolloutID: "r", Sequence: int64(i), CreatedAt: time.Now()}
		if _, err := tb.Append(ctx, rec, bytes.NewReader(body), int64(len(body))); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func pendingGens(t *testing.T, db *engine.DB, name string) int {
	t.Helper()
	tb, err := db.Table(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tb.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(st.Pending)
}

func TestMaintainerPassMergesEveryTable(t *testing.T) {
	db := maintainDB(t, 3, "alpha", "beta")
	var started []int
	var reported []engine.MaintenancePass
	m := engine.NewMaintainer(db, engine.MaintainOptions{
		SweepEvery:     2,
		CollectDropped: true,
		Status:         true,
		OnStart:        func(n int, _ time.Time) { started = append(started, n) },
		OnPass:         func(p engine.MaintenancePass) { reported = append(reported, p) },
	})
	ctx := context.Background()

	p := m.Pass(ctx)
	if p.N != 1 || p.Swept || p.Collecting || p.ListErr != nil {
		t.Fatalf("first pass: %+v", p)
	}
	if fmt.Sprint(p.Listed) != "[alpha beta]" || len(p.Tables) != 2 {
		t.Fatalf("first pass listed %v, reached %d tables", p.Listed, len(p.Tables))
	}
	for _, tp := range p.Tables {
		if tp.OpenErr != nil || tp.MergeErr != nil || tp.Busy {
			t.Fatalf("%s: %+v", tp.Table, tp)
		}
		if tp.Merge.Version == 0 || tp.Merge.Rows != 3 {
			t.Fatalf("%s: merged %+v, want 3 rows in a new version", tp.Table, tp.Merge)
		}
		if tp.Swept {
			t.Fatalf("%s swept on pass 1 with SweepEvery 2", tp.Table)
		}
		if !tp.HasStatus || tp.StatusErr != nil || len(tp.Status.Pending) != 0 || tp.Status.Rows != 3 {
			t.Fatalf("%s: status %+v (err %v)", tp.Table, tp.Status, tp.StatusErr)
		}
		if n := pendingGens(t, db, tp.Table); n != 0 {
			t.Fatalf("%s: %d generations pending after the pass", tp.Table, n)
		}
	}

	// The second pass sweeps and collects; with nothing new it merges
	// nothing.
	p = m.Pass(ctx)
	if p.N != 2 || !p.Swept || !p.Collecting || p.CollectErr != nil {
		t.Fatalf("second pass: %+v", p)
	}
	for _, tp := range p.Tables {
		if tp.Merge.Version != 0 || !tp.Swept || tp.SweepErr != nil {
			t.Fatalf("%s on pass 2: %+v", tp.Table, tp)
		}
	}
	if fmt.Sprint(started) != "[1 2]" || len(reported) != 2 || reported[1].N != 2 {
		t.Fatalf("OnStart saw %v, OnPass %d passes", started, len(reported))
	}
}

func TestMaintainerNamedTables(t *testing.T) {
	db := maintainDB(t, 2, "alpha", "beta")
	m := engine.NewMaintainer(db, engine.MaintainOptions{Tables: []string{"beta", "gone"}})
	p := m.Pass(context.Background())
	if p.Listed != nil || len(p.Tables) != 2 {
		t.Fatalf("pass: %+v", p)
	}
	if tp := p.Tables[0]; tp.Table != "beta" || tp.MergeErr != nil || tp.Merge.Rows != 2 || tp.HasStatus {
		t.Fatalf("beta: %+v", tp)
	}
	if tp := p.Tables[1]; !errors.Is(tp.OpenErr, engine.ErrTableNotFound) {
		t.Fatalf("gone: open error %v, want ErrTableNotFound", tp.OpenErr)
	}
	if n := pendingGens(t, db, "alpha"); n != 1 {
		t.Fatalf("alpha: %d pending generations, want the 1 no pass touched", n)
	}
}

// TestMaintainerRun drives Run through Wait: each pass begins when the test
// says so, and Run ends when its context does.
func TestMaintainerRun(t *testing.T) {
	db := maintainDB(t, 1, "alpha")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	next := make(chan struct{})
	passes := make(chan engine.MaintenancePass)
	var prevs []int
	m := engine.NewMaintainer(db, engine.MaintainOptions{
		SweepEvery: 2,
		Wait: func(ctx context.Context, prev *engine.MaintenancePass) bool {
			if prev == nil {
				prevs = append(prevs, 0)
			} else {
				prevs = append(prevs, prev.N)
			}
			select {
			case <-ctx.Done():
				return false
			case <-next:
				return true
			}
		},
		OnPass: func(p engine.MaintenancePass) { passes <- p },
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()

	next <- struct{}{}
	if p := <-passes; p.N != 1 || p.Swept || len(p.Tables) != 1 || p.Tables[0].Merge.Rows != 1 {
		t.Fatalf("pass 1: %+v", p)
	}
	appendSealed(t, db, "alpha", 2)
	next <- struct{}{}
	if p := <-passes; p.N != 2 || !p.Swept || p.Tables[0].Merge.Rows != 2 || !p.Tables[0].Swept {
		t.Fatalf("pass 2: %+v", p)
	}
	cancel()
	<-done
	// Run may or may not have entered Wait again before the cancel.
	if got := fmt.Sprint(prevs); got != "[0 1]" && got != "[0 1 2]" {
		t.Fatalf("Wait saw previous passes %v, want [0 1] or [0 1 2]", prevs)
	}
}

// TestMaintainerStop: a closed Stop ends Run before another pass, and so
// does a cancelled context, without Wait being asked.
func TestMaintainerStop(t *testing.T) {
	db := maintainDB(t, 1, "alpha")
	stop := make(chan struct{})
	close(stop)
	m := engine.NewMaintainer(db, engine.MaintainOptions{Interval: time.Hour, Stop: stop,
		OnPass: func(p engine.MaintenancePass) { t.Errorf("pass %d ran after Stop", p.N) }})
	m.Run(context.Background()) // returns at once: the ticker never fires

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m = engine.NewMaintainer(db, engine.MaintainOptions{
		Wait:   func(context.Context, *engine.MaintenancePass) bool { t.Error("Wait called after cancel"); return true },
		OnPass: func(p engine.MaintenancePass) { t.Errorf("pass %d ran after cancel", p.N) },
	})
	m.Run(ctx)
}
