package server

import (
	"context"
	"net/http"
	"testing"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

// pingStore is a store with a Ping, as a backend may offer for probes.
type pingStore struct {
	objstore.Bucket
	err error
}

func (p *pingStore) Ping(context.Context) error { return p.err }

func TestReadiness(t *testing.T) {
	ps := &pingStore{Bucket: memory.New()}
	e := newEnv(t, func(o *envOptions) { o.store = ps })
	want(t, e.do("GET", "/healthz", nil), http.StatusOK, "")
	want(t, e.do("GET", "/readyz", nil), http.StatusOK, "")
	ps.err = objstore.ErrAuth
	r := e.do("GET", "/readyz", nil)
	want(t, r, http.StatusServiceUnavailable, codeNotReady)
	want(t, e.do("GET", "/healthz", nil), http.StatusOK, "") // alive all the same
}

func TestReadinessWithoutPingListsTables(t *testing.T) {
	fb := faulty.New(memory.New())
	t.Cleanup(fb.Reset)
	e := newEnv(t, func(o *envOptions) { o.store = fb })
	e.createTable("t")
	want(t, e.do("GET", "/readyz", nil), http.StatusOK, "")
	fb.Fail(faulty.OpList, faulty.Match{}, objstore.ErrThrottled, faulty.Always())
	want(t, e.do("GET", "/readyz", nil), http.StatusServiceUnavailable, codeNotReady)
}
