package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Put sends the payload's SHA-256 with every kind of payload it can hash:
// in a header for bytes in memory and regular files (Content-Length kept),
// in a trailer for a stream of unknown length.
func TestPutSendsThePayloadDigest(t *testing.T) {
	payload := bytes.Repeat([]byte("rollout-"), 5000)
	sum := sha256.Sum256(payload)
	wantDigest := digestValue(sum[:])
	type seen struct {
		header, trailer string
		length          int64
		body            []byte
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Get(reprDigest), r.Trailer.Get(reprDigest), r.ContentLength, b}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"x","rollout_id":"r","payload_size":1,"payload_sha256":"00","created_at":"2026-01-01T00:00:00Z"}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(path, append([]byte("skipped-"), payload...), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(int64(len("skipped-")), io.SeekStart); err != nil {
		t.Fatal(err)
	}
	half := bytes.NewReader(append([]byte("skip"), payload...))
	_, _ = half.Read(make([]byte, 4)) // sent from its position
	cases := []struct {
		name    string
		body    io.Reader
		trailer bool
	}{
		{"bytes.Reader", half, false},
		{"bytes.Buffer", bytes.NewBuffer(payload), false},
		{"strings.Reader", strings.NewReader(string(payload)), false},
		{"file", f, false},
		{"stream", io.MultiReader(bytes.NewReader(payload[:100]), bytes.NewReader(payload[100:])), true},
	}
	for _, tc := range cases {
		if _, err := c.Put(context.Background(), "t", "x", Fields{RolloutID: "r"}, tc.body); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := <-got
		if !bytes.Equal(s.body, payload) {
			t.Fatalf("%s: server received %d bytes, want %d", tc.name, len(s.body), len(payload))
		}
		d := s.header
		if tc.trailer {
			d = s.trailer
			if s.header != "" || s.length != -1 {
				t.Errorf("%s: header %q, length %d: want a trailer on a chunked body", tc.name, s.header, s.length)
			}
		} else if s.length != int64(len(payload)) {
			t.Errorf("%s: Content-Length %d, want %d", tc.name, s.length, len(payload))
		}
		if d != wantDigest {
			t.Errorf("%s: digest %q, want %q", tc.name, d, wantDigest)
		}
	}
}
