// Package payloadgen generates the synthetic rollout payloads that the
// benchmark (cmd/rollbench), the staging fixture (rollstore fixture) and
// the end-to-end test write and then check: bytes that are random, so
// nothing along the way can compress or deduplicate them, and a function of
// a seed string alone, so a read is checked byte for byte without keeping
// what was written.
//
// Bytes and NewReader produce the same stream for the same seed: a ChaCha8
// stream keyed by the seed's SHA-256. NewCycling is a cheaper reader for
// large payloads whose bytes need not be checked.
package payloadgen

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
)

// Bytes returns the first size bytes of seed's stream.
func Bytes(seed string, size int) []byte {
	b := make([]byte, size)
	_, _ = rand.NewChaCha8(sha256.Sum256([]byte(seed))).Read(b) // ChaCha8.Read always fills b
	return b
}

// NewReader returns a reader of the first size bytes of seed's stream. It
// is deliberately not an io.Seeker: clients and servers take their
// streaming paths, and a 300 MB payload never sits in memory.
func NewReader(seed string, size int64) io.Reader {
	return &reader{rng: rand.NewChaCha8(sha256.Sum256([]byte(seed))), left: size}
}

type reader struct {
	rng  *rand.ChaCha8
	left int64
}

func (g *reader) Read(p []byte) (int, error) {
	if g.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	n, _ := g.rng.Read(p) // ChaCha8.Read always fills p
	g.left -= int64(n)
	return n, nil
}

// cycleBlock is what NewCycling readers repeat: 1 MiB of a fixed seed's
// stream.
var cycleBlock = sync.OnceValue(func() []byte { return Bytes("rollbench stream block", 1<<20) })

// NewCycling returns a reader of n bytes cycling through a fixed 1 MiB
// generated block from an offset derived from seed: incompressible, and
// cheaper to produce than NewReader's stream. It is deliberately not an
// io.Seeker.
func NewCycling(seed string, n int64) io.Reader {
	block := cycleBlock()
	h := sha256.Sum256([]byte(seed))
	return &cycling{block: block, off: int(binary.LittleEndian.Uint32(h[:]) % uint32(len(block))), left: n}
}

type cycling struct {
	block []byte
	off   int
	left  int64
}

func (s *cycling) Read(p []byte) (int, error) {
	if s.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n := 0
	for n < len(p) {
		c := copy(p[n:], s.block[s.off:])
		n += c
		s.off = (s.off + c) % len(s.block)
	}
	s.left -= int64(n)
	return n, nil
}

// ErrWrongBytes marks a body that arrived whole but is not what was
// written, as opposed to one that broke off (a transport error).
var ErrWrongBytes = errors.New("wrong bytes")

// Compare reads body to its end and checks that it is exactly the first
// size bytes of seed's stream. A mismatch wraps ErrWrongBytes; a read error
// is returned as it came, with the offset it happened at.
func Compare(body io.Reader, seed string, size int64) error {
	want := NewReader(seed, size)
	got := make([]byte, 64<<10)
	exp := make([]byte, 64<<10)
	var off int64
	for {
		n, rerr := body.Read(got)
		if n > 0 {
			if off+int64(n) > size {
				return fmt.Errorf("%w: body runs past the %d bytes written", ErrWrongBytes, size)
			}
			if _, err := io.ReadFull(want, exp[:n]); err != nil {
				return err
			}
			if !bytes.Equal(got[:n], exp[:n]) {
				i := 0
				for got[i] == exp[i] {
					i++
				}
				return fmt.Errorf("%w: byte %d of %d differs", ErrWrongBytes, off+int64(i), size)
			}
			off += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("body broke off after %d of %d bytes: %w", off, size, rerr)
		}
	}
	if off != size {
		return fmt.Errorf("%w: body ended after %d of %d bytes", ErrWrongBytes, off, size)
	}
	return nil
}
