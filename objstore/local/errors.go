package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/rollstore/rollstore/objstore"
)

// opKind says how an operation reads file system errors.
type opKind uint8

const (
	readOp   opKind = iota // Get, GetRange, Head: anything missing is ErrNotFound
	writeOp                // an unconditional or If-Match Put
	createOp               // an If-Not-Exists Put: an existing name is ErrPrecondition
	deleteOp               // Delete: anything missing is success
)

// mapErr is the one place where native errors from the file system become
// objstore sentinels. The native error stays wrapped for its detail. A nil
// result means the error is success for this kind of operation (a Delete of
// something missing).
func (b *Bucket) mapErr(kind opKind, op, key string, err error) error {
	var sentinel error
	switch {
	case errors.Is(err, objstore.ErrKeyConflict):
		// Classified by the caller, which knows which name was in the way.
	case errors.Is(err, fs.ErrNotExist):
		// A vanished root must not pass for a vanished object: the read path
		// retries the latter.
		if rerr := b.checkRoot(); rerr != nil {
			return fmt.Errorf("local: %s %q: %w", op, key, rerr)
		}
		switch kind {
		case readOp:
			sentinel = objstore.ErrNotFound
		case deleteOp:
			return nil
		}
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		// A file where a directory of keys belongs, or a directory of keys
		// where the object's file would be: either way, no object.
		switch kind {
		case readOp:
			sentinel = objstore.ErrNotFound
		case deleteOp:
			return nil
		default:
			sentinel = objstore.ErrKeyConflict
		}
	case errors.Is(err, syscall.ENAMETOOLONG):
		switch kind {
		case readOp:
			sentinel = objstore.ErrNotFound
		case deleteOp:
			return nil
		default:
			sentinel = objstore.ErrInvalidKey
		}
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		// link(2) refuses any existing name; rename(2) only a directory,
		// which holds other keys.
		sentinel = objstore.ErrKeyConflict
		if kind == createOp && !b.isDir(nativePath(key)) {
			sentinel = objstore.ErrPrecondition
		}
	}
	if sentinel == nil {
		return fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	return fmt.Errorf("local: %s %q: %w: %w", op, key, sentinel, err)
}

// isMissing reports native errors that mean no file exists by a name: the
// name, a parent, or the name is a directory (of other keys).
func isMissing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

// checkRoot returns ErrContainerNotFound when the root directory was removed,
// moved or replaced since Open: the Bucket's handle then points at a
// directory nobody else sees.
func (b *Bucket) checkRoot() error {
	opened, err := b.root.Stat(".")
	if err == nil {
		var named fs.FileInfo
		named, err = os.Stat(b.path)
		if err == nil && !os.SameFile(opened, named) {
			err = errors.New("replaced by another directory since Open")
		}
	}
	if err != nil {
		return fmt.Errorf("root %s: %w: %w", b.path, objstore.ErrContainerNotFound, err)
	}
	return nil
}

func (b *Bucket) isDir(name string) bool {
	fi, err := b.root.Lstat(name)
	return err == nil && fi.IsDir()
}
