package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The client against the real server is tested in
// cmd/rollstore/internal/server (client_test.go), which this package
// cannot import; these tests cover what a real server does not produce.

func TestPathEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain":    "plain",
		"a/b":      "a%2Fb",
		".":        "%2E",
		"..":       "%2E%2E",
		"...":      "%2E%2E%2E",
		"a.b":      "a.b",
		"..a":      "..a",
		"%":        "%25",
		"sp ace":   "sp%20ace",
		"日本":       "%E6%97%A5%E6%9C%AC",
		"q?x#y":    "q%3Fx%23y",
		"a/../b":   "a%2F..%2Fb",
		"plus+one": "plus+one",
	} {
		got := PathEscape(in)
		if got != want {
			t.Errorf("PathEscape(%q) = %q, want %q", in, got, want)
		}
		if back, err := url.PathUnescape(got); err != nil || back != in {
			t.Errorf("PathEscape(%q) = %q does not decode back: %q %v", in, got, back, err)
		}
	}
}

func TestNewRefusesBadBaseURLs(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://h", "http://", "http://h/?q=1", "http://h/#f", "::"} {
		if _, err := New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":                              0,
		"1":                             time.Second,
		" 120 ":                         2 * time.Minute,
		"-3":                            0,
		"soon":                          0,
		"Fri, 02 Jan 2026 03:04:35 GMT": 30 * time.Second,
		"Fri, 02 Jan 2026 03:00:00 GMT": 0, // in the past
	} {
		if got := retryAfter(in, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestErrorsFromOtherServers: an answer that is not rollstore's JSON (a
// proxy's page) still becomes an *APIError matching its status.
func TestErrorsFromOtherServers(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/tables/proxy":
			w.Header().Set("Retry-After", "7")
			http.Error(w, "<html>upstream unavailable</html>", http.StatusServiceUnavailable)
		case "/v1/tables/empty":
			w.WriteHeader(http.StatusConflict)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTeapot)
			w.Write([]byte(`{"error":{"code":"teapot","message":"short and stout","request_id":"r-1","line":3}}`))
		}
	}))
	defer ts.Close()
	c, err := New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	_, err = c.TableStatus(ctx, "proxy")
	var ae *APIError
	if !errors.As(err, &ae) || !errors.Is(err, ErrOverloaded) || ae.RetryAfter != 7*time.Second || ae.Code != "" ||
		!strings.Contains(ae.Message, "upstream unavailable") {
		t.Fatalf("proxy 503: %#v", err)
	}
	err = c.CreateTable(ctx, "empty")
	if !errors.As(err, &ae) || !errors.Is(err, ErrConflict) || ae.Message != "Conflict" {
		t.Fatalf("empty 409: %#v", err)
	}
	err = c.DropTable(ctx, "x")
	if !errors.As(err, &ae) || ae.Status != http.StatusTeapot || ae.Code != "teapot" || ae.RequestID != "r-1" || ae.Line != 3 || ae.Row != -1 {
		t.Fatalf("JSON error: %#v", err)
	}
	for _, s := range []error{ErrNotFound, ErrConflict, ErrGone, ErrOverloaded, ErrUnauthorized, ErrInvalid, ErrNotModified} {
		if errors.Is(err, s) {
			t.Errorf("a 418 matches %v", s)
		}
	}
	if !strings.Contains(err.Error(), "418 teapot: short and stout (request r-1)") {
		t.Errorf("message %q", err.Error())
	}
}

// TestRecordCreatedAtOfAnyYear: a record whose stored created_at has a year
// outside 0..9999, which the server writes with as many digits as it has,
// still decodes, to that time; ordinary ones decode as time.Time does.
func TestRecordCreatedAtOfAnyYear(t *testing.T) {
	for _, want := range []time.Time{
		time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC),
		time.UnixMicro(9e18).UTC(),
		time.UnixMicro(-9e18).UTC(),
		time.Date(12024, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC),
	} {
		body := `{"id":"a","rollout_id":"r","sequence":0,"created_at":"` + want.Format(time.RFC3339Nano) +
			`","payload_size":0,"payload_sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}`
		var r Record
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Errorf("%s: %v", want.Format(time.RFC3339Nano), err)
			continue
		}
		if !r.CreatedAt.Equal(want) || r.ID != "a" || r.RolloutID != "r" || r.PayloadSHA256 == "" {
			t.Errorf("%s: decoded %+v", want.Format(time.RFC3339Nano), r)
		}
	}
	var r Record
	for _, bad := range []string{`"yesterday"`, `"99999-13-01T00:00:00Z"`, `"-"`, `""`} {
		if err := json.Unmarshal([]byte(`{"created_at":`+bad+`}`), &r); err == nil {
			t.Errorf("created_at %s decoded to %v", bad, r.CreatedAt)
		}
	}
}
