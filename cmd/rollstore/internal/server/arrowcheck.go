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
// recover panics into errors.
var errArrowBudget = errors.New("decoding needs more memory than the batch limit allows")

// checkArrowStream decodes an Arrow IPC stream held in memory once, under
// limits, before the engine's reader sees it. Without this a few bytes of
// garbage cost gigabytes: ipc.NewReader (arrow-go v18.8.0) does not apply
// its metadata and body size limits, and allocates whatever length the
// first four bytes claim (27 bytes of text cost 1.9 GB). Here every message
// must fit in the bytes received, and all buffers together, decompressed
// included, in budget bytes; a stream that decodes within that decodes the
// same way again.
func checkArrowStream(data []byte, budget int64) error {
	n := int64(len(data))
	mr := ipc.NewMessageReader(bytes.NewReader(data), ipc.WithMetadataSizeLimit(n), ipc.WithBodySizeLimit(n))
	defer mr.Release()
	rd, err := ipc.NewReaderFromMessageReader(mr, ipc.WithAllocator(&budgetAllocator{mem: memory.NewGoAllocator(), left: budget}))
	if err != nil {
		return err
	}
	defer rd.Release()
	for rd.Next() {
	}
	if err := rd.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// budgetAllocator refuses (by panicking) once budget bytes were allocated
// in total; freeing does not give any back, so the budget bounds the whole
// decode, not just what is live at once.
type budgetAllocator struct {
	mem  memory.Allocator
	left int64
}

func (a *budgetAllocator) take(n int) {
	if int64(n) > a.left {
		panic(fmt.Errorf("%w (%d more bytes)", errArrowBudget, n))
	}
	a.left -= int64(n)
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
