package rowfile

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func testRows(n int, rng *rand.Rand) []Record {
	rows := make([]Record, n)
	for i := range rows {
		p := make([]byte, rng.IntN(3000))
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		rw := float64(i) / 3
		rows[i] = Record{
			ID: fmt.Sprintf("id-%05d", rng.IntN(1_000_000)*100+i), RolloutID: "r", Sequence: int64(i),
			CreatedAt: time.UnixMicro(1_700_000_000_000_000 + int64(i)).UTC(), ContentType: "application/octet-stream",
			Metadata: []byte(`{"k":1}`), PayloadSize: int64(len(p)), PayloadSHA256: sha256.Sum256(p), Payload: p,
		}
		if i%3 == 0 {
			rows[i].Reward = &rw
		}
		if i%7 == 0 { // an external payload
			rows[i].Payload = nil
			rows[i].PayloadRef = "t/payloads/s/00000000000000000001/x" + fmt.Sprint(i)
		}
	}
	return rows
}

func TestEncodeLayoutAndBatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rows := testRows(700, rng)
	byID := map[string]Record{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	data, lay, err := Encode(rows, Options{BatchRows: 64, BatchBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(lay.Batches) < 11 {
		t.Fatalf("want many batches, got %d", len(lay.Batches))
	}
	if len(lay.Rows) != len(rows) {
		t.Fatalf("layout has %d rows, want %d", len(lay.Rows), len(rows))
	}
	for _, want := range rows {
		loc, ok := lay.Find(want.ID)
		if !ok {
			t.Fatalf("%s not in layout", want.ID)
		}
		b := lay.Batches[loc.Batch]
		got, err := DecodeBatch(data[b.Offset:b.Offset+b.Length], false)
		if err != nil {
			t.Fatal(err)
		}
		r := got[loc.Row]
		if r.ID != want.ID || r.Sequence != want.Sequence || r.PayloadSHA256 != want.PayloadSHA256 || r.PayloadRef != want.PayloadRef {
			t.Fatalf("batch row mismatch for %s: %+v", want.ID, r)
		}
		if (want.Reward == nil) != (r.Reward == nil) || !r.CreatedAt.Equal(want.CreatedAt) {
			t.Fatalf("reward/created_at mismatch for %s", want.ID)
		}
		if want.Inline() && !bytes.Equal(data[loc.POff:loc.POff+loc.PLen], want.Payload) {
			t.Fatalf("payload span wrong for %s", want.ID)
		}
	}
	if _, ok := lay.Find("absent"); ok {
		t.Fatal("found absent id")
	}
	// The whole-file decoders agree with Encode.
	all, err := Decode(data, true)
	if err != nil || len(all) != len(rows) {
		t.Fatalf("Decode: %d rows, %v", len(all), err)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].ID >= all[i].ID {
			t.Fatal("rows not sorted by id")
		}
	}
}

// A segment embeds its layout in its header: the first bytes of the file
// give exactly what Encode returned, and any Arrow reader still opens it.
func TestEmbeddedLayout(t *testing.T) {
	rows := testRows(500, rand.New(rand.NewPCG(5, 6)))
	data, lay, err := Encode(rows, Options{BatchRows: 40, EmbedLayout: true})
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := HeaderSize(data[:16])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHeader(data[:hdr-1], int64(len(data))); err == nil {
		t.Fatal("a truncated header was read")
	}
	got, err := ReadHeader(data[:hdr], int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if got.Size != lay.Size || len(got.Rows) != len(lay.Rows) || len(got.Batches) != len(lay.Batches) {
		t.Fatalf("header layout: %d rows %d batches, want %d %d", len(got.Rows), len(got.Batches), len(lay.Rows), len(lay.Batches))
	}
	for i := range lay.Rows {
		if got.Rows[i] != lay.Rows[i] {
			t.Fatalf("row %d: %+v != %+v", i, got.Rows[i], lay.Rows[i])
		}
	}
	for i := range lay.Batches {
		if got.Batches[i] != lay.Batches[i] {
			t.Fatalf("batch %d: %+v != %+v", i, got.Batches[i], lay.Batches[i])
		}
	}
	all, err := Decode(data, true)
	if err != nil || len(all) != len(rows) {
		t.Fatalf("Decode of a segment: %d rows, %v", len(all), err)
	}
	// Files without an embedded layout (data files) say so.
	plain, _, err := Encode(rows[:3], Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHeader(plain, int64(len(plain))); err == nil {
		t.Fatal("a file without a layout yielded one")
	}
}

func TestEncodeRejectsDuplicates(t *testing.T) {
	rows := []Record{{ID: "a", RolloutID: "r"}, {ID: "a", RolloutID: "r"}}
	if _, _, err := Encode(rows, Options{}); err == nil {
		t.Fatal("duplicate ids encoded")
	}
}

func TestDecodeCorrupt(t *testing.T) {
	if _, err := DecodeBatch([]byte("garbage-garbage!"), false); err == nil {
		t.Fatal("garbage decoded")
	}
	if _, err := ReadHeader([]byte("nope, not an arrow file at all"), 30); err == nil {
		t.Fatal("garbage header decoded")
	}
}

func TestValidate(t *testing.T) {
	nan := 0.0
	nan = nan / nan
	bad := []Record{
		{ID: "", RolloutID: "r"},
		{ID: string(make([]byte, 513)), RolloutID: "r"},
		{ID: "a\x01", RolloutID: "r"},
		{ID: "\xff", RolloutID: "r"},
		{ID: "a"},
		{ID: "a", RolloutID: "r", Metadata: []byte("{")},
		{ID: "a", RolloutID: "r", Reward: &nan},
	}
	for i, r := range bad {
		if err := r.Validate(); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
	ok := Record{ID: "ünïcode/id with spaces", RolloutID: "r", Metadata: []byte(`{"a":[1,2]}`)}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	a := ok
	b := ok
	b.Metadata = []byte(` { "a" : [1, 2] } `)
	b.CreatedAt = time.Now()
	if !SameContent(&a, &b) {
		t.Fatal("reformatted metadata is not the same content")
	}
	b.Sequence = 9
	if SameContent(&a, &b) {
		t.Fatal("different sequence is the same content")
	}
}

func TestLayoutRoundTrip(t *testing.T) {
	rows := testRows(300, rand.New(rand.NewPCG(3, 4)))
	_, lay, err := Encode(rows, Options{BatchRows: 50})
	if err != nil {
		t.Fatal(err)
	}
	enc := MarshalLayout(lay)
	got, err := UnmarshalLayout(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Size != lay.Size || len(got.Rows) != len(lay.Rows) || len(got.Batches) != len(lay.Batches) {
		t.Fatalf("round trip lost data")
	}
	for i := range lay.Rows {
		if got.Rows[i] != lay.Rows[i] {
			t.Fatalf("row %d: %+v != %+v", i, got.Rows[i], lay.Rows[i])
		}
	}
	for i := range enc {
		bad := bytes.Clone(enc)
		bad[i] ^= 0x40
		if _, err := UnmarshalLayout(bad); err == nil {
			t.Fatalf("corruption at byte %d not detected", i)
		}
	}
	if _, err := UnmarshalLayout(enc[:len(enc)-1]); err == nil {
		t.Fatal("truncation not detected")
	}
}
