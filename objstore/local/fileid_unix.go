//go:build unix

package local

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// fileID identifies the open file f among the files of its directory: its
// inode number, which a rename or link keeps and a copy changes.
func fileID(f *os.File, fi fs.FileInfo) (uint64, error) {
	if id, ok := statID(fi); ok {
		return id, nil
	}
	return 0, fmt.Errorf("local: %s: no inode number in %T", f.Name(), fi.Sys())
}

// statID is fileID from a stat alone, where the platform puts it there.
func statID(fi fs.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Ino), true
}
