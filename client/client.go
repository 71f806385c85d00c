// Package client is the Go client of rollstore's HTTP API (see docs/api.md
// and api/openapi.yaml).
//
// It covers every route: tables (create, list, status, drop, versions,
// merge), rollouts (put one with a streamed payload, put a batch, get,
// list with paging, read a payload whole or by byte range, streamed, or
// only its headers with StatPayload), the Arrow scan, the change feed
// (FeedReader) and its consumer groups (Consumer), and the health,
// readiness and metrics endpoints.
//
//	c, err := client.New("http://127.0.0.1:8080", client.WithToken(token))
//	res, err := c.Put(ctx, "demo", "run-1/step-0", client.Fields{RolloutID: "run-1"}, strings.NewReader("hello"))
//	p, err := c.Payload(ctx, "demo", "run-1/step-0", client.Range(0, 5))
//	defer p.Close() // p is an io.Reader of the payload's bytes
//
// Ids may hold any character ('/', '%', spaces, unicode, "." and ".."):
// the client encodes them as one path segment. Payloads are never held in
// memory by the client: Put streams its io.Reader (with Content-Length when
// the length is known), Payload and Scan return the response body.
//
// Errors from the server are *APIError values carrying the status, the
// stable error code, the message, the request id the server logged it
// under, and Retry-After. Callers branch with errors.Is on the sentinels
// (ErrNotFound, ErrConflict, ErrGone, ErrOverloaded, …) or on
// APIError.Code.
package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client talks to one rollstore server. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	hc    *http.Client
	token string
	agent string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests with hc instead of http.DefaultClient (for
// timeouts, transports, proxies, TLS).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithToken sends "Authorization: Bearer token" with every request (a
// server started with --auth-token-file needs it).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.agent = ua } }

// New returns a client of the server at baseURL, for example
// "http://127.0.0.1:8080" or "https://rollstore.example/prefix".
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("rollstore client: base URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("rollstore client: base URL %q: want http:// or https:// and a host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("rollstore client: base URL %q: no query or fragment allowed", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = strings.TrimSuffix(u.RawPath, "/")
	c := &Client{base: u, hc: http.DefaultClient, agent: "rollstore-go-client"}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// PathEscape encodes s as one path segment: like url.PathEscape, and an s
// made only of dots is sent as %2E…, so that no client, proxy or router
// takes it for a dot segment and removes it.
func PathEscape(s string) string {
	if strings.Trim(s, ".") == "" {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// tablePath is the escaped path of a table, plus escaped suffix segments.
func tablePath(table string, rest ...string) string {
	var b strings.Builder
	b.WriteString("/v1/tables/")
	b.WriteString(PathEscape(table))
	for _, s := range rest {
		b.WriteByte('/')
		b.WriteString(s)
	}
	return b.String()
}

func rolloutPath(table, id string) string {
	return tablePath(table, "rollouts", PathEscape(id))
}

// newRequest builds a request for an escaped path and a query.
func (c *Client) newRequest(ctx context.Context, method, escapedPath string, q url.Values, body io.Reader) (*http.Request, error) {
	u := *c.base
	raw := u.EscapedPath() + escapedPath
	p, err := url.PathUnescape(raw)
	if err != nil {
		return nil, fmt.Errorf("rollstore client: path %q: %w", raw, err)
	}
	u.Path, u.RawPath = p, raw
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("rollstore client: %w", err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.agent != "" {
		req.Header.Set("User-Agent", c.agent)
	}
	return req, nil
}

// send runs req and returns the response if its status is one of ok;
// otherwise it reads the error answer, closes the body and returns an
// *APIError.
func (c *Client) send(req *http.Request, ok ...int) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rollstore client: %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	for _, s := range ok {
		if resp.StatusCode == s {
			return resp, nil
		}
	}
	defer resp.Body.Close()
	return nil, readError(req, resp)
}

// doJSON sends a request without a body and decodes the JSON answer into
// out (if not nil). It returns the status.
func (c *Client) doJSON(ctx context.Context, method, escapedPath string, q url.Values, out any, ok ...int) (int, error) {
	req, err := c.newRequest(ctx, method, escapedPath, q, nil)
	if err != nil {
		return 0, err
	}
	return c.sendJSON(req, out, ok...)
}

func (c *Client) sendJSON(req *http.Request, out any, ok ...int) (int, error) {
	resp, err := c.send(req, ok...)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("rollstore client: %s %s: decoding the answer: %w", req.Method, req.URL.Redacted(), err)
	}
	return resp.StatusCode, nil
}
