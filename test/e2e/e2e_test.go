package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
)

const (
	table = "rollouts"
	// leaseDuration is every process's --lease-duration, Azure's minimum.
	// A writer acknowledges for at most three quarters of it after a
	// renewal, and a dead or stopped writer's shard can be taken once it
	// has run out.
	leaseDuration = 15 * time.Second
	// pauseFor is how long w-2 is stopped: a third longer than its lease.
	pauseFor = leaseDuration + leaseDuration/3
	// takeoverSlack is how long, beyond the lease, a replacement may need
	// to own a shard (or the merger lease, and finish a pass) once its
	// predecessor stopped renewing: start-up, the clients' backoff, and room
	// for an Azurite shared with other tests (make test runs packages in
	// parallel).
	takeoverSlack = 30 * time.Second
	drainTimeout  = 5 * time.Second

	writeClients     = 3
	readersPerReader = 1
)

// TestManyProcesses runs three writers, two readers and a merger on one
// table, kills a writer, kills the merger mid-merge and stops a writer past
// its lease while clients write and read, then checks that nothing
// acknowledged was lost or changed and nothing refused became visible. See
// the package documentation.
func TestManyProcesses(t *testing.T) {
	takeover := leaseDuration + slowdown*takeoverSlack
	connStr := azuritetest.ConnectionString(t)
	if rollstoreBin == "" {
		t.Fatal("TestMain did not build the rollstore binary")
	}
	ctx := context.Background()
	cfg := azuritetest.Config(t)
	bucket := azuritetest.Open(t, cfg) // the container is deleted last
	prefix := "e2e-" + randomHex(6)
	store, err := objstore.Prefixed(bucket, prefix)
	if err != nil {
		t.Fatal(err)
	}
	lay, err := keyspace.ForTable(table)
	if err != nil {
		t.Fatal(err)
	}
	obs := &observer{store: store, table: lay}

	c := newCluster(t, connStr, []string{
		"--store", "azure",
		"--azure-auth", "connection-string",
		"--azure-container", cfg.Container,
		"--azure-create-container",
		"--prefix", prefix,
		"--lease-duration", leaseDuration.String(),
		"--generation-max-age", "1s", // generations seal, merge and are reclaimed during the test
		"--merge-interval", "300ms",
		"--reclaim-grace", "0s", // reclaim right after the commit: reads race it
		"--feed-retention", "0s", // keeping no merged generation for the feed
		"--retain-versions", "2", "--retain-age", "0s", // and collect old versions too
		"--orphan-grace", "30s", // longer than any upload here (a stopped writer's is never acknowledged)
		"--drain-timeout", drainTimeout.String(),
	})
	c.logf("container %s, prefix %s, logs in %s", cfg.Container, prefix, c.logDir)

	writers := []*proc{
		c.startProc("w-0", "writer", "w-0"),
		c.startProc("w-1", "writer", "w-1"),
		c.startProc("w-2", "writer", "w-2"),
	}
	readers := []*proc{
		c.startProc("reader-0", "reader", ""),
		c.startProc("reader-1", "reader", ""),
	}
	merger := c.startProc("merger", "merger", "")
	createTable(t, c.http, writers[0], table)

	ld := newLoad(table, writers, readers)
	var kills []mergeKill
	var stoppedAt, contAt time.Time
	// Once the clients are stopped (below), report what they saw, also
	// when the test stopped early.
	t.Cleanup(func() {
		report(c, ld, kills, stoppedAt, contAt)
		for _, p := range ld.ledger.problems.report() {
			t.Error(p)
		}
	})
	ld.startWriters(writeClients)
	ld.startReaders(readersPerReader)
	// Stop the clients whatever happens; after a clean run they are
	// stopped already and this returns at once.
	t.Cleanup(ld.abort)

	c.waitFor("60 acknowledged writes and a first merge", slowdown*60*time.Second, 50*time.Millisecond, func() bool {
		b, err := obs.base(ctx)
		return err == nil && b.latest > 0 && ld.ledger.ackedCount() >= 60
	})
	c.logf("warm: %d writes acknowledged, merges running", ld.ledger.ackedCount())

	// 1. SIGKILL w-1 while it is receiving a large upload and has other
	// writes in flight; its replacement is refused the shard until the
	// dead process's lease runs out.
	w1 := writers[1]
	hw1 := ld.holdWrite(w1, "held-w-1", "upload cut by the kill of w-1")
	c.waitFor("w-1 to receive most of a large upload", 30*time.Second, time.Millisecond, hw1.reached)
	waitInFlight(w1, 2)
	ld.writers.set(1, nil)
	inflight := w1.inflight.Load()
	c.kill(w1)
	killedAt := time.Now()
	hw1.release()
	c.logf("killed %s (kill -9) with %d writes in flight, one a %.1f MiB upload held %d KiB short: %s",
		w1, inflight, float64(hw1.e.plan.size)/mib, mib/kib, (<-hw1.attempt).cause())
	w1b := c.startProc("w-1'", "writer", "w-1")
	ld.writers.set(1, w1b)
	c.waitFor("w-1' to take shard w-1", takeover, 20*time.Millisecond, func() bool { return w1b.acks.Load() > 0 })
	// A partitioned table's writer restarted under its name takes its
	// partitions back at once (the members entry is its name's; fencing
	// rests on the heads), so it need not wait out the dead one's lease.
	c.logf("%s took writer w-1's partitions %.1fs after the kill, having refused %d writes with 503 shard_owned",
		w1b, time.Since(killedAt).Seconds(), w1b.shardOwned.Load())

	// 2. SIGKILL the merger in the middle of a pass, and start a new one,
	// which waits out the dead one's lease. A kill that found no pass
	// half done is tried again, with the next merger.
	for attempt := 1; attempt <= 3; attempt++ {
		before, err := obs.base(ctx)
		if err != nil {
			t.Fatal(err)
		}
		trigger, err := obs.watchMerge(ctx, before, takeover)
		if err != nil {
			t.Fatalf("waiting for %s to merge: %v", merger, err)
		}
		c.kill(merger)
		k, err := obs.afterKill(ctx, trigger, before)
		if err != nil {
			t.Fatal(err)
		}
		kills = append(kills, k)
		c.logf("killed %s (kill -9): %v", merger, k)
		merger = c.startProc("merger"+strings.Repeat("'", attempt), "merger", "")
		if k.midMerge() {
			break
		}
	}
	last := kills[len(kills)-1]
	if !last.midMerge() {
		t.Errorf("the merger was killed %d times and never in the middle of a pass", len(kills))
	}
	killedAt = time.Now()
	c.waitFor(merger.name+" to take over and finish the interrupted pass", takeover, 100*time.Millisecond, func() bool {
		b, err := obs.base(ctx)
		if err != nil || b.latest <= last.version {
			return false
		}
		gens, err := obs.generations(ctx)
		if err != nil {
			return false
		}
		for _, g := range gens {
			for _, u := range last.unreclaimed {
				if g == u {
					return false
				}
			}
		}
		return true
	})
	c.logf("%s committed and reclaimed what was left %.1fs after the kill", merger, time.Since(killedAt).Seconds())

	// 3. SIGSTOP w-2 with writes in flight, for longer than its lease; a
	// replacement takes the shard meanwhile. Continued, the old process
	// must acknowledge nothing that could be lost.
	w2 := writers[2]
	hw2 := ld.holdWrite(w2, "held-w-2", "upload held across the stop of w-2")
	c.waitFor("w-2 to receive most of a large upload", 30*time.Second, time.Millisecond, hw2.reached)
	waitInFlight(w2, 2)
	ld.writers.set(2, nil)
	if err := w2.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt = time.Now()
	c.logf("stopped %s (SIGSTOP) with %d writes in flight, one a %.1f MiB upload held %d KiB short",
		w2, w2.inflight.Load(), float64(hw2.e.plan.size)/mib, mib/kib)
	w2b := c.startProc("w-2'", "writer", "w-2")
	ld.writers.set(2, w2b)
	c.waitFor("w-2' to take shard w-2", takeover, 20*time.Millisecond, func() bool { return w2b.acks.Load() > 0 })
	c.logf("%s took writer w-2's partitions %.1fs after the stop, having refused %d writes with 503 shard_owned",
		w2b, time.Since(stoppedAt).Seconds(), w2b.shardOwned.Load())
	if d := pauseFor - time.Since(stoppedAt); d > 0 {
		time.Sleep(d) // the pause is time by nature: a third longer than the lease
	}
	held := w2.inflight.Load()
	if err := w2.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	contAt = time.Now()
	hw2.release()
	c.logf("continued %s (SIGCONT) after %.1fs, %d writes held in flight", w2, contAt.Sub(stoppedAt).Seconds(), held)
	// The continued process was replaced: it takes no partition again,
	// and forwards what it receives to the partitions' owners. What it
	// acknowledges is theirs to keep (checked with every acknowledged id
	// below); what it does not must not become visible.
	for i := range 5 {
		id := fmt.Sprintf("late-%d", i)
		body := payloadFor(id)
		e := ld.ledger.add(id, body)
		e.special = "new write to the continued w-2, not acknowledged"
		a := ld.put(w2, id, body)
		ld.ledger.record(e, a)
		c.logf("%s, continued past its lease, answered a new write %s: %d %s", w2, id, a.status, a.code)
	}
	c.logf("%s answered the upload held across the stop: %s", w2, (<-hw2.attempt).cause())
	c.waitFor("the writes held by the stopped w-2 to be answered", 30*time.Second, 10*time.Millisecond, func() bool { return w2.inflight.Load() == 0 })
	if err := w2.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !w2.waitExit(drainTimeout + 10*time.Second) {
		t.Errorf("%s did not exit within its drain timeout after SIGTERM", w2)
		c.kill(w2)
	}
	c.logf("terminated %s (SIGTERM): %v", w2, w2.waitErr)

	// Let the load run on the final set of writers, then stop it.
	current := []*proc{writers[0], w1b, w2b}
	marks := make([]int64, len(current))
	for i, p := range current {
		marks[i] = p.acks.Load()
	}
	c.waitFor("10 more acknowledged writes on each writer", slowdown*30*time.Second, 20*time.Millisecond, func() bool {
		for i, p := range current {
			if p.acks.Load() < marks[i]+10 {
				return false
			}
		}
		return true
	})
	stopped := make(chan struct{})
	go func() { ld.stopWriting(); close(stopped) }()
	c.waitFor("the writing clients to finish", slowdown*2*time.Minute, 10*time.Millisecond, func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	})
	c.logf("load stopped: %d ids sent, %d acknowledged", len(ld.ledger.snapshot()), ld.ledger.ackedCount())

	// Quiescence: writers seal their last generations by age, the merger
	// merges and reclaims them. Readers keep reading meanwhile.
	var final engine.Status
	c.waitFor("every generation to be merged and reclaimed", slowdown*90*time.Second, 200*time.Millisecond, func() bool {
		st, err := tableStatus(ctx, c.http, readers[0], table)
		if err != nil || st.Version == 0 || len(st.Pending) > 0 {
			return false
		}
		gens, err := obs.generations(ctx)
		if err != nil || len(gens) > 0 {
			return false
		}
		final = st
		return true
	})
	ld.stopReading()
	c.logf("quiescent at base version %d: %d rows, %d data files", final.Version, final.Rows, final.DataFiles)

	// The readers (and the merger) agree on the table.
	views := append(append([]*proc(nil), readers...), merger)
	c.waitFor("the readers and the merger to report the same status", slowdown*30*time.Second, 100*time.Millisecond, func() bool {
		var first engine.Status
		for i, p := range views {
			st, err := tableStatus(ctx, c.http, p, table)
			if err != nil || len(st.Pending) > 0 {
				return false
			}
			if i == 0 {
				first = st
			} else if !sameTable(st, first) {
				return false
			}
		}
		final = first
		return true
	})

	verify(t, c, ld, readers, final)

	reclaimed := metric(ctx, t, c.http, merger, "rollstore_generations_reclaimed_total")
	c.logf("%s: %v base versions committed, %v generations reclaimed, %v orphans swept", merger,
		metric(ctx, t, c.http, merger, "rollstore_merges_committed_total"), reclaimed,
		metric(ctx, t, c.http, merger, "rollstore_orphans_swept_total"))
	if reclaimed == 0 {
		t.Errorf("%s reclaimed no generation", merger)
	}
	for _, r := range readers {
		reads := samples(ctx, t, c.http, r, "rollstore_reads_total")
		c.logf("%s: reads by outcome %v, %v retried after a file vanished", r, reads,
			metric(ctx, t, c.http, r, "rollstore_read_retries_total"))
		if n := reads[`outcome="missing_file"`] + reads[`outcome="overloaded"`]; n > 0 {
			t.Errorf("%s counted %v reads as missing_file or overloaded", r, n)
		}
	}
}

// sameTable reports whether two statuses describe the same table state.
func sameTable(a, b engine.Status) bool {
	return a.Version == b.Version && a.Rows == b.Rows && a.PayloadBytes == b.PayloadBytes &&
		a.DataFiles == b.DataFiles && a.Duplicates == b.Duplicates && reflect.DeepEqual(a.Watermarks, b.Watermarks) &&
		len(a.Pending) == 0 && len(b.Pending) == 0
}

// waitInFlight waits a few seconds for p to have n writes in flight; the
// clients' pace makes that likely, not certain, so it does not fail.
func waitInFlight(p *proc, n int64) {
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for p.inflight.Load() < n && time.Now().Before(deadline) {
		<-tick.C
	}
}

// verify checks the end state against the ledger, from every reader.
func verify(t *testing.T, c *cluster, ld *load, readers []*proc, final engine.Status) {
	ctx := context.Background()
	entries := ld.ledger.snapshot()

	// Every acknowledged id, from every reader, byte for byte.
	var ackd []*entry
	for _, e := range entries {
		if e.acked {
			ackd = append(ackd, e)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range readers {
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < len(ackd); i += 4 {
					ld.readAcked(r, ackd[i], "acked-final")
				}
			})
		}
	}
	wg.Wait()
	c.logf("read back %d acknowledged ids from each of %d readers in %.1fs", len(ackd), len(readers), time.Since(start).Seconds())

	// What is visible, as each reader lists it.
	var visible map[string]listed
	for i, r := range readers {
		got, err := listAll(ctx, c.http, r, table)
		if err != nil {
			t.Fatalf("listing from %s: %v", r, err)
		}
		if i == 0 {
			visible = got
		} else if !reflect.DeepEqual(got, visible) {
			t.Errorf("%s lists %d rows, %s lists %d: the readers disagree", readers[0], len(visible), r, len(got))
		}
	}
	if int64(len(visible)) != final.Rows {
		t.Errorf("the listing has %d rows, the status %d", len(visible), final.Rows)
	}
	for id, l := range visible {
		e := ld.ledger.get(id)
		switch {
		case e == nil:
			ld.ledger.problems.add("visible id never written", "%s", id)
		case l.size != int64(e.plan.size) || l.sum != hex.EncodeToString(e.sum[:]):
			ld.ledger.problems.add("visible id with wrong payload", "%s: size %d sha256 %s", id, l.size, l.sum)
		}
	}
	for _, e := range entries {
		_, vis := visible[e.id]
		switch o := e.outcomeOf(); {
		case o == acked && !vis:
			ld.ledger.problems.add("acknowledged id not listed", "%s (attempts %v)", e.id, e.attempts)
		case o == refused && vis:
			ld.ledger.problems.add("refused write visible", "%s (attempts %v)", e.id, e.attempts)
		case e.special != "" && vis && o != acked:
			ld.ledger.problems.add("write that could not be acknowledged visible", "%s, %s (attempts %v)", e.id, e.special, e.attempts)
		case o == unknown && vis:
			// Visible though never acknowledged: the unknown outcome of a
			// failed request, which must at least read back intact.
			for _, r := range readers {
				ld.readAcked(r, e, "unacked-listed")
			}
		}
	}
}

// report logs the counts behind the verdict.
func report(c *cluster, ld *load, kills []mergeKill, stoppedAt, contAt time.Time) {
	entries := ld.ledger.snapshot()
	visible, _ := listAll(context.Background(), c.http, ld.readers[0], table)
	var b strings.Builder
	fmt.Fprintf(&b, "summary after %.1fs\n", time.Since(c.start).Seconds())

	byOutcome := map[outcome]int{}
	var attempts, bigAcked int
	var ackedBytes int64
	causes := map[string][2]int{}  // unacknowledged ids by cause: invisible, visible
	retried := map[string][2]int{} // acknowledged after failures, by first cause: 201, 200
	for _, e := range entries {
		o := e.outcomeOf()
		byOutcome[o]++
		attempts += len(e.attempts)
		_, vis := visible[e.id]
		switch o {
		case acked:
			ackedBytes += int64(e.plan.size)
			if e.plan.size > inlineMax {
				bigAcked++
			}
			if cause := e.firstCause(); cause != "" {
				n := retried[cause]
				if e.attempts[len(e.attempts)-1].status == http.StatusCreated {
					n[0]++
				} else {
					n[1]++
				}
				retried[cause] = n
			}
		default:
			key := fmt.Sprintf("%s: %s", o, e.firstCause())
			if e.special != "" {
				key += " (" + e.special + ")"
			}
			n := causes[key]
			if vis {
				n[1]++
			} else {
				n[0]++
			}
			causes[key] = n
		}
	}
	fmt.Fprintf(&b, "writes: %d ids in %d attempts; %d acknowledged (%d of > 1 MiB, %.1f MiB in all), %d refused, %d of unknown outcome\n",
		len(entries), attempts, byOutcome[acked], bigAcked, float64(ackedBytes)/mib, byOutcome[refused], byOutcome[unknown])
	fmt.Fprintf(&b, "unacknowledged ids by cause of failure            invisible  visible\n")
	for _, k := range sortedKeys(causes) {
		fmt.Fprintf(&b, "  %-52s %6d %8d\n", k, causes[k][0], causes[k][1])
	}
	fmt.Fprintf(&b, "acknowledged after failed attempts, by first failure   201    200\n")
	for _, k := range sortedKeys(retried) {
		fmt.Fprintf(&b, "  %-52s %6d %6d\n", k, retried[k][0], retried[k][1])
	}

	// Attempts on w-2 that the stop caught in flight.
	held := map[string]int{}
	for _, e := range entries {
		for _, a := range e.attempts {
			if a.proc == "w-2" && a.start.Before(stoppedAt) && a.start.Add(a.took).After(contAt) {
				held[a.causeClass()]++
			}
		}
	}
	fmt.Fprintf(&b, "writes held by the stopped w-2, answered after SIGCONT: %v\n", held)

	// Every write attempt, by process and answer.
	perProc := map[string]int{}
	for _, e := range entries {
		for _, a := range e.attempts {
			perProc[fmt.Sprintf("%s %s", a.proc, a.causeClass())]++
		}
	}
	fmt.Fprintf(&b, "write attempts by process and answer:\n")
	for _, k := range sortedKeys(perProc) {
		fmt.Fprintf(&b, "  %-60s %6d\n", k, perProc[k])
	}
	fmt.Fprintf(&b, "reads by reader, kind and answer:\n")
	for _, l := range ld.ledger.reads.lines() {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	for i, k := range kills {
		fmt.Fprintf(&b, "merger kill %d: %v\n", i+1, k)
	}
	fmt.Fprintf(&b, "problems: %d", ld.ledger.problems.count())
	c.logf("%s", b.String())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func createTable(t *testing.T, client *http.Client, p *proc, name string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, p.url+"/v1/tables/"+name, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("creating table %s on %s: %s %s", name, p, resp.Status, data)
	}
}

func getJSON(ctx context.Context, client *http.Client, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s %s", u, resp.Status, data)
	}
	return json.Unmarshal(data, v)
}

func tableStatus(ctx context.Context, client *http.Client, p *proc, name string) (engine.Status, error) {
	var st engine.Status
	err := getJSON(ctx, client, p.url+"/v1/tables/"+name, &st)
	return st, err
}

// listed is a row as the listing shows it.
type listed struct {
	size int64
	sum  string
}

// listAll lists every row of a table from p, page by page.
func listAll(ctx context.Context, client *http.Client, p *proc, name string) (map[string]listed, error) {
	out := map[string]listed{}
	token := ""
	for {
		u := p.url + "/v1/tables/" + name + "/rollouts?limit=1000"
		if token != "" {
			u += "&page_token=" + url.QueryEscape(token)
		}
		var page struct {
			Records []struct {
				ID            string `json:"id"`
				PayloadSize   int64  `json:"payload_size"`
				PayloadSHA256 string `json:"payload_sha256"`
			} `json:"records"`
			NextPageToken string `json:"next_page_token"`
		}
		if err := getJSON(ctx, client, u, &page); err != nil {
			return nil, err
		}
		for _, r := range page.Records {
			if _, dup := out[r.ID]; dup {
				return nil, fmt.Errorf("%s lists %s twice", p, r.ID)
			}
			out[r.ID] = listed{size: r.PayloadSize, sum: r.PayloadSHA256}
		}
		if page.NextPageToken == "" {
			return out, nil
		}
		token = page.NextPageToken
	}
}

// samples returns the samples of the metrics named name in p's /metrics,
// by their labels ("" for none).
func samples(ctx context.Context, t *testing.T, client *http.Client, p *proc, name string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("metrics of %s: %v", p, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("metrics of %s: %v", p, err)
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(data)) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		labels, value := "", rest
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			labels, value = rest[1:end], rest[end+1:]
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("metrics of %s: %q: %v", p, line, err)
		}
		out[labels] = v
	}
	return out
}

// metric returns the sum of the samples of the metrics named name.
func metric(ctx context.Context, t *testing.T, client *http.Client, p *proc, name string) float64 {
	t.Helper()
	var sum float64
	for _, v := range samples(ctx, t, client, p, name) {
		sum += v
	}
	return sum
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
