package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinels for the answers callers branch on; an *APIError matches the
// one of its status with errors.Is.
var (
	// ErrNotFound: 404, no such record, table, version or route
	// (APIError.Code says which: not_found, table_not_found, …).
	ErrNotFound = errors.New("rollstore: not found")
	// ErrConflict: 409, the id holds other content (conflict), or the
	// table exists (table_exists).
	ErrConflict = errors.New("rollstore: conflict")
	// ErrGone: 410, the pinned base version was collected.
	ErrGone = errors.New("rollstore: version gone")
	// ErrOverloaded: 503, the server cannot take the request now
	// (overloaded, throttled, draining, read_only, …); retry after
	// APIError.RetryAfter, possibly on another instance.
	ErrOverloaded = errors.New("rollstore: unavailable, retry later")
	// ErrUnauthorized: 401, a missing or wrong bearer token.
	ErrUnauthorized = errors.New("rollstore: unauthorized")
	// ErrInvalid: 400, the request was refused as invalid; nothing changed.
	ErrInvalid = errors.New("rollstore: invalid request")
	// ErrNotModified: 304, IfNoneMatch matched the payload's ETag.
	ErrNotModified = errors.New("rollstore: not modified")
	// ErrCursorExpired: 410 cursor_expired, a feed cursor older than the
	// feed's retention (see CursorExpiredError); it is an ErrGone too.
	ErrCursorExpired = errors.New("rollstore: feed cursor expired")
	// ErrRebalanced: 409 rebalanced, a consumer-group member's commit of
	// an assignment that is no longer current; it is an ErrConflict too.
	ErrRebalanced = errors.New("rollstore: consumer group rebalanced")
)

// Codes of the answers the client turns into sentinels or types of their
// own.
const (
	codeCursorExpired = "cursor_expired"
	codeRebalanced    = "rebalanced"
)

// APIError is an answer other than the one asked for.
type APIError struct {
	Status    int    // HTTP status
	Code      string // stable error code, e.g. "not_found"; empty if the body was not rollstore's JSON
	Message   string
	RequestID string // the id the server logged the request under
	// RetryAfter is the server's Retry-After (503s), 0 if none.
	RetryAfter time.Duration
	// Line (NDJSON, from 1) or Row (Arrow, from 0) of a rejected batch
	// item, or -1.
	Line, Row int
	// Method and URL of the request, for the message.
	Method, URL string
	// oldestCursor: the oldest_cursor of a cursor_expired answer.
	oldestCursor string
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rollstore: %s %s: %d", e.Method, e.URL, e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.RequestID != "" {
		b.WriteString(" (request " + e.RequestID + ")")
	}
	return b.String()
}

// Is matches the sentinel of the error's status.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrGone:
		return e.Status == http.StatusGone
	case ErrOverloaded:
		return e.Status == http.StatusServiceUnavailable
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrInvalid:
		return e.Status == http.StatusBadRequest
	case ErrNotModified:
		return e.Status == http.StatusNotModified
	case ErrCursorExpired:
		return e.Code == codeCursorExpired
	case ErrRebalanced:
		return e.Code == codeRebalanced
	}
	return false
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// readError turns a response that is not the one asked for into an
// *APIError. A body that is not rollstore's JSON envelope (a proxy's page)
// becomes the message, shortened.
func readError(req *http.Request, resp *http.Response) *APIError {
	e := &APIError{
		Status:     resp.StatusCode,
		RequestID:  resp.Header.Get("X-Request-Id"),
		RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now()),
		Line:       -1,
		Row:        -1,
		Method:     req.Method,
		URL:        req.URL.Redacted(),
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var env struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			RequestID string `json:"request_id"`
			Line      *int   `json:"line"`
			Row       *int   `json:"row"`
			Oldest    string `json:"oldest_cursor"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error.Code != "" {
		e.Code, e.Message, e.oldestCursor = env.Error.Code, env.Error.Message, env.Error.Oldest
		if env.Error.RequestID != "" {
			e.RequestID = env.Error.RequestID
		}
		if env.Error.Line != nil {
			e.Line = *env.Error.Line
		}
		if env.Error.Row != nil {
			e.Row = *env.Error.Row
		}
		return e
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	return e
}

// retryAfter parses Retry-After: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now))
	}
	return 0
}
