// Package faulty wraps an objstore.Bucket with faults that tests switch on,
// so that the races and crashes the engine must survive (a merge reclaiming a
// generation a read has open, a commit whose response is lost, a call that
// fails on its second attempt) happen exactly where a test puts them rather
// than when timing allows.
//
// A Bucket passes every call through to its inner bucket until rules are
// added. A rule matches calls by Op and key (Match), acts at a Point of the
// call, and fires on the first matching call only unless given Skip, Times or
// Always. For example, to make a merge commit and reclaim a generation while
// a read has one of its segments open:
//
//	fb := faulty.New(memory.New())
//	t.Cleanup(fb.Reset)
//	gate := fb.Pause(faulty.OpGetRange, faulty.Opened, faulty.KeyContains("/wal/"))
//	go read()         // opens a WAL segment, then waits at the gate
//	gate.Wait(ctx)
//	merge()           // commits the next base and deletes the generation
//	gate.Release()    // the read resumes on a reclaimed segment
//
// Matching and counting: a rule sees a call when the call reaches the rule's
// point with a matching Op and key; it counts those calls from the moment it
// is registered and fires on the ones its options select. The rules that fire
// on a call all run, in registration order, and the call returns the first
// error among them. A DeleteMany call matches when any of its keys does (the
// first such key is the one rules are given); a List call matches on its
// prefix argument. Counters count calls, not keys.
//
// Leases pass through too, when the inner bucket is an objstore.Leaser, and
// their calls are ops of their own (OpAcquireLease, OpRenewLease,
// OpReleaseLease) matched on the leased key. To stall a writer past its
// lease, as a long GC pause would, on a memory bucket with a fake clock:
//
//	gate := fb.Pause(faulty.OpRenewLease, faulty.Before, faulty.Key(shardLease))
//	gate.Wait(ctx)     // the writer's renewal is held
//	clock.Advance(20 * time.Second)
//	takeOver()         // another owner acquires the expired lease
//	gate.Release()     // the renewal reaches the store: ErrLeaseLost
package faulty

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
)

// Op names a Bucket method or a lease call.
type Op string

// The operations, one per objstore.Bucket method and one per lease call.
// OpAny matches them all.
const (
	OpGet        Op = "get"
	OpGetRange   Op = "getrange"
	OpHead       Op = "head"
	OpPut        Op = "put"
	OpDelete     Op = "delete"
	OpDeleteMany Op = "deletemany"
	OpList       Op = "list"

	OpAcquireLease Op = "acquirelease" // objstore.Leaser.AcquireLease
	OpRenewLease   Op = "renewlease"   // objstore.Lease.Renew, on the lease's key
	OpReleaseLease Op = "releaselease" // objstore.Lease.Release, on the lease's key

	OpAny Op = "*"
)

func (o Op) matches(op Op) bool { return o == OpAny || o == op }

// Point names the moment within a call at which a rule acts.
type Point string

const (
	// Before: before the inner bucket is called. An error returned here
	// means the inner bucket is never called.
	Before Point = "before"
	// Opened: for Get and GetRange only, after the inner bucket opened the
	// body and before the caller sees it. Calls that failed to open never
	// reach it. An error returned here closes the body.
	Opened Point = "opened"
	// After: after the inner bucket returned, whatever it returned, and
	// before the caller sees the result; for reads, after Opened. An error
	// returned here replaces the result, and the inner call's effect stands.
	After Point = "after"
)

// Match selects calls by key. The zero Match (AnyKey) matches every call.
type Match struct {
	fn func(string) bool
}

// AnyKey matches every call, including a DeleteMany of no keys.
var AnyKey Match

// Key matches calls on exactly key.
func Key(key string) Match {
	return Match{func(k string) bool { return k == key }}
}

// KeyPrefix matches calls on keys beginning with prefix.
func KeyPrefix(prefix string) Match {
	return Match{func(k string) bool { return strings.HasPrefix(k, prefix) }}
}

// KeyContains matches calls on keys containing substr.
func KeyContains(substr string) Match {
	return Match{func(k string) bool { return strings.Contains(k, substr) }}
}

// KeyFunc matches calls on keys for which fn reports true.
func KeyFunc(fn func(key string) bool) Match {
	return Match{fn}
}

// match reports whether the call on keys matches, and the key that did.
func (m Match) match(keys []string) (string, bool) {
	if m.fn == nil {
		if len(keys) == 0 {
			return "", true
		}
		return keys[0], true
	}
	for _, k := range keys {
		if m.fn(k) {
			return k, true
		}
	}
	return "", false
}

// Option chooses which of its matching calls a rule fires on: by default the
// first only.
type Option = hook.Option

// Skip lets the first n matching calls through untouched; the rule fires
// from call n+1 on.
func Skip(n int) Option { return hook.Skip(n) }

// Times makes a rule fire on n matching calls (after any skipped) instead of
// one.
func Times(n int) Option { return hook.Times(n) }

// Always makes a rule fire on every matching call (after any skipped) until
// it is removed.
func Always() Option { return hook.Always() }

// Gate holds calls paused by Bucket.Pause; see hook.Gate.
type Gate = hook.Gate

// Bucket is an objstore.Bucket that injects the faults its rules describe
// into calls on an inner bucket. It is safe for concurrent use, and so is
// adding or removing rules while calls run.
type Bucket struct {
	inner objstore.Bucket

	mu    sync.Mutex
	rules []*Rule
	gates []*Gate
	calls []call
}

type call struct {
	op   Op
	keys []string
}

var (
	_ objstore.Bucket = (*Bucket)(nil)
	_ objstore.Leaser = (*Bucket)(nil)
)

// New returns a Bucket that passes every call to inner until rules are
// added.
func New(inner objstore.Bucket) *Bucket {
	return &Bucket{inner: inner}
}

// Rule is a fault added to a Bucket.
type Rule struct {
	b      *Bucket
	op     Op
	pt     Point
	m      Match
	okOnly bool // sees only calls the inner bucket completed without error
	trig   *hook.Trigger
	act    func(ctx context.Context, key string, c *callState) error
}

// callState is what rules may inspect or change about a call in flight.
type callState struct {
	err  error          // the inner bucket's error, at Opened and After
	body *io.ReadCloser // the opened body, at Opened and After of reads
}

// Remove takes the rule out of its Bucket; calls it is already acting on are
// not affected. It may be called more than once.
func (r *Rule) Remove() {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	if i := slices.Index(r.b.rules, r); i >= 0 {
		r.b.rules = slices.Delete(r.b.rules, i, i+1)
	}
}

// Fired reports how many calls the rule has fired on, so a test can check
// that the fault it arranged was actually hit.
func (r *Rule) Fired() int {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	return r.trig.Fired()
}

// add completes r and registers it, together with the Gate that r holds
// calls at, if any, so that Reset never sees one without the other.
func (b *Bucket) add(r *Rule, g *Gate, opts []Option) *Rule {
	switch r.pt {
	case Before, After:
	case Opened:
		if r.op != OpGet && r.op != OpGetRange && r.op != OpAny {
			panic(fmt.Sprintf("faulty: point %q applies to get and getrange, not %q", r.pt, r.op))
		}
	default:
		panic(fmt.Sprintf("faulty: unknown point %q", r.pt))
	}
	r.b = b
	r.trig = hook.NewTrigger(opts...)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rules = append(b.rules, r)
	if g != nil {
		b.gates = append(b.gates, g)
	}
	return r
}

// Pause holds matching calls at pt until the returned Gate is released, or
// until the caller's context is done, in which case the call returns
// ctx.Err() (a paused Before never reaches the inner bucket). With Times or
// Always every call the rule fires on waits at the same Gate, and after
// Release they all pass.
func (b *Bucket) Pause(op Op, pt Point, m Match, opts ...Option) *Gate {
	g := hook.NewGate()
	b.add(&Rule{op: op, pt: pt, m: m, act: func(ctx context.Context, _ string, _ *callState) error {
		return g.Enter(ctx)
	}}, g, opts)
	return g
}

// Fail makes matching calls return err without reaching the inner bucket.
func (b *Bucket) Fail(op Op, m Match, err error, opts ...Option) *Rule {
	if err == nil {
		panic("faulty: Fail with a nil error")
	}
	return b.add(&Rule{op: op, pt: Before, m: m, act: func(context.Context, string, *callState) error {
		return err
	}}, nil, opts)
}

// FailNth makes the nth matching call (1-based, counted from now) return err
// without reaching the inner bucket; the calls before and after it pass.
func (b *Bucket) FailNth(op Op, n int, m Match, err error) *Rule {
	if n < 1 {
		panic("faulty: FailNth needs n >= 1")
	}
	return b.Fail(op, m, err, Skip(n-1))
}

// LoseResponse lets a matching call succeed on the inner bucket and then
// returns err to the caller, as when a response is lost after the store
// applied the request: a Put's object is written, a Delete's object is gone,
// yet the caller sees a failure. Calls the inner bucket failed pass through
// untouched and are not counted.
func (b *Bucket) LoseResponse(op Op, m Match, err error, opts ...Option) *Rule {
	if err == nil {
		panic("faulty: LoseResponse with a nil error")
	}
	return b.add(&Rule{op: op, pt: After, m: m, okOnly: true, act: func(context.Context, string, *callState) error {
		return err
	}}, nil, opts)
}

// DeleteWhileOpen deletes the object from the inner bucket once a matching
// Get or GetRange has opened its body and before the caller reads it, as a
// concurrent reclaim would. The open body then behaves as the inner backend's
// does for an object deleted under it (the memory backend keeps serving its
// snapshot); later reads of the key fail with objstore.ErrNotFound.
func (b *Bucket) DeleteWhileOpen(op Op, m Match, opts ...Option) *Rule {
	return b.add(&Rule{op: op, pt: Opened, m: m, act: func(ctx context.Context, key string, _ *callState) error {
		return b.inner.Delete(ctx, key)
	}}, nil, opts)
}

// FailRead makes the body of a matching Get or GetRange return err once
// after bytes have been read from it, as an Azure body does when the blob is
// deleted while a ranged read resumes. Reads up to that offset succeed.
func (b *Bucket) FailRead(op Op, m Match, after int64, err error, opts ...Option) *Rule {
	if err == nil {
		panic("faulty: FailRead with a nil error")
	}
	return b.add(&Rule{op: op, pt: Opened, m: m, act: func(_ context.Context, _ string, c *callState) error {
		*c.body = FailAfter(*c.body, after, err)
		return nil
	}}, nil, opts)
}

// Latency delays matching calls by d before they reach the inner bucket. The
// wait ends early with ctx.Err() if the caller's context is done first.
func (b *Bucket) Latency(op Op, m Match, d time.Duration, opts ...Option) *Rule {
	return b.add(&Rule{op: op, pt: Before, m: m, act: func(ctx context.Context, _ string, _ *callState) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}, nil, opts)
}

// Hook runs fn at pt of matching calls, with the matching key (the prefix,
// for List). A non-nil error from fn is returned from the call: at Before
// the inner bucket is not called; at Opened and After the inner call's
// effect stands and an opened body is closed.
func (b *Bucket) Hook(op Op, pt Point, m Match, fn func(ctx context.Context, key string) error, opts ...Option) *Rule {
	return b.add(&Rule{op: op, pt: pt, m: m, act: func(ctx context.Context, key string, _ *callState) error {
		return fn(ctx, key)
	}}, nil, opts)
}

// Calls reports how many op calls the Bucket has received (all calls, for
// OpAny), including those its rules failed.
func (b *Bucket) Calls(op Op) int {
	return b.CallsMatching(op, AnyKey)
}

// CallsMatching reports how many op calls matching m the Bucket has
// received, including those its rules failed. Counts start at New and are
// not cleared by Reset; compare before and after to count one phase.
func (b *Bucket) CallsMatching(op Op, m Match) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.calls {
		if _, ok := m.match(c.keys); ok && op.matches(c.op) {
			n++
		}
	}
	return n
}

// Reset removes every rule and releases every Gate the Bucket created, so
// that no call stays paused once a test is over: pass it to t.Cleanup.
func (b *Bucket) Reset() {
	b.mu.Lock()
	gates := b.gates
	b.rules, b.gates = nil, nil
	b.mu.Unlock()
	for _, g := range gates {
		g.Release()
	}
}

// begin records a call and runs its Before rules.
func (b *Bucket) begin(ctx context.Context, op Op, keys ...string) error {
	b.mu.Lock()
	b.calls = append(b.calls, call{op: op, keys: keys})
	b.mu.Unlock()
	return b.at(ctx, op, Before, keys, &callState{})
}

// at runs the rules that fire on this call at pt and returns the first error.
func (b *Bucket) at(ctx context.Context, op Op, pt Point, keys []string, c *callState) error {
	type firing struct {
		r   *Rule
		key string
	}
	var fire []firing
	b.mu.Lock()
	live := b.rules[:0]
	for _, r := range b.rules {
		if r.pt == pt && r.op.matches(op) && (!r.okOnly || c.err == nil) {
			if key, ok := r.m.match(keys); ok && r.trig.Next() {
				fire = append(fire, firing{r, key})
			}
		}
		if !r.trig.Done() {
			live = append(live, r)
		}
	}
	clear(b.rules[len(live):])
	b.rules = live
	b.mu.Unlock()

	var first error
	for _, f := range fire {
		if err := f.r.act(ctx, f.key, c); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// finishRead runs the Opened and After rules of a Get or GetRange and
// returns the body the caller is to see (rules may wrap it) and the first
// rule error. On a rule error it closes the body, which the caller will then
// never see.
func (b *Bucket) finishRead(ctx context.Context, op Op, key string, rc io.ReadCloser, err error) (io.ReadCloser, error) {
	c := &callState{err: err, body: &rc}
	keys := []string{key}
	var herr error
	if err == nil {
		herr = b.at(ctx, op, Opened, keys, c)
	}
	if aerr := b.at(ctx, op, After, keys, c); herr == nil {
		herr = aerr
	}
	if herr != nil && rc != nil {
		rc.Close()
	}
	return rc, herr
}

// Get implements objstore.Bucket.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Attrs, error) {
	if err := b.begin(ctx, OpGet, key); err != nil {
		return nil, objstore.Attrs{}, err
	}
	rc, a, err := b.inner.Get(ctx, key)
	rc, herr := b.finishRead(ctx, OpGet, key, rc, err)
	if herr != nil {
		return nil, objstore.Attrs{}, herr
	}
	return rc, a, err
}

// GetRange implements objstore.Bucket.
func (b *Bucket) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := b.begin(ctx, OpGetRange, key); err != nil {
		return nil, err
	}
	rc, err := b.inner.GetRange(ctx, key, offset, length)
	rc, herr := b.finishRead(ctx, OpGetRange, key, rc, err)
	if herr != nil {
		return nil, herr
	}
	return rc, err
}

// Head implements objstore.Bucket.
func (b *Bucket) Head(ctx context.Context, key string) (objstore.Attrs, error) {
	if err := b.begin(ctx, OpHead, key); err != nil {
		return objstore.Attrs{}, err
	}
	a, err := b.inner.Head(ctx, key)
	if herr := b.at(ctx, OpHead, After, []string{key}, &callState{err: err}); herr != nil {
		return objstore.Attrs{}, herr
	}
	return a, err
}

// Put implements objstore.Bucket.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) (objstore.Attrs, error) {
	if err := b.begin(ctx, OpPut, key); err != nil {
		return objstore.Attrs{}, err
	}
	a, err := b.inner.Put(ctx, key, r, opts)
	if herr := b.at(ctx, OpPut, After, []string{key}, &callState{err: err}); herr != nil {
		return objstore.Attrs{}, herr
	}
	return a, err
}

// Delete implements objstore.Bucket.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := b.begin(ctx, OpDelete, key); err != nil {
		return err
	}
	err := b.inner.Delete(ctx, key)
	if herr := b.at(ctx, OpDelete, After, []string{key}, &callState{err: err}); herr != nil {
		return herr
	}
	return err
}

// DeleteIfMatch implements objstore.Bucket; rules for OpDelete apply.
func (b *Bucket) DeleteIfMatch(ctx context.Context, key, etag string) error {
	if err := b.begin(ctx, OpDelete, key); err != nil {
		return err
	}
	err := b.inner.DeleteIfMatch(ctx, key, etag)
	if herr := b.at(ctx, OpDelete, After, []string{key}, &callState{err: err}); herr != nil {
		return herr
	}
	return err
}

// DeleteMany implements objstore.Bucket. Rules fail or pass the call as a
// whole: a fault at Before deletes none of the keys.
func (b *Bucket) DeleteMany(ctx context.Context, keys []string) error {
	keys = slices.Clone(keys) // the call log must not alias the caller's slice
	if err := b.begin(ctx, OpDeleteMany, keys...); err != nil {
		return err
	}
	err := b.inner.DeleteMany(ctx, keys)
	if herr := b.at(ctx, OpDeleteMany, After, keys, &callState{err: err}); herr != nil {
		return herr
	}
	return err
}

// List implements objstore.Bucket. Rules match on the prefix argument.
func (b *Bucket) List(ctx context.Context, prefix string, opts objstore.ListOptions, fn func(objstore.Entry) error) error {
	if err := b.begin(ctx, OpList, prefix); err != nil {
		return err
	}
	err := b.inner.List(ctx, prefix, opts, fn)
	if herr := b.at(ctx, OpList, After, []string{prefix}, &callState{err: err}); herr != nil {
		return herr
	}
	return err
}

// AcquireLease implements objstore.Leaser by passing the call to the inner
// bucket. If that is no Leaser, the call fails with an error matching
// errors.ErrUnsupported (after its Before rules, which may fail it first).
// An error from an After rule hides a lease the inner bucket granted: it
// stays held until it expires, as after a lost response.
func (b *Bucket) AcquireLease(ctx context.Context, key string, d time.Duration) (objstore.Lease, error) {
	if err := b.begin(ctx, OpAcquireLease, key); err != nil {
		return nil, err
	}
	var (
		l   objstore.Lease
		err error
	)
	if lr, ok := b.inner.(objstore.Leaser); ok {
		l, err = lr.AcquireLease(ctx, key, d)
	} else {
		err = fmt.Errorf("faulty: acquire lease %s: %T is not an objstore.Leaser: %w", key, b.inner, errors.ErrUnsupported)
	}
	if herr := b.at(ctx, OpAcquireLease, After, []string{key}, &callState{err: err}); herr != nil {
		return nil, herr
	}
	if err != nil {
		return nil, err
	}
	return &lease{b: b, key: key, inner: l}, nil
}

// lease passes Renew and Release through the Bucket's rules.
type lease struct {
	b     *Bucket
	key   string
	inner objstore.Lease
}

func (l *lease) Renew(ctx context.Context) error {
	return l.b.leaseCall(ctx, OpRenewLease, l.key, l.inner.Renew)
}

func (l *lease) Release(ctx context.Context) error {
	return l.b.leaseCall(ctx, OpReleaseLease, l.key, l.inner.Release)
}

func (l *lease) Duration() time.Duration { return l.inner.Duration() }

func (b *Bucket) leaseCall(ctx context.Context, op Op, key string, fn func(context.Context) error) error {
	if err := b.begin(ctx, op, key); err != nil {
		return err
	}
	err := fn(ctx)
	if herr := b.at(ctx, op, After, []string{key}, &callState{err: err}); herr != nil {
		return herr
	}
	return err
}

// FailAfter wraps a body so that it delivers n bytes, then fails every
// Read with err: a body cut off mid-stream (FailRead's, and any test's
// own store wrapper's).
func FailAfter(rc io.ReadCloser, n int64, err error) io.ReadCloser {
	return &failingBody{rc: rc, left: n, err: err}
}

// failingBody returns err once left bytes have been read.
type failingBody struct {
	rc   io.ReadCloser
	left int64
	err  error
}

func (f *failingBody) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, f.err
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.rc.Read(p)
	f.left -= int64(n)
	return n, err
}

func (f *failingBody) Close() error { return f.rc.Close() }
