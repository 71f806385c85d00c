// The errors callers of the engine branch on.

package engine

import (
	"errors"
	"fmt"

	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/engine/rowfile"
)

// Errors callers branch on.
var (
	ErrTableNotFound = errors.New("table not found")
	ErrTableExists   = errors.New("table already exists")
	ErrNotFound      = errors.New("row not found")
	ErrConflict      = errors.New("id exists with different content")
	ErrVersionGone   = errors.New("base version was garbage-collected")
	ErrNoVersion     = errors.New("base version does not exist")
	// ErrMissingFile: a file the read needed stayed missing after the
	// bounded retries; never reported as ErrNotFound.
	ErrMissingFile = errors.New("file missing after bounded retries")
	// ErrRowChanged: a payload read that had to find its row again (its
	// file vanished under it) found the id with another payload (size,
	// checksum or content type) than the one it had begun to serve. Ids
	// are immutable, but two shards can acknowledge one id at once, each
	// with its own content, and a merge keeps one copy: the read stops
	// rather than serve a mix of the two. Retrying the read is safe.
	ErrRowChanged = errors.New("row changed under the read")
	// ErrOverloaded: a cap was hit (in-flight bytes, back-pressure); retry later.
	ErrOverloaded = errors.New("overloaded, retry later")
	// ErrBackpressure: appends are refused while too many generations wait
	// for a merge; reads are never refused for it.
	ErrBackpressure = fmt.Errorf("merge backlog: %w", ErrOverloaded)
	// ErrFenced: this writer lost its shard (another writer moved the
	// shard's head) and stopped; what it had not acknowledged was not
	// written.
	ErrFenced = errors.New("writer fenced: shard owned elsewhere")
	// ErrOutcomeUnknown: a write may or may not have become durable (a
	// lost response, a store failure mid-commit); an identical retry is
	// answered from what landed.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrTooSlow: an append (or a create) stalled so long, against
	// OrphanGrace, that committing it could not be made safe; the caller
	// may retry it.
	ErrTooSlow = errors.New("stalled past half the orphan grace")
	// ErrClosed: the database is closed.
	ErrClosed      = errors.New("closed")
	ErrNoWriter    = errors.New("this process owns no writer shard")
	ErrTooLarge    = errors.New("payload too large")
	ErrInvalid     = rowfile.ErrInvalidRecord
	ErrInvalidName = keyspace.ErrInvalidName
	// ErrNotOwner: the append's partition is owned by another process (a
	// NotOwnerError says which); forward it there.
	ErrNotOwner = errors.New("partition owned by another writer")
	// ErrShardOwned: another live process holds the shard's lease.
	ErrShardOwned = errors.New("shard is owned by another writer")
	// ErrMergerBusy: another merger holds the table's merger lease, or a
	// merge kept losing its commit to concurrent work and gave up; retry.
	ErrMergerBusy = errors.New("another merger is running")
)
