package engine

// Listing and scanning answer every acknowledged row once, from the WAL
// and the base together: pages, filters, scans with and without payloads.
// A batch append is one commit, all or nothing.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/objstore/memory"
)

func TestListPagesFiltersAndDedup(t *testing.T) {
	e := newEnv(t, memory.New(), testConfig("s0"))
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("id-%02d", i)
		_, err := e.tb.Append(ctx, Record{ID: id, RolloutID: fmt.Sprintf("r%d", i%3), ProblemID: "p"}, bytes.NewReader(payloadFor(id, i*10)), int64(i*10))
		if err != nil {
			t.Fatal(err)
		}
		if i == 14 {
			e.merge() // half in the base, half in the WAL
		}
	}
	var got []string
	tok := ""
	pages := 0
	for {
		page, err := e.tb.List(ctx, ListOptions{Limit: 7, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range page.Records {
			got = append(got, r.ID)
		}
		if page.NextPageToken == "" {
			break
		}
		tok = page.NextPageToken
	}
	if len(got) != 30 || pages != 5 {
		t.Fatalf("listed %d rows in %d pages", len(got), pages)
	}
	for i, id := range got {
		if id != fmt.Sprintf("id-%02d", i) {
			t.Fatalf("row %d is %s", i, id)
		}
	}
	page, err := e.tb.List(ctx, ListOptions{RolloutID: "r1", Limit: 100})
	if err != nil || len(page.Records) != 10 || page.NextPageToken != "" {
		t.Fatalf("filtered: %d rows, token %q, %v", len(page.Records), page.NextPageToken, err)
	}
	if _, err := e.tb.List(ctx, ListOptions{PageToken: "!!"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad token: %v", err)
	}
	// Pinned to version 1: only the first 15 rows.
	page, err = e.tb.List(ctx, ListOptions{Version: 1, Limit: 1000})
	if err != nil || len(page.Records) != 15 {
		t.Fatalf("pinned list: %d rows, %v", len(page.Records), err)
	}
}

func TestScanAndAppendBatch(t *testing.T) {
	e := newEnv(t, memory.New(), testConfig("s0"))
	ctx := context.Background()
	var items []BatchItem
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("b-%02d", i)
		items = append(items, BatchItem{Record: Record{ID: id, RolloutID: "r"}, Payload: payloadFor(id, i*500)})
	}
	res, err := e.tb.AppendBatch(ctx, items)
	if err != nil || len(res) != 20 || !res[0].Created {
		t.Fatalf("batch: %v", err)
	}
	if got := e.db.Stats().Segments.Load(); got != 1 {
		t.Fatalf("batch took %d segments, want 1", got)
	}
	// A batch with one conflicting item writes nothing.
	bad := []BatchItem{{Record: Record{ID: "new-1", RolloutID: "r"}}, {Record: Record{ID: "b-03", RolloutID: "other"}}}
	var be *BatchError
	if _, err := e.tb.AppendBatch(ctx, bad); !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting batch: %v", err)
	}
	if _, err := e.tb.Get(ctx, "new-1", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("partial batch visible: %v", err)
	}
	// Identical retry of the whole batch: nothing created.
	res, err = e.tb.AppendBatch(ctx, items)
	if err != nil || res[5].Created {
		t.Fatalf("batch retry: %v", err)
	}
	e.merge()
	for _, withPayloads := range []bool{false, true} {
		var buf bytes.Buffer
		if err := e.tb.Scan(ctx, &buf, ScanOptions{WithPayloads: withPayloads}); err != nil {
			t.Fatal(err)
		}
		n := 0
		err := rowfile.ReadStream(&buf, func(row int, rec rowfile.Record) error {
			want := payloadFor(rec.ID, n*500)
			if withPayloads && !bytes.Equal(rec.Payload, want) {
				return fmt.Errorf("row %d (%s): payload differs", row, rec.ID)
			}
			if !withPayloads && len(rec.Payload) != 0 {
				return fmt.Errorf("row %d: payload present", row)
			}
			n++
			return nil
		})
		if err != nil || n != 20 {
			t.Fatalf("scan(payloads=%v): %d rows, %v", withPayloads, n, err)
		}
	}
}
