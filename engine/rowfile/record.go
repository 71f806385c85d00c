// Package rowfile defines the rollout record, its one Arrow schema, and the
// Arrow IPC files rollstore writes for WAL segments and base data files.
//
// Every file is a plain Arrow IPC file any Arrow reader can open. What makes
// point reads cheap is known at write time and kept beside the file: the byte
// range of every record batch (so a metadata lookup is one ranged GET of one
// batch) and of every inline payload (so a payload read is one ranged GET of
// exactly its bytes). The payload column is last in the schema, which puts a
// batch's payload bytes contiguously at the end of its body; the writer
// computes each row's span from that rule and verifies it byte for byte
// against the encoded file before trusting it.
package rowfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrInvalidRecord reports a record that may not be stored.
var ErrInvalidRecord = errors.New("invalid record")

// Field limits. They bound what one record can cost a reader.
const (
	MaxIDBytes       = 512
	MaxFieldBytes    = 1024
	MaxMetadataBytes = 64 << 10
)

// The range of created_at: years 1 to 9999 in UTC, what RFC 3339 (every
// JSON answer) and HTTP dates can express. A stored time outside it could
// never be shown.
var (
	MinCreatedAt = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxCreatedAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// Record is one rollout: immutable once written.
type Record struct {
	ID            string          `json:"id"`
	RolloutID     string          `json:"rollout_id"`
	ProblemID     string          `json:"problem_id,omitempty"`
	Sequence      int64           `json:"sequence"`
	Role          string          `json:"role,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	ContentType   string          `json:"content_type,omitempty"`
	Reward        *float64        `json:"reward,omitempty"`
	PolicyVersion string          `json:"policy_version,omitempty"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`

	PayloadSize   int64    `json:"payload_size"`
	PayloadSHA256 [32]byte `json:"-"`
	// PayloadRef is the object key (relative to the store root) of a payload
	// stored as its own object; empty when the payload is inline.
	PayloadRef string `json:"-"`
	// Payload holds inline payload bytes when they were loaded.
	Payload []byte `json:"-"`
}

// Inline reports whether the payload lives inside the row file.
func (r *Record) Inline() bool { return r.PayloadRef == "" }

// Validate checks everything a caller supplies.
func (r *Record) Validate() error {
	if err := ValidateID(r.ID); err != nil {
		return err
	}
	if r.RolloutID == "" {
		return fmt.Errorf("%w: rollout_id is required", ErrInvalidRecord)
	}
	for name, v := range map[string]string{"rollout_id": r.RolloutID, "problem_id": r.ProblemID,
		"role": r.Role, "content_type": r.ContentType, "policy_version": r.PolicyVersion} {
		if len(v) > MaxFieldBytes || !utf8.ValidString(v) || hasControl(v) {
			return fmt.Errorf("%w: %s must be valid UTF-8 without control characters, at most %d bytes", ErrInvalidRecord, name, MaxFieldBytes)
		}
	}
	if r.CreatedAt.Before(MinCreatedAt) || r.CreatedAt.After(MaxCreatedAt) {
		return fmt.Errorf("%w: created_at %s is outside %s..%s", ErrInvalidRecord,
			r.CreatedAt.UTC().Format(time.RFC3339Nano), MinCreatedAt.Format(time.RFC3339), MaxCreatedAt.Format(time.RFC3339Nano))
	}
	if r.Reward != nil && (math.IsNaN(*r.Reward) || math.IsInf(*r.Reward, 0)) {
		return fmt.Errorf("%w: reward must be finite", ErrInvalidRecord)
	}
	if len(r.Metadata) > MaxMetadataBytes {
		return fmt.Errorf("%w: metadata exceeds %d bytes", ErrInvalidRecord, MaxMetadataBytes)
	}
	if len(r.Metadata) > 0 {
		if err := CheckJSON(r.Metadata, nil); err != nil {
			return fmt.Errorf("%w: metadata: %v", ErrInvalidRecord, err)
		}
	}
	if r.PayloadSize < 0 {
		return fmt.Errorf("%w: negative payload size", ErrInvalidRecord)
	}
	return nil
}

// ValidateID checks a record id: 1–512 bytes of UTF-8 without control
// characters.
func ValidateID(id string) error {
	if len(id) == 0 {
		return fmt.Errorf("%w: id is required (1..%d bytes of UTF-8)", ErrInvalidRecord, MaxIDBytes)
	}
	if len(id) > MaxIDBytes {
		return fmt.Errorf("%w: id is %d bytes, at most %d allowed", ErrInvalidRecord, len(id), MaxIDBytes)
	}
	if !utf8.ValidString(id) || hasControl(id) {
		return fmt.Errorf("%w: id must be UTF-8 without control characters", ErrInvalidRecord)
	}
	return nil
}

func hasControl(s string) bool {
	for _, c := range s {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return true
		}
	}
	return false
}

// SameContent reports whether b is an identical retry of a: same fields,
// same payload, metadata the same JSON value (see sameJSON). CreatedAt and
// where the payload is stored do not count here (a retry that gives no
// created_at is stamped anew, and its payload may be stored elsewhere);
// the engine compares an explicit created_at itself.
func SameContent(a, b *Record) bool {
	return a.ID == b.ID && a.RolloutID == b.RolloutID && a.ProblemID == b.ProblemID &&
		a.Sequence == b.Sequence && a.Role == b.Role && a.ContentType == b.ContentType &&
		a.PolicyVersion == b.PolicyVersion && sameReward(a.Reward, b.Reward) &&
		sameJSON(a.Metadata, b.Metadata) &&
		a.PayloadSize == b.PayloadSize && a.PayloadSHA256 == b.PayloadSHA256
}

// sameReward compares bit for bit: -0 is not 0 (NaN is never stored).
func sameReward(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return math.Float64bits(*a) == math.Float64bits(*b)
}

// sameJSON reports whether two JSON documents are the same value, so that
// a retry that re-serialised its metadata (other spacing, other key
// order, another client's number formatting) is still identical: objects
// are equal when they have the same keys with equal values, in any order;
// arrays element by element; strings after unescaping; numbers by their
// exact decimal value, never through float64 (1.0 is 1 and 1e2 is 100,
// but 9007199254740993 is not 9007199254740992; -0 is 0). CheckJSON has
// refused what would make this loose (duplicate keys, lone surrogates,
// invalid UTF-8) before anything was stored.
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if isNullish(a) || isNullish(b) {
		return isNullish(a) && isNullish(b)
	}
	va, okA := decodeJSON(a)
	vb, okB := decodeJSON(b)
	return okA && okB && equalJSON(va, vb)
}

func decodeJSON(m json.RawMessage) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(m))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	return v, true
}

// equalJSON compares two values decoded with UseNumber.
func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !equalJSON(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		cx, okX := canonicalNumber(string(x))
		cy, okY := canonicalNumber(string(y))
		return okX && okY && cx == cy
	case string, bool, nil:
		return a == b
	}
	return false
}

// canonicalNumber writes a JSON number literal as its exact decimal value
// in one form: sign, significant digits without leading or trailing
// zeros, and the power of ten they are scaled by ("0" for zero of any
// sign). The exponent is a big integer, so no literal, however long its
// digits or large its exponent, is rounded or expanded.
func canonicalNumber(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expText := s, "0"
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, expText = s[:i], strings.TrimPrefix(s[i+1:], "+")
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	exp, ok := new(big.Int).SetString(expText, 10)
	if !ok || intPart == "" {
		return "", false
	}
	digits := intPart + frac
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	exp.Sub(exp, big.NewInt(int64(len(frac))))
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", true
	}
	trimmed := strings.TrimRight(digits, "0")
	exp.Add(exp, big.NewInt(int64(len(digits)-len(trimmed))))
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + trimmed + "e" + exp.String(), true
}

func isNullish(m json.RawMessage) bool {
	s := bytes.TrimSpace(m)
	return len(s) == 0 || string(s) == "null"
}

// CheckJSON reports why data is not one JSON value rollstore accepts, or
// nil. Beyond syntax it refuses what encoding/json would silently change:
// invalid UTF-8 and \u escapes of lone surrogates (both become U+FFFD) and
// a key repeated in an object (the last one wins). If topKey is not nil it
// is called with every key of a top-level object, exactly as written after
// unescaping, and its error is returned.
func CheckJSON(data []byte, topKey func(key string) error) error {
	if !utf8.Valid(data) {
		return errors.New("invalid UTF-8")
	}
	if !json.Valid(data) {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return err // the decoder says where
		}
		return errors.New("invalid JSON")
	}
	s := jsonScan{b: data}
	return s.value(topKey)
}

// jsonScan walks a document already known to be valid JSON.
type jsonScan struct {
	b []byte
	i int
}

func (s *jsonScan) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// value checks the value at s.i; keys, if not nil, checks the keys of an
// object there.
func (s *jsonScan) value(keys func(string) error) error {
	s.space()
	switch s.b[s.i] {
	case '{':
		s.i++
		var seen map[string]struct{}
		for {
			s.space()
			switch s.b[s.i] {
			case '}':
				s.i++
				return nil
			case ',':
				s.i++
				s.space()
			}
			key, err := s.str(true)
			if err != nil {
				return err
			}
			if _, dup := seen[key]; dup {
				return fmt.Errorf("duplicate key %q", key)
			}
			if seen == nil {
				seen = map[string]struct{}{}
			}
			seen[key] = struct{}{}
			if keys != nil {
				if err := keys(key); err != nil {
					return err
				}
			}
			s.space()
			s.i++ // ':'
			if err := s.value(nil); err != nil {
				return err
			}
		}
	case '[':
		s.i++
		for {
			s.space()
			switch s.b[s.i] {
			case ']':
				s.i++
				return nil
			case ',':
				s.i++
			}
			if err := s.value(nil); err != nil {
				return err
			}
		}
	case '"':
		_, err := s.str(false)
		return err
	default: // a number, true, false or null
		for s.i < len(s.b) && !isDelim(s.b[s.i]) {
			s.i++
		}
		return nil
	}
}

// str checks the string at s.i, and returns it unescaped if decode is set.
func (s *jsonScan) str(decode bool) (string, error) {
	start := s.i
	s.i++ // '"'
	escaped := false
	for {
		switch c := s.b[s.i]; c {
		case '"':
			s.i++
			if !decode {
				return "", nil
			}
			if !escaped {
				return string(s.b[start+1 : s.i-1]), nil
			}
			var v string
			err := json.Unmarshal(s.b[start:s.i], &v)
			return v, err
		case '\\':
			escaped = true
			if s.b[s.i+1] != 'u' {
				s.i += 2
				continue
			}
			r := hex4(s.b[s.i+2 : s.i+6])
			s.i += 6
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return "", fmt.Errorf("lone surrogate \\u%04x in a string", r)
			case r >= 0xd800 && r <= 0xdbff:
				if s.i+6 > len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
					return "", fmt.Errorf("lone surrogate \\u%04x in a string", r)
				}
				if lo := hex4(s.b[s.i+2 : s.i+6]); lo < 0xdc00 || lo > 0xdfff {
					return "", fmt.Errorf("lone surrogate \\u%04x in a string", r)
				}
				s.i += 6
			}
		default:
			s.i++
		}
	}
}

func isDelim(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// hex4 reads four hex digits, which valid JSON guarantees.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
