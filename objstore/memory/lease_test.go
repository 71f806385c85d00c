package memory_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

func TestLeaseExpiry(t *testing.T) {
	objstoretest.RunLeaseExpiry(t, func(t *testing.T, now func() time.Time) (a, b objstore.Bucket) {
		m := memory.New(memory.WithClock(now))
		return m, m
	})
}

// TestClockStampsObjects: WithClock also sets LastModified.
func TestClockStampsObjects(t *testing.T) {
	clk := objstoretest.NewClock()
	b := memory.New(memory.WithClock(clk.Now))
	clk.Advance(time.Minute)
	a, err := b.Put(t.Context(), "k", strings.NewReader("v"), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.Now(); !a.LastModified.Equal(want) {
		t.Errorf("LastModified = %v, want the clock's %v", a.LastModified, want)
	}
}
