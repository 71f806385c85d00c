package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rollstore/rollstore/internal/payloadgen"
)

// Payloads: an id determines its payload's size, bytes and retry policy, so
// any reader can verify any id without the writer's help.

const (
	kib = 1 << 10
	mib = 1 << 20
	// inlineMax is the engine's default split between inline and external
	// payloads; only used to label uploads "big".
	inlineMax = 1 * mib
)

// plan is what an id determines.
type plan struct {
	size  int
	retry bool // the client retries it identically until acknowledged (at most maxAttempts)
}

func planFor(id string) plan {
	h := sha256.Sum256([]byte(id))
	u := binary.LittleEndian.Uint64(h[:8])
	p := plan{retry: (u>>56)%4 != 0} // a quarter are sent once, never retried
	if u%24 == 0 {
		p.size = 2*mib + int((u>>8)%(6*mib+1))
	} else {
		p.size = 1*kib + int((u>>8)%(59*kib+1))
	}
	return p
}

// payloadFor returns the payload of id: plan.size bytes of the id's
// generated stream (payloadgen).
func payloadFor(id string) []byte {
	return payloadgen.Bytes(id, planFor(id).size)
}

// outcome classifies one write attempt.
type outcome int

const (
	acked   outcome = iota // 200 or 201: must be readable forever
	refused                // refused before anything was written: must not be visible
	unknown                // failed, but may have landed
)

func (o outcome) String() string {
	return [...]string{"acknowledged", "refused", "unknown outcome"}[o]
}

// attempt is one PUT of an id.
type attempt struct {
	proc    string
	status  int    // 0: no HTTP answer
	code    string // the error code of an error answer
	err     string // transport error
	outcome outcome
	start   time.Time
	took    time.Duration
}

// cause names why an attempt failed, for the report.
func (a attempt) cause() string {
	switch {
	case a.outcome == acked:
		return strconv.Itoa(a.status)
	case a.status == 0:
		return "transport: " + a.err
	default:
		return fmt.Sprintf("%d %s", a.status, a.code)
	}
}

// causeClass is cause with transport errors folded to their kind.
func (a attempt) causeClass() string {
	if a.status != 0 || a.outcome == acked {
		return a.cause()
	}
	switch {
	case strings.Contains(a.err, "connection refused"):
		return "transport: connection refused"
	case strings.Contains(a.err, "deadline exceeded") || strings.Contains(a.err, "Timeout"):
		return "transport: timeout"
	case strings.Contains(a.err, "EOF") || strings.Contains(a.err, "reset by peer") || strings.Contains(a.err, "broken pipe") ||
		strings.Contains(a.err, "use of closed network connection"):
		return "transport: connection lost"
	}
	return "transport: other"
}

// entry is the ledger's record of one id.
type entry struct {
	id       string
	plan     plan
	sum      [sha256.Size]byte
	attempts []attempt
	acked    bool
	// special, when set, says why this id must never become visible:
	// the test sent it where no write can be acknowledged.
	special string
}

// outcomeOf is the id's overall outcome: acknowledged if any attempt was;
// refused if every attempt was refused; otherwise unknown.
func (e *entry) outcomeOf() outcome {
	if e.acked {
		return acked
	}
	for _, a := range e.attempts {
		if a.outcome == unknown {
			return unknown
		}
	}
	return refused
}

// firstCause is the cause class of the first attempt with the id's overall
// outcome (for an acknowledged id: of its first failed attempt, or "").
func (e *entry) firstCause() string {
	want := e.outcomeOf()
	for _, a := range e.attempts {
		if want == acked && a.outcome != acked {
			return a.causeClass()
		}
		if want != acked && a.outcome == want {
			return a.causeClass()
		}
	}
	return ""
}

// ledger records every write attempt and every read the test made.
type ledger struct {
	mu       sync.Mutex
	entries  map[string]*entry
	order    []string
	ackedIDs []string

	problems problems
	reads    counter // "reader-0 acked 200", ...
}

func newLedger() *ledger {
	return &ledger{entries: map[string]*entry{}, reads: counter{m: map[string]int{}}}
}

func (l *ledger) add(id string, body []byte) *entry {
	e := &entry{id: id, plan: planFor(id), sum: sha256.Sum256(body)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries[id] != nil {
		panic("e2e: id written twice by the test: " + id)
	}
	l.entries[id] = e
	l.order = append(l.order, id)
	return e
}

func (l *ledger) record(e *entry, a attempt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.attempts = append(e.attempts, a)
	if a.outcome == acked && !e.acked {
		e.acked = true
		l.ackedIDs = append(l.ackedIDs, e.id)
	}
}

func (l *ledger) randomAcked(rng *rand.Rand) (*entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ackedIDs) == 0 {
		return nil, false
	}
	return l.entries[l.ackedIDs[rng.IntN(len(l.ackedIDs))]], true
}

func (l *ledger) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ackedIDs)
}

// snapshot returns every entry, in the order the ids were first sent.
func (l *ledger) snapshot() []*entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*entry, len(l.order))
	for i, id := range l.order {
		out[i] = l.entries[id]
	}
	return out
}

func (l *ledger) get(id string) *entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries[id]
}

// problems collects what must fail the test, from any goroutine, grouped
// by kind so that a systematic failure is one line with a count.
type problems struct {
	mu    sync.Mutex
	kinds []string
	n     map[string]int
	first map[string][]string
}

func (p *problems) add(kind, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		p.n, p.first = map[string]int{}, map[string][]string{}
	}
	if p.n[kind] == 0 {
		p.kinds = append(p.kinds, kind)
	}
	p.n[kind]++
	if len(p.first[kind]) < 5 {
		p.first[kind] = append(p.first[kind], fmt.Sprintf(format, args...))
	}
}

func (p *problems) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, k := range p.kinds {
		n += p.n[k]
	}
	return n
}

func (p *problems) report() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, k := range p.kinds {
		out = append(out, fmt.Sprintf("%s: %d time(s), e.g.:\n\t%s", k, p.n[k], strings.Join(p.first[k], "\n\t")))
	}
	return out
}

// counter counts labelled events.
type counter struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counter) inc(key string) {
	c.mu.Lock()
	c.m[key]++
	c.mu.Unlock()
}

func (c *counter) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k, n := range c.m {
		out = append(out, fmt.Sprintf("%-48s %6d", k, n))
	}
	sort.Strings(out)
	return out
}

// slots routes writes: slot i is the current process of shard w-i, or nil
// while it is down.
type slots struct {
	mu    sync.Mutex
	procs []*proc
	rr    int
}

func (s *slots) set(i int, p *proc) {
	s.mu.Lock()
	s.procs[i] = p
	s.mu.Unlock()
}

// next returns the next live writer, round-robin.
func (s *slots) next() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range s.procs {
		s.rr = (s.rr + 1) % len(s.procs)
		if p := s.procs[s.rr]; p != nil {
			return p
		}
	}
	return nil
}

// load runs the writing and reading clients.
type load struct {
	table   string
	ledger  *ledger
	writers *slots
	readers []*proc
	client  *http.Client

	// ctx is canceled by abort: requests, backoffs and held bodies end.
	ctx    context.Context
	cancel context.CancelFunc

	stopWrites atomic.Bool
	stopReads  atomic.Bool
	wg         sync.WaitGroup // writing clients
	rwg        sync.WaitGroup // reading clients
}

const (
	writeTimeout = 60 * time.Second // longer than any pause the scenario makes
	readTimeout  = 30 * time.Second
	maxAttempts  = 10

	// The load is paced so that Azurite, which serves every process from
	// one thread, keeps up with the merger too: a merge pass makes one
	// request per segment merged and per file reclaimed, and falling
	// behind makes every refresh list more generations.
	writeEvery = 400 * time.Millisecond // per writing client
	readEvery  = 100 * time.Millisecond // per reading client
)

func newLoad(table string, writers []*proc, readers []*proc) *load {
	ctx, cancel := context.WithCancel(context.Background())
	return &load{
		ctx:     ctx,
		cancel:  cancel,
		table:   table,
		ledger:  newLedger(),
		writers: &slots{procs: slices.Clone(writers)},
		readers: readers,
		client: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 16,
			// Every answer is read in full; compression would only hide
			// what is on the wire.
			DisableCompression: true,
		}},
	}
}

func (l *load) startWriters(n int) {
	for i := range n {
		l.wg.Go(func() { l.writeLoop(i) })
	}
}

func (l *load) startReaders(perReader int) {
	for ri, r := range l.readers {
		for j := range perReader {
			seed := uint64(ri*perReader + j + 1)
			l.rwg.Go(func() { l.readLoop(r, seed) })
		}
	}
}

// stopWriting stops the writing clients once their current id is done
// (retries included) and waits for them.
func (l *load) stopWriting() {
	l.stopWrites.Store(true)
	l.wg.Wait()
}

func (l *load) stopReading() {
	l.stopReads.Store(true)
	l.rwg.Wait()
}

// abort ends every client at once, abandoning requests in flight; for a
// test that failed before it could stop the load cleanly.
func (l *load) abort() {
	l.stopWrites.Store(true)
	l.stopReads.Store(true)
	l.cancel()
	l.wg.Wait()
	l.rwg.Wait()
}

// pause waits d unless the load is aborted first.
func (l *load) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.ctx.Done():
		return false
	}
}

// writeLoop writes new ids, one every writeEvery at most, until stopped.
func (l *load) writeLoop(client int) {
	pace := time.NewTicker(writeEvery)
	defer pace.Stop()
	for n := 0; !l.stopWrites.Load(); n++ {
		l.write(fmt.Sprintf("c%d-%05d", client, n))
		select {
		case <-pace.C:
		case <-l.ctx.Done():
			return
		}
	}
}

// write sends id until it is acknowledged, or once if its plan says so,
// each attempt to the next writer; failed attempts back off.
func (l *load) write(id string) {
	body := payloadFor(id)
	e := l.ledger.add(id, body)
	backoff := 50 * time.Millisecond
	for try := 1; l.ctx.Err() == nil; {
		p := l.writers.next()
		if p == nil {
			// Every writer is down for a moment; the scenario brings
			// one back.
			l.pause(backoff)
			continue
		}
		a := l.put(p, id, body)
		l.ledger.record(e, a)
		if a.outcome == acked || !e.plan.retry || try == maxAttempts {
			return
		}
		try++
		l.pause(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// errorBody is the service's error answer.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// put sends one attempt of id to p and classifies the answer.
func (l *load) put(p *proc, id string, body []byte) attempt {
	return l.send(p, id, bytes.NewReader(body), int64(len(body)))
}

func (l *load) send(p *proc, id string, body io.Reader, size int64) attempt {
	ctx, cancel := context.WithTimeout(l.ctx, writeTimeout)
	defer cancel()
	big := size > inlineMax
	p.inflight.Add(1)
	if big {
		p.inflightBig.Add(1)
	}
	defer func() {
		p.inflight.Add(-1)
		if big {
			p.inflightBig.Add(-1)
		}
	}()
	start := time.Now()
	a := attempt{proc: p.name, start: start}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, rolloutURL(p, l.table, id), body)
	if err != nil {
		panic(err)
	}
	req.ContentLength = size
	req.Header.Set("Rollstore-Record", `{"rollout_id":"e2e"}`)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := l.client.Do(req)
	if err != nil {
		a.err, a.took = err.Error(), time.Since(start)
		// A refused connection never reached a server: nothing was written.
		if errors.Is(err, syscall.ECONNREFUSED) {
			a.outcome = refused
		} else {
			a.outcome = unknown
		}
		return a
	}
	data, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.status, a.took = resp.StatusCode, time.Since(start)
	switch {
	case rerr != nil:
		a.err, a.outcome = rerr.Error(), unknown
		if resp.StatusCode/100 == 2 {
			l.ledger.problems.add("write answer cut short", "%s %s: %d, body: %v", p, id, resp.StatusCode, rerr)
		}
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated:
		a.outcome = acked
		p.acks.Add(1)
	default:
		var eb errorBody
		_ = json.Unmarshal(data, &eb)
		a.code = eb.Error.Code
		a.outcome = unknown
		switch {
		case resp.StatusCode == http.StatusRequestTimeout && a.code == "timeout":
			// The upload stalled past --upload-idle-timeout: nothing stored.
			a.outcome = refused
		case resp.StatusCode == http.StatusServiceUnavailable && isRefusal(a.code):
			a.outcome = refused
			if a.code == "shard_owned" {
				p.shardOwned.Add(1)
			}
		case resp.StatusCode == http.StatusServiceUnavailable && (a.code == "fenced" || a.code == "unavailable"):
			// May have landed: a fenced writer's segment can be in the
			// generation its successor sealed.
		case resp.StatusCode == http.StatusServiceUnavailable && (a.code == "store_unavailable" || a.code == "throttled" || a.code == "timeout"):
			// The store did not answer in time (a process continued after
			// SIGSTOP finds every try it had in flight stalled past
			// --azure-stall-timeout): like any failed request, it may have
			// landed; the ledger accepts the row visible or not.
		case resp.StatusCode == http.StatusServiceUnavailable && a.code == "outcome_unknown":
			// The documented answer when a try got no answer and the
			// counts that would tell were reclaimed meanwhile (a writer
			// continued after SIGSTOP, its connections dead): the ledger
			// accepts the row visible or not.
		case resp.StatusCode == http.StatusConflict:
			l.ledger.problems.add("identical retry refused (409)", "%s %s: %s", p, id, data)
		default:
			l.ledger.problems.add("unexpected write answer", "%s %s: %d %s", p, id, resp.StatusCode, data)
		}
	}
	return a
}

// isRefusal reports whether a 503 code means the write was refused before
// anything was stored.
func isRefusal(code string) bool {
	switch code {
	case "shard_owned", "draining", "read_only", "overloaded", "not_ready",
		// A write forwarded to no one (the owner could not be reached) or
		// refused by the owner before anything was written.
		"owner_unreachable", "not_owner":
		return true
	}
	return false
}

func rolloutURL(p *proc, table, id string) string {
	return p.url + "/v1/tables/" + table + "/rollouts/" + url.PathEscape(id)
}

// readLoop reads from r, one read every readEvery at most, until stopped: four in five reads are of a random
// acknowledged id's payload (compared by size and SHA-256), one in five of
// an id never written (404 not_found).
func (l *load) readLoop(r *proc, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	pace := time.NewTicker(readEvery)
	defer pace.Stop()
	for n := 0; !l.stopReads.Load(); n++ {
		select {
		case <-pace.C:
		case <-l.ctx.Done():
			return
		}
		if e, ok := l.ledger.randomAcked(rng); ok && rng.IntN(5) != 0 {
			l.readAcked(r, e, "acked")
		} else {
			l.readAbsent(r, fmt.Sprintf("absent-%d-%d", seed, n))
		}
	}
}

// readAcked reads the payload of an id that must exist (kind says why: it
// was acknowledged, or it is listed) and reports whether it came back
// intact.
func (l *load) readAcked(r *proc, e *entry, kind string) bool {
	ctx, cancel := context.WithTimeout(l.ctx, readTimeout)
	defer cancel()
	res := l.getPayload(ctx, r, e.id)
	l.ledger.reads.inc(fmt.Sprintf("%s %s %s", r, kind, res.label()))
	switch {
	case res.err != nil:
		l.ledger.problems.add("reader transport error", "%s %s: %v", r, e.id, res.err)
	case res.status >= 500:
		l.ledger.problems.add(fmt.Sprintf("reader %d", res.status), "%s %s: %s", r, e.id, res.body)
	case res.status == http.StatusNotFound:
		l.ledger.problems.add(kind+" id not found", "%s %s: %s", r, e.id, res.body)
	case res.status != http.StatusOK:
		l.ledger.problems.add("unexpected read answer", "%s %s: %d %s", r, e.id, res.status, res.body)
	case res.size != int64(e.plan.size) || res.sum != e.sum:
		l.ledger.problems.add("wrong payload bytes", "%s %s: %d bytes, want %d (sha256 equal: %v)", r, e.id, res.size, e.plan.size, res.sum == e.sum)
	default:
		return true
	}
	return false
}

func (l *load) readAbsent(r *proc, id string) {
	ctx, cancel := context.WithTimeout(l.ctx, readTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rolloutURL(r, l.table, id), nil)
	resp, err := l.client.Do(req)
	if err != nil {
		l.ledger.reads.inc(fmt.Sprintf("%s absent transport-error", r))
		l.ledger.problems.add("reader transport error", "%s %s: %v", r, id, err)
		return
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var eb errorBody
	_ = json.Unmarshal(data, &eb)
	l.ledger.reads.inc(fmt.Sprintf("%s absent %d %s", r, resp.StatusCode, eb.Error.Code))
	switch {
	case resp.StatusCode >= 500:
		l.ledger.problems.add(fmt.Sprintf("reader %d", resp.StatusCode), "%s %s: %s", r, id, data)
	case resp.StatusCode != http.StatusNotFound || eb.Error.Code != "not_found":
		l.ledger.problems.add("absent id not answered 404 not_found", "%s %s: %d %s", r, id, resp.StatusCode, data)
	}
}

// readResult is one payload read.
type readResult struct {
	status int
	size   int64
	sum    [sha256.Size]byte
	body   string // error answers
	code   string
	err    error
}

func (r readResult) label() string {
	switch {
	case r.err != nil:
		return "transport-error"
	case r.code != "":
		return fmt.Sprintf("%d %s", r.status, r.code)
	}
	return strconv.Itoa(r.status)
}

func (l *load) getPayload(ctx context.Context, r *proc, id string) readResult {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rolloutURL(r, l.table, id)+"/payload", nil)
	resp, err := l.client.Do(req)
	if err != nil {
		return readResult{err: err}
	}
	defer resp.Body.Close()
	res := readResult{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		var eb errorBody
		_ = json.Unmarshal(data, &eb)
		res.body, res.code = string(data), eb.Error.Code
		return res
	}
	h := sha256.New()
	res.size, res.err = io.Copy(h, resp.Body)
	copySum(&res.sum, h)
	return res
}

func copySum(dst *[sha256.Size]byte, h hash.Hash) { h.Sum(dst[:0]) }

// heldWrite is a write of a large payload whose body stops half-way until
// released, so that the test can kill or stop the writer while it is
// receiving an upload, deterministically.
type heldWrite struct {
	e       *entry
	body    *heldBody
	attempt chan attempt
}

// holdWrite starts a write to p of the first id of the form prefix-<n>
// whose payload is external (> 1 MiB). Its body sends all but the last
// mebibyte and then waits for release.
func (l *load) holdWrite(p *proc, prefix, special string) *heldWrite {
	var id string
	for n := 0; ; n++ {
		id = fmt.Sprintf("%s-%d", prefix, n)
		if planFor(id).size > inlineMax {
			break
		}
	}
	payload := payloadFor(id)
	e := l.ledger.add(id, payload)
	e.special = special
	cut := len(payload) - mib
	hw := &heldWrite{
		e: e,
		body: &heldBody{
			first:   bytes.NewReader(payload[:cut]),
			rest:    bytes.NewReader(payload[cut:]),
			reached: make(chan struct{}),
			release: make(chan struct{}),
			abort:   l.ctx.Done(),
		},
		attempt: make(chan attempt, 1),
	}
	go func() {
		a := l.send(p, id, hw.body, int64(len(payload)))
		l.ledger.record(e, a)
		hw.attempt <- a
	}()
	return hw
}

// reached reports whether the transport has sent everything before the
// hold.
func (hw *heldWrite) reached() bool {
	select {
	case <-hw.body.reached:
		return true
	default:
		return false
	}
}

// release lets the rest of the body go.
func (hw *heldWrite) release() { hw.body.once.Do(func() { close(hw.body.release) }) }

// heldBody reads first, then blocks until release before reading rest.
type heldBody struct {
	first, rest *bytes.Reader
	reached     chan struct{}
	release     chan struct{}
	abort       <-chan struct{}
	once        sync.Once // closes release
	reachedOnce sync.Once
}

func (b *heldBody) Read(p []byte) (int, error) {
	if b.first.Len() > 0 {
		return b.first.Read(p)
	}
	b.reachedOnce.Do(func() { close(b.reached) })
	select {
	case <-b.release:
	case <-b.abort:
		return 0, context.Canceled
	}
	return b.rest.Read(p)
}
