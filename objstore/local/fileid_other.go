//go:build !unix && !windows

package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// fileID is unsupported where the platform has no stable file id: Open
// fails there rather than pair files with the wrong sidecars.
func fileID(f *os.File, _ fs.FileInfo) (uint64, error) {
	return 0, fmt.Errorf("local: %s: no file ids on this platform: %w", f.Name(), errors.ErrUnsupported)
}

func statID(fs.FileInfo) (uint64, bool) { return 0, false }
