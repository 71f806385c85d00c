package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/rollstore/rollstore/objstore"
)

// errInTheWay reports a write blocked by something under root that is not
// part of the store: a file where a directory of keys must go, or a
// directory with an object file's name. Keys alone never cause it.
var errInTheWay = errors.New("a file or directory that is not part of the store is in the way")

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
		// A foreign file where a directory belongs, or a directory with an
		// object file's name: either way, no object.
		switch kind {
		case readOp:
			sentinel = objstore.ErrNotFound
		case deleteOp:
			return nil
		default:
			sentinel = errInTheWay
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
		// which is in the way.
		sentinel = errInTheWay
		if kind == createOp && !b.isDir(nativePath(key)) {
			sentinel = objstore.ErrPrecondition
		}
	}
	if sentinel == nil {
		return fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	return fmt.Errorf("local: %s %q: %w: %w", op, key, sentinel, err)
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
