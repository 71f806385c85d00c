package keyspace

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

func TestValidateTable(t *testing.T) {
	good := []string{"a", "A", "_x", "0", "rollouts.v2", "a-b_c.d", strings.Repeat("x", 128)}
	for _, n := range good {
		if err := ValidateTable(n); err != nil {
			t.Errorf("ValidateTable(%q) = %v, want nil", n, err)
		}
	}
	bad := []string{"", ".", "..", ".hidden", "-x", "a/b", "a\\b", "a b", "a\x00", "ä", strings.Repeat("x", 129), "../etc"}
	for _, n := range bad {
		if err := ValidateTable(n); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateTable(%q) = %v, want ErrInvalidName", n, err)
		}
		if _, err := ForTable(n); err == nil {
			t.Errorf("ForTable(%q) succeeded", n)
		}
	}
	if err := ValidateShard(strings.Repeat("s", 65)); !errors.Is(err, ErrInvalidName) {
		t.Errorf("65-char shard accepted")
	}
}

func TestKeysAreValidAndParse(t *testing.T) {
	table, err := ForTable("t1")
	if err != nil {
		t.Fatal(err)
	}
	incName := NewIncarnationName(time.Unix(1_800_000_000, 0), 0xabcdef)
	tb, err := table.Incarnation(incName)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := table.ParseIncarnation(tb.Version(1)); !ok || got != incName {
		t.Errorf("ParseIncarnation = %q, %v", got, ok)
	}
	df, err := tb.DataFile("00000000000000000007-ab12")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := tb.Payload("writer-0", 3, "p-1")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{table.Descriptor(), tb.Registry(), tb.Head("writer-0"), tb.Version(42), df,
		tb.Segment("writer-0", 3, 9), tb.Seal("writer-0", 3), pl, tb.ShardLease("writer-0"), tb.MergerLease()}
	for _, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			t.Errorf("key %q invalid for objstore: %v", k, err)
		}
		if !strings.HasPrefix(k, table.Root()) {
			t.Errorf("key %q outside table root", k)
		}
		if name, ok := TableFromKey(k); !ok || name != "t1" {
			t.Errorf("TableFromKey(%q) = %q, %v", k, name, ok)
		}
	}
	if v, ok := tb.ParseVersion(tb.Version(42)); !ok || v != 42 {
		t.Errorf("ParseVersion = %d, %v", v, ok)
	}
	if _, ok := tb.ParseVersion(tb.VersionsPrefix() + "42.json"); ok {
		t.Errorf("unpadded version parsed")
	}
	if n, isIdx, ok := tb.ParseDataObject(df); !ok || isIdx || n != "00000000000000000007-ab12" {
		t.Errorf("ParseDataObject = %q, %v, %v", n, isIdx, ok)
	}
	if k, ok := tb.ParseWAL(tb.Head("writer-0")); !ok || !k.IsHead || k.Shard != "writer-0" {
		t.Errorf("ParseWAL(head) = %+v, %v", k, ok)
	}
	if k, ok := tb.ParseWAL(tb.Registry()); !ok || !k.Registry {
		t.Errorf("ParseWAL(registry) = %+v, %v", k, ok)
	}
	other, _ := table.Incarnation(NewIncarnationName(time.Unix(1_800_000_001, 0), 1))
	if _, ok := other.ParseWAL(tb.Segment("writer-0", 3, 9)); ok {
		t.Errorf("a key of one incarnation parsed as another's")
	}
	k, ok := tb.ParseWAL(tb.Segment("writer-0", 3, 9))
	if !ok || k != (WALKey{Shard: "writer-0", Gen: 3, Seg: 9}) {
		t.Errorf("ParseWAL(segment) = %+v, %v", k, ok)
	}
	k, ok = tb.ParseWAL(tb.Seal("writer-0", 3))
	if !ok || !k.IsSeal || k.Gen != 3 {
		t.Errorf("ParseWAL(seal) = %+v, %v", k, ok)
	}
	if k, ok := tb.ParseWAL(tb.GenerationPrefix("s", 1) + "junk"); !ok || !k.IsOther {
		t.Errorf("stray key not flagged: %+v %v", k, ok)
	}
	if !tb.IsPayload(pl) || tb.IsPayload(df) {
		t.Errorf("IsPayload wrong")
	}
	// Zero padding makes lexical order numeric order.
	if !(tb.Version(9) < tb.Version(10) && tb.Segment("s", 1, 99) < tb.Segment("s", 1, 100)) {
		t.Errorf("lexical order is not numeric order")
	}
	if _, err := tb.DataFile("_reserved"); err == nil {
		t.Errorf("reserved file name accepted")
	}
	if _, err := tb.Payload("../x", 1, "p"); err == nil {
		t.Errorf("bad shard accepted")
	}
	if _, err := table.Incarnation("../i"); err == nil {
		t.Errorf("bad incarnation accepted")
	}
}
