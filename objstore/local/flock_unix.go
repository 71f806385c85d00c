//go:build unix

package local

import (
	"os"
	"syscall"
)

// lockFile locks f exclusively with flock(2). Locks belong to the open
// file, so two opens of one lock file exclude each other within a process
// as well as across processes, and a process that dies releases its locks.
func lockFile(f *os.File) (release func(), err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
	// Closing f releases the lock; unlocking first says so explicitly.
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }, nil
}
