package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rollstore/rollstore/client"
)

// consumerEnv, when set, makes the test binary a consumer-group member
// instead of running tests: its value is the member's consumerConfig as
// JSON. The feed test starts its consumers this way, as processes it can
// kill.
const consumerEnv = "ROLLSTORE_E2E_CONSUMER"

// consumerConfig is what one consumer process reads, and where it logs it.
type consumerConfig struct {
	Proc    string        `json:"proc"` // c1, c1', ...: names the process, not the member
	URL     string        `json:"url"`
	Table   string        `json:"table"`
	Group   string        `json:"group"`
	Member  string        `json:"member"`
	Log     string        `json:"log"`
	MaxRows int           `json:"max_rows"`
	Wait    time.Duration `json:"wait"`
	Pause   time.Duration `json:"pause"` // after each batch with rows, before the next read
	// HoldAfter > 0: the first batch of at least HoldRows rows from the
	// HoldAfter-th batch with rows on is held: the process logs a hold
	// and reads no more (so never commits that batch) until it is killed.
	HoldAfter int `json:"hold_after"`
	HoldRows  int `json:"hold_rows"`
}

// Kinds of the lines of a consumer's log.
const (
	lineBatch       = "batch"       // a page with rows, as received
	lineCommitted   = "committed"   // the next read committed batch Seq (not rebalanced)
	lineUncommitted = "uncommitted" // the next read was rebalanced: batch Seq was not committed
	lineRebalanced  = "rebalanced"  // a page (with rows or not) answered Rollstore-Rebalanced: true
	lineHold        = "hold"        // the process holds batch Seq uncommitted, reading no more
	lineError       = "error"       // a read failed; the same cursor is sent again
)

// consumerLine is one line of a consumer's log.
type consumerLine struct {
	Kind       string      `json:"kind"`
	Proc       string      `json:"proc"`
	Member     string      `json:"member"`
	Seq        int         `json:"seq,omitempty"`
	Epoch      uint64      `json:"epoch,omitempty"`
	Partitions []int       `json:"partitions,omitempty"`
	Rows       []loggedRow `json:"rows,omitempty"`
	Error      string      `json:"error,omitempty"`
}

type loggedRow struct {
	ID        string `json:"id"`
	Partition int    `json:"partition"`
	Offset    uint64 `json:"offset"`
}

// consumerMain runs one consumer process until it is signalled. Every
// line reaches the disk before the process reads again: what the log says
// was received or committed was, even if the process is killed next.
func consumerMain(raw string) int {
	var cfg consumerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "consumer: %s: %v\n", consumerEnv, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	f, err := os.OpenFile(cfg.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "consumer: %v\n", err)
		return 1
	}
	defer f.Close()
	logLine := func(l consumerLine) {
		l.Proc, l.Member = cfg.Proc, cfg.Member
		b, err := json.Marshal(l)
		if err == nil {
			_, err = f.Write(append(b, '\n'))
		}
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "consumer: writing the log: %v\n", err)
			os.Exit(1)
		}
	}
	cl, err := client.New(cfg.URL, client.WithHTTPClient(&http.Client{Timeout: cfg.Wait + 60*time.Second}))
	if err != nil {
		fmt.Fprintf(os.Stderr, "consumer: %v\n", err)
		return 1
	}
	m := cl.Consumer(cfg.Table, cfg.Group, cfg.Member, client.FeedOptions{MaxRows: cfg.MaxRows, Wait: cfg.Wait, Columns: []string{"id"}})
	fmt.Fprintf(os.Stderr, "consumer %s: member %s of %s reading %s through %s\n", cfg.Proc, cfg.Member, cfg.Group, cfg.Table, cfg.URL)
	seq, batches := 0, 0
	pending := 0 // the batch the next read commits, 0: none
	for ctx.Err() == nil {
		page, err := m.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			// The consumer keeps its cursor: the next read commits it again.
			logLine(consumerLine{Kind: lineError, Error: err.Error()})
			fmt.Fprintf(os.Stderr, "consumer %s: %v\n", cfg.Proc, err)
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		if pending > 0 {
			kind := lineCommitted
			if page.Rebalanced {
				kind = lineUncommitted
			}
			logLine(consumerLine{Kind: kind, Seq: pending, Epoch: page.Epoch})
			pending = 0
		}
		if page.Rebalanced {
			logLine(consumerLine{Kind: lineRebalanced, Epoch: page.Epoch, Partitions: page.Partitions})
		}
		if len(page.Rows) == 0 {
			continue
		}
		seq++
		batches++
		rows := make([]loggedRow, len(page.Rows))
		for i, r := range page.Rows {
			rows[i] = loggedRow{ID: r.ID, Partition: r.Partition, Offset: r.Offset}
		}
		logLine(consumerLine{Kind: lineBatch, Seq: seq, Epoch: page.Epoch, Partitions: page.Partitions, Rows: rows})
		pending = seq
		if cfg.HoldAfter > 0 && batches >= cfg.HoldAfter && len(rows) >= cfg.HoldRows {
			logLine(consumerLine{Kind: lineHold, Seq: seq, Epoch: page.Epoch})
			<-ctx.Done()
			break
		}
		sleepCtx(ctx, cfg.Pause)
	}
	return 0
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// readConsumerLog reads a consumer's log. A last line cut short (the
// process killed while writing it) is left out; any other line that does
// not parse is an error.
func readConsumerLog(path string) ([]consumerLine, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(data, '\n'); i+1 < len(data) {
		data = data[:i+1]
	}
	var out []consumerLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var l consumerLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, l)
	}
	return out, sc.Err()
}
