package server

// A writer that sends its payload's SHA-256 (RFC 9530 Repr-Digest or
// Content-Digest, as a header or, for a streamed body, a trailer) has a
// payload stored only if the bytes received are the bytes it hashed; a
// mismatch is 400 and leaves the id free.

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"testing"
)

func sha256Field(b []byte) string {
	s := sha256.Sum256(b)
	return "sha-256=:" + base64.StdEncoding.EncodeToString(s[:]) + ":"
}

func TestPayloadDigestRefusesMismatchAndStoresNothing(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for _, size := range []int{0, 100, 64 << 10} { // empty, inline, a payload object of its own
		payload := payloadOf("d", size)
		other := payloadOf("other", size+1)
		for _, field := range []string{"Repr-Digest", "Content-Digest"} {
			id := field + "-" + string(rune('a'+size%26)) + "-" + string(rune('0'+size/(64<<10)))
			r := e.put("t", id, `{"rollout_id":"r"}`, payload, field, sha256Field(other))
			want(t, r, http.StatusBadRequest, codeInvalidArgument)
			want(t, e.do("GET", rolloutURL("t", id), nil), http.StatusNotFound, codeNotFound)
			r = e.put("t", id, `{"rollout_id":"r"}`, payload, field, sha256Field(payload))
			want(t, r, http.StatusCreated, "")
			p := e.do("GET", rolloutURL("t", id)+"/payload", nil)
			if !bytes.Equal(p.body, payload) {
				t.Fatalf("%s: %d bytes read back, want %d", id, len(p.body), len(payload))
			}
		}
	}
	// Digests the server cannot check are refused, not ignored.
	for _, v := range []string{"sha-512=:AAAA:", "sha-256=AAAA", "sha-256=:not base64:", "sha-256=:" + base64.StdEncoding.EncodeToString([]byte("short")) + ":", "garbage"} {
		r := e.put("t", "malformed", `{"rollout_id":"r"}`, []byte("x"), "Repr-Digest", v)
		want(t, r, http.StatusBadRequest, codeInvalidArgument)
	}
	want(t, e.do("GET", rolloutURL("t", "malformed"), nil), http.StatusNotFound, codeNotFound)
	// Two fields that disagree.
	r := e.put("t", "two", `{"rollout_id":"r"}`, []byte("x"), "Repr-Digest", sha256Field([]byte("x")), "Content-Digest", sha256Field([]byte("y")))
	want(t, r, http.StatusBadRequest, codeInvalidArgument)
}

// A streamed body of unknown length carries its digest in a trailer, the
// way a client hashing as it sends does.
func TestPayloadDigestInATrailer(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	payload := payloadOf("streamed", 50<<10)
	send := func(id string, digestOf []byte) response {
		pr, pw := io.Pipe()
		req, err := http.NewRequest("PUT", e.ts.URL+rolloutURL("t", id), pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Rollstore-Record", `{"rollout_id":"r"}`)
		req.Trailer = http.Header{"Repr-Digest": nil}
		go func() {
			for off := 0; off < len(payload); off += 7000 {
				_, _ = pw.Write(payload[off:min(off+7000, len(payload))])
			}
			req.Trailer.Set("Repr-Digest", sha256Field(digestOf))
			_ = pw.Close()
		}()
		return e.send(req)
	}
	want(t, send("bad", []byte("something else")), http.StatusBadRequest, codeInvalidArgument)
	want(t, e.do("GET", rolloutURL("t", "bad"), nil), http.StatusNotFound, codeNotFound)
	want(t, send("good", payload), http.StatusCreated, "")
	p := e.do("GET", rolloutURL("t", "good")+"/payload", nil)
	if !bytes.Equal(p.body, payload) {
		t.Fatalf("%d bytes read back, want %d", len(p.body), len(payload))
	}
}
