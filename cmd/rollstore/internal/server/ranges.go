package server

import (
	"math"
	"strconv"
	"strings"
)

// byteRange is one parsed "bytes=" range before the payload size is known.
// Exactly one form is set: first-last, first- (last < 0), or -suffix.
type byteRange struct {
	first, last int64 // last < 0: to the end
	suffix      int64 // > 0 for a suffix range
	isSuffix    bool
}

// rangeKind says what to do with a Range header.
type rangeKind int

const (
	rangeNone    rangeKind = iota // no usable Range: serve the whole payload
	rangeOne                      // one range: serve 206
	rangeInvalid                  // malformed bytes range: 416
)

// parseRange reads a Range header. Only a single byte range is honoured:
// a header with several ranges is ignored and the whole payload served
// (RFC 9110 lets a server ignore Range, and payloads are fetched whole or
// by one window in practice, so multipart/byteranges is not worth its
// cost). Units other than bytes are ignored likewise.
func parseRange(h string) (byteRange, rangeKind) {
	if h == "" {
		return byteRange{}, rangeNone
	}
	unit, spec, ok := strings.Cut(h, "=")
	if !ok || !strings.EqualFold(strings.TrimSpace(unit), "bytes") {
		return byteRange{}, rangeNone
	}
	if strings.Contains(spec, ",") {
		return byteRange{}, rangeNone
	}
	spec = strings.TrimSpace(spec)
	a, b, ok := strings.Cut(spec, "-")
	if !ok {
		return byteRange{}, rangeInvalid
	}
	if a == "" {
		n, ok := parseDigits(b)
		if !ok {
			return byteRange{}, rangeInvalid
		}
		return byteRange{suffix: n, isSuffix: true}, rangeOne
	}
	first, ok := parseDigits(a)
	if !ok {
		return byteRange{}, rangeInvalid
	}
	if b == "" {
		return byteRange{first: first, last: -1}, rangeOne
	}
	last, ok := parseDigits(b)
	if !ok || last < first {
		return byteRange{}, rangeInvalid
	}
	return byteRange{first: first, last: last}, rangeOne
}

// parseDigits accepts only ASCII digits (no sign, no spaces). A number
// too large for int64 is math.MaxInt64: past the end of any payload, which
// is what it means (RFC 9110 §14.1.1: a last position past the end is
// clipped to it, a first one past the end is unsatisfiable).
func parseDigits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return math.MaxInt64, true // only ErrRange is left
	}
	return n, true
}

// resolve turns a range into offset and length for a payload of size
// bytes; ok is false when it is not satisfiable (RFC 9110 §14.1.1: a first
// position at or past the end, or a zero suffix, or any range of an empty
// payload).
func (br byteRange) resolve(size int64) (off, n int64, ok bool) {
	if br.isSuffix {
		if br.suffix == 0 || size == 0 {
			return 0, 0, false
		}
		n = min(br.suffix, size)
		return size - n, n, true
	}
	if br.first >= size {
		return 0, 0, false
	}
	last := size - 1
	if br.last >= 0 && br.last < last {
		last = br.last
	}
	return br.first, last - br.first + 1, true
}

// length is the length to ask the engine for when the size is not yet
// known (first-last and first- forms): -1 means to the end.
func (br byteRange) length() int64 {
	if br.last < 0 {
		return -1
	}
	return br.last - br.first + 1
}
