package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
)

// clientShares bounds what one client holds of the server's shared
// capacity: request slots, upload slots and payload bytes being served.
// Without it one client (a stuck data loader, a crawler) holding every
// slot or the whole payload budget answers everyone else 503. A client is
// its bearer token when auth is on, its address otherwise. A client that
// holds nothing is always admitted (so a payload larger than a share can
// still be read), and the server-wide limits still apply on top.
type clientShares struct {
	maxRequests, maxUploads, maxWaits int
	maxBytes                          int64

	mu   sync.Mutex
	held map[string]*clientUse
}

type clientUse struct {
	requests, uploads, waits int
	bytes                    int64
}

func newClientShares(share float64, requests, uploads, waits int, payloadBudget int64) *clientShares {
	if share <= 0 || share >= 1 {
		return nil // no per-client bound
	}
	return &clientShares{
		maxRequests: max(1, int(share*float64(requests))),
		maxUploads:  max(1, int(share*float64(uploads))),
		maxWaits:    max(1, int(share*float64(waits))),
		maxBytes:    max(1, int64(share*float64(payloadBudget))),
		held:        map[string]*clientUse{},
	}
}

// clientKey names the client of r: a digest of its bearer token when the
// server checks tokens, else its IP address.
func (s *Server) clientKey(r *http.Request) string {
	if len(s.tokens) > 0 {
		if _, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok {
			sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
			return "token:" + hex.EncodeToString(sum[:8])
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}

// admit takes a request slot (and an upload slot) for key, or says why
// not; release gives them back.
func (c *clientShares) admit(key string, upload bool) (release func(), err error) {
	if c == nil {
		return func() {}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.use(key)
	switch {
	case u.requests >= c.maxRequests:
		return nil, fmt.Errorf("this client holds %d concurrent requests, its share of the server's limit", u.requests)
	case upload && u.uploads >= c.maxUploads:
		return nil, fmt.Errorf("this client holds %d concurrent uploads, its share of the server's limit", u.uploads)
	}
	u.requests++
	if upload {
		u.uploads++
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		u.requests--
		if upload {
			u.uploads--
		}
		c.forget(key, u)
	}, nil
}

// admitWait takes one of key's share of the waiting slots (feed
// long-polls), or reports that it holds its share.
func (c *clientShares) admitWait(key string) (release func(), ok bool) {
	if c == nil {
		return func() {}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.use(key)
	if u.waits >= c.maxWaits {
		c.forget(key, u)
		return nil, false
	}
	u.waits++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		u.waits--
		c.forget(key, u)
	}, true
}

// reserve counts n payload bytes being served to key.
func (c *clientShares) reserve(key string, n int64) (release func(), err error) {
	if c == nil {
		return func() {}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.use(key)
	if u.bytes > 0 && u.bytes+n > c.maxBytes {
		return nil, fmt.Errorf("this client is being served %d payload bytes; %d more would pass its share (%d) of the in-flight payload budget", u.bytes, n, c.maxBytes)
	}
	u.bytes += n
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		u.bytes -= n
		c.forget(key, u)
	}, nil
}

func (c *clientShares) use(key string) *clientUse {
	u := c.held[key]
	if u == nil {
		u = &clientUse{}
		c.held[key] = u
	}
	return u
}

func (c *clientShares) forget(key string, u *clientUse) {
	if u.requests == 0 && u.uploads == 0 && u.waits == 0 && u.bytes == 0 && c.held[key] == u {
		delete(c.held, key)
	}
}
