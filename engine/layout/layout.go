// Package layout is the one place that maps a table's logical parts (base
// versions, data files, shards, generations, segments, payloads, leases) to
// object keys, and parses keys back. Nothing else in rollstore builds keys by
// hand, so the layout can be read, validated and changed here alone.
//
// Under a table root:
//
//	<table>/_table.json                          table descriptor (create-if-absent)
//	<table>/base/_versions/<v:020>.json          base manifest v (create-if-absent)
//	<table>/base/data/<file>.arrow               immutable Arrow IPC data files
//	<table>/base/data/<file>.idx                 their row layouts (rowfile index)
//	<table>/wal/<shard>/<gen:020>/<seg:020>.arrow immutable WAL segments
//	<table>/wal/<shard>/<gen:020>/_sealed.json   seal record of a generation
//	<table>/payloads/<shard>/<gen:020>/<name>    large payloads, streamed
//	<table>/_leases/<name>                       lease blobs (shard owners, merger)
//
// Numbers are zero-padded to 20 digits so lexical listing order is numeric
// order. The store-wide prefix (a staging run's fresh prefix) is not part of
// the layout: it is applied by objstore.Prefixed below everything.
package layout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalidName reports a table, shard or file name the layout refuses.
var ErrInvalidName = errors.New("layout: invalid name")

const (
	maxTableName = 128
	maxShardName = 64
	maxFileName  = 128
)

// ValidateTable checks a table name: 1–128 characters of
// [A-Za-z0-9_][A-Za-z0-9._-]*. The first-character rule keeps ".", ".." and
// hidden names out, so a table name can never escape its root.
func ValidateTable(name string) error { return validateName("table", name, maxTableName) }

// ValidateShard checks a shard name with the table-name alphabet, 1–64 chars.
func ValidateShard(name string) error { return validateName("shard", name, maxShardName) }

func validateName(kind, name string, max int) error {
	if len(name) == 0 || len(name) > max {
		return fmt.Errorf("%w: %s name %q must be 1..%d characters", ErrInvalidName, kind, name, max)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' ||
			(i > 0 && (c == '.' || c == '-'))
		if !ok {
			return fmt.Errorf("%w: %s name %q: want [A-Za-z0-9_][A-Za-z0-9._-]*", ErrInvalidName, kind, name)
		}
	}
	return nil
}

// validateFile checks a generated file name (data file, payload object).
func validateFile(name string) error {
	if err := validateName("file", name, maxFileName); err != nil {
		return err
	}
	if strings.HasPrefix(name, "_") {
		return fmt.Errorf("%w: file name %q: '_' prefix is reserved", ErrInvalidName, name)
	}
	return nil
}

// Table is the key space of one table. The zero value is not usable; use
// ForTable.
type Table struct{ name string }

// ForTable returns the layout of a table after validating its name.
func ForTable(name string) (Table, error) {
	if err := ValidateTable(name); err != nil {
		return Table{}, err
	}
	return Table{name: name}, nil
}

// Name is the table name.
func (t Table) Name() string { return t.name }

// Root is the prefix (with trailing slash) under which all of the table lives.
func (t Table) Root() string { return t.name + "/" }

// Descriptor is the key of the table descriptor.
func (t Table) Descriptor() string { return t.name + "/_table.json" }

// VersionsPrefix lists base manifests.
func (t Table) VersionsPrefix() string { return t.name + "/base/_versions/" }

// Version is the key of base manifest v.
func (t Table) Version(v uint64) string { return t.VersionsPrefix() + pad(v) + ".json" }

// ParseVersion returns the version of a base manifest key.
func (t Table) ParseVersion(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, t.VersionsPrefix())
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, ".json")
	if !ok {
		return 0, false
	}
	return parsePad(num)
}

// DataPrefix lists base data files.
func (t Table) DataPrefix() string { return t.name + "/base/data/" }

// DataFile is the key of a base data file. name is a generated file name
// without extension.
func (t Table) DataFile(name string) (string, error) {
	if err := validateFile(name); err != nil {
		return "", err
	}
	return t.DataPrefix() + name + ".arrow", nil
}

// DataIndex is the key of a data file's index object (its row layout).
func (t Table) DataIndex(name string) (string, error) {
	if err := validateFile(name); err != nil {
		return "", err
	}
	return t.DataPrefix() + name + ".idx", nil
}

// ParseDataObject returns the file name of a data file or index key.
func (t Table) ParseDataObject(key string) (name string, isIndex bool, ok bool) {
	rest, ok := strings.CutPrefix(key, t.DataPrefix())
	if !ok {
		return "", false, false
	}
	if name, ok := strings.CutSuffix(rest, ".idx"); ok {
		return name, true, validateFile(name) == nil
	}
	name, ok = strings.CutSuffix(rest, ".arrow")
	return name, false, ok && validateFile(name) == nil
}

// ParseDataFile returns the name of a data file key.
func (t Table) ParseDataFile(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, t.DataPrefix())
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, ".arrow")
	return name, ok && validateFile(name) == nil
}

// WALPrefix lists every shard's generations.
func (t Table) WALPrefix() string { return t.name + "/wal/" }

// ShardPrefix lists one shard's generations.
func (t Table) ShardPrefix(shard string) string { return t.WALPrefix() + shard + "/" }

// GenerationPrefix lists one generation's segments and seal record.
func (t Table) GenerationPrefix(shard string, gen uint64) string {
	return t.ShardPrefix(shard) + pad(gen) + "/"
}

// Segment is the key of WAL segment seg of a generation.
func (t Table) Segment(shard string, gen, seg uint64) string {
	return t.GenerationPrefix(shard, gen) + pad(seg) + ".arrow"
}

// Seal is the key of a generation's seal record.
func (t Table) Seal(shard string, gen uint64) string {
	return t.GenerationPrefix(shard, gen) + "_sealed.json"
}

// WALKey is a parsed key under the WAL prefix.
type WALKey struct {
	Shard   string
	Gen     uint64
	Seg     uint64 // valid when IsSeal is false
	IsSeal  bool
	IsOther bool // a key under a generation that is neither (a stray)
}

// ParseWAL parses a key under WALPrefix.
func (t Table) ParseWAL(key string) (WALKey, bool) {
	rest, ok := strings.CutPrefix(key, t.WALPrefix())
	if !ok {
		return WALKey{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || ValidateShard(parts[0]) != nil {
		return WALKey{}, false
	}
	gen, ok := parsePad(parts[1])
	if !ok {
		return WALKey{}, false
	}
	k := WALKey{Shard: parts[0], Gen: gen}
	switch {
	case parts[2] == "_sealed.json":
		k.IsSeal = true
	default:
		num, isSeg := strings.CutSuffix(parts[2], ".arrow")
		seg, okNum := parsePad(num)
		if isSeg && okNum {
			k.Seg = seg
		} else {
			k.IsOther = true
		}
	}
	return k, true
}

// PayloadsPrefix lists all large-payload objects.
func (t Table) PayloadsPrefix() string { return t.name + "/payloads/" }

// Payload is the key of a large payload written by a shard during a
// generation. Payload objects outlive their generation: a merge re-references
// them from the base instead of copying (see the engine package).
func (t Table) Payload(shard string, gen uint64, name string) (string, error) {
	if err := ValidateShard(shard); err != nil {
		return "", err
	}
	if err := validateFile(name); err != nil {
		return "", err
	}
	return t.PayloadsPrefix() + shard + "/" + pad(gen) + "/" + name, nil
}

// IsPayload reports whether key is a payload object of this table.
func (t Table) IsPayload(key string) bool {
	rest, ok := strings.CutPrefix(key, t.PayloadsPrefix())
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || ValidateShard(parts[0]) != nil || validateFile(parts[2]) != nil {
		return false
	}
	_, ok = parsePad(parts[1])
	return ok
}

// LeasesPrefix lists lease blobs.
func (t Table) LeasesPrefix() string { return t.name + "/_leases/" }

// ShardLease is the key of the lease blob that fences a shard's writer.
func (t Table) ShardLease(shard string) string { return t.LeasesPrefix() + "shard-" + shard }

// MergerLease is the key of the lease blob that makes the merger a singleton.
func (t Table) MergerLease() string { return t.LeasesPrefix() + "merger" }

// TableFromKey returns the table name a key belongs to (its first segment).
func TableFromKey(key string) (string, bool) {
	name, _, ok := strings.Cut(key, "/")
	return name, ok && ValidateTable(name) == nil
}

func pad(n uint64) string { return fmt.Sprintf("%020d", n) }

func parsePad(s string) (uint64, bool) {
	if len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}
