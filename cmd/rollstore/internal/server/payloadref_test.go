package server

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/local"
)

// TestPayloadRefNamesTheObject serves a local folder under a store prefix,
// as `rollstore serve --prefix` does, and checks that a record's
// payload_ref is the payload object's full name: the file under the folder
// holds exactly the payload, in the base and in the WAL, for records read
// by id and listed. An inline payload has no payload_ref.
func TestPayloadRefNamesTheObject(t *testing.T) {
	root := t.TempDir()
	lb, err := local.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	const prefix = "staging/run-1"
	store, err := objstore.Prefixed(lb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *envOptions) {
		o.store = store
		o.server.StorePrefix = prefix
	})
	e.createTable("t")
	big := payloadOf("big", 10<<10) // above the test's InlineMax
	want(t, e.put("t", "merged", `{"rollout_id":"r"}`, big), http.StatusCreated, "")
	e.merge("t")
	want(t, e.put("t", "pending", `{"rollout_id":"r"}`, big), http.StatusCreated, "")
	want(t, e.put("t", "inline", `{"rollout_id":"r"}`, []byte("small")), http.StatusCreated, "")

	check := func(what, id, ref string) {
		t.Helper()
		if id == "inline" {
			if ref != "" {
				t.Errorf("%s: inline payload has payload_ref %q", what, ref)
			}
			return
		}
		// <prefix>/<table>/<incarnation>/payloads/…
		if parts := strings.Split(strings.TrimPrefix(ref, prefix+"/"), "/"); !strings.HasPrefix(ref, prefix+"/t/") || len(parts) < 3 || parts[2] != "payloads" {
			t.Errorf("%s: payload_ref %q, want the object's full name under %s/", what, ref, prefix)
			return
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(ref)))
		if err != nil || !bytes.Equal(data, big) {
			t.Errorf("%s: <folder>/%s: %d bytes, %v; want the %d-byte payload", what, ref, len(data), err, len(big))
		}
	}
	for _, id := range []string{"merged", "pending", "inline"} {
		var rec struct {
			PayloadRef string `json:"payload_ref"`
		}
		r := e.do("GET", rolloutURL("t", id), nil)
		want(t, r, http.StatusOK, "")
		r.decode(t, &rec)
		check("GET "+id, id, rec.PayloadRef)
	}
	var page struct {
		Records []struct {
			ID         string `json:"id"`
			PayloadRef string `json:"payload_ref"`
		} `json:"records"`
	}
	r := e.do("GET", "/v1/tables/t/rollouts", nil)
	want(t, r, http.StatusOK, "")
	r.decode(t, &page)
	if len(page.Records) != 3 {
		t.Fatalf("listed %d records, want 3", len(page.Records))
	}
	for _, rec := range page.Records {
		check("list "+rec.ID, rec.ID, rec.PayloadRef)
	}
	// The Go client hands it out too.
	for _, id := range []string{"merged", "pending", "inline"} {
		rec, err := e.client.Get(context.Background(), "t", id)
		if err != nil {
			t.Fatal(err)
		}
		check("client.Get "+id, id, rec.PayloadRef)
	}
}
