package local

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

var _ objstore.Leaser = (*Bucket)(nil)

// leaseRecord is the content of a lease file.
type leaseRecord struct {
	Key     string `json:"key"` // for whoever looks; the file name is a hash
	ID      string `json:"id"`
	Expires int64  `json:"expires_unix_nano"`
}

// live reports whether the lease still excludes others at now. A lease
// stays on file after it expires, so that its holder can renew it as long
// as nobody else has taken it, as on Azure.
func (r leaseRecord) live(now time.Time) bool { return now.UnixNano() < r.Expires }

// leaseName returns the name, relative to root, of key's lease file and
// lock file without their suffixes. Keys are hashed so that any key, at any
// depth and length, maps to one flat name.
func leaseName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(leaseDir, hex.EncodeToString(sum[:]))
}

// lockLease opens key's lock file, creating it and the lease directory if
// create is set, and locks it exclusively. Lock files are never removed:
// a process could otherwise lock a file that another has just unlinked and
// replaced, and two owners would each hold a lock. Errors are native.
func (b *Bucket) lockLease(key string, create bool) (unlock func(), err error) {
	name := leaseName(key) + ".lock"
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	f, err := b.root.OpenFile(name, flag, filePerm)
	if create && errors.Is(err, fs.ErrNotExist) {
		if err := b.mkdirs(leaseDir); err != nil {
			return nil, err
		}
		f, err = b.root.OpenFile(name, flag, filePerm)
	}
	if err != nil {
		return nil, err
	}
	release, err := lockFile(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		release()
		f.Close()
	}, nil
}

// readLease returns key's lease record, and false if there is none. The
// lock need not be held: lease files are replaced by rename, never
// rewritten in place. A damaged file counts as no lease (see the package
// documentation). Errors are native.
func (b *Bucket) readLease(key string) (leaseRecord, bool, error) {
	f, err := b.root.Open(leaseName(key) + ".lease")
	if errors.Is(err, fs.ErrNotExist) {
		return leaseRecord{}, false, nil
	}
	if err != nil {
		return leaseRecord{}, false, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return leaseRecord{}, false, err
	}
	var r leaseRecord
	if json.Unmarshal(data, &r) != nil || r.ID == "" {
		return leaseRecord{}, false, nil
	}
	return r, true, nil
}

// writeLease replaces key's lease file with r; the lock must be held.
// Errors are native.
func (b *Bucket) writeLease(r leaseRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp, f, err := b.createTemp()
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = b.root.Rename(tmp, leaseName(r.Key)+".lease")
	}
	if err != nil {
		b.root.Remove(tmp)
	}
	return err
}

// removeLease removes key's lease file; the lock must be held.
func (b *Bucket) removeLease(key string) error {
	err := b.root.Remove(leaseName(key) + ".lease")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// leaseGuard holds key's lease lock across a write or delete of the
// object, which guardLease has found is not leased. The zero leaseGuard,
// for a key never leased, does nothing.
type leaseGuard struct {
	b       *Bucket
	key     string
	release func()
	expired bool // an expired lease is on file
}

// guardLease returns objstore.ErrLeased if a lease on key is live, and
// otherwise a guard that keeps the lease from changing until unlock. Keys
// never leased have no lock file, and most writes stop there. Errors are
// ready to return from op.
func (b *Bucket) guardLease(op, key string) (leaseGuard, error) {
	release, err := b.lockLease(key, false)
	if isMissing(err) {
		return leaseGuard{}, nil
	}
	if err != nil {
		return leaseGuard{}, b.mapErr(writeOp, op, key, err)
	}
	r, ok, err := b.readLease(key)
	if err != nil {
		release()
		return leaseGuard{}, b.mapErr(writeOp, op, key, err)
	}
	if ok && r.live(b.now()) {
		release()
		return leaseGuard{}, fmt.Errorf("local: %s %q: %w", op, key, objstore.ErrLeased)
	}
	return leaseGuard{b: b, key: key, release: release, expired: ok}, nil
}

// written ends the expired lease, if any, because the object was written or
// deleted: as on Azure, its holder can no longer renew it. Failing to
// remove it only leaves it renewable, so the error is dropped.
func (g leaseGuard) written() {
	if g.expired {
		g.b.removeLease(g.key)
	}
}

func (g leaseGuard) unlock() {
	if g.release != nil {
		g.release()
	}
}

// AcquireLease takes a lease on key for d, which must be a whole number of
// seconds from 15 to 60 as on Azure, creating an empty object at key if
// there is none. While the lease is live, Put and Delete of key fail with
// objstore.ErrLeased, even for the holder (Azure would want the lease id,
// which the object API does not carry).
func (b *Bucket) AcquireLease(ctx context.Context, key string, d time.Duration) (objstore.Lease, error) {
	const op = "acquire lease"
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("local: %s: %w", op, err)
	}
	if err := objstore.ValidateLeaseDuration(d); err != nil {
		return nil, fmt.Errorf("local: %s %q: %w", op, key, err)
	}
	unlock, err := b.lockLease(key, true)
	if err != nil {
		return nil, b.mapErr(writeOp, op, key, err)
	}
	defer unlock()
	r, ok, err := b.readLease(key)
	if err != nil {
		return nil, b.mapErr(writeOp, op, key, err)
	}
	now := b.now()
	if ok && r.live(now) {
		return nil, fmt.Errorf("local: %s %q: %w", op, key, objstore.ErrLeased)
	}
	// Created under the lock, so that a Put or Delete that finds the lock
	// file waits and then sees the lease.
	if err := b.ensureObject(ctx, key); err != nil {
		return nil, err
	}
	l := &fileLease{b: b, key: key, id: rand.Text(), d: d}
	if err := b.writeLease(leaseRecord{Key: key, ID: l.id, Expires: now.Add(d).UnixNano()}); err != nil {
		return nil, b.mapErr(writeOp, op, key, err)
	}
	return l, nil
}

// ensureObject creates an empty object at key unless there is one. The
// caller holds key's lease lock.
func (b *Bucket) ensureObject(ctx context.Context, key string) error {
	if fi, err := b.root.Stat(nativePath(key)); err == nil && fi.Mode().IsRegular() {
		return nil
	}
	tmp, _, id, err := b.writeTemp(ctx, key, nil, 0)
	if err != nil {
		return err
	}
	defer b.root.Remove(tmp)
	err = b.commit(ctx, key, tmp, id, sidecar{ETag: newETag()}, objstore.PutOptions{IfNotExists: true}, false)
	if errors.Is(err, objstore.ErrPrecondition) {
		return nil // created meanwhile, by a Put
	}
	return err
}

// fileLease is a held lease: the id it wrote to the lease file.
type fileLease struct {
	b   *Bucket
	key string
	id  string
	d   time.Duration
}

// Renew extends the lease by its duration from now. A lease that expired
// is renewed as long as nobody took it and the object was not written or
// deleted since; otherwise, or once released, Renew reports
// objstore.ErrLeaseLost.
func (l *fileLease) Renew(ctx context.Context) error {
	const op = "renew lease"
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: %s %q: %w", op, l.key, err)
	}
	lost := fmt.Errorf("local: %s %q: %w", op, l.key, objstore.ErrLeaseLost)
	unlock, err := l.b.lockLease(l.key, false)
	if isMissing(err) {
		// The lease directory was removed, and the lease with it, unless
		// the whole folder is gone.
		if rerr := l.b.checkRoot(); rerr != nil {
			return fmt.Errorf("local: %s %q: %w", op, l.key, rerr)
		}
		return lost
	}
	if err != nil {
		return l.b.mapErr(writeOp, op, l.key, err)
	}
	defer unlock()
	r, ok, err := l.b.readLease(l.key)
	if err != nil {
		return l.b.mapErr(writeOp, op, l.key, err)
	}
	if !ok || r.ID != l.id {
		return lost
	}
	r.Expires = l.b.now().Add(l.d).UnixNano()
	if err := l.b.writeLease(r); err != nil {
		return l.b.mapErr(writeOp, op, l.key, err)
	}
	return nil
}

// Release gives the lease up. Releasing a lease that is no longer held
// returns nil: what Release was asked for is true.
func (l *fileLease) Release(ctx context.Context) error {
	const op = "release lease"
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local: %s %q: %w", op, l.key, err)
	}
	unlock, err := l.b.lockLease(l.key, false)
	if isMissing(err) {
		if rerr := l.b.checkRoot(); rerr != nil {
			return fmt.Errorf("local: %s %q: %w", op, l.key, rerr)
		}
		return nil
	}
	if err != nil {
		return l.b.mapErr(writeOp, op, l.key, err)
	}
	defer unlock()
	r, ok, err := l.b.readLease(l.key)
	if err != nil {
		return l.b.mapErr(writeOp, op, l.key, err)
	}
	if ok && r.ID == l.id {
		if err := l.b.removeLease(l.key); err != nil {
			return l.b.mapErr(writeOp, op, l.key, err)
		}
	}
	return nil
}

// Duration is the lease period.
func (l *fileLease) Duration() time.Duration { return l.d }
