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
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
)

const (
	// reserved starts every name the backend keeps for itself; see the
	// package documentation.
	reserved = ".rollstore"
	// tmpDir holds temporary files. It is inside root so that renames and
	// links out of it stay on one file system.
	tmpDir = reserved + string(filepath.Separator) + "tmp"
	// leaseDir holds lease files; see lease.go.
	leaseDir = reserved + string(filepath.Separator) + "leases"
	// oldFormatDir marks a folder in the RSO1 format, which this package
	// does not read.
	oldFormatDir = ".rollstore-tmp"
	// tmpMaxAge is how long a temporary file may go unwritten before Open
	// takes it for a crashed writer's leftover.
	tmpMaxAge = time.Hour

	dirPerm  fs.FileMode = 0o755
	filePerm fs.FileMode = 0o644

	// commitAttempts bounds how often a Put recreates a directory that a
	// concurrent Delete pruned between the Put's mkdir and its rename.
	commitAttempts = 8
)

// Points at which a Bucket calls its hooks (WithHooks), between the steps
// whose order the package documentation promises.
const (
	// HookPutSidecar: the sidecar is durable, the file not yet published.
	HookPutSidecar = "local.put.sidecar-written"
	// HookPutPublished: the file is published and durable; the sidecar of
	// the file it replaced is not yet removed. An error here makes Put
	// return it without removing that sidecar.
	HookPutPublished = "local.put.published"
	// HookDeleteUnlinked: the file is unlinked, its sidecar not yet removed.
	HookDeleteUnlinked = "local.delete.unlinked"
)

// ErrOldFormat reports a folder in the RSO1 format (objects in *.rso files),
// which this package does not read and Open refuses; see the package
// documentation.
var ErrOldFormat = errors.New("local: folder is in the old RSO1 format (objects in *.rso files); this version stores objects as plain files and cannot read it: move it aside or delete it")

// keyLocks serialise the writers of one key in this process: the
// check-and-replace of an If-Match Put, and the publish of a Put or Delete
// with the removal of the sidecar it obsoletes. They are shared by every
// Bucket in the process, so two Buckets over one folder are still atomic
// with each other.
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
	hook hook.Func
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

// WithHooks makes the Bucket call h at the Hook* points, so that tests can
// pause, fail or kill a Put or Delete between its steps.
func WithHooks(h hook.Func) Option {
	return func(b *Bucket) { b.hook = h }
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
	if b.isDir(oldFormatDir) {
		root.Close()
		return nil, fmt.Errorf("%w (%s)", ErrOldFormat, abs)
	}
	if err := b.mkdirs(tmpDir); err != nil {
		root.Close()
		return nil, fmt.Errorf("local: open %s: reserved directory: %w", abs, err)
	}
	if err := b.checkFileIDs(); err != nil {
		root.Close()
		return nil, fmt.Errorf("local: open %s: %w", abs, err)
	}
	b.sweepTemp(time.Now().Add(-tmpMaxAge))
	return b, nil
}

// checkFileIDs fails where files have no id to name sidecars by, so that
// such a platform fails at Open rather than at the first Put.
func (b *Bucket) checkFileIDs() error {
	tmp, f, err := b.createTemp()
	if err != nil {
		return err
	}
	defer b.root.Remove(tmp)
	defer f.Close()
	fi, err := f.Stat()
	if err == nil {
		_, err = fileID(f, fi)
	}
	return err
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
	if _, err := obj.f.Seek(offset, io.SeekStart); err != nil {
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

// open opens the object at key for reading.
func (b *Bucket) open(ctx context.Context, op, key string) (object, error) {
	if err := ctx.Err(); err != nil {
		return object{}, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if err := checkKey(key); err != nil {
		return object{}, fmt.Errorf("local: %s: %w", op, err)
	}
	obj, err := b.openObject(key)
	if err != nil {
		return object{}, b.mapErr(readOp, op, key, err)
	}
	return obj, nil
}

// body is a Get body: an open object file, which stops when ctx is done
// like a network body would.
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
	if err := objstore.ValidateContentType(opts.ContentType); err != nil {
		return objstore.Attrs{}, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if opts.IfNotExists && opts.IfMatch != "" {
		return objstore.Attrs{}, fmt.Errorf("local: %s %q: IfNotExists and IfMatch are mutually exclusive", op, key)
	}

	s := sidecar{ETag: newETag(), ContentType: opts.ContentType}
	if len(opts.Metadata) > 0 {
		s.Metadata = maps.Clone(opts.Metadata)
	}
	tmp, fi, id, err := b.writeTemp(ctx, key, r, opts.Size)
	if err != nil {
		return objstore.Attrs{}, err
	}
	// After a rename this finds nothing; after a link or a failure it
	// removes the temporary name.
	defer b.root.Remove(tmp)
	s.Size = fi.Size()

	// The last point at which a cancelled Put can leave no trace.
	if err := ctx.Err(); err != nil {
		return objstore.Attrs{}, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if err := b.commit(ctx, key, tmp, id, s, opts, true); err != nil {
		return objstore.Attrs{}, err
	}
	return objstore.Attrs{
		Key:          key,
		Size:         s.Size,
		ETag:         s.ETag,
		LastModified: fi.ModTime().UTC(), // rename and link keep it
		Metadata:     s.Metadata,
		ContentType:  contentType(s.ContentType),
	}, nil
}

// writeTemp writes the body to a complete, synced temporary file, for the
// caller to commit under key or remove, and returns its stat and id.
func (b *Bucket) writeTemp(ctx context.Context, key string, r io.Reader, want int64) (tmpName string, fi fs.FileInfo, id uint64, err error) {
	tmp, f, err := b.createTemp()
	if err != nil {
		return "", nil, 0, b.mapErr(writeOp, "put", key, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			b.root.Remove(tmp)
		}
	}()
	var size int64
	if r != nil {
		if want > 0 && want < math.MaxInt64 {
			// One byte more than declared is enough to tell it was wrong.
			r = io.LimitReader(r, want+1)
		}
		src := &ctxReader{ctx: ctx, r: r}
		size, err = io.Copy(f, src)
		if src.err != nil {
			return "", nil, 0, fmt.Errorf("local: put %q: reading body: %w", key, src.err)
		}
		if err != nil {
			return "", nil, 0, fmt.Errorf("local: put %q: %w", key, err)
		}
	}
	if want > 0 && size != want {
		return "", nil, 0, fmt.Errorf("local: put %q: body length differs from PutOptions.Size %d", key, want)
	}
	err = f.Sync()
	if err == nil {
		fi, err = f.Stat()
	}
	if err == nil {
		id, err = fileID(f, fi)
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		return "", nil, 0, fmt.Errorf("local: put %q: %w", key, err)
	}
	return tmp, fi, id, nil
}

// createTemp creates a fresh temporary file.
func (b *Bucket) createTemp() (string, *os.File, error) {
	name := filepath.Join(tmpDir, rand.Text())
	const flag = os.O_WRONLY | os.O_CREATE | os.O_EXCL
	f, err := b.root.OpenFile(name, flag, filePerm)
	if errors.Is(err, fs.ErrNotExist) {
		// Someone removed the reserved directory; it is ours to recreate.
		if err := b.mkdirs(tmpDir); err != nil {
			return "", nil, err
		}
		f, err = b.root.OpenFile(name, flag, filePerm)
	}
	return name, f, err
}

// writeSidecar writes s to a synced temporary file, for the caller to
// rename into place.
func (b *Bucket) writeSidecar(s sidecar) (string, error) {
	data, err := s.encode()
	if err != nil {
		return "", err
	}
	tmp, f, err := b.createTemp()
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.root.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// commit publishes the finished temporary file tmp, whose id is id, under
// key with sidecar s, in the order the package documentation gives. Unless
// the caller holds key's lease lock already (guard false), it refuses a
// leased key.
func (b *Bucket) commit(ctx context.Context, key, tmp string, id uint64, s sidecar, opts objstore.PutOptions, guard bool) error {
	const op = "put"
	name := nativePath(key)
	dir := filepath.Dir(name)
	kind := writeOp
	if opts.IfNotExists {
		kind = createOp
	}
	published := false
	if guard {
		g, err := b.guardLease(op, key)
		if err != nil {
			return err
		}
		defer func() {
			if published {
				g.written()
			}
			g.unlock()
		}()
	}
	mu := keyLock(key)
	mu.Lock()
	defer mu.Unlock()

	// The file this Put replaces, held open so that its id cannot be
	// reused until its sidecar is removed.
	var old *object
	defer func() {
		if old != nil {
			old.f.Close()
		}
	}()
	if !opts.IfNotExists {
		o, err := b.openObject(key)
		switch {
		case err == nil:
			old = &o
		case opts.IfMatch != "" && isMissing(err):
			return fmt.Errorf("local: %s %q: %w: object does not exist", op, key, objstore.ErrPrecondition)
		case opts.IfMatch != "" || !isMissing(err) && !errors.Is(err, errCorrupt):
			// Replacing a damaged object is allowed (it is how one is
			// repaired); comparing its ETag is not.
			return b.mapErr(kind, op, key, err)
		}
		if opts.IfMatch != "" && old.attrs.ETag != opts.IfMatch {
			return fmt.Errorf("local: %s %q: %w: etag is %s, want %s", op, key, objstore.ErrPrecondition, old.attrs.ETag, opts.IfMatch)
		}
	}

	meta := sidecarName(key, id)
	if err := b.placeSidecar(key, meta, s); err != nil {
		return err
	}
	defer func() {
		if !published {
			b.root.Remove(meta)
			b.prune(dir)
		}
	}()
	if err := b.hook.Call(ctx, HookPutSidecar); err != nil {
		return fmt.Errorf("local: %s %q: %w", op, key, err)
	}

	var err error
	if opts.IfNotExists {
		err = b.root.Link(tmp, name)
	} else {
		err = b.root.Rename(tmp, name)
	}
	if err != nil {
		if isMissing(err) && !errors.Is(err, fs.ErrNotExist) || b.isDir(name) {
			err = fmt.Errorf("%w: %w", objstore.ErrKeyConflict, err)
		}
		return b.mapErr(kind, op, key, err)
	}
	published = true
	// The removal of the old sidecar must not be durable before the
	// rename is: the old file would be back without one.
	if err := b.syncDir(dir); err != nil {
		return fmt.Errorf("local: %s %q: syncing directory: %w", op, key, err)
	}
	if err := b.hook.Call(ctx, HookPutPublished); err != nil {
		return fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if old != nil && old.meta != meta {
		b.root.Remove(old.meta) // a leftover at worst; see the package documentation
	}
	return nil
}

// placeSidecar makes s the durable sidecar meta of key's next file,
// creating the directories on the way. A concurrent Delete may prune them
// between the mkdir and the rename, so that is retried; once the sidecar
// is in, its directory is not empty and stays.
func (b *Bucket) placeSidecar(key, meta string, s sidecar) error {
	tmp, err := b.writeSidecar(s)
	if err != nil {
		return b.mapErr(writeOp, "put", key, err)
	}
	defer b.root.Remove(tmp)
	mdir := filepath.Dir(meta)
	for range commitAttempts {
		if err = b.mkdirs(mdir); err == nil {
			err = b.root.Rename(tmp, meta)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err == nil {
		err = b.syncDir(mdir)
	}
	if err != nil {
		if isMissing(err) && !errors.Is(err, fs.ErrNotExist) {
			// A file where a directory of keys must go.
			err = fmt.Errorf("%w: %w", objstore.ErrKeyConflict, err)
		}
		b.root.Remove(meta)
		return b.mapErr(writeOp, "put", key, err)
	}
	return nil
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
		// Possibly a file: what comes next then fails with ENOTDIR.
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
	g, err := b.guardLease(op, key)
	if err != nil {
		return err
	}
	defer g.unlock()
	removed, err := b.remove(ctx, key, "")
	if err != nil {
		return b.mapErr(deleteOp, op, key, err)
	}
	g.written()
	if removed {
		b.prune(filepath.Dir(nativePath(key)))
	}
	return nil
}

// DeleteIfMatch removes the object if its ETag is etag. Like an If-Match
// Put, it is atomic among the Buckets of this process.
func (b *Bucket) DeleteIfMatch(ctx context.Context, key, etag string) error {
	const op = "delete"
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("local: %s: %w", op, err)
	}
	if etag == "" {
		return fmt.Errorf("local: %s %q: %w: no ETag to match", op, key, objstore.ErrPrecondition)
	}
	g, err := b.guardLease(op, key)
	if err != nil {
		return err
	}
	defer g.unlock()
	if _, err := b.remove(ctx, key, etag); err != nil {
		if isMissing(err) {
			return fmt.Errorf("local: %s %q: %w: no such object", op, key, objstore.ErrPrecondition)
		}
		return b.mapErr(writeOp, op, key, err)
	}
	g.written()
	b.prune(filepath.Dir(nativePath(key)))
	return nil
}

// remove unlinks key's file, then its sidecar, reporting whether there was
// a file. With an etag, only an object of that ETag is removed: a missing
// one is fs.ErrNotExist, another ErrPrecondition. Errors are native.
func (b *Bucket) remove(ctx context.Context, key, etag string) (bool, error) {
	name := nativePath(key)
	mu := keyLock(key)
	mu.Lock()
	defer mu.Unlock()
	fi, err := b.root.Lstat(name)
	if err != nil {
		return false, err
	}
	if fi.IsDir() {
		if etag != "" {
			return false, fs.ErrNotExist
		}
		return false, nil // keys below it, not an object
	}
	// Held open, so that the id naming its sidecar is not reused before
	// the sidecar is gone. A damaged object or a foreign file is removed
	// all the same, with whatever sidecar it has.
	obj, oerr := b.openObject(key)
	if oerr == nil {
		defer obj.f.Close()
	}
	if etag != "" {
		if oerr != nil {
			return false, oerr
		}
		if obj.attrs.ETag != etag {
			return false, fmt.Errorf("%w: etag is %s, want %s", objstore.ErrPrecondition, obj.attrs.ETag, etag)
		}
	}
	if err := b.root.Remove(name); err != nil {
		return false, err
	}
	if oerr == nil {
		if err := b.hook.Call(ctx, HookDeleteUnlinked); err != nil {
			return true, err
		}
		b.root.Remove(obj.meta)
	}
	return true, nil
}

// prune removes dir, with its sidecar directory, and its ancestors while
// they are empty. It is best effort: a directory that is not empty, or
// already gone, ends it, and a Put that loses its directory to a prune
// recreates it.
func (b *Bucket) prune(dir string) {
	for dir != "." {
		b.root.Remove(metaDirOf(dir) + string(filepath.Separator))
		// The trailing separator makes Remove refuse anything but a
		// directory, should an object have taken the name meanwhile.
		if b.root.Remove(dir+string(filepath.Separator)) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
	b.root.Remove(metaDir + string(filepath.Separator))
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
	dir := tmpDir
	ents, err := b.readDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
			b.root.Remove(filepath.Join(dir, e.Name()))
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

// checkKey is objstore.ValidateKey plus the names this backend reserves.
func checkKey(key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	for seg := range strings.SplitSeq(key, "/") {
		if isReserved(seg) {
			return fmt.Errorf("%w: %q: names starting with %q are reserved by the local backend", objstore.ErrInvalidKey, key, reserved)
		}
	}
	return nil
}

// isReserved reports whether a file or key segment name is the backend's.
func isReserved(name string) bool {
	return strings.HasPrefix(name, reserved)
}

// nativePath is the name of key's file relative to root. Validated keys
// have no "..", "." or empty segments, and os.Root refuses anything that
// would still resolve outside root (through a symbolic link, say).
func nativePath(key string) string {
	return filepath.FromSlash(key)
}

// nativeDir is the name of the directory holding the keys that start with
// dir (a key prefix ending in '/', or "" for root).
func nativeDir(dir string) string {
	if dir == "" {
		return "."
	}
	return filepath.FromSlash(strings.TrimSuffix(dir, "/"))
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
