package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// ReadOptions select what a read sees.
type ReadOptions struct {
	// Version pins the read to one base version: no WAL, no refresh, no
	// retry against newer versions. 0 reads the latest view.
	Version uint64
}

// maxRetries bounds how often a read retries after a file vanished under
// it (docs/design.md, invariant 6): a concurrent merge reclaims a
// generation at most once per commit, so two retries against fresh
// snapshots suffice; a file still missing after that is an error, not a
// loop.
const maxRetries = 2

// Get returns a row's metadata (payload bytes are not loaded).
func (t *Table) Get(ctx context.Context, id string, opts ReadOptions) (*Record, error) {
	rec, err := t.get(ctx, id, opts)
	return onSuccessor(ctx, t, rec, err, func(nt *Table) (*Record, error) { return nt.get(ctx, id, opts) })
}

func (t *Table) get(ctx context.Context, id string, opts ReadOptions) (*Record, error) {
	if err := rowfile.ValidateID(id); err != nil {
		return nil, err
	}
	var out *Record
	var attempts int
	err := t.withRow(ctx, id, opts, &attempts, func(ctx context.Context, loc location) error {
		rec, err := t.readRow(ctx, loc)
		if err == nil {
			out = rec
		}
		return err
	})
	return out, err
}

// withRow finds id and calls use with its location, recovering from
// files reclaimed under the read:
//
//  1. The resident snapshot first: its base, then its pending
//     generations. Ids are immutable, so a row found there is the row; a
//     hit costs no request beyond the row itself.
//  2. Otherwise a refresh that started after the read began (so every
//     write acknowledged before the read is visible): its base, then its
//     pending generations. A miss there is final (see refreshSnapshot).
//
// If use fails with objstore.ErrNotFound, the file was reclaimed (or, for
// a stale snapshot, collected): retry against a refresh that also probes
// for the newest base, at most maxRetries times, counted in *attempts
// across calls for one logical read.
func (t *Table) withRow(ctx context.Context, id string, opts ReadOptions, attempts *int, use func(context.Context, location) error) error {
	if err := t.checkLive(); err != nil {
		return err
	}
	start := t.db.rt.Now()
	if opts.Version > 0 {
		return t.withPinned(ctx, id, opts.Version, start, use)
	}
	return t.withRowIn(ctx, t.newReadView(false), id, start, attempts, use)
}

// readView is where a read of the latest view starts: the refresh ticket
// and the resident snapshot as they were when the read began. A shared
// view serves every id of one GetMany: the ids the resident snapshot does
// not hold then share one refresh that started after the read began (a
// miss there is final for each of them), and the refreshes that recover
// from a reclaimed file are shared too, each still one that started after
// the failure it recovers from.
type readView struct {
	ticket   uint64
	resident *snapshot
	shared   bool

	mu         sync.Mutex
	last       *snapshot // the newest snapshot a refresh of this view returned
	lastProbed bool      // ...built by a refresh that probed for the newest base
	// parts holds, per partition, a snapshot whose view of it was
	// refreshed after ticket.
	parts map[string]*snapshot
}

func (t *Table) newReadView(shared bool) *readView {
	ticket := t.refresh.ticket()
	return &readView{ticket: ticket, resident: t.fresh(), shared: shared}
}

// refreshed is t.refreshed, answered from the view's last refresh when
// that one started after ticket (and probed, if probe): the condition
// under which the refresher itself would let the caller join it.
//
// For a read of one id (shard: its partition) in a partitioned table, the
// refresh is of that partition only: one HEAD of its head.
func (v *readView) refreshed(ctx context.Context, t *Table, shard string, ticket uint64, probe bool) (*snapshot, error) {
	if shard != "" && t.partitions > 0 && !probe {
		if !v.shared || ticket != v.ticket {
			return t.refreshedPartition(ctx, shard, ticket)
		}
		// One refresh of each partition serves every id of the view.
		v.mu.Lock()
		s := v.parts[shard]
		v.mu.Unlock()
		if s != nil {
			return s, nil
		}
		s, err := t.refreshedPartition(ctx, shard, ticket)
		if err != nil {
			return nil, err
		}
		v.mu.Lock()
		if v.parts == nil {
			v.parts = map[string]*snapshot{}
		}
		v.parts[shard] = s
		v.mu.Unlock()
		return s, nil
	}
	if !v.shared {
		return t.refreshed(ctx, ticket, probe)
	}
	v.mu.Lock()
	s, probed := v.last, v.lastProbed
	v.mu.Unlock()
	if s != nil && s.flight > ticket && (probed || !probe) {
		return s, nil
	}
	s, err := t.refreshed(ctx, ticket, probe)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	if v.last == nil || s.flight > v.last.flight {
		v.last, v.lastProbed = s, probe
	} else if s.flight == v.last.flight && probe {
		v.lastProbed = true
	}
	v.mu.Unlock()
	return s, nil
}

// withRowIn is withRow for the latest view, starting from view; the read
// began at start.
func (t *Table) withRowIn(ctx context.Context, view *readView, id string, start time.Time, attempts *int, use func(context.Context, location) error) error {
	st := t.db.stats
	ticket := view.ticket
	resident := view.resident
	known := resident.version()
	probe := *attempts > 0
	var causes []error // every attempt's failure, reported together
	if resident != nil && *attempts == 0 {
		if loc, ok := resident.find(id); ok {
			if err := t.db.point(ctx, hookReadLocated); err != nil {
				return err
			}
			err := use(ctx, loc)
			if err == nil {
				if loc.inBase {
					t.countRead(readBaseHit, start)
				} else {
					t.countRead(readWALHit, start)
				}
				return nil
			}
			if !errors.Is(err, objstore.ErrNotFound) {
				return err
			}
			// A file of a stale snapshot was reclaimed or collected.
			causes = append(causes, err)
			*attempts++
			st.ReadRetries.Add(1)
			probe = true
		}
	}
	for {
		s, err := view.refreshed(ctx, t, t.PartitionOf(id), ticket, probe)
		if err != nil {
			return err
		}
		loc, ok := s.find(id)
		if !ok {
			t.countRead(readAbsent, start)
			return fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		if err := t.db.point(ctx, hookReadLocated); err != nil {
			return err
		}
		err = use(ctx, loc)
		if err == nil {
			switch {
			case loc.inBase && loc.version > known:
				t.countRead(readLateBaseHit, start)
			case loc.inBase:
				t.countRead(readBaseHit, start)
			default:
				t.countRead(readWALHit, start)
			}
			return nil
		}
		if !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
		causes = append(causes, err)
		if *attempts >= maxRetries {
			return t.missing(ctx, fmt.Errorf("%w: %s after %d attempts: %w", ErrMissingFile, loc.key, *attempts+1, errors.Join(causes...)))
		}
		*attempts++
		st.ReadRetries.Add(1)
		ticket, probe = t.refresh.ticket(), true
	}
}

// withPinned reads from exactly one base version, once (docs/design.md,
// invariant 7). The version must still be retained when the read begins
// (in any process: the check is a HEAD of its manifest, not this process's
// cache).
func (t *Table) withPinned(ctx context.Context, id string, v uint64, start time.Time, use func(context.Context, location) error) error {
	s, err := t.pinnedSnapshot(ctx, v)
	if err != nil {
		return err
	}
	return t.withPinnedIn(ctx, s, id, v, start, use)
}

// withPinnedIn is withPinned in s, the base-only view of version v that
// pinnedSnapshot returned; the read began at start.
func (t *Table) withPinnedIn(ctx context.Context, s *snapshot, id string, v uint64, start time.Time, use func(context.Context, location) error) error {
	loc, ok := s.base.find(id)
	if !ok {
		t.countRead(readAbsent, start)
		return fmt.Errorf("%w: %q in version %d", ErrNotFound, id, v)
	}
	if err := t.db.point(ctx, hookReadLocated); err != nil {
		return err
	}
	err := use(ctx, loc)
	if errors.Is(err, objstore.ErrNotFound) {
		// The version's files were collected while it was cached here.
		t.pinned.Remove(v)
		t.db.stats.ReadMissingFile.Add(1)
		return fmt.Errorf("%w: version %d: %w", ErrVersionGone, v, err)
	}
	if err == nil {
		t.countRead(readBaseHit, start)
	}
	return err
}

// Outcomes of a point read that found its answer, counted and timed in
// Stats.
type readOutcome int

const (
	readBaseHit readOutcome = iota
	readWALHit
	readLateBaseHit
	readAbsent
)

// countRead counts a point read's outcome and times it from start.
func (t *Table) countRead(o readOutcome, start time.Time) {
	st := t.db.stats
	d := t.db.rt.Now().Sub(start)
	switch o {
	case readBaseHit:
		st.ReadBaseHits.Add(1)
		st.ReadBaseHitSeconds.observe(d)
	case readWALHit:
		st.ReadWALHits.Add(1)
		st.ReadWALHitSeconds.observe(d)
	case readLateBaseHit:
		st.ReadLateBaseHits.Add(1)
		st.ReadLateBaseHitSeconds.observe(d)
	case readAbsent:
		st.ReadAbsent.Add(1)
		st.ReadAbsentSeconds.observe(d)
	}
}

// pinnedSnapshot returns the base-only view of version v if v is still
// retained: ErrVersionGone or ErrNoVersion when its manifest is missing.
func (t *Table) pinnedSnapshot(ctx context.Context, v uint64) (*snapshot, error) {
	// The version must exist, in the table's incarnation as it is now (a
	// dropped incarnation's versions are not the table's: its files may
	// linger until they are collected), and be the version the table's
	// history holds: a merger that lost its lease can create an object at
	// a collected version's key, and the next version, which names its
	// parent, tells the two apart. All three checks in one round trip.
	var incErr, err, nextErr error
	var cur, next objstore.Attrs
	if perr := sched.Parallel(ctx, t.db.rt, 3, 3, func(ctx context.Context, i int) error {
		switch i {
		case 0:
			cur, err = t.db.store.Head(ctx, t.keys.Version(v))
		case 1:
			next, nextErr = t.db.store.Head(ctx, t.keys.Version(v+1))
		default:
			incErr = t.checkIncarnation(ctx)
		}
		return nil
	}); perr != nil {
		return nil, perr
	}
	if incErr != nil {
		return nil, t.noteGone(incErr)
	}
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			t.pinned.Remove(v)
			return nil, t.versionMissing(ctx, v)
		}
		return nil, err
	}
	// Is the object at v's key the table's version v? Yes if the next
	// version names it as its parent, or if it is this process's view's
	// base (loaded as the newest: a late merger's object never is). No if
	// the next names another (versions are collected oldest first, so a
	// late object at v means v+1 was collected too, or is one itself and
	// names the version it was built on). Otherwise (v+1 missing, failing,
	// or of a format without parent) the collection floor, read after the
	// HEAD of v answered, tells: a late object at v was created after v
	// was deleted, which was after the floor passed v.
	id := cur.Metadata["id"]
	parent, named := next.Metadata["parent"]
	switch view := t.snap.Load(); {
	case nextErr == nil && named && parent == id:
	case nextErr == nil && named:
		return nil, t.notInHistory(v)
	case view.version() == v && view.base.m.ID == id:
	default:
		reg, err := t.liveRegistry(ctx)
		if err != nil {
			return nil, err
		}
		if v < reg.Floor {
			return nil, t.notInHistory(v)
		}
	}
	s, err := t.pinned.GetOrLoad(ctx, v, func(ctx context.Context) (*snapshot, int64, error) {
		b, err := t.loadBase(ctx, v)
		if err != nil {
			return nil, 0, err
		}
		return &snapshot{base: b, shards: map[string]*shardView{}, size: b.size}, b.size, nil
	})
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, t.versionMissing(ctx, v)
	}
	if err == nil && s.base.m.ID != id {
		return nil, t.notInHistory(v) // loaded (or cached) from another object than the one checked
	}
	return s, err
}

// notInHistory answers a pinned read of version v that was collected,
// whatever object its key holds now.
func (t *Table) notInHistory(v uint64) error {
	t.pinned.Remove(v)
	return fmt.Errorf("%w: %d (collected)", ErrVersionGone, v)
}

func (t *Table) versionMissing(ctx context.Context, v uint64) error {
	// A version missing because this incarnation was dropped says nothing
	// about the table as it is now.
	if err := t.checkIncarnation(ctx); err != nil {
		return t.noteGone(err)
	}
	// Missing: collected if below the collection floor, read after the
	// manifest was found missing (retention raises it before it deletes);
	// otherwise not committed yet when it was looked for.
	reg, err := t.liveRegistry(ctx)
	if err != nil {
		return err
	}
	if v < reg.Floor {
		return fmt.Errorf("%w: %d", ErrVersionGone, v)
	}
	return fmt.Errorf("%w: %d (the newest the registry names is %d)", ErrNoVersion, v, reg.Base)
}

// readRow fetches a row's batch (one ranged GET, or none when cached;
// batches are immutable) and returns the row without payload bytes.
func (t *Table) readRow(ctx context.Context, loc location) (*Record, error) {
	ck := loc.key + "#" + strconv.FormatInt(loc.batch.Offset, 10)
	rows, err := t.db.batches.GetOrLoad(ctx, ck, func(ctx context.Context) ([]rowfile.Record, int64, error) {
		rows, err := t.fetchBatch(ctx, loc, false)
		if err != nil {
			return nil, 0, err
		}
		var size int64
		for i := range rows {
			size += int64(len(rows[i].ID)+len(rows[i].RolloutID)+len(rows[i].Metadata)+len(rows[i].PayloadRef)) + 256
		}
		return rows, size, nil
	})
	if err != nil {
		return nil, err
	}
	if int(loc.loc.Row) >= len(rows) || rows[loc.loc.Row].ID != loc.loc.ID {
		return nil, fmt.Errorf("%w: %s: batch does not hold %q at row %d", rowfile.ErrCorrupt, loc.key, loc.loc.ID, loc.loc.Row)
	}
	rec := rows[loc.loc.Row]
	return &rec, nil
}

// fetchBatch reads and decodes the batch holding loc's row: one ranged GET.
func (t *Table) fetchBatch(ctx context.Context, loc location, withPayload bool) ([]rowfile.Record, error) {
	data, err := readRange(ctx, t.db.store, loc.key, loc.batch.Offset, loc.batch.Length)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != loc.batch.Length {
		return nil, fmt.Errorf("%s: short read: %w", loc.key, io.ErrUnexpectedEOF)
	}
	rows, err := rowfile.DecodeBatch(data, withPayload)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", loc.key, err)
	}
	return rows, nil
}

// RangeError reports a payload range that starts past the payload's end.
type RangeError struct{ Size int64 }

func (e *RangeError) Error() string {
	return fmt.Sprintf("range not satisfiable: payload is %d bytes", e.Size)
}

// Stat describes a row's payload (id, size, checksum, content type,
// creation time, object) from its location alone: no request beyond
// finding the row, which the resident view usually answers. What a HEAD
// or a conditional request needs before any byte is read.
func (t *Table) Stat(ctx context.Context, id string, opts ReadOptions) (*Record, error) {
	rec, err := t.stat(ctx, id, opts)
	return onSuccessor(ctx, t, rec, err, func(nt *Table) (*Record, error) { return nt.stat(ctx, id, opts) })
}

func (t *Table) stat(ctx context.Context, id string, opts ReadOptions) (*Record, error) {
	if err := rowfile.ValidateID(id); err != nil {
		return nil, err
	}
	var out *Record
	var attempts int
	err := t.withRow(ctx, id, opts, &attempts, func(_ context.Context, loc location) error {
		out = payloadRecord(loc)
		return nil
	})
	return out, err
}

// Payload is an open payload read. Close it to release its share of the
// in-flight byte budget.
type Payload struct {
	// Record describes the payload: id, size, checksum, content type and
	// creation time (the other fields are not loaded; use Get).
	Record *Record
	// Offset and Length are the range being served.
	Offset, Length int64
	// Cached reports that the bytes come from the payload cache.
	Cached bool

	t        *Table
	opts     ReadOptions
	attempts int
	span     payloadSpan // where the body reads from: the row the latest attempt found
	rc       io.ReadCloser
	read     int64
	release  func()
	reserved int64 // what release gives back
}

// payloadSpan is where a row's payload bytes are: its own object, or the
// span of the file that holds the row. Two copies of one row (in a WAL
// segment and in the base) have the same payload at different spans, so a
// span is only ever used with the file of the row it was taken from.
type payloadSpan struct {
	key string
	off int64 // of the payload's first byte in key
}

func spanOf(loc location) payloadSpan {
	if loc.loc.Ref != "" {
		return payloadSpan{key: loc.loc.Ref}
	}
	return payloadSpan{key: loc.key, off: loc.loc.POff}
}

// payloadRecord is what a row's location says about its payload.
func payloadRecord(loc location) *Record {
	l := loc.loc
	return &Record{ID: l.ID, PayloadSize: l.Size, PayloadSHA256: l.SHA256, ContentType: l.ContentType,
		CreatedAt: time.UnixMicro(l.CreatedAt).UTC(), PayloadRef: l.Ref}
}

// SamePayload reports whether a and b describe the same payload as a
// reader of it sees it: the same bytes (size and checksum) under the same
// content type. Ids are immutable, so two rows of one id normally agree;
// they do not when two shards acknowledged the id at once, each with its
// own payload, and a read that found one copy and then the other must not
// serve a mix of the two.
func SamePayload(a, b *Record) bool {
	return a.PayloadSize == b.PayloadSize && a.PayloadSHA256 == b.PayloadSHA256 && a.ContentType == b.ContentType
}

// OpenPayload opens length bytes of a payload from offset (length < 0: to
// the end). What the response needs is in the row's location, so the
// payload's bytes are the only request: served from the payload cache
// when hot, else streamed from the store. If the file under the read is
// reclaimed mid-stream, the read resumes from the row's new home at the
// same offset, within the same bounded retries; if the row found there is
// another payload than the one being served, the read fails with
// ErrRowChanged.
func (t *Table) OpenPayload(ctx context.Context, id string, offset, length int64, opts ReadOptions) (*Payload, error) {
	p, err := t.openPayload(ctx, id, offset, length, opts)
	return onSuccessor(ctx, t, p, err, func(nt *Table) (*Payload, error) {
		return nt.openPayload(ctx, id, offset, length, opts)
	})
}

func (t *Table) openPayload(ctx context.Context, id string, offset, length int64, opts ReadOptions) (*Payload, error) {
	if err := rowfile.ValidateID(id); err != nil {
		return nil, err
	}
	p := &Payload{t: t, opts: opts}
	err := t.withRow(ctx, id, opts, &p.attempts, func(ctx context.Context, loc location) error {
		// Everything the open serves comes from the row this attempt
		// found. An earlier attempt committed nothing to the caller, and
		// the row it found may have been another copy, elsewhere: its
		// description, range and span do not carry over.
		p.closeBody()
		rec := payloadRecord(loc)
		if offset < 0 || offset > rec.PayloadSize {
			return &RangeError{Size: rec.PayloadSize}
		}
		n := rec.PayloadSize - offset
		if length >= 0 && length < n {
			n = length
		}
		p.Record, p.Offset, p.Length, p.Cached = rec, offset, n, false
		p.from(loc)
		if err := t.db.point(ctx, hookReadRowRead); err != nil {
			return err
		}
		if data, ok, err := t.cachedPayload(ctx, p.span, rec); err != nil {
			return err
		} else if ok {
			p.unreserve() // cached bytes are not in flight
			p.Cached = true
			p.rc = io.NopCloser(bytes.NewReader(data[p.Offset : p.Offset+p.Length]))
			return nil
		}
		if err := p.reserve(p.Length); err != nil {
			return err
		}
		rc, err := t.openSpan(ctx, p.span, p.Offset, p.Length)
		if err != nil {
			return err
		}
		p.rc = rc
		return t.db.point(ctx, hookPayloadOpened)
	})
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// from points the read's body at the row loc that the current attempt
// found: its file, at its span.
func (p *Payload) from(loc location) {
	p.span = spanOf(loc)
}

// reserve holds n bytes of the in-flight budget for the read, replacing
// what an earlier attempt held for another length.
func (p *Payload) reserve(n int64) error {
	if p.release != nil && p.reserved == n {
		return nil
	}
	p.unreserve()
	release, err := p.t.db.budget.reserve(n)
	if err != nil {
		p.t.db.stats.ReadOverloaded.Add(1)
		return err
	}
	p.release, p.reserved = release, n
	return nil
}

func (p *Payload) unreserve() {
	if p.release != nil {
		p.release()
		p.release, p.reserved = nil, 0
	}
}

func (p *Payload) closeBody() {
	if p.rc != nil {
		p.rc.Close()
		p.rc = nil
	}
}

// cachedPayload returns the whole payload rec describes, small enough for
// the payload cache, from the cache or fetched from sp (one GET) and
// checked against its checksum. ok is false for payloads the cache does
// not take.
func (t *Table) cachedPayload(ctx context.Context, sp payloadSpan, rec *Record) ([]byte, bool, error) {
	cfg := t.db.cfg
	size := rec.PayloadSize
	if cfg.PayloadCacheBytes <= 0 || size > cfg.PayloadCacheMaxItem || size > cfg.PayloadCacheBytes/4 {
		return nil, false, nil
	}
	data, err := t.db.payloads.GetOrLoad(ctx, payloadKey{sum: rec.PayloadSHA256, size: size}, func(ctx context.Context) ([]byte, int64, error) {
		rc, err := t.openSpan(ctx, sp, 0, size)
		if err != nil {
			return nil, 0, err
		}
		defer rc.Close()
		buf := make([]byte, size)
		if _, err := io.ReadFull(rc, buf); err != nil {
			return nil, 0, readErr(sp.key, err)
		}
		if sha256.Sum256(buf) != rec.PayloadSHA256 {
			return nil, 0, fmt.Errorf("%w: payload of %q does not match its checksum", rowfile.ErrCorrupt, rec.ID)
		}
		return buf, int64(len(buf)) + 64, nil
	})
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// openSpan opens n bytes of the payload at sp from off.
func (t *Table) openSpan(ctx context.Context, sp payloadSpan, off, n int64) (io.ReadCloser, error) {
	if n == 0 {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	return t.db.store.GetRange(ctx, sp.key, sp.off+off, n)
}

// ReadContext reads with ctx used for any re-open after a mid-stream loss.
func (p *Payload) ReadContext(ctx context.Context, b []byte) (int, error) {
	if p.read >= p.Length {
		return 0, io.EOF
	}
	if int64(len(b)) > p.Length-p.read {
		b = b[:p.Length-p.read]
	}
	for {
		n, err := p.rc.Read(b)
		p.read += int64(n)
		if err == io.EOF && p.read < p.Length {
			err = fmt.Errorf("payload of %q: body ended at %d of %d bytes: %w", p.Record.ID, p.read, p.Length, io.ErrUnexpectedEOF)
		}
		if err == nil || err == io.EOF || n > 0 {
			if err != nil && err != io.EOF && n > 0 {
				err = nil // report the bytes now; the error recurs on the next Read
			}
			return n, err
		}
		if !errors.Is(err, objstore.ErrNotFound) {
			return 0, err
		}
		if rerr := p.reopen(ctx, err); rerr != nil {
			return 0, rerr
		}
	}
}

// Read implements io.Reader.
func (p *Payload) Read(b []byte) (int, error) { return p.ReadContext(context.Background(), b) }

// reopen finds the row again after its file vanished mid-stream and opens
// the rest of the range there. Every reopen counts as an attempt, whether
// or not the open succeeds, so a body that keeps failing ends in
// ErrMissingFile after the bounded retries.
func (p *Payload) reopen(ctx context.Context, cause error) error {
	p.closeBody()
	var err error
	if p.attempts >= maxRetries {
		err = p.t.missing(ctx, fmt.Errorf("%w: payload of %q after %d attempts: %w", ErrMissingFile, p.Record.ID, p.attempts+1, cause))
	} else {
		p.attempts++
		p.t.db.stats.ReadRetries.Add(1)
		err = p.resume(ctx, p.t, false)
	}
	// Dropped under the read: what the table holds now is the answer, as
	// for a read that began now (see successor).
	_, err = onSuccessor(ctx, p.t, struct{}{}, err, func(nt *Table) (struct{}, error) {
		p.t = nt
		return struct{}{}, p.resume(ctx, nt, true)
	})
	return err
}

// resume opens the rest of the range wherever t holds the row now;
// dropped says t is a later incarnation than the one the read began on.
//
// The caller has the payload's description and its first p.read bytes:
// the rest must be the same payload, or the body would disagree with what
// was already served. The row found now may be elsewhere (merged into the
// base, a data file rewritten) at another span of another file, so the
// rest is read from that row's own span, at the same offset in the
// payload.
func (p *Payload) resume(ctx context.Context, t *Table, dropped bool) error {
	want := p.Record
	return t.withRow(ctx, want.ID, p.opts, &p.attempts, func(ctx context.Context, loc location) error {
		if got := payloadRecord(loc); !SamePayload(got, want) {
			if dropped {
				// A new incarnation's row of the same id: not this payload.
				return fmt.Errorf("%w: %q (the table was dropped and created again while its payload was read)", ErrNotFound, want.ID)
			}
			return fmt.Errorf("%w: payload of %q, %d of its bytes served: it was %d bytes (sha256 %x, %q), the row found now has %d (sha256 %x, %q)",
				ErrRowChanged, want.ID, p.read, want.PayloadSize, want.PayloadSHA256[:8], want.ContentType, got.PayloadSize, got.PayloadSHA256[:8], got.ContentType)
		}
		p.from(loc)
		rc, err := t.openSpan(ctx, p.span, p.Offset+p.read, p.Length-p.read)
		if err != nil {
			return err
		}
		p.rc = rc
		return nil
	})
}

// Close releases the read.
func (p *Payload) Close() error {
	var err error
	if p.rc != nil {
		err = p.rc.Close()
		p.rc = nil
	}
	p.unreserve()
	return err
}
