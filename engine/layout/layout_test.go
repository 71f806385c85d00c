package layout

import (
	"errors"
	"strings"
	"testing"

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
	tb, err := ForTable("t1")
	if err != nil {
		t.Fatal(err)
	}
	df, err := tb.DataFile("00000000000000000007-ab12")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := tb.Payload("writer-0", 3, "p-1")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{tb.Descriptor(), tb.Version(42), df,
		tb.Segment("writer-0", 3, 9), tb.Seal("writer-0", 3), pl, tb.ShardLease("writer-0"), tb.MergerLease()}
	for _, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			t.Errorf("key %q invalid for objstore: %v", k, err)
		}
		if !strings.HasPrefix(k, tb.Root()) {
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
	if n, ok := tb.ParseDataFile(df); !ok || n != "00000000000000000007-ab12" {
		t.Errorf("ParseDataFile = %q, %v", n, ok)
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
}
