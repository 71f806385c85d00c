package server

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// errArrowBudget is panicked by budgetAllocator; arrow-go's readers
// recover panics into errors (losing the chain, hence the allocator's flag).
var errArrowBudget = errors.New("decoding the batch needs more memory than the batch limit allows")

// errArrowRows: the stream holds more rows than one batch may.
var errArrowRows = errors.New("too many rows")

// checkArrowStream decodes an Arrow IPC stream held in memory once, under
// limits, before the engine's reader sees it. Without this a few bytes of
// garbage cost gigabytes: ipc.NewReader (arrow-go v18.8.0) does not apply
// its metadata and body size limits, and allocates whatever length the
// first four bytes claim (27 bytes of text cost 1.9 GB). Here every message
// must fit in the bytes received, all buffers together, decompressed
// included, in budget bytes, and the record batches together may hold at
// most maxRows rows, counted from each batch's header before any of its
// rows is materialised. A stream that decodes within that decodes the same
// way again. It returns the server-computed columns the stream carries.
func checkArrowStream(data []byte, budget int64, maxRows int) (*computed, error) {
	n := int64(len(data))
	mr := ipc.NewMessageReader(bytes.NewReader(data), ipc.WithMetadataSizeLimit(n), ipc.WithBodySizeLimit(n))
	defer mr.Release()
	alloc := &budgetAllocator{mem: memory.NewGoAllocator(), left: budget}
	rd, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(alloc))
	if err != nil {
		return nil, alloc.explain(err)
	}
	defer rd.Release()
	if err := checkArrowColumns(rd.Schema()); err != nil {
		return nil, err
	}
	comp := newComputed(rd.Schema())
	rows := int64(0)
	for batches := 1; rd.Next(); batches++ {
		rows += rd.RecordBatch().NumRows()
		if rows > int64(maxRows) {
			return nil, fmt.Errorf("%w: %d in the first %d record batches", errArrowRows, rows, batches)
		}
		if err := comp.add(rd.RecordBatch()); err != nil {
			return nil, err
		}
	}
	if err := rd.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, alloc.explain(err)
	}
	return comp, nil
}

// budgetAllocator refuses (by panicking) once budget bytes were allocated
// in total; freeing does not give any back, so the budget bounds the whole
// decode, not just what is live at once.
type budgetAllocator struct {
	mem      memory.Allocator
	left     int64
	exceeded bool
}

func (a *budgetAllocator) take(n int) {
	if int64(n) > a.left {
		a.exceeded = true
		panic(fmt.Errorf("%w (%d more bytes)", errArrowBudget, n))
	}
	a.left -= int64(n)
}

// explain returns errArrowBudget for a decoding error the budget caused.
func (a *budgetAllocator) explain(err error) error {
	if a.exceeded {
		return fmt.Errorf("%w: %v", errArrowBudget, err)
	}
	return err
}

func (a *budgetAllocator) Allocate(n int) []byte {
	a.take(n)
	return a.mem.Allocate(n)
}

func (a *budgetAllocator) Reallocate(n int, b []byte) []byte {
	if n > len(b) {
		a.take(n - len(b))
	}
	return a.mem.Reallocate(n, b)
}

func (a *budgetAllocator) Free(b []byte) { a.mem.Free(b) }

// computedColumns are the columns of a table's schema that the server
// computes: a stream from a scan carries them, so they are accepted and
// checked against the row's payload (a copy is verified, not trusted),
// never taken as the row's values.
var computedColumns = map[string]arrow.DataType{
	"payload_size":   arrow.PrimitiveTypes.Int64,
	"payload_sha256": &arrow.FixedSizeBinaryType{ByteWidth: 32},
	"payload_ref":    arrow.BinaryTypes.String,
}

// checkArrowColumns refuses what an NDJSON batch refuses: a column that
// is not in the table schema (a misspelt column would be dropped
// silently), and a column name given twice (only one would be read).
func checkArrowColumns(sc *arrow.Schema) error {
	seen := make(map[string]bool, sc.NumFields())
	for _, f := range sc.Fields() {
		want, isComputed := computedColumns[f.Name]
		switch {
		case seen[f.Name]:
			return fmt.Errorf("column %q appears more than once", f.Name)
		case isComputed && !arrow.TypeEqual(f.Type, want):
			return fmt.Errorf("column %q is %s, want %s", f.Name, f.Type, want)
		case !batchLineFields[f.Name] && !isComputed:
			return fmt.Errorf("unknown column %q (names are case-sensitive; the table schema's columns are the record fields)", f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}

// computed holds, row by row, the server-computed columns a stream
// carries (nil slices for those it does not).
type computed struct {
	idx   map[string]int
	sizes []int64
	sums  [][32]byte
	refs  []string
	has   map[string]bool
}

func newComputed(sc *arrow.Schema) *computed {
	c := &computed{idx: map[string]int{}, has: map[string]bool{}}
	for i, f := range sc.Fields() {
		if _, ok := computedColumns[f.Name]; ok {
			c.idx[f.Name], c.has[f.Name] = i, true
		}
	}
	return c
}

func (c *computed) add(b arrow.RecordBatch) error {
	n := int(b.NumRows())
	for name, i := range c.idx {
		if name != "payload_ref" && b.Column(i).NullN() > 0 {
			return fmt.Errorf("column %q has nulls: the table schema does not allow them", name)
		}
	}
	if i, ok := c.idx["payload_size"]; ok {
		col, ok := b.Column(i).(*array.Int64)
		if !ok {
			return fmt.Errorf("column %q is not int64", "payload_size")
		}
		for r := range n {
			c.sizes = append(c.sizes, col.Value(r))
		}
	}
	if i, ok := c.idx["payload_sha256"]; ok {
		col, ok := b.Column(i).(*array.FixedSizeBinary)
		if !ok {
			return fmt.Errorf("column %q is not fixed_size_binary[32]", "payload_sha256")
		}
		for r := range n {
			v := col.Value(r)
			if len(v) != 32 {
				return fmt.Errorf("column %q holds a value of %d bytes", "payload_sha256", len(v))
			}
			c.sums = append(c.sums, [32]byte(v))
		}
	}
	if i, ok := c.idx["payload_ref"]; ok {
		col, ok := b.Column(i).(*array.String)
		if !ok {
			return fmt.Errorf("column %q is not utf8", "payload_ref")
		}
		for r := range n {
			c.refs = append(c.refs, strings.Clone(col.Value(r)))
		}
	}
	return nil
}

// check checks row's server-computed columns, where the stream has them,
// against the payload the row carries.
func (c *computed) check(row int, payload []byte) error {
	if c.has["payload_ref"] && c.refs[row] != "" && len(payload) == 0 {
		return fmt.Errorf("column \"payload_ref\": the row names a payload object but carries no payload bytes (a scan leaves out payloads over its limit); a payload is never copied by reference")
	}
	if c.has["payload_size"] && c.sizes[row] != int64(len(payload)) {
		return fmt.Errorf("column \"payload_size\" says %d bytes, the payload has %d", c.sizes[row], len(payload))
	}
	if c.has["payload_sha256"] {
		if sum := sha256.Sum256(payload); sum != c.sums[row] {
			return fmt.Errorf("column \"payload_sha256\" is %x, the payload's SHA-256 is %x", c.sums[row], sum)
		}
	}
	return nil
}
