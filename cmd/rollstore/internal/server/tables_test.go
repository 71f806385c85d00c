package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

func TestTables(t *testing.T) {
	e := newEnv(t)

	r := e.do("GET", "/v1/tables", nil)
	want(t, r, http.StatusOK, "")
	var list struct{ Tables []string }
	r.decode(t, &list)
	if list.Tables == nil || len(list.Tables) != 0 {
		t.Fatalf("empty store lists %q, want []", r.body)
	}

	want(t, e.do("PUT", "/v1/tables/runs", nil), http.StatusCreated, "")
	want(t, e.do("PUT", "/v1/tables/runs", nil), http.StatusConflict, codeTableExists)
	e.createTable("evals")

	e.do("GET", "/v1/tables", nil).decode(t, &list)
	if len(list.Tables) != 2 || list.Tables[0] != "evals" || list.Tables[1] != "runs" {
		t.Fatalf("tables %q, want [evals runs]", list.Tables)
	}

	e.mustPut("runs", "a", []byte("payload-a"))
	r = e.do("GET", "/v1/tables/runs", nil)
	want(t, r, http.StatusOK, "")
	var st engine.Status
	r.decode(t, &st)
	if st.Name != "runs" || st.PendingRows != 1 || len(st.Pending) != 1 ||
		st.Pending[0].Shard != engine.PartitionName(engine.PartitionOf("a", engine.DefaultPartitions)) {
		t.Fatalf("status before merge: %s", r.body)
	}
	if st.Partitions != engine.DefaultPartitions || len(st.Owners) != st.Partitions {
		t.Fatalf("status: %d partitions, %d owners", st.Partitions, len(st.Owners))
	}
	for i, o := range st.Owners {
		if o.Partition != engine.PartitionName(i) || o.Writer != "test-0" {
			t.Fatalf("owner %d: %+v, want test-0", i, o)
		}
	}
	e.merge("runs")
	e.do("GET", "/v1/tables/runs", nil).decode(t, &st)
	if st.Version != 1 || st.Rows != 1 || st.PayloadBytes != int64(len("payload-a")) || st.PendingRows != 0 {
		t.Fatalf("status after merge: %+v", st)
	}

	want(t, e.do("DELETE", "/v1/tables/runs", nil), http.StatusNoContent, "")
	want(t, e.do("GET", "/v1/tables/runs", nil), http.StatusNotFound, codeTableNotFound)
	want(t, e.do("GET", rolloutURL("runs", "a"), nil), http.StatusNotFound, codeTableNotFound)
	want(t, e.put("runs", "b", `{"rollout_id":"r"}`, []byte("x")), http.StatusNotFound, codeTableNotFound)
	want(t, e.do("DELETE", "/v1/tables/runs", nil), http.StatusNotFound, codeTableNotFound)
	// The name is free again, and the new table starts empty.
	e.createTable("runs")
	want(t, e.do("GET", rolloutURL("runs", "a"), nil), http.StatusNotFound, codeNotFound)
}

func TestBadTableNames(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{
		"/v1/tables/%2e%2e",        // ".." escaped past the router's cleaning
		"/v1/tables/.hidden",       // names may not start with '.'
		"/v1/tables/a%2Fb",         // '/' inside one segment
		"/v1/tables/a%5Cb",         // backslash
		"/v1/tables/a%00b",         // NUL
		"/v1/tables/%C3%A9t%C3%A9", // non-ASCII
		"/v1/tables/x%20y",         // space
	} {
		want(t, e.do("PUT", path, nil), http.StatusBadRequest, codeInvalidArgument)
		want(t, e.do("GET", path, nil), http.StatusBadRequest, codeInvalidArgument)
		want(t, e.do("PUT", path+"/rollouts/x", nil, "Rollstore-Record", `{"rollout_id":"r"}`), http.StatusBadRequest, codeInvalidArgument)
	}
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'a'
	}
	want(t, e.do("PUT", "/v1/tables/"+string(long), nil), http.StatusBadRequest, codeInvalidArgument)

	// Nothing was created by any of them.
	var list struct{ Tables []string }
	e.do("GET", "/v1/tables", nil).decode(t, &list)
	if len(list.Tables) != 0 {
		t.Fatalf("tables %q after bad names", list.Tables)
	}
}

func TestPathTricks(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	e.createTable("other")
	e.mustPut("other", "secret", []byte("not yours"))

	// Literal dot segments are cleaned by the router, which redirects;
	// the client must not end up reading another table's rows.
	c := e.ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, p := range []string{
		"/v1/tables/t/../other/rollouts/secret",
		"/v1/tables/t/rollouts/../../other/rollouts/secret",
	} {
		req, _ := http.NewRequest("GET", e.ts.URL+p, nil)
		req.URL.Opaque = p // keep the dots as sent
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 300 || resp.StatusCode > 399 {
			t.Errorf("%s: %d, want a redirect to the cleaned path", p, resp.StatusCode)
		}
	}
	// Escaped dots stay inside their segment: an id, never a path step.
	want(t, e.do("GET", "/v1/tables/t/rollouts/..%2F..%2Fother%2Frollouts%2Fsecret", nil), http.StatusNotFound, codeNotFound)
	want(t, e.do("GET", "/v1/tables/t/rollouts/%2e%2e/payload", nil), http.StatusNotFound, codeNotFound)
	want(t, e.do("GET", "/v1/tables/%2e%2e/rollouts/secret", nil), http.StatusBadRequest, codeInvalidArgument)
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	e := newEnv(t)
	want(t, e.do("GET", "/nope", nil), http.StatusNotFound, codeRouteNotFound)
	want(t, e.do("GET", "/v1/tables/t/rollouts/a/b/c", nil), http.StatusNotFound, codeRouteNotFound)

	r := e.do("POST", "/v1/tables/t", nil)
	want(t, r, http.StatusMethodNotAllowed, codeMethodNotAllowed)
	if got := r.header.Get("Allow"); got != "GET, PUT, DELETE, HEAD" {
		t.Errorf("Allow %q", got)
	}
	r = e.do("DELETE", "/v1/tables/t/rollouts/x", nil)
	want(t, r, http.StatusMethodNotAllowed, codeMethodNotAllowed)
	if got := r.header.Get("Allow"); got != "GET, PUT, HEAD" {
		t.Errorf("Allow %q", got)
	}
}

// TestDropWhileUploading: six uploads start while a DELETE of their table
// is under way (held just before it deletes the table's descriptor) and
// get into the engine; then the drop goes on. The DELETE answers 204, none
// of the six is acknowledged (their table is gone), none answers 500, and
// the name is usable at once: the table is created again and written to
// with 201, not 503 shard_owned.
func TestDropWhileUploading(t *testing.T) {
	fb := faulty.New(memory.New())
	t.Cleanup(fb.Reset)
	e := newEnv(t, func(o *envOptions) { o.store = fb })
	e.createTable("t")
	e.mustPut("t", "before", []byte("committed before the drop")) // the shard's writer runs and holds its lease

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dropping := fb.Pause(faulty.OpDelete, faulty.Before, faulty.Key("t/_table.json"))
	t.Cleanup(dropping.Release)
	dropped := make(chan response, 1)
	go func() { dropped <- e.do("DELETE", "/v1/tables/t", nil) }()
	if err := dropping.Wait(ctx); err != nil {
		t.Fatal("the drop never reached the descriptor")
	}

	// Each upload either reaches the engine's write path (and is held
	// there) or is answered; wait until all six have done one or the other.
	const writers = 6
	progressed := make(chan struct{}, 2*writers)
	release := make(chan struct{})
	e.hooks.Do("write:after-payload", func(ctx context.Context) error {
		progressed <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, hook.Times(writers))
	answers := make(chan response, writers)
	for i := range writers {
		size := 100 + i*3000 // inline and external payloads
		ch := e.startPut(e.ts.URL, "t", fmt.Sprint("w-", i), payloadOf(fmt.Sprint("w-", i), size))
		go func() {
			select {
			case r := <-ch:
				progressed <- struct{}{}
				answers <- r
			case <-release:
				answers <- <-ch
			}
		}()
	}
	for range writers {
		select {
		case <-progressed:
		case <-ctx.Done():
			t.Fatal("the uploads neither reached the engine nor were answered")
		}
	}
	dropping.Release()
	close(release)

	want(t, <-dropped, http.StatusNoContent, "")
	for range writers {
		r := <-answers
		if r.status < 300 || r.status >= 500 && r.status != http.StatusServiceUnavailable {
			t.Errorf("upload during the drop: %d %s", r.status, r.body)
		}
	}

	e.createTable("t")
	want(t, e.put("t", "after", `{"rollout_id":"r"}`, []byte("written after the drop")), http.StatusCreated, "")
	p := e.do("GET", rolloutURL("t", "after")+"/payload", nil)
	if p.status != http.StatusOK || string(p.body) != "written after the drop" {
		t.Fatalf("read back: %d %q", p.status, p.body)
	}
	e.wantNothingStored("t", "before", "w-0", "w-5")
}

// TestCreateTablePartitions: ?partitions= fixes a table's partition count
// (1..1024), shown with the owners in its status; anything else is 400.
func TestCreateTablePartitions(t *testing.T) {
	e := newEnv(t)
	for _, bad := range []string{"0", "1025", "-1", "x", ""} {
		want(t, e.do("PUT", "/v1/tables/p?partitions="+bad, nil), http.StatusBadRequest, codeInvalidArgument)
	}
	want(t, e.do("GET", "/v1/tables/p", nil), http.StatusNotFound, codeTableNotFound)
	e.createTableWith("p", 4)
	st, err := e.client.TableStatus(context.Background(), "p")
	if err != nil || st.Partitions != 4 || len(st.Owners) != 4 || st.Owners[3].Partition != "p0003" || st.Owners[3].Writer != "test-0" {
		t.Fatalf("status of a table of 4 partitions: %+v %v", st, err)
	}
	if err := e.client.CreateTableWithPartitions(context.Background(), "q", 1024); err != nil {
		t.Fatal(err)
	}
}
