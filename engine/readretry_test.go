package engine

// A read never mixes two rows (doc.go, "Reads"). A read that found its row
// in one place and lost that file to a reclaim finds the row again, and
// from then on serves only what the row found on that attempt says: its
// file and span, its size, checksum and content type. The same payload
// found elsewhere (its WAL segment merged into the base) continues at the
// same offset of the payload, in the new file. Another payload under the id
// (two shards acknowledged the id at once, each with its own, and the merge
// kept the other copy) is served whole while nothing of the first was
// served, and is ErrRowChanged once some of it was: never a body that
// disagrees with its description, never a panic. Each race is forced at a
// named point.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

// readerConfig is a reading process's configuration, with the payload
// cache on or off.
func readerConfig(cache bool) Config {
	cfg := testConfig("")
	cfg.ResidentMaxAge = time.Hour
	if cache {
		cfg.PayloadCacheBytes = 4 << 20
	}
	return cfg
}

// notInBase matches the keys of WAL segments and payload objects: what a
// reclaim (or, for a dropped copy's payload, the sweep) deletes while the
// base holds the row.
var notInBase = faulty.KeyFunc(func(k string) bool { return !strings.Contains(k, "/base/") })

// servedPayload is what a payload read served: its description, its range
// and its bytes.
type servedPayload struct {
	rec    *Record
	off, n int64
	data   []byte
	err    error
}

func servePayload(tb *Table, id string, off, n int64) servedPayload {
	p, err := tb.OpenPayload(context.Background(), id, off, n, ReadOptions{})
	if err != nil {
		return servedPayload{err: err}
	}
	defer p.Close()
	data, err := io.ReadAll(p)
	return servedPayload{rec: p.Record, off: p.Offset, n: p.Length, data: data, err: err}
}

// checkServed asserts a read served want[off:off+n] under want's
// description (size, checksum, content type).
func checkServed(t *testing.T, got servedPayload, want []byte, contentType string, off, n int64) {
	t.Helper()
	if got.err != nil {
		t.Fatalf("read: %v", got.err)
	}
	if n < 0 {
		n = int64(len(want)) - off
	}
	if sum := sha(want); got.rec.PayloadSize != int64(len(want)) || got.rec.PayloadSHA256 != sum || got.rec.ContentType != contentType {
		t.Fatalf("described as %d bytes, sha256 %x, %q; the payload is %d bytes, sha256 %x, %q",
			got.rec.PayloadSize, got.rec.PayloadSHA256[:8], got.rec.ContentType, len(want), sum[:8], contentType)
	}
	if got.off != off || got.n != n {
		t.Fatalf("range [%d,+%d), want [%d,+%d)", got.off, got.n, off, n)
	}
	if !bytes.Equal(got.data, want[off:off+n]) {
		t.Fatalf("served %d bytes that are not the payload's [%d,+%d)", len(got.data), off, n)
	}
}

// The open found the row in a WAL segment; before it read the payload,
// another process merged and reclaimed the generation. The retry finds the
// row in the base, a copy at another span of another file, and serves the
// payload from there: every byte, under the payload's own description. An
// external payload's object outlives its generation, so its first read is
// failed as a vanished file's would be, to force the retry.
func TestPayloadOpenRetriedInBaseAfterReclaim(t *testing.T) {
	for _, size := range []int{3000, 20 << 10} { // inline, external
		for _, cache := range []bool{false, true} {
			for _, rng := range [][2]int64{{0, -1}, {100, 1000}} {
				t.Run(fmt.Sprintf("%d/cache=%v/%d+%d", size, cache, rng[0], rng[1]), func(t *testing.T) {
					mem := memory.New()
					w := newEnv(t, mem, testConfig("s0"))
					walRow(t, w, "x", size)
					fr := faulty.New(mem)
					r := newEnv(t, fr, readerConfig(cache))
					if int64(size) > r.db.cfg.InlineMax {
						fr.Fail(faulty.OpGetRange, faulty.KeyContains("/payloads/"), objstore.ErrNotFound)
					}
					gate := r.hooks.Pause(hookReadRowRead) // the row described, its bytes not yet read
					done := make(chan servedPayload, 1)
					go func() { done <- servePayload(r.tb, "x", rng[0], rng[1]) }()
					mustWaitHook(t, gate)
					mergeOther(t, mem)
					gate.Release()
					checkServed(t, <-done, payloadFor("x", size), "application/octet-stream", rng[0], rng[1])
					if st := r.db.Stats(); st.ReadRetries.Load() != 1 || baseServed(st) != 1 {
						t.Fatalf("retries %d, base hits %d: want the retry served by the base", st.ReadRetries.Load(), baseServed(st))
					}
				})
			}
		}
	}
}

// The body was streaming from the WAL when the generation was merged and
// reclaimed, and it failed after 1000 bytes as a resumed read of a deleted
// blob does. The rest comes from the base's copy, at the same offset of
// the payload (not of the file): the bytes add up to the payload's range.
func TestPayloadResumedInBaseAfterReclaimMidStream(t *testing.T) {
	for _, size := range []int{3000, 200 << 10} { // inline, external
		for _, rng := range [][2]int64{{0, -1}, {500, int64(size) - 600}} {
			t.Run(fmt.Sprintf("%d/%d+%d", size, rng[0], rng[1]), func(t *testing.T) {
				ctx := context.Background()
				mem := memory.New()
				w := newEnv(t, mem, testConfig("s0"))
				walRow(t, w, "x", size)
				fr := faulty.New(mem)
				r := newEnv(t, fr, readerConfig(false))
				fr.FailRead(faulty.OpGetRange, notInBase, 1000, objstore.ErrNotFound)
				p, err := r.tb.OpenPayload(ctx, "x", rng[0], rng[1], ReadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				head := make([]byte, 1000)
				if _, err := io.ReadFull(p, head); err != nil {
					t.Fatal(err)
				}
				mergeOther(t, mem)
				rest, err := io.ReadAll(p)
				checkServed(t, servedPayload{rec: p.Record, off: p.Offset, n: p.Length, data: append(head, rest...), err: err},
					payloadFor("x", size), "application/octet-stream", rng[0], rng[1])
				if st := r.db.Stats(); st.ReadRetries.Load() != 1 || baseServed(st) != 1 {
					t.Fatalf("retries %d, base hits %d: want the rest served by the base", st.ReadRetries.Load(), baseServed(st))
				}
			})
		}
	}
}

// rowCopy is one shard's copy of an id that two shards acknowledged.
type rowCopy struct {
	size        int
	seed        string // the payload is payloadFor(seed, size)
	contentType string
	rollout     string
}

func (c rowCopy) payload() []byte { return payloadFor(c.seed, c.size) }

func (c rowCopy) record(id string) Record {
	return Record{ID: id, RolloutID: c.rollout, ContentType: c.contentType, Metadata: []byte(`{"copy":"` + c.rollout + `"}`)}
}

// is reports whether rec is this copy, every field a read serves: the
// payload's size and checksum, or its bytes when loaded (a scan's stream
// carries the bytes).
func (c rowCopy) is(rec *Record) bool {
	if rec.RolloutID != c.rollout || rec.ContentType != c.contentType || string(rec.Metadata) != `{"copy":"`+c.rollout+`"}` {
		return false
	}
	if rec.Payload != nil {
		return bytes.Equal(rec.Payload, c.payload())
	}
	return rec.PayloadSize == int64(c.size) && rec.PayloadSHA256 == sha(c.payload())
}

// raceTwoCopies has shards s0 and s1 both acknowledge id, each with its
// own copy, as two writers racing on one id can: s0 checks that the id is
// new and is held there; s1 checks, commits and seals first. land lets s0
// commit and seals its generation. A merge of both keeps s0's copy (the
// first shard's), so a read that found s1's copy in the WAL and lost it to
// the reclaim finds s0's in the base.
func raceTwoCopies(t *testing.T, store objstore.Bucket, id string, first, kept rowCopy) (land func()) {
	t.Helper()
	ctx := context.Background()
	a := newEnv(t, store, testConfig("s0"))
	b := newEnv(t, store, testConfig("s1"))
	checked := a.hooks.Pause(hookChecked)
	aDone := await(func() error {
		res, err := a.tb.Append(ctx, kept.record(id), bytes.NewReader(kept.payload()), int64(kept.size))
		if err == nil && !res.Created {
			err = errors.New("s0's copy not created")
		}
		return err
	})
	mustWaitHook(t, checked)
	res, err := b.tb.Append(ctx, first.record(id), bytes.NewReader(first.payload()), int64(first.size))
	if err != nil || !res.Created {
		t.Fatalf("s1's copy: %+v %v", res, err)
	}
	if err := b.tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		checked.Release()
		if err := <-aDone; err != nil {
			t.Fatalf("s0's copy: %v", err)
		}
		if err := a.tb.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// mustWaitHook waits until a call reaches a hook's gate.
func mustWaitHook(t *testing.T, g *hook.Gate) {
	t.Helper()
	if err := g.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// The open found s1's copy in the WAL and described it; before it read a
// byte, the merge kept s0's copy and reclaimed s1's (an external copy's
// object is deleted too, as the sweep deletes what no row references). The
// retry finds s0's copy, shorter and other bytes, and nothing of s1's was
// served yet: the open serves s0's copy whole, under s0's description.
func TestPayloadOpenAcrossTwoCopiesServesTheOneFound(t *testing.T) {
	for _, c := range []struct {
		name        string
		first, kept rowCopy
	}{
		{"inline", rowCopy{3000, "first", "application/x-first", "r-first"}, rowCopy{1000, "kept", "application/x-kept", "r-kept"}},
		{"external", rowCopy{20 << 10, "first", "application/x-first", "r-first"}, rowCopy{10 << 10, "kept", "application/x-kept", "r-kept"}},
	} {
		for _, cache := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/cache=%v", c.name, cache), func(t *testing.T) {
				ctx := context.Background()
				mem := memory.New()
				land := raceTwoCopies(t, mem, "x", c.first, c.kept)
				r := newEnv(t, mem, readerConfig(cache))
				seen, err := r.tb.Stat(ctx, "x", ReadOptions{}) // r's resident view: s1's copy, in the WAL
				if err != nil || seen.PayloadSize != int64(c.first.size) {
					t.Fatalf("stat before the merge: %+v %v", seen, err)
				}
				land()
				gate := r.hooks.Pause(hookReadRowRead)
				done := make(chan servedPayload, 1)
				go func() { done <- servePayload(r.tb, "x", 0, -1) }()
				mustWaitHook(t, gate)
				mergeOther(t, mem)
				if seen.PayloadRef != "" {
					if err := mem.Delete(ctx, seen.PayloadRef); err != nil {
						t.Fatal(err)
					}
				}
				gate.Release()
				checkServed(t, <-done, c.kept.payload(), c.kept.contentType, 0, -1)
			})
		}
	}
}

// The body was streaming s1's copy when the merge kept s0's and reclaimed
// s1's; the body then failed after 1000 bytes. The row found again is
// another payload than the one whose description and first bytes were
// served: ErrRowChanged, and not one byte of s0's copy. A copy that
// differs only in fields the payload read does not serve continues.
func TestPayloadResumeAcrossTwoCopies(t *testing.T) {
	const ct = "application/x-sim"
	for _, c := range []struct {
		name        string
		first, kept rowCopy
		changed     bool
	}{
		{"size", rowCopy{3000, "first", ct, "r-first"}, rowCopy{1000, "kept", ct, "r-kept"}, true},
		{"checksum", rowCopy{3000, "first", ct, "r-first"}, rowCopy{3000, "kept", ct, "r-kept"}, true},
		{"content-type", rowCopy{3000, "same", "application/x-first", "r-first"}, rowCopy{3000, "same", "application/x-kept", "r-kept"}, true},
		{"external", rowCopy{20 << 10, "first", ct, "r-first"}, rowCopy{20 << 10, "kept", ct, "r-kept"}, true},
		{"metadata-only", rowCopy{3000, "same", ct, "r-first"}, rowCopy{3000, "same", ct, "r-kept"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			mem := memory.New()
			land := raceTwoCopies(t, mem, "x", c.first, c.kept)
			fr := faulty.New(mem)
			r := newEnv(t, fr, readerConfig(false))
			if _, err := r.tb.Stat(ctx, "x", ReadOptions{}); err != nil { // r's resident view: s1's copy
				t.Fatal(err)
			}
			land()
			fr.FailRead(faulty.OpGetRange, notInBase, 1000, objstore.ErrNotFound)
			p, err := r.tb.OpenPayload(ctx, "x", 0, -1, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.Record.PayloadSHA256 != sha(c.first.payload()) || p.Record.ContentType != c.first.contentType {
				t.Fatalf("opened %+v, want s1's copy", p.Record)
			}
			head := make([]byte, 1000)
			if _, err := io.ReadFull(p, head); err != nil {
				t.Fatal(err)
			}
			mergeOther(t, mem)
			rest, err := io.ReadAll(p)
			if !c.changed {
				checkServed(t, servedPayload{rec: p.Record, off: p.Offset, n: p.Length, data: append(head, rest...), err: err},
					c.first.payload(), c.first.contentType, 0, -1)
				return
			}
			if !errors.Is(err, ErrRowChanged) {
				t.Fatalf("resumed into another payload: %v (%d more bytes), want ErrRowChanged", err, len(rest))
			}
			if len(rest) != 0 || !bytes.Equal(head, c.first.payload()[:1000]) {
				t.Fatalf("served %d bytes of s1's copy, then %d more", len(head), len(rest))
			}
		})
	}
}

// Reads of whole rows racing the same merge: each found s1's copy in the
// WAL and lost its segment before it read the row. The retry's row, s0's
// copy, is what each answers, entirely: not s1's fields with s0's payload
// or the other way round.
func TestRowReadsAcrossTwoCopiesServeTheOneFound(t *testing.T) {
	first := rowCopy{3000, "first", "application/x-first", "r-first"}
	kept := rowCopy{1000, "kept", "application/x-kept", "r-kept"}
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		point string
		read  func(tb *Table) ([]*Record, error)
	}{
		{"get", hookReadLocated, func(tb *Table) ([]*Record, error) {
			rec, err := tb.Get(ctx, "x", ReadOptions{})
			return []*Record{rec}, err
		}},
		{"getmany", hookReadLocated, func(tb *Table) ([]*Record, error) {
			return tb.GetMany(ctx, []string{"x"}, GetManyOptions{})
		}},
		{"list", hookListSnapshot, func(tb *Table) ([]*Record, error) {
			page, err := tb.List(ctx, ListOptions{})
			return page.Records, err
		}},
		{"scan", hookScanSnapshot, func(tb *Table) ([]*Record, error) {
			var buf bytes.Buffer
			if err := tb.Scan(ctx, &buf, ScanOptions{WithPayloads: true}); err != nil {
				return nil, err
			}
			var recs []*Record
			err := readStreamRows(buf.Bytes(), func(r Record) { recs = append(recs, &r) })
			return recs, err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := memory.New()
			land := raceTwoCopies(t, mem, "x", first, kept)
			r := newEnv(t, mem, readerConfig(false))
			gate := r.hooks.Pause(c.point) // s1's copy located (or listed), not yet read
			var recs []*Record
			done := await(func() (err error) { recs, err = c.read(r.tb); return err })
			mustWaitHook(t, gate)
			land()
			mergeOther(t, mem)
			gate.Release()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0] == nil || !kept.is(recs[0]) {
				t.Fatalf("read %d rows, first %+v: want s0's copy entirely", len(recs), *recs[0])
			}
			if st := r.db.Stats(); st.ReadRetries.Load() != 1 {
				t.Fatalf("%d retries, want 1", st.ReadRetries.Load())
			}
		})
	}
}
