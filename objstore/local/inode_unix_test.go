//go:build unix

package local_test

import (
	"os"
	"syscall"
	"testing"
)

// inode returns the inode number of the file name.
func inode(t *testing.T, name string) (uint64, bool) {
	t.Helper()
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Ino), true
}
