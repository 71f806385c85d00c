package rowfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The index object kept beside a base data file (and embedded, base64, in a
// WAL segment's schema metadata) is its Layout in a compact binary form,
// written once and never changed, so readers cache it freely:
//
//	"RSIX2\n"                       magic
//	uvarint size                     the file's size (0 when embedded)
//	uvarint nbatch, then per batch:  offset, length, rows (uvarints), min id, max id (strings)
//	uvarint ntypes, then ntypes strings: the distinct payload content types
//	uvarint nrow, then per row, in id order:
//	    id (string), batch, row, inline payload offset, inline payload length,
//	    payload size (uvarints), created at (varint, Unix microseconds),
//	    payload object key (string, empty when inline),
//	    content type (uvarint index into the types), SHA-256 (32 bytes)
//	uint32 CRC-32C (Castagnoli) of everything before it, big-endian
//
// A string is a uvarint length and that many bytes. Offsets are relative to
// the end of the file's header when the layout is embedded in it.

var indexMagic = []byte("RSIX2\n")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MarshalLayout encodes a layout for storage.
func MarshalLayout(l *Layout) []byte {
	b := append([]byte(nil), indexMagic...)
	b = binary.AppendUvarint(b, uint64(l.Size))
	b = binary.AppendUvarint(b, uint64(len(l.Batches)))
	for _, x := range l.Batches {
		b = binary.AppendUvarint(b, uint64(x.Offset))
		b = binary.AppendUvarint(b, uint64(x.Length))
		b = binary.AppendUvarint(b, uint64(x.Rows))
		b = appendString(b, x.MinID)
		b = appendString(b, x.MaxID)
	}
	types := map[string]int{}
	var order []string
	for _, r := range l.Rows {
		if _, ok := types[r.ContentType]; !ok {
			types[r.ContentType] = len(order)
			order = append(order, r.ContentType)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(order)))
	for _, ct := range order {
		b = appendString(b, ct)
	}
	b = binary.AppendUvarint(b, uint64(len(l.Rows)))
	for _, r := range l.Rows {
		b = appendString(b, r.ID)
		b = binary.AppendUvarint(b, uint64(r.Batch))
		b = binary.AppendUvarint(b, uint64(r.Row))
		b = binary.AppendUvarint(b, uint64(r.POff))
		b = binary.AppendUvarint(b, uint64(r.PLen))
		b = binary.AppendUvarint(b, uint64(r.Size))
		b = binary.AppendVarint(b, r.CreatedAt)
		b = appendString(b, r.Ref)
		b = binary.AppendUvarint(b, uint64(types[r.ContentType]))
		b = append(b, r.SHA256[:]...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errIndex = errors.New("bad index")

// UnmarshalLayout decodes an index object.
func UnmarshalLayout(data []byte) (*Layout, error) {
	if len(data) < len(indexMagic)+4 || string(data[:len(indexMagic)]) != string(indexMagic) {
		return nil, fmt.Errorf("%w: %w: magic", ErrCorrupt, errIndex)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: %w: checksum", ErrCorrupt, errIndex)
	}
	d := decoder{b: body[len(indexMagic):]}
	l := &Layout{Size: int64(d.uint())}
	nb := d.count(8)
	l.Batches = make([]Batch, 0, nb)
	for i := 0; i < nb && d.err == nil; i++ {
		l.Batches = append(l.Batches, Batch{Offset: int64(d.uint()), Length: int64(d.uint()), Rows: int(d.uint()),
			MinID: d.str(), MaxID: d.str()})
	}
	nt := d.count(1)
	types := make([]string, 0, nt)
	for i := 0; i < nt && d.err == nil; i++ {
		types = append(types, d.str())
	}
	nr := d.count(6 + 32)
	l.Rows = make([]Loc, 0, nr)
	for i := 0; i < nr && d.err == nil; i++ {
		r := Loc{ID: d.str(), Batch: int32(d.uint()), Row: int32(d.uint()),
			POff: int64(d.uint()), PLen: int64(d.uint()), Size: int64(d.uint()), CreatedAt: d.int(), Ref: d.str()}
		if t := d.uint(); t < uint64(len(types)) {
			r.ContentType = types[t]
		} else if d.err == nil {
			d.err = errIndex
		}
		d.bytes(r.SHA256[:])
		l.Rows = append(l.Rows, r)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = errIndex
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, d.err)
	}
	for i := 1; i < len(l.Rows); i++ {
		if l.Rows[i-1].ID >= l.Rows[i].ID {
			return nil, fmt.Errorf("%w: %w: rows not sorted", ErrCorrupt, errIndex)
		}
	}
	for _, r := range l.Rows {
		if int(r.Batch) >= len(l.Batches) || r.Batch < 0 {
			return nil, fmt.Errorf("%w: %w: row in batch %d of %d", ErrCorrupt, errIndex, r.Batch, len(l.Batches))
		}
	}
	return l, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errIndex
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads an element count and rejects counts the remaining bytes could
// not hold (each element takes at least min bytes), so a corrupt count cannot
// trigger a huge allocation.
func (d *decoder) count(min int) int {
	n := d.uint()
	if n > uint64(len(d.b)/min+1) {
		d.err = errIndex
		return 0
	}
	return int(n)
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errIndex
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(dst []byte) {
	if d.err != nil {
		return
	}
	if len(d.b) < len(dst) {
		d.err = errIndex
		return
	}
	copy(dst, d.b)
	d.b = d.b[len(dst):]
}

func (d *decoder) str() string {
	n := d.uint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errIndex
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
