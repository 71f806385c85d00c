package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"

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
// way again.
func checkArrowStream(data []byte, budget int64, maxRows int) error {
	n := int64(len(data))
	mr := ipc.NewMessageReader(bytes.NewReader(data), ipc.WithMetadataSizeLimit(n), ipc.WithBodySizeLimit(n))
	defer mr.Release()
	alloc := &budgetAllocator{mem: memory.NewGoAllocator(), left: budget}
	rd, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(alloc))
	if err != nil {
		return alloc.explain(err)
	}
	defer rd.Release()
	rows := int64(0)
	for batches := 1; rd.Next(); batches++ {
		rows += rd.RecordBatch().NumRows()
		if rows > int64(maxRows) {
			return fmt.Errorf("%w: %d in the first %d record batches", errArrowRows, rows, batches)
		}
	}
	if err := rd.Err(); err != nil && !errors.Is(err, io.EOF) {
		return alloc.explain(err)
	}
	return nil
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
