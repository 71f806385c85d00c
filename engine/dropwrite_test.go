package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// An append that meets a drop mid-way answers that the table is gone, not
// that another writer owns the shard: here the shard's lease is still held
// by a writer the drop fenced (it took the shard just before the drop and
// is held inside its takeover), and a second append, on a handle opened
// while the drop is under way, finds that lease taken. There is no other
// live writer, and a retry would reach the table's next incarnation.
func TestAppendDuringDropIsTableNotFound(t *testing.T) {
	clk := objstoretest.NewClock()
	store := memory.New(memory.WithClock(clk.Now))
	e := newEnv(t, store, leaseConfig("s0", clk))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The first append starts the shard's writer: it takes the lease,
	// registers as active, and is held before it creates the head.
	takingOver := e.hooks.Pause("head:cas")
	first := make(chan error, 1)
	go func() { first <- appendID(e.tb, "x") }()
	if err := takingOver.Wait(ctx); err != nil {
		t.Fatal("the first append never reached its takeover")
	}

	// The drop tombstones the registry and the heads and is held before
	// it deletes the descriptor: the table still resolves to this
	// incarnation.
	fenced := e.hooks.Pause("drop:fenced")
	dropped := make(chan error, 1)
	go func() { dropped <- e.db.DropTable(context.Background(), "t") }()
	if err := fenced.Wait(ctx); err != nil {
		t.Fatal("the drop never fenced the table")
	}

	tb, err := e.db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	err = appendID(tb, "y")
	if !errors.Is(err, ErrTableNotFound) || errors.Is(err, ErrShardOwned) {
		t.Fatalf("append while the table is being dropped: %v, want ErrTableNotFound", err)
	}

	takingOver.Release()
	if err := <-first; !errors.Is(err, ErrTableNotFound) {
		t.Errorf("append fenced by the drop: %v, want ErrTableNotFound", err)
	}
	fenced.Release()
	if err := <-dropped; err != nil {
		t.Fatal(err)
	}
	if tb, err := e.db.Table(ctx, "t"); err == nil {
		err = appendID(tb, "z")
		if !errors.Is(err, ErrTableNotFound) {
			t.Fatalf("append after the drop: %v, want ErrTableNotFound", err)
		}
	} else if !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("after the drop: %v", err)
	}
}
