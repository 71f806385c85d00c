package local

import (
	"io/fs"
	"os"
	"syscall"
)

// fileID identifies the open file f among the files of its directory: its
// NTFS file index, which a rename or link keeps and a copy changes.
func fileID(f *os.File, _ fs.FileInfo) (uint64, error) {
	var d syscall.ByHandleFileInformation
	if err := syscall.GetFileInformationByHandle(syscall.Handle(f.Fd()), &d); err != nil {
		return 0, &os.PathError{Op: "GetFileInformationByHandle", Path: f.Name(), Err: err}
	}
	return uint64(d.FileIndexHigh)<<32 | uint64(d.FileIndexLow), nil
}

// statID is fileID from a stat alone: Windows keeps the index out of it.
func statID(fs.FileInfo) (uint64, bool) { return 0, false }
