package client

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Fields are the record fields a writer sets. RolloutID is required; the
// others are optional. The server adds the id (from the call), the payload
// size and SHA-256, and CreatedAt if it is zero.
type Fields struct {
	RolloutID     string
	ProblemID     string
	Sequence      int64
	Role          string
	Reward        *float64
	PolicyVersion string
	// Metadata is any value encoding/json can encode (a map, a struct, a
	// json.RawMessage), at most 64 KiB as JSON; nil for none.
	Metadata  any
	CreatedAt time.Time
	// ContentType is the payload's media type, served back with it.
	ContentType string
}

// recordFields is Fields as the Rollstore-Record header and NDJSON batch
// lines carry them.
type recordFields struct {
	RolloutID     string     `json:"rollout_id"`
	ProblemID     string     `json:"problem_id,omitempty"`
	Sequence      int64      `json:"sequence,omitempty"`
	Role          string     `json:"role,omitempty"`
	Reward        *float64   `json:"reward,omitempty"`
	PolicyVersion string     `json:"policy_version,omitempty"`
	Metadata      any        `json:"metadata,omitempty"`
	CreatedAt     *time.Time `json:"created_at,omitempty"`
}

func (f Fields) wire() recordFields {
	w := recordFields{RolloutID: f.RolloutID, ProblemID: f.ProblemID, Sequence: f.Sequence, Role: f.Role,
		Reward: f.Reward, PolicyVersion: f.PolicyVersion, Metadata: f.Metadata}
	if !f.CreatedAt.IsZero() {
		t := f.CreatedAt
		w.CreatedAt = &t
	}
	return w
}

// Record is a stored record's metadata.
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
	PayloadSize   int64           `json:"payload_size"`
	// PayloadSHA256 is the payload's SHA-256 in hex; the payload's ETag is
	// it, quoted.
	PayloadSHA256 string `json:"payload_sha256"`
	// PayloadRef, for a payload stored as an object of its own (above the
	// server's inline limit), is that object's full name in the store:
	// the blob name in the container, or the path under the local data
	// folder. Empty for inline payloads.
	PayloadRef string `json:"payload_ref,omitempty"`
}

// UnmarshalJSON reads a record as the server sends it. created_at may
// have a year outside 0..9999 (a row stored before writes were checked for
// it), written with as many digits as it has, which time.Time's own
// decoding refuses: it is read here instead of failing the whole answer.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record
	aux := struct {
		*plain
		CreatedAt *string `json:"created_at"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	if aux.CreatedAt == nil {
		return nil
	}
	t, err := parseAnyYear(*aux.CreatedAt)
	if err != nil {
		return fmt.Errorf("rollstore client: created_at: %w", err)
	}
	r.CreatedAt = t
	return nil
}

// parseAnyYear parses RFC 3339, also with a year of more than four digits
// or a negative one (the server's form of such times: Go's).
func parseAnyYear(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err == nil {
		return t, nil
	}
	i := 0
	if strings.HasPrefix(s, "-") {
		i = 1
	}
	dash := strings.IndexByte(s[i:], '-') + i
	if dash-i < 4 {
		return time.Time{}, err
	}
	year, yerr := strconv.Atoi(s[:dash])
	if yerr != nil {
		return time.Time{}, err
	}
	// 2000 is a leap year, so any date of the stored year parses.
	u, uerr := time.Parse(time.RFC3339Nano, "2000"+s[dash:])
	if uerr != nil {
		return time.Time{}, err
	}
	return time.Date(year, u.Month(), u.Day(), u.Hour(), u.Minute(), u.Second(), u.Nanosecond(), u.Location()), nil
}

// PutResult is the answer to a Put.
type PutResult struct {
	Record
	// Created is false for an identical retry of a stored record (200):
	// nothing new was written.
	Created bool
}

// BatchItem is one record of a batch, its payload in memory.
type BatchItem struct {
	ID string
	Fields
	Payload []byte
}

// BatchResult is the answer to a batch.
type BatchResult struct {
	Created  int           `json:"created"`
	Existing int           `json:"existing"` // identical retries
	Records  []BatchRecord `json:"records"`  // in batch order
}

// BatchRecord reports one item of a stored batch.
type BatchRecord struct {
	ID            string `json:"id"`
	Created       bool   `json:"created"`
	PayloadSize   int64  `json:"payload_size"`
	PayloadSHA256 string `json:"payload_sha256"`
}

// ListOptions filter and page a listing. Zero values mean no filter, the
// server's default page size (100; at most 1000), the first page, and the
// latest view.
type ListOptions struct {
	RolloutID     string
	ProblemID     string
	PolicyVersion string
	// Prefix keeps the ids that start with it; the server seeks to it, so
	// a listing under a prefix costs what the rows under it cost.
	Prefix string
	// StartAfter keeps the ids greater than it (byte-wise, the listing's
	// order).
	StartAfter string
	Limit      int
	PageToken  string
	Version    uint64
}

// LookupResult answers one id of GetMany: Found with its Record, or not
// found (Record is then nil).
type LookupResult struct {
	ID     string  `json:"id"`
	Found  bool    `json:"found"`
	Record *Record `json:"record,omitempty"`
}

// Page is one page of a listing.
type Page struct {
	Records []Record `json:"records"`
	// NextPageToken asks for the next page; empty on the last.
	NextPageToken string `json:"next_page_token,omitempty"`
}

// ScanOptions choose what a scan streams.
type ScanOptions struct {
	Version  uint64 // 0: the latest view
	Payloads bool   // include the payload column's bytes
}

// TableStatus describes a table's latest view.
type TableStatus struct {
	Name string `json:"name"`
	// Incarnation changes when the table is dropped and created again.
	Incarnation string `json:"incarnation"`
	Version     uint64 `json:"version"` // newest base version, 0 before the first merge
	// Partitions is the ids' hash partition count, fixed at creation (0:
	// a table created before partitions); Owners names the writer owning
	// each partition, as the answering server sees the writers.
	Partitions int     `json:"partitions"`
	Owners     []Owner `json:"owners,omitempty"`
	// Rows counts every acknowledged row: BaseRows (merged into the base
	// version) + PendingRows (in generations not yet merged).
	Rows         int64             `json:"rows"`
	BaseRows     int64             `json:"base_rows"`
	PayloadBytes int64             `json:"payload_bytes"` // in the base
	DataFiles    int               `json:"data_files"`
	Duplicates   int64             `json:"duplicates"`
	Watermarks   map[string]uint64 `json:"watermarks"`
	Pending      []PendingGen      `json:"pending"`
	PendingRows  int64             `json:"pending_rows"`
	// Backpressure, when set, says why appends to the server's shard are
	// refused (503 overloaded) until a merge: too many generations wait
	// for one. Reads are never refused for it.
	Backpressure string `json:"backpressure,omitempty"`
	// Consumers are the table's consumer groups (none for a table
	// without partitions, which has no feed).
	Consumers []ConsumerGroup `json:"consumers,omitempty"`
}

// Owner is the writer owning a partition; Writer is empty when no writer
// is live, Addr where it takes forwarded writes.
type Owner struct {
	Partition string `json:"partition"`
	Writer    string `json:"writer"`
	Addr      string `json:"addr,omitempty"`
}

// PendingGen is a WAL generation not yet merged.
type PendingGen struct {
	Shard      string `json:"shard"`
	Generation uint64 `json:"generation"`
	Sealed     bool   `json:"sealed"`
	Segments   int    `json:"segments"`
	Rows       int64  `json:"rows"`
}

// GenRef names a generation.
type GenRef struct {
	Shard      string `json:"shard"`
	Generation uint64 `json:"generation"`
}

// MergeResult reports a merge pass.
type MergeResult struct {
	Version           uint64        `json:"version"` // committed; 0 when nothing was merged
	Merged            []GenRef      `json:"merged"`
	Rows              int64         `json:"rows"`
	Bytes             int64         `json:"bytes"` // WAL bytes merged
	Duplicates        int64         `json:"duplicates"`
	CompactedFiles    int           `json:"compacted_files"`
	Conflicts         int           `json:"conflicts"`
	Reclaimed         []GenRef      `json:"reclaimed"`
	Sealed            []GenRef      `json:"sealed,omitempty"` // abandoned generations this pass sealed
	Leftover          bool          `json:"leftover"`
	VersionsCollected int           `json:"versions_collected"`
	FilesCollected    int           `json:"files_collected"`
	Duration          time.Duration `json:"duration_ns"`
}

// VersionInfo summarises a retained base version.
type VersionInfo struct {
	Version      uint64    `json:"version"`
	Parent       uint64    `json:"parent"`
	CreatedAt    time.Time `json:"created_at"`
	Rows         int64     `json:"rows"`
	PayloadBytes int64     `json:"payload_bytes"`
	DataFiles    int       `json:"data_files"`
}
