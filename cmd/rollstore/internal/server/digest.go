package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
)

// errDigestMismatch: the payload received is not the payload the client
// described, so nothing is stored.
var errDigestMismatch = errors.New("payload does not match its digest")

// The RFC 9530 fields a writer may describe its payload with. Content is
// stored as received (no content coding is accepted), so the two digests
// are of the same bytes.
var digestFields = []string{"Repr-Digest", "Content-Digest"}

// digestCheck verifies a payload's SHA-256 against the one its writer
// sent, in a header before the body or in a trailer after it (a client
// streaming a payload of unknown length hashes as it sends). It sees the
// body as the upload reads it, so a mismatch fails the read that completes
// the body, before the engine can commit the record.
type digestCheck struct {
	want    []byte // from a header; nil until a trailer provides it
	trailer bool   // a digest was announced as a trailer
	req     *http.Request
	h       hash.Hash
}

// newDigestCheck reads the digest a request announces; nil when it
// announces none.
func newDigestCheck(r *http.Request) (*digestCheck, error) {
	d := &digestCheck{req: r, h: sha256.New()}
	for _, f := range digestFields {
		vals := r.Header.Values(f)
		if len(vals) == 0 {
			continue
		}
		sum, err := parseDigest(f, strings.Join(vals, ","))
		if err != nil {
			return nil, err
		}
		if d.want != nil && !bytes.Equal(d.want, sum) {
			return nil, fmt.Errorf("Repr-Digest and Content-Digest name different SHA-256s")
		}
		d.want = sum
	}
	for _, f := range digestFields {
		if _, ok := r.Trailer[http.CanonicalHeaderKey(f)]; ok {
			d.trailer = true
		}
	}
	if d.want == nil && !d.trailer {
		return nil, nil
	}
	return d, nil
}

// parseDigest reads the sha-256 member of an RFC 9530 digest field, a
// structured-field dictionary such as `sha-256=:<base64>:`. A field that
// names only other algorithms is refused rather than ignored: a client
// that asked for a check must not silently get none.
func parseDigest(field, v string) ([]byte, error) {
	var sum []byte
	for member := range strings.SplitSeq(v, ",") {
		member = strings.TrimSpace(member)
		if member == "" {
			continue
		}
		key, val, ok := strings.Cut(member, "=")
		if !ok {
			return nil, fmt.Errorf("%s member %q is not of the form algorithm=:<base64>: (RFC 9530)", field, member)
		}
		if key != "sha-256" {
			continue
		}
		if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
			return nil, fmt.Errorf("%s sha-256 value must be a byte sequence (:<base64>:)", field)
		}
		b, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1])
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("%s sha-256 value is not the base64 of 32 bytes", field)
		}
		if sum != nil && !bytes.Equal(sum, b) {
			return nil, fmt.Errorf("%s names two different sha-256 values", field)
		}
		sum = b
	}
	if sum == nil {
		return nil, fmt.Errorf("%s names no sha-256 (the only algorithm rollstore checks)", field)
	}
	return sum, nil
}

// verify compares what was hashed with the digest sent. atEOF: the body
// ended, so a trailer, if any, has arrived.
func (d *digestCheck) verify(atEOF bool) error {
	want := d.want
	if want == nil && atEOF {
		for _, f := range digestFields {
			v := d.req.Trailer.Values(f)
			if len(v) == 0 {
				continue
			}
			sum, err := parseDigest(f+" trailer", strings.Join(v, ","))
			if err != nil {
				return fmt.Errorf("%w: %v", errDigestMismatch, err)
			}
			want = sum
		}
	}
	if want == nil {
		return nil // a trailer was announced but not sent: nothing to check
	}
	if got := d.h.Sum(nil); !bytes.Equal(got, want) {
		return fmt.Errorf("%w: received bytes have SHA-256 %s, the client sent %s", errDigestMismatch, hex.EncodeToString(got), hex.EncodeToString(want))
	}
	return nil
}
