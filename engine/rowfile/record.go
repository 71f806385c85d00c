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
	if r.Reward != nil && (math.IsNaN(*r.Reward) || math.IsInf(*r.Reward, 0)) {
		return fmt.Errorf("%w: reward must be finite", ErrInvalidRecord)
	}
	if len(r.Metadata) > MaxMetadataBytes {
		return fmt.Errorf("%w: metadata exceeds %d bytes", ErrInvalidRecord, MaxMetadataBytes)
	}
	if len(r.Metadata) > 0 && !json.Valid(r.Metadata) {
		return fmt.Errorf("%w: metadata is not valid JSON", ErrInvalidRecord)
	}
	if r.PayloadSize < 0 {
		return fmt.Errorf("%w: negative payload size", ErrInvalidRecord)
	}
	return nil
}

// ValidateID checks a record id: 1–512 bytes of UTF-8 without control
// characters.
func ValidateID(id string) error {
	if len(id) == 0 || len(id) > MaxIDBytes {
		return fmt.Errorf("%w: id must be 1..%d bytes", ErrInvalidRecord, MaxIDBytes)
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
// same payload. CreatedAt and where the payload is stored do not count (a
// retry is stamped anew and may be stored elsewhere).
func SameContent(a, b *Record) bool {
	return a.ID == b.ID && a.RolloutID == b.RolloutID && a.ProblemID == b.ProblemID &&
		a.Sequence == b.Sequence && a.Role == b.Role && a.ContentType == b.ContentType &&
		a.PolicyVersion == b.PolicyVersion && sameReward(a.Reward, b.Reward) &&
		sameJSON(a.Metadata, b.Metadata) &&
		a.PayloadSize == b.PayloadSize && a.PayloadSHA256 == b.PayloadSHA256
}

func sameReward(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// sameJSON compares JSON documents by value, so a retry that re-serialised
// its metadata with other spacing or key order is still identical.
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if len(a) == 0 || len(b) == 0 {
		return isNullish(a) && isNullish(b)
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

func isNullish(m json.RawMessage) bool {
	s := bytes.TrimSpace(m)
	return len(s) == 0 || string(s) == "null"
}
