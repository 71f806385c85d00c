// Package keyspace is the one place that maps a table's logical parts (base
// versions, data files, shards, generations, segments, payloads, leases) to
// object keys, and parses keys back. Nothing else in rollstore builds keys by
// hand, so the key space can be read, validated and changed here alone.
//
// A table's descriptor names its current incarnation; everything else of
// the table lives under that incarnation's prefix, so a table dropped and
// created again never shares a key with its former self, and a process
// still acting on the old incarnation can only touch dead keys:
//
//	<table>/_table.json                                   descriptor (create-if-absent): names the incarnation
//	<table>/<inc>/base/_versions/<v:020>.json             base manifest v (create-if-absent)
//	<table>/<inc>/base/data/<file>.arrow                  immutable Arrow IPC data files
//	<table>/<inc>/base/data/<file>.idx                    their row indexes (rowfile index format)
//	<table>/<inc>/wal/_registry.json                      shard registry (compare-and-swap)
//	<table>/<inc>/wal/<shard>/_head.json                  the shard's head: its commit point (compare-and-swap)
//	<table>/<inc>/wal/<shard>/<gen:020>/<seg:020>.arrow   WAL segments 1, 2, … of a generation (create-if-absent)
//	<table>/<inc>/wal/<shard>/<gen:020>/_sealed.json      seal record: the generation's segments and row indexes
//	<table>/<inc>/payloads/<shard>/<gen:020>/<name>       large payloads, streamed
//	<table>/<inc>/consumers/<group>.json                  a consumer group: members, committed positions (compare-and-swap)
//	<table>/<inc>/_leases/shard-<shard>, merger           lease blobs (shard owner, merger singleton)
//
// Numbers are zero-padded to 20 digits so lexical listing order is numeric
// order. Incarnation names sort by creation time. The store-wide prefix (a
// staging run's fresh prefix) is not part of the key space: it is applied by
// objstore.Prefixed below everything.
package keyspace

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidName reports a table, shard or file name the key space refuses.
var ErrInvalidName = errors.New("keyspace: invalid name")

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

// Table is the key space of one table name. The zero value is not usable;
// use ForTable.
type Table struct{ name string }

// ForTable returns the keys of a table after validating its name.
func ForTable(name string) (Table, error) {
	if err := ValidateTable(name); err != nil {
		return Table{}, err
	}
	return Table{name: name}, nil
}

// Name is the table name.
func (t Table) Name() string { return t.name }

// Root is the prefix (with trailing slash) under which all of the table,
// every incarnation, lives.
func (t Table) Root() string { return t.name + "/" }

// Descriptor is the key of the table descriptor.
func (t Table) Descriptor() string { return t.name + "/_table.json" }

// NewIncarnationName returns the name of a new incarnation created at now;
// random makes it unique. Names sort by creation time.
func NewIncarnationName(now time.Time, random uint64) string {
	return fmt.Sprintf("i%013x%08x", now.UnixMilli(), uint32(random))
}

// ValidateIncarnation checks an incarnation name.
func ValidateIncarnation(name string) error {
	if len(name) != 22 || name[0] != 'i' {
		return fmt.Errorf("%w: incarnation %q", ErrInvalidName, name)
	}
	for _, c := range name[1:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("%w: incarnation %q", ErrInvalidName, name)
		}
	}
	return nil
}

// Incarnation returns the key space of one incarnation of the table.
func (t Table) Incarnation(inc string) (Inc, error) {
	if err := ValidateIncarnation(inc); err != nil {
		return Inc{}, err
	}
	return Inc{table: t.name, inc: inc, root: t.name + "/" + inc + "/"}, nil
}

// ParseIncarnation returns the incarnation a key of the table belongs to.
func (t Table) ParseIncarnation(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, t.Root())
	if !ok {
		return "", false
	}
	inc, _, ok := strings.Cut(rest, "/")
	return inc, ok && ValidateIncarnation(inc) == nil
}

// Inc is the key space of one incarnation of a table.
type Inc struct{ table, inc, root string }

// Table is the table name.
func (l Inc) Table() string { return l.table }

// Name is the incarnation name.
func (l Inc) Name() string { return l.inc }

// Root is the prefix (with trailing slash) of everything in the incarnation.
func (l Inc) Root() string { return l.root }

// VersionsPrefix lists base manifests.
func (l Inc) VersionsPrefix() string { return l.root + "base/_versions/" }

// Version is the key of base manifest v.
func (l Inc) Version(v uint64) string { return l.VersionsPrefix() + pad(v) + ".json" }

// ParseVersion returns the version of a base manifest key.
func (l Inc) ParseVersion(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, l.VersionsPrefix())
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
func (l Inc) DataPrefix() string { return l.root + "base/data/" }

// DataFile is the key of a base data file. name is a generated file name
// without extension.
func (l Inc) DataFile(name string) (string, error) {
	if err := validateFile(name); err != nil {
		return "", err
	}
	return l.DataPrefix() + name + ".arrow", nil
}

// DataIndex is the key of a data file's index object (its row layout).
func (l Inc) DataIndex(name string) (string, error) {
	if err := validateFile(name); err != nil {
		return "", err
	}
	return l.DataPrefix() + name + ".idx", nil
}

// ParseDataObject returns the file name of a data file or index key.
func (l Inc) ParseDataObject(key string) (name string, isIndex bool, ok bool) {
	rest, ok := strings.CutPrefix(key, l.DataPrefix())
	if !ok {
		return "", false, false
	}
	if name, ok := strings.CutSuffix(rest, ".idx"); ok {
		return name, true, validateFile(name) == nil
	}
	name, ok = strings.CutSuffix(rest, ".arrow")
	return name, false, ok && validateFile(name) == nil
}

// ConsumersPrefix lists the consumer groups of the feed.
func (l Inc) ConsumersPrefix() string { return l.root + "consumers/" }

// Consumer is the key of a consumer group's object. The group name has the
// table-name alphabet.
func (l Inc) Consumer(group string) (string, error) {
	if err := validateName("consumer group", group, maxShardName); err != nil {
		return "", err
	}
	return l.ConsumersPrefix() + group + ".json", nil
}

// ParseConsumer returns the group a consumer key names.
func (l Inc) ParseConsumer(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, l.ConsumersPrefix())
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, ".json")
	return name, ok && validateName("consumer group", name, maxShardName) == nil
}

// WALPrefix lists every shard's generations.
func (l Inc) WALPrefix() string { return l.root + "wal/" }

// Registry is the key of the shard registry.
func (l Inc) Registry() string { return l.WALPrefix() + "_registry.json" }

// Members is the key of a partitioned table's directory of writers.
func (l Inc) Members() string { return l.WALPrefix() + "_members.json" }

// ShardPrefix lists one shard's head and generations.
func (l Inc) ShardPrefix(shard string) string { return l.WALPrefix() + shard + "/" }

// Head is the key of a shard's head.
func (l Inc) Head(shard string) string { return l.ShardPrefix(shard) + "_head.json" }

// GenerationPrefix lists one generation's segments and seal record.
func (l Inc) GenerationPrefix(shard string, gen uint64) string {
	return l.ShardPrefix(shard) + pad(gen) + "/"
}

// Segment is the key of WAL segment seg (from 1) of a generation.
func (l Inc) Segment(shard string, gen, seg uint64) string {
	return l.GenerationPrefix(shard, gen) + pad(seg) + ".arrow"
}

// Seal is the key of a generation's seal record.
func (l Inc) Seal(shard string, gen uint64) string {
	return l.GenerationPrefix(shard, gen) + "_sealed.json"
}

// WALKey is a parsed key under the WAL prefix.
type WALKey struct {
	Shard    string
	Gen      uint64
	Seg      uint64 // a segment, when none of the flags is set
	IsHead   bool   // the shard's head (Gen is 0)
	IsSeal   bool
	IsOther  bool // a key under a generation that is neither (a stray)
	Registry bool // the registry (Shard is empty)
}

// ParseWAL parses a key under WALPrefix.
func (l Inc) ParseWAL(key string) (WALKey, bool) {
	rest, ok := strings.CutPrefix(key, l.WALPrefix())
	if !ok {
		return WALKey{}, false
	}
	if rest == "_registry.json" || rest == "_members.json" {
		return WALKey{Registry: true}, true
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 || ValidateShard(parts[0]) != nil {
		return WALKey{}, false
	}
	if len(parts) == 2 {
		return WALKey{Shard: parts[0], IsHead: parts[1] == "_head.json", IsOther: parts[1] != "_head.json"}, true
	}
	if len(parts) != 3 {
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
		if isSeg && okNum && seg > 0 {
			k.Seg = seg
		} else {
			k.IsOther = true
		}
	}
	return k, true
}

// PayloadsPrefix lists all large-payload objects.
func (l Inc) PayloadsPrefix() string { return l.root + "payloads/" }

// Payload is the key of a large payload written by a shard during a
// generation. Payload objects outlive their generation: a merge re-references
// them from the base instead of copying (see the engine package).
func (l Inc) Payload(shard string, gen uint64, name string) (string, error) {
	if err := ValidateShard(shard); err != nil {
		return "", err
	}
	if err := validateFile(name); err != nil {
		return "", err
	}
	return l.PayloadsPrefix() + shard + "/" + pad(gen) + "/" + name, nil
}

// IsPayload reports whether key is a payload object of this incarnation.
func (l Inc) IsPayload(key string) bool {
	rest, ok := strings.CutPrefix(key, l.PayloadsPrefix())
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
func (l Inc) LeasesPrefix() string { return l.root + "_leases/" }

// ShardLease is the key of the lease blob that fences a shard's writer.
func (l Inc) ShardLease(shard string) string { return l.LeasesPrefix() + "shard-" + shard }

// MergerLease is the key of the lease blob that makes the merger a singleton.
func (l Inc) MergerLease() string { return l.LeasesPrefix() + "merger" }

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
