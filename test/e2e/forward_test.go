package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
)

// TestForwardingWriters runs three writer processes (w-0, w-1, w-2) on one
// table of 16 partitions, which they share; any writer takes any write and
// forwards it to the partition's owner. It checks, over real HTTP:
//
//  1. the same id sent to two writers at once, with different payloads, is
//     acknowledged exactly once (201) and refused once (409);
//  2. writes the test sends to w-0 for partitions w-2 owns, some of them
//     being forwarded when w-2 is killed with SIGKILL, fail with 503 (or
//     land) but never lie; w-2 restarted under the same name (on another
//     port: it advertises its new address) takes its partitions back, and
//     writes through w-0 succeed again within seconds;
//  3. a rolling restart (SIGTERM each writer in turn, then start it again
//     under its name) while clients keep writing, each id retried with the
//     same content until acknowledged and some ids written by two clients
//     with different contents at once: every acknowledged row reads back
//     byte-equal from every writer, and no id is acknowledged with two
//     contents;
//  4. a writer killed for good (SIGKILL, not restarted): its partitions are
//     writable through the others within the member timeout
//     (--lease-duration).
//
// No merger runs: reads come from the writers' WAL, and no generation of a
// live writer is sealed by another process.
func TestForwardingWriters(t *testing.T) {
	connStr := azuritetest.ConnectionString(t)
	if rollstoreBin == "" {
		t.Fatal("TestMain did not build the rollstore binary")
	}
	cfg := azuritetest.Config(t)
	_ = azuritetest.Open(t, cfg) // the container, deleted when the test ends
	prefix := "e2e-fwd-" + randomHex(6)
	c := newCluster(t, connStr, []string{
		"--store", "azure",
		"--azure-auth", "connection-string",
		"--azure-container", cfg.Container,
		"--azure-create-container",
		"--prefix", prefix,
		"--lease-duration", leaseDuration.String(),
		"--drain-timeout", drainTimeout.String(),
		"--partitions", "16",
	})
	c.logf("container %s, prefix %s, logs in %s", cfg.Container, prefix, c.logDir)
	const tbl = "fwd"
	names := []string{"w-0", "w-1", "w-2"}
	var mu sync.Mutex
	live := map[string]*proc{}
	for _, n := range names {
		live[n] = c.startProc(n, "writer", n)
	}
	writer := func(n string) *proc {
		mu.Lock()
		defer mu.Unlock()
		return live[n]
	}
	createTable(t, c.http, live["w-0"], tbl)
	owners := agreeOnOwners(t, c, tbl, names, writer)

	// 1. One winner per id.
	for i := range 20 {
		id := fmt.Sprintf("race-%02d", i)
		var wg sync.WaitGroup
		var status [2]int
		for k, n := range []string{"w-0", "w-1"} {
			wg.Go(func() {
				status[k], _ = putID(c.http, writer(n), tbl, id, contentOf(id, n, 2000))
			})
		}
		wg.Wait()
		if !(status[0] == 201 && status[1] == 409 || status[0] == 409 && status[1] == 201) {
			t.Fatalf("%s to w-0 and w-1 at once: %d and %d, want one 201 and one 409", id, status[0], status[1])
		}
	}
	c.logf("1: 20 ids written to two writers at once, one winner each")

	// 2. Kill the owner while writes are being forwarded to it.
	ownedBy := func(w string, prefix string, n int) []string {
		var out []string
		for i := 0; len(out) < n; i++ {
			id := fmt.Sprintf("%s-%04d", prefix, i)
			if owners[engine.PartitionName(engine.PartitionOf(id, 16))] == w {
				out = append(out, id)
			}
		}
		return out
	}
	led := newFwdLedger()
	ids := ownedBy("w-2", "kill", 24)
	var wg sync.WaitGroup
	killed := make(chan struct{})
	for k, id := range ids {
		wg.Go(func() {
			if k >= 12 {
				<-killed // half before the kill, half around it
			}
			size := 3000
			if k%3 == 0 {
				size = 2 << 20 // staged as an object by w-0, then forwarded
			}
			body := contentOf(id, "a", size)
			led.note(id, body, writer("w-0"), tbl, c.http)
		})
	}
	time.Sleep(50 * time.Millisecond) // some of them are being forwarded now
	c.kill(writer("w-2"))
	close(killed)
	wg.Wait()
	c.logf("2: w-2 killed; writes to its partitions through w-0: %s", led.summary())
	restarted := c.startProc("w-2'", "writer", "w-2")
	mu.Lock()
	live["w-2"] = restarted
	mu.Unlock()
	probe := ownedBy("w-2", "back", 1)[0]
	took := c.waitFor("a write through w-0 to a partition of the restarted w-2", slowdown*15*time.Second, 50*time.Millisecond, func() bool {
		st, _ := putID(c.http, writer("w-0"), tbl, probe, contentOf(probe, "a", 100))
		return st == http.StatusCreated || st == http.StatusOK
	})
	c.logf("2: writes through w-0 to w-2's partitions succeed %v after w-2 was ready again", took.Round(time.Millisecond))
	// The restarted writer joined the members with its new address as it
	// started; the others read the members every second.
	if took > slowdown*5*time.Second {
		t.Errorf("writes to w-2's partitions succeeded only %v after it was ready again, want within 5s", took)
	}
	// Ids of unknown outcome are retried with the same content: 201 or 200.
	for _, id := range ids {
		led.settle(id, writer("w-0"), tbl, c.http, t)
	}

	// 3. Rolling restart under load.
	ctx, stop := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	var n atomic.Int64
	for cl := range 4 {
		clients.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("roll-%d-%05d", cl, i)
				if i%4 == 0 {
					// Two clients, two contents, two writers, at once.
					var pair sync.WaitGroup
					for k := range 2 {
						pair.Go(func() {
							led.write(ctx, id, contentOf(id, fmt.Sprint(k), 1500), func() *proc { return writer(names[(i+k)%3]) }, tbl, c.http)
						})
					}
					pair.Wait()
				} else {
					size := 1000 + i%7*500
					if i%25 == 1 {
						size = 1500 << 10
					}
					led.write(ctx, id, contentOf(id, "x", size), func() *proc { return writer(names[(i+int(n.Add(1)))%3]) }, tbl, c.http)
				}
			}
		})
	}
	time.Sleep(2 * time.Second)
	for _, name := range names {
		p := writer(name)
		if err := p.signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if !p.waitExit(slowdown * 60 * time.Second) {
			t.Fatalf("%s did not exit after SIGTERM", p)
		}
		c.logf("3: %s drained (%v)", p, p.waitErr)
		np := c.startProc(name+"'", "writer", name)
		mu.Lock()
		live[name] = np
		mu.Unlock()
		time.Sleep(2 * time.Second) // writes run against the restarted writer
	}
	stop()
	clients.Wait()
	c.logf("3: rolling restart done; %s", led.summary())

	// Every acknowledged row, from every writer; one content per id.
	for _, name := range names {
		p := writer(name)
		for id, want := range led.acked() {
			got, status, err := getPayload(c.http, p, tbl, id)
			if err != nil || status != http.StatusOK || !bytes.Equal(got, want) {
				t.Errorf("%s from %s: %d, %d bytes (want %d), %v", id, p, status, len(got), len(want), err)
			}
		}
	}
	for _, p := range led.problems() {
		t.Error(p)
	}
	c.logf("verified %d acknowledged rows on every writer", len(led.acked()))

	// 4. A writer killed for good: once its heartbeat is older than the
	// member timeout (--lease-duration), the others own its partitions.
	dead := writer("w-1")
	c.kill(dead)
	killedAt := time.Now()
	probe = ownedBy("w-1", "orphaned", 1)[0]
	took = c.waitFor("a write through w-0 to a partition of the killed w-1", slowdown*4*leaseDuration, 100*time.Millisecond, func() bool {
		st, _ := putID(c.http, writer("w-0"), tbl, probe, contentOf(probe, "a", 100))
		return st == http.StatusCreated || st == http.StatusOK
	})
	c.logf("4: w-1 killed; its partitions writable through w-0 %v after the kill (member timeout %v)",
		time.Since(killedAt).Round(time.Millisecond), leaseDuration)
	// The member timeout decides, not the machine: a bound of twice it
	// catches partitions that never move, without timing the machine.
	if took > slowdown*2*leaseDuration {
		t.Errorf("w-1's partitions became writable elsewhere only %v after it was killed, want about the member timeout %v", took, leaseDuration)
	}
	for _, name := range []string{"w-0", "w-2"} {
		got, status, err := getPayload(c.http, writer(name), tbl, probe)
		if err != nil || status != http.StatusOK || !bytes.Equal(got, contentOf(probe, "a", 100)) {
			t.Errorf("%s from %s after w-1's partitions moved: %d %v", probe, name, status, err)
		}
	}
}

// contentOf derives an id's payload for writer (or version) v.
func contentOf(id, v string, n int) []byte {
	seed := sha256.Sum256([]byte(id + "/" + v))
	b := make([]byte, n)
	for i := range b {
		b[i] = seed[i%len(seed)] ^ byte(i>>5)
	}
	return b
}

func putID(client *http.Client, p *proc, table, id string, body []byte) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, rolloutURL(p, table, id), bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Rollstore-Record", `{"rollout_id":"fwd"}`)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var eb errorBody
	_ = json.Unmarshal(data, &eb)
	return resp.StatusCode, eb.Error.Code
}

func getPayload(client *http.Client, p *proc, table, id string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rolloutURL(p, table, id)+"/payload", nil)
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return data, resp.StatusCode, err
}

// agreeOnOwners waits until every writer names the same owner for every
// partition and every writer owns one (or the owners held for a few
// members polls), and returns them by partition.
func agreeOnOwners(t *testing.T, c *cluster, table string, names []string, writer func(string) *proc) map[string]string {
	t.Helper()
	var last []engine.Owner
	var since time.Time
	c.waitFor("the writers to agree on the owners", slowdown*30*time.Second, 50*time.Millisecond, func() bool {
		var first []engine.Owner
		who := map[string]bool{}
		for _, n := range names {
			st, err := tableStatus(context.Background(), c.http, writer(n), table)
			if err != nil {
				return false
			}
			for _, o := range st.Owners {
				who[o.Writer] = true
			}
			if first == nil {
				first = st.Owners
			} else if !reflect.DeepEqual(first, st.Owners) {
				return false
			}
		}
		if !reflect.DeepEqual(first, last) {
			last, since = first, time.Now()
		}
		return len(who) == len(names) || time.Since(since) > 3*time.Second
	})
	out := map[string]string{}
	for _, o := range last {
		out[o.Partition] = o.Writer
	}
	return out
}

// fwdLedger records what the writers acknowledged: per id, the contents
// acknowledged (more than one is a failure), and the ids whose outcome is
// unknown.
type fwdLedger struct {
	mu       sync.Mutex
	ack      map[string][][]byte
	unknown  map[string][]byte
	answers  map[string]int // "201", "409", "503 owner_unreachable", ...
	problemz []string
}

func newFwdLedger() *fwdLedger {
	return &fwdLedger{ack: map[string][][]byte{}, unknown: map[string][]byte{}, answers: map[string]int{}}
}

// note sends id once and records the answer.
func (l *fwdLedger) note(id string, body []byte, p *proc, table string, client *http.Client) int {
	st, code := putID(client, p, table, id, body)
	l.mu.Lock()
	defer l.mu.Unlock()
	key := fmt.Sprint(st)
	if code != "" {
		key += " " + code
	}
	if st == 0 {
		key = "transport error"
	}
	l.answers[key]++
	switch {
	case st == http.StatusCreated || st == http.StatusOK:
		for _, b := range l.ack[id] {
			if bytes.Equal(b, body) {
				delete(l.unknown, id)
				return st
			}
		}
		l.ack[id] = append(l.ack[id], body)
		if len(l.ack[id]) > 1 {
			l.problemz = append(l.problemz, fmt.Sprintf("%s acknowledged with %d contents", id, len(l.ack[id])))
		}
		delete(l.unknown, id)
	case st == http.StatusConflict:
		// Another content holds the id; fine unless this one was acked.
		for _, b := range l.ack[id] {
			if bytes.Equal(b, body) {
				l.problemz = append(l.problemz, fmt.Sprintf("%s: an identical retry refused with 409 on %s", id, p))
			}
		}
	case st == http.StatusServiceUnavailable || st == 0:
		if len(l.ack[id]) == 0 {
			l.unknown[id] = body
		}
	default:
		l.problemz = append(l.problemz, fmt.Sprintf("%s on %s: unexpected %s", id, p, key))
	}
	return st
}

// write sends id with body until it is acknowledged or refused with 409
// (another content won), each attempt to the writer pick gives.
func (l *fwdLedger) write(ctx context.Context, id string, body []byte, pick func() *proc, table string, client *http.Client) {
	backoff := 20 * time.Millisecond
	for ctx.Err() == nil {
		switch l.note(id, body, pick(), table, client) {
		case http.StatusCreated, http.StatusOK, http.StatusConflict:
			return
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, time.Second)
	}
}

// settle retries an id of unknown outcome with its content until answered
// for good.
func (l *fwdLedger) settle(id string, p *proc, table string, client *http.Client, t *testing.T) {
	l.mu.Lock()
	body, ok := l.unknown[id]
	l.mu.Unlock()
	if !ok {
		return
	}
	deadline := time.Now().Add(slowdown * 30 * time.Second)
	for time.Now().Before(deadline) {
		switch l.note(id, body, p, table, client) {
		case http.StatusCreated, http.StatusOK:
			return
		case http.StatusConflict:
			t.Errorf("%s: its own content refused with 409 after an unknown outcome", id)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s: not acknowledged within 30s of retries", id)
}

func (l *fwdLedger) acked() map[string][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]byte{}
	for id, bs := range l.ack {
		out[id] = bs[0]
	}
	return out
}

func (l *fwdLedger) problems() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.problemz...)
}

func (l *fwdLedger) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d ids acknowledged, %d of unknown outcome, answers %v", len(l.ack), len(l.unknown), l.answers)
}
