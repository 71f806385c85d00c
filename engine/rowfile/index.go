package rowfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The index object kept beside a base data file is its Layout in a compact
// binary form: magic, uvarint counts, length-prefixed strings, and a CRC32C
// of everything before it. It is written once with the data file and never
// changes, so readers cache it freely.

var indexMagic = []byte("RSIX1\n")

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
	b = binary.AppendUvarint(b, uint64(len(l.Rows)))
	for _, r := range l.Rows {
		b = appendString(b, r.ID)
		b = binary.AppendUvarint(b, uint64(r.Batch))
		b = binary.AppendUvarint(b, uint64(r.Row))
		b = binary.AppendUvarint(b, uint64(r.POff))
		b = binary.AppendUvarint(b, uint64(r.PLen))
		b = appendString(b, r.Ref)
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
	nr := d.count(6)
	l.Rows = make([]Loc, 0, nr)
	for i := 0; i < nr && d.err == nil; i++ {
		l.Rows = append(l.Rows, Loc{ID: d.str(), Batch: int32(d.uint()), Row: int32(d.uint()),
			POff: int64(d.uint()), PLen: int64(d.uint()), Ref: d.str()})
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
