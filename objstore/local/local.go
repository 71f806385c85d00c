// Package local implements objstore.Bucket over a folder on disk. It is
// rollstore's embedded default and what developers run against locally.
//
// # Layout
//
// The object with key "a/b/c" is the file <root>/a/b/c.rso. The suffix keeps
// object files and directories apart, so that "a/b" and "a/b/c" can both be
// stored, as in any object store; it also marks the files as rollstore's
// own format rather than bare payloads (see below). In return, a key whose
// directory part has a segment ending in ".rso" ("x.rso/y") is rejected
// with objstore.ErrInvalidKey: it would name a directory that looks like an
// object file. On a case-insensitive file system, keys that differ only in
// case name the same object.
//
// The top-level directory ".rollstore-tmp" holds writes in flight: keys
// below it are rejected with objstore.ErrInvalidKey and List never shows
// it. Open removes temporary files that a crashed process left there once
// they have not been written for an hour. The top-level directory
// ".rollstore-leases" holds leases (see Leases below) and is reserved in
// the same way.
//
// Delete removes the directories it leaves empty, so that reclaimed
// generations do not leave a trail of directories for List to walk.
//
// Keys are resolved with os.Root: a symbolic link planted under root is
// followed only while it stays inside root, and List does not report
// links. Files without the suffix or the magic below are not objects, and
// List passes over them.
//
// # Object files
//
// Metadata lives in the object file, so that one rename replaces content
// and metadata together. Each file is
//
//	"RSO1"    4 bytes of magic
//	n         uint32, big-endian: length of the JSON header
//	size      uint64, big-endian: length of the payload
//	header    n bytes of JSON: {"etag":"...","metadata":{...}}
//	payload   size bytes
//
// Sizes reported by Head, Get and List are payload sizes. To extract a
// payload by hand, skip the first 16+n bytes. Get and Head report a file
// that is not in this format as an error, never as a missing object, and a
// damaged object file (the magic, but lengths that disagree with the file's)
// makes List fail rather than be skipped.
//
// # Consistency
//
// Put writes a temporary file, syncs it and renames it into place, then
// syncs the directory: readers see the old object or the new one, never a
// mix, and an acknowledged Put survives a crash. With IfNotExists, Put
// commits with link(2), which refuses an existing name: of racing creators
// exactly one wins, across processes too. IfMatch compares ETags and renames
// under a lock held by this process, so it is atomic among the Buckets of
// one process but only best-effort between processes sharing a folder;
// rollstore commits with IfNotExists.
//
// ETags are random per Put and stored in the header, so they change on
// every replacement whatever the file system's timestamp resolution.
//
// A body returned by Get keeps reading the object it opened even if the
// object is deleted or replaced meanwhile.
//
// # Leases
//
// Bucket implements objstore.Leaser across the processes of one machine
// that share the folder. The lease on a key is a small JSON file in
// .rollstore-leases, named by a hash of the key, holding the owner's random
// lease id and the expiry time; every change to it is made under flock(2)
// on a lock file beside it, which serialises the goroutines of one process
// as well as processes. Expiry is read from the Bucket's clock (WithClock),
// so all processes sharing a folder must share a clock: the machine's, or
// in tests one fake clock. Lease files are not synced: they only coordinate
// processes on this machine, and a crash of the machine ends every holder.
// A damaged lease file, which only such a crash can leave, counts as no
// lease.
//
// As on Azure, a leased object cannot be written or deleted
// (objstore.ErrLeased), and writing or deleting one whose lease expired
// ends the lease. Put and Delete check under the same lock once a key has
// ever been leased, so the check is atomic with lease changes except
// against the very first AcquireLease of a key. On systems without flock(2)
// (Windows), leases are only exclusive among the Buckets of one process.
package local

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

const (
	// objSuffix ends the name of every object file; see the package
	// documentation.
	objSuffix = ".rso"
	// tmpDir is the reserved top-level directory for temporary files. It is
	// inside root so that renames and links out of it stay on one file
	// system.
	tmpDir = ".rollstore-tmp"
	// leaseDir is the reserved top-level directory for lease files; see
	// lease.go.
	leaseDir = ".rollstore-leases"
	// tmpMaxAge is how long a temporary file may go unwritten before Open
	// takes it for a crashed writer's leftover.
	tmpMaxAge = time.Hour

	dirPerm  fs.FileMode = 0o755
	filePerm fs.FileMode = 0o644

	// commitAttempts bounds how often a Put recreates a directory that a
	// concurrent Delete pruned between the Put's mkdir and its rename.
	commitAttempts = 8
)

// keyLocks serialise the check-and-replace of an If-Match Put with the
// other writers of the same key. They are shared by every Bucket in the
// process, so two Buckets over one folder are still atomic with each other.
var (
	keyLockSeed = maphash.MakeSeed()
	keyLocks    [64]sync.Mutex
)

func keyLock(key string) *sync.Mutex {
	return &keyLocks[maphash.String(keyLockSeed, key)%uint64(len(keyLocks))]
}

// Bucket is an objstore.Bucket over a folder. It is safe for concurrent use,
// also by several processes over the same folder (subject to the IfMatch
// caveat in the package documentation).
type Bucket struct {
	path string // absolute, as given to Open: for messages and checkRoot
	root *os.Root
	now  func() time.Time
}

var _ objstore.Bucket = (*Bucket)(nil)

// An Option configures a Bucket made by Open.
type Option func(*Bucket)

// WithClock makes the Bucket read the time for leases from now instead of
// time.Now, so that tests can expire leases without waiting. Every Bucket
// sharing a folder must read the same clock. Object times are the file
// system's and are not affected. now must be safe for concurrent use.
func WithClock(now func() time.Time) Option {
	return func(b *Bucket) { b.now = now }
}

// Open returns a Bucket storing objects under the folder dir, creating it if
// it is missing. Close releases it.
func Open(dir string, opts ...Option) (*Bucket, error) {
	if dir == "" {
		return nil, errors.New("local: open: empty folder name")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local: open %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, dirPerm); err != nil {
		return nil, fmt.Errorf("local: open: %w", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("local: open: %w", err)
	}
	b := &Bucket{path: abs, root: root, now: time.Now}
	for _, opt := range opts {
		opt(b)
	}
	if err := root.Mkdir(tmpDir, dirPerm); err != nil && !(errors.Is(err, fs.ErrExist) && b.isDir(tmpDir)) {
		root.Close()
		return nil, fmt.Errorf("local: open %s: reserved directory: %w", abs, err)
	}
	b.sweepTemp(time.Now().Add(-tmpMaxAge))
	return b, nil
}

// Close releases the Bucket's handle on its folder. Bodies already returned
// by Get stay readable.
func (b *Bucket) Close() error {
	return b.root.Close()
}

// Get opens the whole object.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Attrs, error) {
	obj, err := b.open(ctx, "get", key)
	if err != nil {
		return nil, objstore.Attrs{}, err
	}
	return newBody(ctx, obj.f, obj.attrs.Size), obj.attrs, nil
}

// GetRange opens length bytes from offset, as objstore.Bucket documents.
func (b *Bucket) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	const op = "get range"
	// The object is opened first so that a missing object is reported as
	// such whatever the range.
	obj, err := b.open(ctx, op, key)
	if err != nil {
		return nil, err
	}
	size := obj.attrs.Size
	if offset < 0 || offset > size {
		obj.f.Close()
		return nil, fmt.Errorf("local: %s %q: %w: offset %d, size %d", op, key, objstore.ErrInvalidRange, offset, size)
	}
	n := size - offset
	if length >= 0 && length < n {
		n = length
	}
	// The file is positioned at the payload's first byte.
	if _, err := obj.f.Seek(offset, io.SeekCurrent); err != nil {
		obj.f.Close()
		return nil, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	return newBody(ctx, obj.f, n), nil
}

// Head returns the attributes without the body.
func (b *Bucket) Head(ctx context.Context, key string) (objstore.Attrs, error) {
	obj, err := b.open(ctx, "head", key)
	if err != nil {
		return objstore.Attrs{}, err
	}
	obj.f.Close()
	return obj.attrs, nil
}

// object is an open object file, positioned at its first payload byte.
type object struct {
	f     *os.File
	attrs objstore.Attrs
}

// open opens the object at key for reading.
func (b *Bucket) open(ctx context.Context, op, key string) (object, error) {
	if err := ctx.Err(); err != nil {
		return object{}, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if err := checkKey(key); err != nil {
		return object{}, fmt.Errorf("local: %s: %w", op, err)
	}
	obj, err := b.openObject(nativePath(key))
	if err != nil {
		return object{}, b.mapErr(readOp, op, key, err)
	}
	obj.attrs.Key = key
	return obj, nil
}

// openObject opens and checks the object file name. Its errors are native
// ones, for the caller to map.
func (b *Bucket) openObject(name string) (object, error) {
	f, err := b.root.Open(name)
	if err != nil {
		return object{}, err
	}
	fi, err := f.Stat()
	if err == nil {
		switch {
		case fi.IsDir():
			// Not ours: no key makes a directory with this name.
			err = &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
		case !fi.Mode().IsRegular():
			err = &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w: not a regular file", errCorrupt)}
		}
	}
	var (
		h    header
		size int64
	)
	if err == nil {
		h, size, err = readHeader(f, fi.Size())
		if err != nil {
			err = &fs.PathError{Op: "read", Path: name, Err: err}
		}
	}
	if err != nil {
		f.Close()
		return object{}, err
	}
	return object{f: f, attrs: objstore.Attrs{
		Size:         size,
		ETag:         h.ETag,
		LastModified: fi.ModTime().UTC(),
		Metadata:     h.Metadata,
	}}, nil
}

// body is a Get body: the payload part of an open object file, which stops
// when ctx is done like a network body would.
type body struct {
	ctx context.Context
	f   *os.File
	r   io.LimitedReader
}

func newBody(ctx context.Context, f *os.File, n int64) *body {
	return &body{ctx: ctx, f: f, r: io.LimitedReader{R: f, N: n}}
}

func (rc *body) Read(p []byte) (int, error) {
	if err := rc.ctx.Err(); err != nil {
		return 0, err
	}
	return rc.r.Read(p)
}

func (rc *body) Close() error {
	return rc.f.Close()
}

// Put writes the object from r; see the package documentation for how it
// is made atomic and durable. A positive opts.Size must match the body's
// length, so that a truncated upload is never stored as complete.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) (objstore.Attrs, error) {
	const op = "put"
	if err := ctx.Err(); err != nil {
		return objstore.Attrs{}, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if err := checkKey(key); err != nil {
		return objstore.Attrs{}, fmt.Errorf("local: %s: %w", op, err)
	}
	if err := objstore.ValidateMetadata(opts.Metadata); err != nil {
		return objstore.Attrs{}, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if opts.IfNotExists && opts.IfMatch != "" {
		return objstore.Attrs{}, fmt.Errorf("local: %s %q: IfNotExists and IfMatch are mutually exclusive", op, key)
	}

	h := header{ETag: newETag()}
	if len(opts.Metadata) > 0 {
		h.Metadata = maps.Clone(opts.Metadata)
	}
	tmp, size, mtime, err := b.writeTemp(ctx, key, r, opts.Size, h)
	if err != nil {
		return objstore.Attrs{}, err
	}
	// After a rename this finds nothing; after a link or a failure it
	// removes the temporary name.
	defer b.root.Remove(tmp)

	// The last point at which a cancelled Put can leave no trace.
	if err := ctx.Err(); err != nil {
		return objstore.Attrs{}, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if err := b.commit(key, tmp, opts, true); err != nil {
		return objstore.Attrs{}, err
	}
	return objstore.Attrs{
		Key:          key,
		Size:         size,
		ETag:         h.ETag,
		LastModified: mtime.UTC(), // rename and link keep it
		Metadata:     h.Metadata,
	}, nil
}

// writeTemp writes a complete, synced object file under tmpDir, for the
// caller to commit under key or remove.
func (b *Bucket) writeTemp(ctx context.Context, key string, r io.Reader, want int64, h header) (tmpName string, size int64, mtime time.Time, err error) {
	prefix, err := encodePrefix(h)
	if err != nil {
		return "", 0, time.Time{}, fmt.Errorf("local: put %q: %w", key, err)
	}
	tmp, f, err := b.createTemp()
	if err != nil {
		return "", 0, time.Time{}, b.mapErr(writeOp, "put", key, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			b.root.Remove(tmp)
		}
	}()

	if _, err := f.Write(prefix); err != nil {
		return "", 0, time.Time{}, fmt.Errorf("local: put %q: %w", key, err)
	}
	if r != nil {
		if want > 0 && want < math.MaxInt64 {
			// One byte more than declared is enough to tell it was wrong.
			r = io.LimitReader(r, want+1)
		}
		src := &ctxReader{ctx: ctx, r: r}
		size, err = io.Copy(f, src)
		if src.err != nil {
			return "", 0, time.Time{}, fmt.Errorf("local: put %q: reading body: %w", key, src.err)
		}
		if err != nil {
			return "", 0, time.Time{}, fmt.Errorf("local: put %q: %w", key, err)
		}
	}
	if want > 0 && size != want {
		return "", 0, time.Time{}, fmt.Errorf("local: put %q: body length differs from PutOptions.Size %d", key, want)
	}
	err = putSize(f, size)
	if err == nil {
		err = f.Sync()
	}
	var fi fs.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		return "", 0, time.Time{}, fmt.Errorf("local: put %q: %w", key, err)
	}
	return tmp, size, fi.ModTime(), nil
}

// createTemp creates a fresh temporary file.
func (b *Bucket) createTemp() (string, *os.File, error) {
	name := filepath.Join(tmpDir, rand.Text())
	const flag = os.O_WRONLY | os.O_CREATE | os.O_EXCL
	f, err := b.root.OpenFile(name, flag, filePerm)
	if errors.Is(err, fs.ErrNotExist) {
		// Someone removed the reserved directory; it is ours to recreate.
		if err := b.root.Mkdir(tmpDir, dirPerm); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", nil, err
		}
		f, err = b.root.OpenFile(name, flag, filePerm)
	}
	return name, f, err
}

// commit moves the finished temporary file tmp to key. Unless the caller
// holds key's lease lock already (guard false), it refuses a leased key.
func (b *Bucket) commit(key, tmp string, opts objstore.PutOptions, guard bool) error {
	name := nativePath(key)
	dir := filepath.Dir(name)
	kind := writeOp
	var g leaseGuard
	if guard {
		var err error
		if g, err = b.guardLease("put", key); err != nil {
			return err
		}
		defer g.unlock()
	}
	var err error
	switch {
	case opts.IfMatch != "":
		// The object exists if the Put is to succeed, so its directory
		// does too.
		err = b.replaceIfMatch(key, tmp, name, opts.IfMatch)
	case opts.IfNotExists:
		kind = createOp
		for range commitAttempts {
			if err = b.mkdirs(dir); err == nil {
				err = b.root.Link(tmp, name)
			}
			// A concurrent Delete may have pruned dir after mkdirs.
			if !errors.Is(err, fs.ErrNotExist) {
				break
			}
		}
	default:
		for range commitAttempts {
			if err = b.mkdirs(dir); err == nil {
				mu := keyLock(key)
				mu.Lock()
				err = b.root.Rename(tmp, name)
				mu.Unlock()
			}
			if !errors.Is(err, fs.ErrNotExist) {
				break
			}
		}
	}
	if errors.Is(err, objstore.ErrPrecondition) {
		return err
	}
	if err != nil {
		return b.mapErr(kind, "put", key, err)
	}
	g.written()
	// A directory that vanished was pruned empty, so our object was
	// deleted after it landed: the Put itself happened.
	if err := b.syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: put %q: syncing directory: %w", key, err)
	}
	return nil
}

// replaceIfMatch renames tmp over name if the object there has ETag want.
// It returns ErrPrecondition errors ready-made and other errors native.
func (b *Bucket) replaceIfMatch(key, tmp, name, want string) error {
	mu := keyLock(key)
	mu.Lock()
	defer mu.Unlock()
	obj, err := b.openObject(name)
	if err != nil {
		if isMissing(err) {
			return fmt.Errorf("local: put %q: %w: object does not exist", key, objstore.ErrPrecondition)
		}
		return err
	}
	obj.f.Close()
	if obj.attrs.ETag != want {
		return fmt.Errorf("local: put %q: %w: etag is %s, want %s", key, objstore.ErrPrecondition, obj.attrs.ETag, want)
	}
	err = b.root.Rename(tmp, name)
	if isMissing(err) {
		// Another process deleted the object and pruned its directory.
		return fmt.Errorf("local: put %q: %w: object was deleted: %w", key, objstore.ErrPrecondition, err)
	}
	return err
}

// mkdirs creates dir and any missing parents, syncing the parent of each
// directory it creates so that an acknowledged object's path survives a
// crash.
func (b *Bucket) mkdirs(dir string) error {
	if dir == "." {
		return nil
	}
	err := b.root.Mkdir(dir, dirPerm)
	if errors.Is(err, fs.ErrNotExist) {
		if err := b.mkdirs(filepath.Dir(dir)); err != nil {
			return err
		}
		err = b.root.Mkdir(dir, dirPerm)
	}
	if errors.Is(err, fs.ErrExist) {
		// Possibly a foreign file: the commit then fails with ENOTDIR,
		// which mapErr reports as in the way.
		return nil
	}
	if err != nil {
		return err
	}
	return b.syncDir(filepath.Dir(dir))
}

func (b *Bucket) syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be opened for syncing there
	}
	d, err := b.root.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Delete removes the object; a missing object is success. Directories it
// leaves empty are removed too.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	const op = "delete"
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("local: %s: %w", op, err)
	}
	name := nativePath(key)
	g, err := b.guardLease(op, key)
	if err != nil {
		return err
	}
	mu := keyLock(key)
	mu.Lock()
	removed, err := b.remove(name)
	mu.Unlock()
	if err != nil {
		err = b.mapErr(deleteOp, op, key, err)
	}
	if err == nil {
		g.written()
	}
	g.unlock()
	if err != nil {
		return err
	}
	if removed {
		b.prune(filepath.Dir(name))
	}
	return nil
}

// remove unlinks the object file name, reporting whether there was one.
func (b *Bucket) remove(name string) (bool, error) {
	fi, err := b.root.Lstat(name)
	if err != nil {
		return false, err
	}
	if fi.IsDir() {
		return false, nil // not ours; see openObject
	}
	if err := b.root.Remove(name); err != nil {
		return false, err
	}
	return true, nil
}

// prune removes dir and its ancestors while they are empty. It is best
// effort: a directory that is not empty, or already gone, ends it, and a
// Put that loses its directory to a prune recreates it.
func (b *Bucket) prune(dir string) {
	for dir != "." {
		// The trailing separator makes Remove refuse anything but a
		// directory, should an object have taken the name meanwhile.
		if b.root.Remove(dir+string(filepath.Separator)) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// DeleteMany removes every key, missing ones included. It validates all
// keys before removing any, carries on past failures and reports them
// together, but stops when ctx is done or the folder is gone.
func (b *Bucket) DeleteMany(ctx context.Context, keys []string) error {
	for _, key := range keys {
		if err := checkKey(key); err != nil {
			return fmt.Errorf("local: delete many: %w", err)
		}
	}
	var errs []error
	for _, key := range keys {
		err := b.Delete(ctx, key)
		if err == nil {
			continue
		}
		errs = append(errs, err)
		if ctx.Err() != nil || errors.Is(err, objstore.ErrContainerNotFound) {
			break
		}
	}
	return errors.Join(errs...)
}

// sweepTemp removes temporary files not written since cutoff: a live Put
// writes its file continuously, so these are left over from crashes.
func (b *Bucket) sweepTemp(cutoff time.Time) {
	ents, err := b.readDir(tmpDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
			b.root.Remove(filepath.Join(tmpDir, e.Name()))
		}
	}
}

func (b *Bucket) readDir(name string) ([]fs.DirEntry, error) {
	d, err := b.root.Open(name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadDir(-1)
}

// checkKey is objstore.ValidateKey plus what this backend reserves.
func checkKey(key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if isReserved(key) {
		return fmt.Errorf("%w: %q: %s/ and %s/ are reserved by the local backend", objstore.ErrInvalidKey, key, tmpDir, leaseDir)
	}
	if i := strings.LastIndexByte(key, '/'); i >= 0 && !storableDir(key[:i+1]) {
		return fmt.Errorf("%w: %q: the local backend cannot store keys below a segment ending in %q", objstore.ErrInvalidKey, key, objSuffix)
	}
	return nil
}

// isReserved reports whether key or prefix lies in a reserved directory.
func isReserved(key string) bool {
	return strings.HasPrefix(key, tmpDir+"/") || strings.HasPrefix(key, leaseDir+"/")
}

// isReservedDir reports whether the directory entry name in the directory
// of keys dir is a reserved directory.
func isReservedDir(dir, name string) bool {
	return dir == "" && (name == tmpDir || name == leaseDir)
}

// storableDir reports whether the directory part dir of a key (ending in
// '/') can be a directory: none of its segments may look like an object
// file's name.
func storableDir(dir string) bool {
	for seg := range strings.SplitSeq(strings.TrimSuffix(dir, "/"), "/") {
		if strings.HasSuffix(seg, objSuffix) {
			return false
		}
	}
	return true
}

// nativePath is the name of key's object file relative to root. Validated
// keys have no "..", "." or empty segments, and os.Root refuses anything
// that would still resolve outside root (through a symbolic link, say).
func nativePath(key string) string {
	return filepath.FromSlash(key) + objSuffix
}

// nativeDir is the name of the directory holding the keys that start with
// dir (a key prefix ending in '/', or "" for root).
func nativeDir(dir string) string {
	if dir == "" {
		return "."
	}
	return filepath.FromSlash(strings.TrimSuffix(dir, "/"))
}

// isMissing reports native errors that mean no object file exists by a
// name: the name, a parent, or the name is a directory of other objects.
func isMissing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

func newETag() string {
	return `"` + rand.Text() + `"`
}

// ctxReader stops a copy once ctx is done, and keeps the source's own error
// so that Put can tell a failing body from a failing disk.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
	err error
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		c.err = err
		return 0, err
	}
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}
