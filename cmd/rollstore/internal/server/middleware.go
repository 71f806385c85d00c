package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// handlerFunc is a route handler. A returned error is answered by the
// wrapper (see errors.go), or, if the response had already begun, ends the
// connection so the client sees a truncated response instead of a body
// that silently stops short.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle registers h for pattern with the common request handling: request
// id, drain, auth, the concurrency limit, logs and metrics. The pattern is
// also the route label of metrics, so labels are templates, not raw paths.
func (s *Server) handle(pattern string, h handlerFunc, opts int) {
	s.handleOn(s.mux, pattern, h, opts)
}

// handleOn is handle on another mux (the metrics listener's).
func (s *Server) handleOn(mux *http.ServeMux, pattern string, h handlerFunc, opts int) {
	route := pattern
	if _, path, ok := strings.Cut(pattern, " "); ok {
		route = path
	}
	if opts&internal == 0 && route != "/" {
		allowed := queryParams[pattern]
		next := h
		h = func(w http.ResponseWriter, r *http.Request) error {
			if err := checkQuery(r.URL.RawQuery, allowed); err != nil {
				return err
			}
			return next(w, r)
		}
	}
	mux.Handle(pattern, s.wrap(route, h, opts))
}

// checkQuery refuses a query string that does not say one thing: a
// malformed escape (url.Values would drop the pair and the request would
// run without it), a parameter given twice (only the first would count),
// or a parameter the route does not take (a misspelt filter would be
// ignored, and a listing would answer everything).
func checkQuery(raw string, allowed []string) error {
	if raw == "" {
		return nil
	}
	seen := map[string]bool{}
	for pair := range strings.SplitSeq(raw, "&") {
		if pair == "" {
			continue
		}
		k, _, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			return badRequest("malformed query string: %q is not a valid escape", pair)
		}
		if _, v, _ := strings.Cut(pair, "="); v != "" {
			if _, err := url.QueryUnescape(v); err != nil {
				return badRequest("malformed query string: parameter %s has a malformed escape", name)
			}
		}
		switch {
		case !slices.Contains(allowed, name):
			if len(allowed) == 0 {
				return badRequest("unknown query parameter %q: this route takes none", name)
			}
			return badRequest("unknown query parameter %q: this route takes %s", name, strings.Join(allowed, ", "))
		case seen[name]:
			return badRequest("query parameter %s is given more than once", name)
		}
		seen[name] = true
	}
	return nil
}

// wrap is h with the common request handling, route its metrics label.
func (s *Server) wrap(route string, h handlerFunc, opts int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*parserErrorConn); ok {
			c.handled.Store(true) // from now on, what this connection writes is ours
		}
		start := time.Now()
		r = withRequestID(w, r)
		rec := &recorder{ResponseWriter: w}
		err := s.admit(rec, r, h, opts)
		status, abort := s.answer(rec, r, err)
		if err == nil && rec.encodeErr != nil {
			err = fmt.Errorf("encoding the response: %w", rec.encodeErr)
		}
		elapsed := time.Since(start)
		s.metrics.requests.WithLabelValues(route, methodLabel(r.Method), strconv.Itoa(status)).Observe(elapsed.Seconds())
		s.logRequest(r, route, status, rec.bytes, elapsed, err, abort)
		_ = s.cfg.Hooks.Call(r.Context(), "request:logged")
		if abort {
			panic(http.ErrAbortHandler)
		}
	})
}

// admit runs h unless the request is refused: while draining, without a
// valid token, or over the concurrency limits.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, h handlerFunc, opts int) error {
	if opts&internal == 0 && s.draining.Load() {
		// Connection: close sends keep-alive clients to another instance.
		w.Header().Set("Connection", "close")
		return newError(http.StatusServiceUnavailable, codeDraining, "server is draining; retry on another instance")
	}
	if opts&public == 0 && len(s.tokens) > 0 && !s.authorized(r) {
		return newError(http.StatusUnauthorized, codeUnauthorized, "missing or invalid bearer token")
	}
	if opts&(internal|waits) != 0 {
		return h(w, r)
	}
	release, err := s.clients.admit(s.clientKey(r), opts&upload != 0)
	if err != nil {
		s.metrics.clientRefusals.Inc()
		return newError(http.StatusServiceUnavailable, codeOverloaded, "%v (--max-client-share)", err)
	}
	defer release()
	if opts&upload != 0 {
		if err := checkContentEncoding(w, r); err != nil {
			return err
		}
		select {
		case s.uploads <- struct{}{}:
			defer func() { <-s.uploads }()
		default:
			return newError(http.StatusServiceUnavailable, codeOverloaded, "too many concurrent uploads (limit %d)", s.cfg.MaxConcurrentUploads)
		}
	}
	select {
	case s.sem <- struct{}{}:
	default:
		return newError(http.StatusServiceUnavailable, codeOverloaded, "too many concurrent requests (limit %d)", s.cfg.MaxConcurrentRequests)
	}
	s.metrics.inflight.Inc()
	defer func() {
		s.metrics.inflight.Dec()
		<-s.sem
	}()
	return h(w, r)
}

// answer writes the error answer if there is one and reports the status
// to log. If the response had already begun, no answer can be written:
// abort tells the caller to cut the connection instead.
func (s *Server) answer(rec *recorder, r *http.Request, err error) (status int, abort bool) {
	switch {
	case err == nil && rec.status == 0:
		return http.StatusOK, false
	case err == nil:
		return rec.status, false
	case rec.status != 0 && r.Context().Err() != nil:
		return statusClientClosed, true // the client left mid-response: its loss, not ours
	case rec.status != 0:
		return classify(err).status, true
	}
	if o := s.writeError(rec, r, err); o.status == statusClientClosed {
		return o.status, false
	}
	return rec.status, false
}

// withRequestID takes the caller's X-Request-Id if it is usable, or makes
// one, echoes it and puts it in the request's context for logs.
func withRequestID(w http.ResponseWriter, r *http.Request) *http.Request {
	id := r.Header.Get("X-Request-Id")
	if !validRequestID(id) {
		id = newRequestID()
	}
	w.Header().Set("X-Request-Id", id)
	return r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
}

func (s *Server) logRequest(r *http.Request, route string, status int, n int64, d time.Duration, err error, aborted bool) {
	level := logLevel(route, status, err)
	if !s.log.Enabled(r.Context(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", requestID(r.Context())),
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.String("path", r.URL.EscapedPath()),
		slog.Int("status", status),
		slog.Int64("bytes", n),
		slog.Duration("duration", d),
		slog.String("remote", r.RemoteAddr),
	}
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	if aborted {
		attrs = append(attrs, slog.Bool("aborted", true))
	}
	s.log.LogAttrs(r.Context(), level, "request", attrs...)
}

// logLevel says who needs to look at an answer: ERROR is for what an
// operator must act on (the server or the store failed: 500, 502), WARN
// for the server shedding load or the store being unavailable for a while
// (503, which clients retry and metrics count), INFO for everything a
// client caused, answered or cut off (a stalled download included), and
// DEBUG for probes, which fail by design while starting or draining.
func logLevel(route string, status int, err error) slog.Level {
	switch {
	case route == "/healthz" || route == "/readyz" || route == "/metrics":
		return slog.LevelDebug
	case status == http.StatusServiceUnavailable:
		return slog.LevelWarn
	case status >= 500 && status != statusClientClosed:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// methodLabel keeps the method label's values bounded whatever clients send.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodOptions, http.MethodPatch:
		return m
	}
	return "OTHER"
}

type requestIDKey struct{}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// validRequestID accepts a caller's id only if it is short and plain, since
// it is echoed in headers and logs.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:", c) >= 0) {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// recorder notes the status and size of a response. Unwrap lets
// http.ResponseController reach the connection (read deadlines, flushes).
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	// encodeErr is why writeJSON could not encode the answer, if it could not.
	encodeErr error
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// checkContentEncoding refuses a request body in any content coding but
// identity, on every route that stores what it receives: rollstore stores a payload as the bytes it
// receives, so a gzipped PUT would store the compressed bytes under a
// checksum of them, and a gzipped batch would fail as invalid JSON. 415
// with Accept-Encoding, as RFC 9110 (section 15.5.16) asks.
func checkContentEncoding(w http.ResponseWriter, r *http.Request) error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				w.Header().Set("Accept-Encoding", "identity")
				return newError(http.StatusUnsupportedMediaType, codeUnsupportedMedia,
					"Content-Encoding %q is not accepted: send the body uncompressed (a payload is stored as the bytes received)", c)
			}
		}
	}
	return nil
}
