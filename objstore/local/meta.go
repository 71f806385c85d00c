package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/rollstore/rollstore/objstore"
)

// The sidecar format; see the package documentation.
const (
	// metaDir is the directory, beside a key's file, of the sidecars of the
	// objects in that directory.
	metaDir = ".rollstore-meta"
	// metaSuffix ends a sidecar's name, after the file id.
	metaSuffix = ".json"
	// maxSidecar bounds a sidecar read, so that a damaged or foreign file
	// cannot make a read allocate without limit. Metadata is tiny in
	// practice (Azure caps it at 8 KiB).
	maxSidecar = 1 << 20
	// openAttempts bounds how often a read opens a key again because its
	// file was replaced or deleted between the open and the sidecar read.
	openAttempts = 4
)

// errCorrupt marks a file under root that is not a well-formed object: no
// sidecar of its own, a damaged one, or a size that disagrees with it. It is
// reported as itself, never as a missing object, so that damage is seen
// rather than retried.
var errCorrupt = errors.New("not a well-formed object of this store")

// sidecar is what a Put stores beside the object's bytes.
type sidecar struct {
	ETag        string            `json:"etag"`
	Size        int64             `json:"size"`
	ContentType string            `json:"content_type,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

func (s sidecar) encode() ([]byte, error) {
	data, err := json.Marshal(s)
	if err == nil && len(data) > maxSidecar {
		err = fmt.Errorf("%w: metadata too large: %d bytes encoded, limit %d", objstore.ErrInvalidKey, len(data), maxSidecar)
	}
	return data, err
}

// metaDirOf is the sidecar directory for the objects in the native
// directory dir ("." for root).
func metaDirOf(dir string) string {
	return filepath.Join(dir, metaDir)
}

// sidecarName is the name, relative to root, of the sidecar describing the
// file with id that holds key.
func sidecarName(key string, id uint64) string {
	name := nativePath(key)
	return filepath.Join(filepath.Dir(name), sidecarBase(filepath.Base(name), id))
}

// sidecarBase is the name, relative to the directory of the file base, of
// the sidecar describing that file with id.
func sidecarBase(base string, id uint64) string {
	return filepath.Join(metaDir, base+"."+strconv.FormatUint(id, 16)+metaSuffix)
}

// sidecarOf parses the name of an entry of a sidecar directory: the base
// name of the key's file it describes. The id is the last dot-separated
// part before the suffix and is hex, so the parse is unambiguous whatever
// dots the key holds.
func sidecarOf(entry string) (base string, ok bool) {
	rest, ok := strings.CutSuffix(entry, metaSuffix)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return "", false
	}
	if _, err := strconv.ParseUint(rest[i+1:], 16, 64); err != nil {
		return "", false
	}
	return rest[:i], true
}

// readSidecar reads and checks the sidecar at name in dir. A missing one is
// fs.ErrNotExist; a damaged one errCorrupt. Other errors are native.
func readSidecar(dir *os.Root, name string) (sidecar, error) {
	f, err := dir.Open(name)
	if err != nil {
		if isMissing(err) {
			return sidecar{}, fs.ErrNotExist
		}
		return sidecar{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSidecar+1))
	if err != nil {
		return sidecar{}, err
	}
	var s sidecar
	if len(data) > maxSidecar {
		return sidecar{}, fmt.Errorf("%w: sidecar %s exceeds %d bytes", errCorrupt, name, maxSidecar)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return sidecar{}, fmt.Errorf("%w: sidecar %s: %w", errCorrupt, name, err)
	}
	if s.ETag == "" || s.Size < 0 {
		return sidecar{}, fmt.Errorf("%w: sidecar %s has no etag or a negative size", errCorrupt, name)
	}
	return s, nil
}

// object is an open object: its file, positioned at the first byte, and the
// attributes of exactly that file.
type object struct {
	f     *os.File
	attrs objstore.Attrs
	meta  string // its sidecar's name, relative to root
}

// openObject opens the object at key. Its errors are native ones or
// errCorrupt, for the caller to map.
//
// The file is opened first and its sidecar found by the opened file's id,
// so the attributes describe the bytes served even while a Put replaces
// the key. A sidecar missing for the opened file means the file was
// replaced or deleted after the open (a Put publishes the sidecar first,
// and removes the old one last), so the key is opened again; only a file
// that stays the same without a sidecar of its own is matched by size to
// the key's only sidecar (a copied folder) or reported as damage.
func (b *Bucket) openObject(key string) (object, error) {
	name := nativePath(key)
	dirName, base := filepath.Dir(name), filepath.Base(name)
	var lastID uint64
	for attempt := 0; ; attempt++ {
		// Both files are opened relative to their directory, which os.Root
		// would otherwise walk to from root twice.
		dir := b.root
		if dirName != "." {
			d, err := b.root.OpenRoot(dirName)
			if err != nil {
				if fi, serr := b.root.Stat(dirName); serr == nil && !fi.IsDir() {
					// OpenRoot's own error for this has no errno.
					err = &fs.PathError{Op: "open", Path: dirName, Err: syscall.ENOTDIR}
				}
				return object{}, err
			}
			dir = d
		}
		obj, id, err := openIn(dir, key, base, attempt, lastID)
		if dir != b.root {
			dir.Close()
		}
		if !errors.Is(err, errReopen) {
			if err == nil {
				obj.meta = filepath.Join(dirName, obj.meta)
			}
			return obj, err
		}
		lastID = id
	}
}

// errReopen: the opened file has no sidecar of its own; open the key again.
var errReopen = errors.New("reopen")

// openIn is attempt number attempt of openObject, with base the file's
// name in dir and lastID the id the attempt before found. A sidecar missing
// for the opened file is errReopen on the first attempt and, up to the
// last, while the file keeps changing; otherwise soleSidecar settles it.
// The object's meta is relative to dir.
func openIn(dir *os.Root, key, base string, attempt int, lastID uint64) (object, uint64, error) {
	f, fi, id, err := openFile(dir, base)
	if err != nil {
		return object{}, 0, err
	}
	meta := sidecarBase(base, id)
	s, err := readSidecar(dir, meta)
	if errors.Is(err, fs.ErrNotExist) {
		if attempt == 0 || id != lastID && attempt < openAttempts-1 {
			f.Close()
			return object{}, id, errReopen
		}
		meta, s, err = soleSidecar(dir, base, fi.Size())
	}
	if err == nil && s.Size != fi.Size() {
		err = fmt.Errorf("%w: %s has %d bytes, its sidecar says %d (changed outside the store?)", errCorrupt, key, fi.Size(), s.Size)
	}
	if err != nil {
		f.Close()
		return object{}, id, &fs.PathError{Op: "read", Path: key, Err: err}
	}
	return object{f: f, meta: meta, attrs: objstore.Attrs{
		Key:          key,
		Size:         fi.Size(),
		ETag:         s.ETag,
		LastModified: fi.ModTime().UTC(),
		Metadata:     s.Metadata,
		ContentType:  contentType(s.ContentType),
	}}, id, nil
}

// openFile opens the regular file name in dir and returns it with its stat
// and id. A directory is EISDIR (a directory of other keys), anything else
// that is not a regular file errCorrupt.
func openFile(dir *os.Root, name string) (*os.File, fs.FileInfo, uint64, error) {
	f, err := dir.Open(name)
	if err != nil {
		return nil, nil, 0, err
	}
	fi, err := f.Stat()
	var id uint64
	switch {
	case err != nil:
	case fi.IsDir():
		err = &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	case !fi.Mode().IsRegular():
		err = &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w: not a regular file", errCorrupt)}
	default:
		id, err = fileID(f, fi)
	}
	if err != nil {
		f.Close()
		return nil, nil, 0, err
	}
	return f, fi, id, nil
}

// soleSidecar finds the sidecar of the file base in dir whose id names
// none: the file's only sidecar that records size. None, or several, is
// errCorrupt: guessing could pair bytes with another version's metadata.
func soleSidecar(dir *os.Root, base string, size int64) (string, sidecar, error) {
	d, err := dir.Open(metaDir)
	var ents []fs.DirEntry
	if err == nil {
		ents, err = d.ReadDir(-1)
		d.Close()
	}
	if err != nil && !isMissing(err) {
		return "", sidecar{}, err
	}
	var (
		found  []string
		found1 sidecar
	)
	for _, e := range ents {
		if of, ok := sidecarOf(e.Name()); !ok || of != base {
			continue
		}
		meta := filepath.Join(metaDir, e.Name())
		s, err := readSidecar(dir, meta)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", sidecar{}, err
		}
		if s.Size == size {
			found, found1 = append(found, meta), s
		}
	}
	switch len(found) {
	case 0:
		return "", sidecar{}, fmt.Errorf("%w: %s has no sidecar (not written by this store, or copied without its %s directory)", errCorrupt, base, metaDir)
	case 1:
		return found[0], found1, nil
	}
	return "", sidecar{}, fmt.Errorf("%w: %s has no sidecar of its own and %d that could be its own (a copy of a folder a crash left mid-write?)", errCorrupt, base, len(found))
}

// hasSidecar reports whether the file of key with id, as seen by a List,
// is an object: it has a sidecar, or it was replaced or copied and
// openObject finds one.
func (b *Bucket) hasSidecar(key string, id uint64, haveID bool) (bool, error) {
	if haveID {
		_, err := b.root.Stat(sidecarName(key, id))
		if err == nil {
			return true, nil
		}
		if !isMissing(err) {
			return false, err
		}
	}
	obj, err := b.openObject(key)
	if err == nil {
		obj.f.Close()
		return true, nil
	}
	if isMissing(err) || errors.Is(err, errCorrupt) {
		return false, nil
	}
	return false, err
}

func contentType(ct string) string {
	if ct == "" {
		return objstore.DefaultContentType
	}
	return ct
}
