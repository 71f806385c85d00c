package server

// Payload reads that meet two copies of one id: two shards acknowledged
// the id at once, each with its own payload, and a merge keeps one while a
// read that found the other is under way. The answer is one copy, whole,
// under its own headers, or 503 row_changed before any byte, or a cut
// connection after some: never one copy's bytes under the other's headers.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

// openEngine opens another process on store, with its own hooks.
func openEngine(t *testing.T, store objstore.Bucket, shard string) (*engine.Table, *hook.Set) {
	t.Helper()
	hs := hook.NewSet()
	cfg := testEngineConfig()
	cfg.Shard, cfg.Hooks = shard, hs.Func()
	db, err := engine.Open(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hs.Reset()
		_ = db.Close(context.Background())
	})
	tb, err := db.Table(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	return tb, hs
}

// raceCopies has shards a and b acknowledge id in table t, b with first
// and a with kept: a checked that the id was new, then b checked,
// committed and sealed. land lets a commit and seals it. A merge of both
// keeps a's copy (the first shard's).
func raceCopies(t *testing.T, store objstore.Bucket, id string, first, kept []byte) (land func()) {
	t.Helper()
	ctx := context.Background()
	a, ah := openEngine(t, store, "a")
	b, _ := openEngine(t, store, "b")
	checked := ah.Pause("write:checked")
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Append(ctx, engine.Record{ID: id, RolloutID: "r-a", ContentType: "application/x-kept"}, bytes.NewReader(kept), int64(len(kept)))
		aDone <- err
	}()
	if err := checked.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := b.Append(ctx, engine.Record{ID: id, RolloutID: "r-b", ContentType: "application/x-first"}, bytes.NewReader(first), int64(len(first)))
	if err != nil || !res.Created {
		t.Fatalf("b's copy: %+v %v", res, err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		checked.Release()
		if err := <-aDone; err != nil {
			t.Fatalf("a's copy: %v", err)
		}
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// mergeElsewhere merges table t through another process on store.
func mergeElsewhere(t *testing.T, store objstore.Bucket) {
	t.Helper()
	m, _ := openEngine(t, store, "")
	res, err := m.Merge(context.Background(), engine.MergeOptions{})
	if err != nil || len(res.Reclaimed) == 0 {
		t.Fatalf("merge: %+v %v", res, err)
	}
}

func quotedSHA(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

// The server's view holds b's copy. A GET found it and, before it read a
// byte, the merge kept a's copy and reclaimed b's. A plain GET serves a's
// copy whole under a's headers. A conditional GET, or one for a suffix
// range, had its conditions or its range decided on b's copy (described
// first): it is 503 row_changed with Retry-After, and the next try is
// decided and served on a's copy.
func TestPayloadGetAcrossTwoCopies(t *testing.T) {
	first, kept := payloadOf("first", 3000), payloadOf("kept", 1000)
	for _, c := range []struct {
		name string
		hdr  []string
	}{
		{"plain", nil},
		{"conditional", []string{"If-None-Match", `"00"`}},
		{"suffix-range", []string{"Range", "bytes=-2500"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, func(o *envOptions) {
				o.engine.Partitions = -1 // only a table without partitions can hold two copies of an id
				o.engine.ResidentMaxAge = time.Hour
			})
			e.createTable("t")
			land := raceCopies(t, e.store, "x", first, kept)
			path := rolloutURL("t", "x") + "/payload"
			if r := e.do("GET", path, nil); r.status != http.StatusOK || !bytes.Equal(r.body, first) {
				t.Fatalf("before the merge: %d, %d bytes", r.status, len(r.body))
			}
			land()
			gate := e.hooks.Pause("read:row-read")
			type result struct {
				r   response
				err error
			}
			done := make(chan result, 1)
			go func() {
				r, err := e.doAsync("GET", path, "", c.hdr...)
				done <- result{r, err}
			}()
			if err := gate.Wait(waitCtx(t)); err != nil {
				t.Fatal(err)
			}
			mergeElsewhere(t, e.store)
			gate.Release()
			res := <-done
			if res.err != nil {
				t.Fatal(res.err)
			}
			r := res.r
			if c.hdr == nil {
				want(t, r, http.StatusOK, "")
				if !bytes.Equal(r.body, kept) || r.header.Get("ETag") != quotedSHA(kept) || r.header.Get("Content-Type") != "application/x-kept" {
					t.Fatalf("served %d bytes under ETag %s, %s: want a's copy whole", len(r.body), r.header.Get("ETag"), r.header.Get("Content-Type"))
				}
				return
			}
			want(t, r, http.StatusServiceUnavailable, codeRowChanged)
			if r.header.Get("Retry-After") == "" {
				t.Fatal("503 row_changed without Retry-After")
			}
			r = e.do("GET", path, nil, c.hdr...)
			if r.status != http.StatusOK && r.status != http.StatusPartialContent || r.header.Get("ETag") != quotedSHA(kept) {
				t.Fatalf("the retry: %d under ETag %s, want a's copy", r.status, r.header.Get("ETag"))
			}
		})
	}
}

// The body of b's copy was streaming, its headers sent, when the merge
// kept a's copy and reclaimed b's; the body then failed after 1000 bytes.
// The connection is cut: the client never receives a whole body, and no
// byte of a's copy.
func TestPayloadStreamMeetingAnotherCopyIsCutOff(t *testing.T) {
	first, kept := payloadOf("first", 3000), payloadOf("kept", 3000)
	fb := faulty.New(memory.New())
	var logs syncBuffer
	e := newEnv(t, func(o *envOptions) {
		o.store = fb
		o.engine.ResidentMaxAge = time.Hour
		o.engine.Partitions = -1 // only a table without partitions can hold two copies of an id
		o.server.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	e.createTable("t")
	land := raceCopies(t, e.store, "x", first, kept)
	path := rolloutURL("t", "x") + "/payload"
	loggedFirst := make(chan struct{})
	e.hooks.Do("request:logged", func(context.Context) error { close(loggedFirst); return nil })
	if r := e.do("GET", path, nil); r.status != http.StatusOK || !bytes.Equal(r.body, first) {
		t.Fatalf("before the merge: %d, %d bytes", r.status, len(r.body))
	}
	await(t, loggedFirst, "the first GET's log line")
	land()
	fb.FailRead(faulty.OpGetRange, faulty.KeyContains("/wal/"), 1000, objstore.ErrNotFound)
	gate := e.hooks.Pause("read:payload-opened")
	type result struct {
		status int
		etag   string
		body   []byte
		err    error
	}
	logged := make(chan struct{})
	e.hooks.Do("request:logged", func(context.Context) error { close(logged); return nil }) // the GET's: no other request runs
	done := make(chan result, 1)
	go func() {
		resp, err := http.Get(e.ts.URL + path) // not the validating client: the answer is cut off
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{resp.StatusCode, resp.Header.Get("ETag"), b, err}
	}()
	if err := gate.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	mergeElsewhere(t, e.store)
	gate.Release()
	r := <-done
	if r.err == nil {
		t.Fatalf("a whole answer: %d, %d bytes under ETag %s", r.status, len(r.body), r.etag)
	}
	if r.status != 0 && (r.status != http.StatusOK || r.etag != quotedSHA(first)) {
		t.Fatalf("%d under ETag %s: want b's copy's headers", r.status, r.etag)
	}
	if !bytes.HasPrefix(first, r.body) {
		t.Fatalf("%d bytes received, not a prefix of b's copy", len(r.body))
	}
	// The server cut it for the row change, after its headers were out.
	await(t, logged, "the GET's log line")
	lines := strings.Split(strings.TrimSpace(grepLines(logs.String(), "method=GET")), "\n")
	line := lines[len(lines)-1]
	if !strings.Contains(line, "aborted=true") || !strings.Contains(line, engine.ErrRowChanged.Error()) {
		t.Fatalf("log: %s", line)
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
