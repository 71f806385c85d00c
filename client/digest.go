package client

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"strings"
)

// reprDigest is RFC 9530's Repr-Digest field: the server refuses a payload
// whose bytes do not hash to it (400), so a payload corrupted on its way
// is never stored.
const reprDigest = "Repr-Digest"

func digestValue(sum []byte) string {
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum) + ":"
}

// attachDigest makes req carry the SHA-256 of body, which req sends from
// its current position: in a header when it can be computed without
// consuming body (bytes in memory, a regular file read through ReadAt),
// in a trailer computed as the bytes go out when body is a stream of
// unknown length (req is chunked). A stream of declared length (Sized)
// goes without: HTTP/1.1 has no trailers beside a Content-Length, and
// the stream cannot be read twice.
func attachDigest(req *http.Request, body io.Reader) error {
	h := sha256.New()
	switch b := body.(type) {
	case nil:
	case *bytes.Buffer:
		h.Write(b.Bytes())
	case *bytes.Reader:
		if _, err := io.Copy(h, io.NewSectionReader(b, b.Size()-int64(b.Len()), int64(b.Len()))); err != nil {
			return err
		}
	case *strings.Reader:
		if _, err := io.Copy(h, io.NewSectionReader(b, b.Size()-int64(b.Len()), int64(b.Len()))); err != nil {
			return err
		}
	case interface {
		io.ReaderAt
		io.Seeker
		Stat() (fs.FileInfo, error)
	}:
		if req.ContentLength < 0 {
			return trailerDigest(req, h)
		}
		off, err := b.Seek(0, io.SeekCurrent)
		if err != nil {
			return err
		}
		if _, err := io.Copy(h, io.NewSectionReader(b, off, req.ContentLength)); err != nil {
			return err
		}
	default:
		if req.ContentLength < 0 {
			return trailerDigest(req, h)
		}
		return nil
	}
	req.Header.Set(reprDigest, digestValue(h.Sum(nil)))
	return nil
}

func trailerDigest(req *http.Request, h hash.Hash) error {
	req.Trailer = http.Header{reprDigest: nil}
	req.Body = &hashingBody{ReadCloser: req.Body, h: h, req: req}
	return nil
}

// hashingBody hashes a request body as the transport reads it and sets
// the digest trailer at its end; the transport sends trailers after the
// body's EOF.
type hashingBody struct {
	io.ReadCloser
	h   hash.Hash
	req *http.Request
}

func (b *hashingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.h.Write(p[:n])
	if err == io.EOF {
		b.req.Trailer.Set(reprDigest, digestValue(b.h.Sum(nil)))
	}
	return n, err
}
