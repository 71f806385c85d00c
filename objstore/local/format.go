package local

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The object file format; see the package documentation.
const (
	magic = "RSO1"
	// prefixLen covers the magic, the header length and the payload size:
	// everything List needs to report a size without parsing JSON.
	prefixLen = 4 + 4 + 8
	// sizeOffset is where the payload size sits in the prefix. Put streams
	// bodies of unknown length, so it writes a placeholder there and patches
	// it once the body is copied.
	sizeOffset = 8
	// maxHeaderLen bounds the JSON header so that a damaged or foreign file
	// cannot make a read allocate without limit. Metadata is tiny in practice
	// (Azure caps it at 8 KiB).
	maxHeaderLen = 1 << 20
)

// errCorrupt marks a file under root that is not a well-formed object file:
// it is reported as itself, never as a missing object, so that damage is
// seen rather than retried.
var errCorrupt = errors.New("not a well-formed rollstore object file")

// errForeign marks a file that is not an object file at all (as opposed to a
// damaged one): List passes over such files, so that a stray file an
// operator or a desktop tool dropped under root does not break listings.
var errForeign = fmt.Errorf("%w: no %s magic", errCorrupt, magic)

// header is the JSON part of an object file.
type header struct {
	ETag     string            `json:"etag"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// encodePrefix returns the bytes an object file starts with, with a payload
// size of zero to be patched by putSize.
func encodePrefix(h header) ([]byte, error) {
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(js) > maxHeaderLen {
		return nil, fmt.Errorf("metadata too large: %d bytes encoded, limit %d", len(js), maxHeaderLen)
	}
	buf := make([]byte, prefixLen, prefixLen+len(js))
	copy(buf, magic)
	binary.BigEndian.PutUint32(buf[4:], uint32(len(js)))
	return append(buf, js...), nil
}

// putSize patches the payload size into an object file written by
// encodePrefix.
func putSize(w io.WriterAt, size int64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(size))
	_, err := w.WriteAt(b[:], sizeOffset)
	return err
}

// parsePrefix checks the fixed-size start of an object file of fileSize
// bytes and returns the JSON header length and the payload size.
func parsePrefix(p []byte, fileSize int64) (hlen, size int64, err error) {
	if len(p) < prefixLen || string(p[:4]) != magic {
		return 0, 0, errForeign
	}
	hlen = int64(binary.BigEndian.Uint32(p[4:]))
	size = int64(binary.BigEndian.Uint64(p[sizeOffset:]))
	if hlen > maxHeaderLen || size < 0 || prefixLen+hlen+size != fileSize {
		return 0, 0, fmt.Errorf("%w: header says %d+%d bytes, file has %d", errCorrupt, prefixLen+hlen, size, fileSize)
	}
	return hlen, size, nil
}

// readPrefix reads the fixed-size start of an object file without moving
// its offset.
func readPrefix(r io.ReaderAt, fileSize int64) (hlen, size int64, err error) {
	var p [prefixLen]byte
	if fileSize < prefixLen {
		return 0, 0, errForeign
	}
	if _, err := r.ReadAt(p[:], 0); err != nil {
		return 0, 0, err
	}
	return parsePrefix(p[:], fileSize)
}

// readHeader reads the whole header of an object file of fileSize bytes
// from r, leaving r at the first payload byte.
func readHeader(r io.Reader, fileSize int64) (header, int64, error) {
	var p [prefixLen]byte
	if fileSize < prefixLen {
		return header{}, 0, errForeign
	}
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return header{}, 0, err
	}
	hlen, size, err := parsePrefix(p[:], fileSize)
	if err != nil {
		return header{}, 0, err
	}
	js := make([]byte, hlen)
	if _, err := io.ReadFull(r, js); err != nil {
		return header{}, 0, err
	}
	var h header
	if err := json.Unmarshal(js, &h); err != nil {
		return header{}, 0, fmt.Errorf("%w: header: %w", errCorrupt, err)
	}
	if h.ETag == "" {
		return header{}, 0, fmt.Errorf("%w: header has no etag", errCorrupt)
	}
	return h, size, nil
}
