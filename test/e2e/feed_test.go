package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollstore/rollstore/client"
	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
)

const (
	feedTable      = "feed"
	feedPartitions = 16
	feedGroup      = "learners"
	// groupSession is the servers' --group-session-timeout: how long a
	// killed member keeps its partitions.
	groupSession = 5 * time.Second
	// The member to be killed stops reading at its first batch of at
	// least feedHoldRows rows from its feedHoldAfter-th batch with rows
	// on, holding that batch uncommitted. It pauses longer than the others
	// after each batch, so that rows gather for the next.
	feedHoldAfter = 5
	feedHoldRows  = 3
	feedHoldPause = time.Second
	// feedMoreRows is how many more rows are written once the killed
	// member's replacement joined, before the writes stop.
	feedMoreRows = 300
)

// TestFeedGroupCommitsEveryAcknowledgedRowOnce runs three writer
// processes sharing a partitioned table, a merger, and a consumer group
// of three member processes (learners: c0, c1, c2), each reading the feed
// through another writer with long-polls and committing each batch with
// its next read. Member c1 is killed with SIGKILL holding a batch it
// received and did not commit; once the session timeout removed it, its
// partitions go to the others, which read them again from the committed
// positions; then c1 is started again under its name. When the writes
// have stopped and the group caught up, the consumers' logs and the group
// must show that every acknowledged row was delivered in exactly one
// committed batch, at dense offsets per partition, that no refused write
// was delivered, and that the group's committed positions equal what
// each partition acknowledged.
func TestFeedGroupCommitsEveryAcknowledgedRowOnce(t *testing.T) {
	connStr := azuritetest.ConnectionString(t)
	if rollstoreBin == "" {
		t.Fatal("TestMain did not build the rollstore binary")
	}
	ctx := context.Background()
	cfg := azuritetest.Config(t)
	_ = azuritetest.Open(t, cfg) // the container, deleted when the test ends
	prefix := "e2e-feed-" + randomHex(6)
	c := newCluster(t, connStr, []string{
		"--store", "azure",
		"--azure-auth", "connection-string",
		"--azure-container", cfg.Container,
		"--azure-create-container",
		"--prefix", prefix,
		"--lease-duration", leaseDuration.String(),
		"--drain-timeout", drainTimeout.String(),
		"--partitions", strconv.Itoa(feedPartitions),
		// Generations seal, merge and are reclaimed while the feed is
		// read (the default --feed-retention keeps every row readable).
		"--generation-max-age", "1s",
		"--merge-interval", "300ms",
		"--reclaim-grace", "0s",
		"--group-session-timeout", groupSession.String(),
	})
	c.logf("container %s, prefix %s, logs in %s", cfg.Container, prefix, c.logDir)
	names := []string{"w-0", "w-1", "w-2"}
	writers := make([]*proc, len(names))
	byName := map[string]*proc{}
	for i, n := range names {
		writers[i] = c.startProc(n, "writer", n)
		byName[n] = writers[i]
	}
	merger := c.startProc("merger", "merger", "")
	createTable(t, c.http, writers[0], feedTable)
	agreeOnOwners(t, c, feedTable, names, func(n string) *proc { return byName[n] })
	api, err := client.New(writers[0].url, client.WithHTTPClient(c.http))
	if err != nil {
		t.Fatal(err)
	}

	cons := []*consumerProc{
		c.startConsumer("c0", "c0", writers[0], false),
		c.startConsumer("c1", "c1", writers[1], true),
		c.startConsumer("c2", "c2", writers[2], false),
	}
	led := newFeedLedger()
	stopCtx, stopWrites := context.WithCancel(ctx)
	abortCtx, abortWrites := context.WithCancel(ctx)
	var clients sync.WaitGroup
	defer func() {
		stopWrites()
		abortWrites()
		clients.Wait()
	}()
	for cl := range 3 {
		clients.Go(func() { led.writeLoop(stopCtx, abortCtx, c.http, writers, cl) })
	}

	// c1 holds a batch: received and logged, not committed.
	c1 := cons[1]
	var held consumerLine
	c.waitFor("c1 to hold a batch uncommitted", slowdown*90*time.Second, 20*time.Millisecond, func() bool {
		lines, err := readConsumerLog(c1.feedLog)
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := heldBatch(lines); ok {
			held = h
			return true
		}
		return c1.hasExited()
	})
	if held.Seq == 0 {
		t.Fatalf("c1 exited (%v) before it held a batch", c1.waitErr)
	}
	c.kill(c1.proc)
	killedAt := time.Now()
	c.logf("killed c1 (kill -9) holding batch %d uncommitted: %d rows of partitions %v at epoch %d; %d writes acknowledged so far",
		held.Seq, len(held.Rows), rowPartitions(held.Rows), held.Epoch, led.ackedCount())

	// The session timeout removes c1; its partitions go to c0 and c2.
	var g client.ConsumerGroup
	c.waitFor("the group to drop the killed c1", slowdown*(groupSession+60*time.Second), 100*time.Millisecond, func() bool {
		g, err = api.ConsumerGroupOf(ctx, feedTable, feedGroup)
		return err == nil && slices.Equal(memberNames(g), []string{"c0", "c2"})
	})
	c.logf("the group dropped c1 %.1fs after the kill (session timeout %v): epoch %d, members %s",
		time.Since(killedAt).Seconds(), groupSession, g.Epoch, describeMembers(g))

	// c1 again, under its name, through another writer.
	c1b := c.startConsumer("c1'", "c1", writers[2], false)
	cons = append(cons, c1b)
	acked := led.ackedCount()
	c.waitFor("c1 to rejoin and read while writes go on", slowdown*90*time.Second, 50*time.Millisecond, func() bool {
		lines, err := readConsumerLog(c1b.feedLog)
		if err != nil {
			t.Fatal(err)
		}
		return countKind(lines, lineBatch) > 0 && led.ackedCount() >= acked+feedMoreRows
	})
	stopWrites()
	clients.Wait()
	counts := led.perPartition()
	c.logf("writes stopped: %s", led.summary())

	// Wait for the group to commit every acknowledged row, and for every
	// consumer to have logged the commits of its batches. What does not
	// happen by the deadline is reported by the checks below.
	stoppedAt := time.Now()
	deadline := stoppedAt.Add(slowdown * 90 * time.Second)
	var logs map[string][]consumerLine
	for {
		g, err = api.ConsumerGroupOf(ctx, feedTable, feedGroup)
		logs = readAllLogs(t, cons)
		if err == nil && caughtUp(g, counts) && committedIDs(logs) >= led.ackedCount() {
			c.logf("the group caught up %.1fs after the writes stopped", time.Since(stoppedAt).Seconds())
			break
		}
		if time.Now().After(deadline) {
			c.logf("the group did not catch up within the deadline (%v): checking what is there", err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, p := range cons {
		if !p.hasExited() {
			if err := p.signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if !p.waitExit(30 * time.Second) {
				t.Fatalf("%s did not exit after SIGTERM", p)
			}
			if p.waitErr != nil {
				t.Errorf("consumer %s exited with %v after SIGTERM", p, p.waitErr)
			}
		}
	}
	logs = readAllLogs(t, cons)
	g, err = api.ConsumerGroupOf(ctx, feedTable, feedGroup)
	if err != nil {
		t.Fatalf("the group: %v", err)
	}

	checkFeedLogs(t, c, led, logs, held, counts)
	checkGroup(t, g, counts)
	for _, p := range led.problemList() {
		t.Error(p)
	}
	c.logf("merger: %.0f merges committed, %.0f rows merged",
		metric(ctx, t, c.http, merger, "rollstore_merges_committed_total"), metric(ctx, t, c.http, merger, "rollstore_merged_rows_total"))
	for _, w := range writers {
		commits := samples(ctx, t, c.http, w, "rollstore_feed_commits_total")
		c.logf("%s: feed requests %v, commits %v", w, samples(ctx, t, c.http, w, "rollstore_feed_requests_total"), commits)
	}
}

// consumerProc is a consumer process and the log of what it read.
type consumerProc struct {
	*proc
	feedLog string
}

// startConsumer starts the test binary as member of the feed group,
// reading through writer via; hold makes it hold a batch uncommitted
// (feedHoldAfter) and read no more.
func (c *cluster) startConsumer(name, member string, via *proc, hold bool) *consumerProc {
	c.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.seq++
	seq := c.seq
	c.mu.Unlock()
	file := fmt.Sprintf("%02d-%s", seq, strings.ReplaceAll(name, "'", "+"))
	cfg := consumerConfig{
		Proc:    name,
		URL:     via.url,
		Table:   feedTable,
		Group:   feedGroup,
		Member:  member,
		Log:     filepath.Join(c.logDir, file+".feed.jsonl"),
		MaxRows: 20,
		Wait:    time.Second,
		Pause:   50 * time.Millisecond,
	}
	if hold {
		cfg.HoldAfter, cfg.HoldRows, cfg.Pause = feedHoldAfter, feedHoldRows, feedHoldPause
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	p := &proc{name: name, role: "consumer", log: filepath.Join(c.logDir, file+".log"), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		c.t.Fatal(err)
	}
	p.cmd = exec.Command(exe)
	for _, kv := range c.env {
		if !strings.HasPrefix(kv, "ROLLSTORE_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, consumerEnv+"="+string(raw))
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		c.t.Fatalf("starting consumer %s: %v", name, err)
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	go func() {
		p.waitErr = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	c.logf("started consumer %s (member %s of %s, pid %d) reading through %s", name, member, feedGroup, p.pid(), via)
	return &consumerProc{proc: p, feedLog: cfg.Log}
}

// heldBatch returns the batch a consumer logged it holds.
func heldBatch(lines []consumerLine) (consumerLine, bool) {
	for _, l := range lines {
		if l.Kind != lineHold {
			continue
		}
		for _, b := range lines {
			if b.Kind == lineBatch && b.Seq == l.Seq {
				return b, true
			}
		}
	}
	return consumerLine{}, false
}

func countKind(lines []consumerLine, kind string) int {
	n := 0
	for _, l := range lines {
		if l.Kind == kind {
			n++
		}
	}
	return n
}

func readAllLogs(t *testing.T, cons []*consumerProc) map[string][]consumerLine {
	t.Helper()
	out := map[string][]consumerLine{}
	for _, p := range cons {
		lines, err := readConsumerLog(p.feedLog)
		if err != nil {
			t.Fatal(err)
		}
		out[p.name] = lines
	}
	return out
}

// loggedBatch is a batch as its consumer logged it, with how its commit
// went: committed, uncommitted (the next read was rebalanced) or open
// (no next read answered).
type loggedBatch struct {
	consumerLine
	state string
}

// batchesOf pairs each logged batch with its commit.
func batchesOf(lines []consumerLine) []*loggedBatch {
	var out []*loggedBatch
	bySeq := map[int]*loggedBatch{}
	for _, l := range lines {
		switch l.Kind {
		case lineBatch:
			b := &loggedBatch{consumerLine: l, state: "open"}
			out = append(out, b)
			bySeq[l.Seq] = b
		case lineCommitted, lineUncommitted:
			if b := bySeq[l.Seq]; b != nil {
				b.state = l.Kind
			}
		}
	}
	return out
}

// committedIDs counts the distinct ids of committed batches.
func committedIDs(logs map[string][]consumerLine) int {
	ids := map[string]bool{}
	for _, lines := range logs {
		for _, b := range batchesOf(lines) {
			if b.state == lineCommitted {
				for _, r := range b.Rows {
					ids[r.ID] = true
				}
			}
		}
	}
	return len(ids)
}

func caughtUp(g client.ConsumerGroup, counts map[int]uint64) bool {
	if g.LagRows != 0 {
		return false
	}
	for p := range feedPartitions {
		if g.Committed[p].Offset != counts[p] {
			return false
		}
	}
	return true
}

func memberNames(g client.ConsumerGroup) []string {
	var out []string
	for _, m := range g.Members {
		out = append(out, m.Name)
	}
	sort.Strings(out)
	return out
}

func describeMembers(g client.ConsumerGroup) string {
	var parts []string
	for _, m := range g.Members {
		parts = append(parts, fmt.Sprintf("%s%v", m.Name, m.Partitions))
	}
	return strings.Join(parts, " ")
}

func rowPartitions(rows []loggedRow) []int {
	var out []int
	for _, r := range rows {
		if !slices.Contains(out, r.Partition) {
			out = append(out, r.Partition)
		}
	}
	slices.Sort(out)
	return out
}

type rowPos struct {
	partition int
	offset    uint64
}

// checkFeedLogs checks what the consumers logged against the writers'
// ledger, and logs the counts.
func checkFeedLogs(t *testing.T, c *cluster, led *feedLedger, logs map[string][]consumerLine, held consumerLine, counts map[int]uint64) {
	t.Helper()
	ackedIDs := led.ackedSet()
	refused := led.refusedSet()
	posOf := map[string]rowPos{}    // every delivery of an id at one position
	idAt := map[rowPos]string{}     // and one id per position
	committedAt := map[rowPos]int{} // committed batches holding the position
	deliveries := map[rowPos]int{}
	bad := 0
	fail := func(format string, args ...any) {
		bad++
		if bad <= 30 {
			t.Errorf(format, args...)
		}
	}
	var batches, uncommitted, uncommittedRows, open, rebalancedPages, readErrors, delivered int
	procs := sortedKeys(logs)
	for _, name := range procs {
		lines := logs[name]
		rebalancedPages += countKind(lines, lineRebalanced)
		readErrors += countKind(lines, lineError)
		for _, b := range batchesOf(lines) {
			batches++
			switch b.state {
			case lineUncommitted:
				uncommitted++
				uncommittedRows += len(b.Rows)
			case "open":
				open++
			}
			last := map[int]uint64{}
			for i, r := range b.Rows {
				delivered++
				pos := rowPos{r.Partition, r.Offset}
				deliveries[pos]++
				where := fmt.Sprintf("%s batch %d (epoch %d) row %d: %s at %d/%d", name, b.Seq, b.Epoch, i, r.ID, r.Partition, r.Offset)
				if want := engine.PartitionOf(r.ID, feedPartitions); r.Partition != want {
					fail("%s: the id belongs to partition %d", where, want)
				}
				if !slices.Contains(b.Partitions, r.Partition) {
					fail("%s: not one of the member's partitions %v", where, b.Partitions)
				}
				if off, ok := last[r.Partition]; ok && r.Offset != off+1 {
					fail("%s: follows offset %d in the same batch", where, off)
				}
				last[r.Partition] = r.Offset
				if why, ok := refused[r.ID]; ok {
					fail("%s: a write refused (%s) was delivered", where, why)
				} else if _, ok := ackedIDs[r.ID]; !ok {
					fail("%s: an id never acknowledged was delivered", where)
				}
				if p, ok := posOf[r.ID]; ok && p != pos {
					fail("%s: also delivered at %d/%d", where, p.partition, p.offset)
				}
				posOf[r.ID] = pos
				if id, ok := idAt[pos]; ok && id != r.ID {
					fail("%s: %s also delivered at that offset", where, id)
				}
				idAt[pos] = r.ID
				if b.state == lineCommitted {
					committedAt[pos]++
				}
			}
		}
	}
	for p := range feedPartitions {
		for off := range counts[p] {
			pos := rowPos{p, off}
			switch n := committedAt[pos]; {
			case n == 0 && deliveries[pos] == 0:
				fail("partition %d offset %d (of %d acknowledged): never delivered", p, off, counts[p])
			case n == 0:
				fail("partition %d offset %d (%s): delivered %d times, never in a committed batch", p, off, idAt[pos], deliveries[pos])
			case n > 1:
				fail("partition %d offset %d (%s): in %d committed batches", p, off, idAt[pos], n)
			}
		}
	}
	for pos, id := range idAt {
		if pos.offset >= counts[pos.partition] {
			fail("%s delivered at %d/%d, past the %d rows partition %d acknowledged", id, pos.partition, pos.offset, counts[pos.partition], pos.partition)
		}
	}
	for id, p := range ackedIDs {
		if _, ok := posOf[id]; !ok {
			fail("%s (partition %d) acknowledged, never delivered", id, p)
		}
	}
	// The held batch was not committed: its rows came again, to the
	// members that took its partitions.
	if st := batchState(logs["c1"], held.Seq); st != "open" {
		t.Errorf("c1's held batch %d: %s, want it never committed", held.Seq, st)
	}
	for _, r := range held.Rows {
		if deliveries[rowPos{r.Partition, r.Offset}] < 2 {
			fail("%s at %d/%d, held uncommitted by the killed c1, was not delivered again", r.ID, r.Partition, r.Offset)
		}
	}
	if bad > 30 {
		t.Errorf("... and %d more", bad-30)
	}
	redelivered := delivered - len(deliveries)
	c.logf("feed: %d rows acknowledged in %d partitions, %d refused; %d batches (%d committed, %d uncommitted holding %d rows, %d left open) delivered %d rows, %d distinct: %d redelivered (%d of them held by the killed c1); %d rebalanced pages, %d read errors",
		len(ackedIDs), feedPartitions, len(refused), batches, batches-uncommitted-open, uncommitted, uncommittedRows, open, delivered, len(deliveries), redelivered, len(held.Rows), rebalancedPages, readErrors)
	for _, name := range procs {
		lines := logs[name]
		rows := 0
		for _, b := range batchesOf(lines) {
			rows += len(b.Rows)
		}
		c.logf("  %s: %d batches, %d rows, %d rebalanced pages, %d read errors", name, countKind(lines, lineBatch), rows, countKind(lines, lineRebalanced), countKind(lines, lineError))
	}
}

func batchState(lines []consumerLine, seq int) string {
	for _, b := range batchesOf(lines) {
		if b.Seq == seq {
			return b.state
		}
	}
	return "missing"
}

// checkGroup checks the group's committed positions and lag against what
// the partitions acknowledged.
func checkGroup(t *testing.T, g client.ConsumerGroup, counts map[int]uint64) {
	t.Helper()
	if g.LagRows != 0 {
		t.Errorf("group %s: lag_rows %d after it caught up, want 0", g.Group, g.LagRows)
	}
	for p := range feedPartitions {
		if got := g.Committed[p].Offset; got != counts[p] {
			t.Errorf("group %s: partition %d committed at %d, %d rows acknowledged", g.Group, p, got, counts[p])
		}
	}
	seen := map[int]bool{}
	for _, pl := range g.Partitions {
		seen[pl.Partition] = true
		if pl.Acked != counts[pl.Partition] || pl.Committed != counts[pl.Partition] || pl.LagRows != 0 {
			t.Errorf("group %s: partition %d: committed %d, acked %d, lag %d; %d rows acknowledged", g.Group, pl.Partition, pl.Committed, pl.Acked, pl.LagRows, counts[pl.Partition])
		}
	}
	if len(seen) != feedPartitions {
		t.Errorf("group %s: lag of %d partitions, want %d", g.Group, len(seen), feedPartitions)
	}
	t.Logf("group %s: epoch %d, members %s, lag %d rows", g.Group, g.Epoch, describeMembers(g), g.LagRows)
}

// feedLedger records the writes: acknowledged (200 or 201), refused
// (nothing stored: 400, or 503 with a refusal code on the first try), or
// left unknown (tries that may have landed, never acknowledged by the
// retries).
type feedLedger struct {
	mu       sync.Mutex
	acked    map[string]int    // id → partition
	refused  map[string]string // id → the answer
	unknown  map[string]string // id → the last answer
	answers  map[string]int
	problems []string
}

func newFeedLedger() *feedLedger {
	return &feedLedger{acked: map[string]int{}, refused: map[string]string{}, unknown: map[string]string{}, answers: map[string]int{}}
}

// writeLoop writes new ids until stop, one in ten with a malformed
// record (refused with 400), each to the next writer.
func (l *feedLedger) writeLoop(stop, abort context.Context, hc *http.Client, writers []*proc, cl int) {
	for i := 0; stop.Err() == nil; i++ {
		id := fmt.Sprintf("f%d-%05d", cl, i)
		l.write(abort, hc, writers, (cl+i)%len(writers), id, i%10 == 7)
		sleepCtx(stop, 20*time.Millisecond)
	}
}

// write sends id until it is acknowledged or refused. A try of unknown
// outcome is retried with the same content (200 if it had landed); the
// id is then refused only by an acknowledgement's absence, never by a
// later refusal.
func (l *feedLedger) write(ctx context.Context, hc *http.Client, writers []*proc, first int, id string, malformed bool) {
	hdr := `{"rollout_id":"feed"}`
	if malformed {
		hdr = `{"rollout_id":`
	}
	body := contentOf(id, "feed", 100+len(id)*37%1900)
	uncertain := ""
	deadline := time.Now().Add(slowdown * 60 * time.Second)
	for try := 0; ; try++ {
		p := writers[(first+try)%len(writers)]
		st, code := feedPut(ctx, hc, p, id, hdr, body)
		answer := fmt.Sprint(st)
		if code != "" {
			answer += " " + code
		}
		if st == 0 {
			answer = "transport error"
		}
		l.mu.Lock()
		l.answers[answer]++
		switch {
		case st == http.StatusCreated || st == http.StatusOK:
			l.acked[id] = engine.PartitionOf(id, feedPartitions)
			delete(l.unknown, id)
			if malformed {
				l.problems = append(l.problems, fmt.Sprintf("%s with a malformed record acknowledged by %s: %s", id, p, answer))
			}
			l.mu.Unlock()
			return
		case malformed && st == http.StatusBadRequest,
			uncertain == "" && st == http.StatusServiceUnavailable && isRefusal(code):
			l.refused[id] = answer
			l.mu.Unlock()
			return
		case st == http.StatusServiceUnavailable || st == 0:
			if !isRefusal(code) {
				uncertain = answer
			}
			l.unknown[id] = uncertain
		default:
			l.problems = append(l.problems, fmt.Sprintf("%s on %s: unexpected %s", id, p, answer))
			l.unknown[id] = answer
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

func feedPut(ctx context.Context, hc *http.Client, p *proc, id, record string, body []byte) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, rolloutURL(p, feedTable, id), bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Rollstore-Record", record)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil && resp.StatusCode/100 == 2 {
		// The answer was cut: the outcome is unknown.
		return 0, err.Error()
	}
	var eb errorBody
	_ = json.Unmarshal(data, &eb)
	return resp.StatusCode, eb.Error.Code
}

func (l *feedLedger) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *feedLedger) ackedSet() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.acked))
	for id, p := range l.acked {
		out[id] = p
	}
	return out
}

func (l *feedLedger) refusedSet() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]string, len(l.refused))
	for id, why := range l.refused {
		out[id] = why
	}
	return out
}

// perPartition counts the acknowledged rows of each partition.
func (l *feedLedger) perPartition() map[int]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]uint64{}
	for _, p := range l.acked {
		out[p]++
	}
	return out
}

// problemList is what the writes saw that they should not have; ids
// left of unknown outcome are among them, as they make the counts
// uncertain.
func (l *feedLedger) problemList() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.problems)
	for _, id := range sortedKeys(l.unknown) {
		out = append(out, fmt.Sprintf("%s: never acknowledged after a try of unknown outcome (%s)", id, l.unknown[id]))
	}
	return out
}

func (l *feedLedger) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d ids acknowledged, %d refused, %d of unknown outcome; answers %v", len(l.acked), len(l.refused), len(l.unknown), l.answers)
}
