package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/client"
)

// The Go client's GetMany and its listing by prefix and start_after,
// against the real server (every request and answer checked against
// api/openapi.yaml).
func TestClientGetMany(t *testing.T) {
	e := newEnv(t)
	c := e.client
	ctx := context.Background()
	e.createTable("t")
	for _, id := range awkwardIDs {
		e.mustPut("t", id, payloadOf(id, 5))
	}
	v1 := e.merge("t").Version
	e.mustPut("t", "after-v1", payloadOf("late", 5))

	ask := append([]string{"after-v1", "not there"}, awkwardIDs...)
	res, err := c.GetMany(ctx, "t", ask)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(ask) {
		t.Fatalf("%d results for %d ids", len(res), len(ask))
	}
	for i, r := range res {
		found := ask[i] != "not there"
		if r.ID != ask[i] || r.Found != found || (r.Record != nil) != found || (found && (r.Record.ID != ask[i] || r.Record.PayloadSize != 5)) {
			t.Fatalf("results[%d] for %q: %+v", i, ask[i], r)
		}
	}

	// Pinned: what version 1 held.
	res, err = c.GetMany(ctx, "t", []string{"after-v1", awkwardIDs[0]}, client.AtVersion(v1))
	if err != nil || res[0].Found || !res[1].Found {
		t.Fatalf("pinned: %+v %v", res, err)
	}
	apiErr(t, errOf(c.GetMany(ctx, "t", []string{"x"}, client.AtVersion(99))), client.ErrNotFound, codeVersionNotFound)
	apiErr(t, errOf(c.GetMany(ctx, "nope", []string{"x"})), client.ErrNotFound, codeTableNotFound)
	apiErr(t, errOf(c.GetMany(ctx, "t", []string{"ok", ""})), client.ErrInvalid, codeInvalidArgument)
	if _, err := c.GetMany(ctx, "t", []string{"x"}, client.Range(0, 1)); err == nil {
		t.Fatal("GetMany took a range")
	}
	if res, err := c.GetMany(ctx, "t", nil); err != nil || len(res) != 0 {
		t.Fatalf("no ids: %+v %v", res, err)
	}

	// More ids than one request takes: sent in several, answered in order.
	many := make([]string, client.MaxLookupIDs+250)
	for i := range many {
		many[i] = fmt.Sprintf("absent-%04d", i)
	}
	many[3], many[client.MaxLookupIDs+100] = "after-v1", awkwardIDs[1]
	res, err = c.GetMany(ctx, "t", many)
	if err != nil || len(res) != len(many) {
		t.Fatalf("%d ids: %d results, %v", len(many), len(res), err)
	}
	for i, r := range res {
		if r.ID != many[i] || r.Found != !strings.HasPrefix(many[i], "absent-") {
			t.Fatalf("results[%d]: %+v", i, r)
		}
	}
	if seen := e.api.Seen()["POST /v1/tables/{table}/lookup"]; len(seen) == 0 {
		t.Fatal("the lookups did not go through the validated route")
	}
}

func TestClientListPrefixAndStartAfter(t *testing.T) {
	e := newEnv(t)
	c := e.client
	ctx := context.Background()
	e.createTable("t")
	var all []string
	for _, p := range []string{"run-1/", "run-10/", "run-2/"} {
		for i := range 5 {
			id := fmt.Sprintf("%sstep-%d", p, i)
			all = append(all, id)
			e.mustPut("t", id, []byte(id))
		}
	}
	e.merge("t")
	e.mustPut("t", "run-1/step-5", []byte("late"))
	all = append(all, "run-1/step-5")
	slices.Sort(all)

	collect := func(o client.ListOptions) []string {
		t.Helper()
		var ids []string
		for r, err := range c.All(ctx, "t", o) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.ID)
		}
		return ids
	}
	filter := func(prefix, after string) []string {
		var out []string
		for _, id := range all {
			if strings.HasPrefix(id, prefix) && id > after {
				out = append(out, id)
			}
		}
		return out
	}
	for _, o := range []client.ListOptions{
		{Prefix: "run-1/"}, {Prefix: "run-1/", StartAfter: "run-1/step-2"}, {Prefix: "run-1"},
		{StartAfter: "run-10/step-4"}, {Prefix: "run-3/"}, {Prefix: "run-2/", StartAfter: "run-1/"},
	} {
		o.Limit = 2
		if got, w := collect(o), filter(o.Prefix, o.StartAfter); !slices.Equal(got, w) {
			t.Fatalf("%+v: %v, want %v", o, got, w)
		}
	}
	// A page token continues only the listing that issued it.
	p, err := c.List(ctx, "t", client.ListOptions{Prefix: "run-1/", Limit: 1})
	if err != nil || p.NextPageToken == "" {
		t.Fatalf("%+v %v", p, err)
	}
	apiErr(t, errOf(c.List(ctx, "t", client.ListOptions{Prefix: "run-2/", Limit: 1, PageToken: p.NextPageToken})), client.ErrInvalid, codeInvalidArgument)
}
