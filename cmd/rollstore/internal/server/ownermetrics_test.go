package server

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/memory"
)

// ownedPartitions returns the partitions of table a scrape says are owned.
func ownedPartitions(t *testing.T, body, table string) []string {
	t.Helper()
	var out []string
	re := regexp.MustCompile(`(?m)^rollstore_partition_owned\{partition="([^"]+)",table="` + regexp.QuoteMeta(table) + `"\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		if m[2] != "1" {
			t.Fatalf("rollstore_partition_owned %s = %s, want only 1s", m[1], m[2])
		}
		out = append(out, m[1])
	}
	return out
}

// Two writers split a table's partitions: every partition is exported as
// owned by exactly one of them, each exports the table's partition count,
// and when one leaves the other exports every partition.
func TestPartitionOwnershipMetricsNameOneOwnerPerPartition(t *testing.T) {
	store := memory.New()
	a, b := twoPods(t, store)
	scrape := func(p *pod) string {
		t.Helper()
		r := p.do("GET", "/metrics", nil)
		want(t, r, http.StatusOK, "")
		return string(r.body)
	}
	owners := map[string][]string{}
	for _, p := range []*pod{a, b} {
		body := scrape(p)
		if v := metricValue(t, body, `rollstore_table_partitions{table="t"}`); v != fmt.Sprint(engine.DefaultPartitions) {
			t.Errorf("%s: rollstore_table_partitions %s, want %d", p.name, v, engine.DefaultPartitions)
		}
		for _, part := range ownedPartitions(t, body, "t") {
			owners[part] = append(owners[part], p.name)
		}
	}
	for i := range engine.DefaultPartitions {
		part := engine.PartitionName(i)
		if got := owners[part]; len(got) != 1 {
			t.Errorf("partition %s exported as owned by %v, want exactly one writer", part, got)
		}
	}
	if len(owners) != engine.DefaultPartitions {
		t.Errorf("owned partitions %v, want the %d of the table", owners, engine.DefaultPartitions)
	}

	b.stop() // leaves the members: a takes every partition at its next poll
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := ownedPartitions(t, scrape(a), "t")
		if len(got) == engine.DefaultPartitions {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after b left, a exports %d owned partitions, want %d: %v", len(got), engine.DefaultPartitions, got)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A reader owns nothing and says nothing about ownership.
	r := newEnv(t, func(o *envOptions) { o.store = store; o.engine.Shard = "" })
	want(t, r.do("GET", rolloutURL("t", "absent"), nil), http.StatusNotFound, "")
	body := string(r.do("GET", "/metrics", nil).body)
	if strings.Contains(body, "rollstore_partition_owned{") || strings.Contains(body, "rollstore_table_partitions{") {
		t.Errorf("a reader exports ownership:\n%s", grepMetrics(body, "rollstore_partition_owned")+grepMetrics(body, "rollstore_table_partitions"))
	}
}

// Point reads are timed under the outcome they are counted under, and the
// forwarding series exist, at zero, before anything was forwarded.
func TestReadDurationAndForwardSeriesAreExported(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	e.mustPut("t", "a", []byte("x"))
	e.do("GET", rolloutURL("t", "a"), nil)
	e.do("GET", rolloutURL("t", "a")+"/payload", nil)
	e.do("GET", rolloutURL("t", "absent"), nil)
	body := string(e.do("GET", "/metrics", nil).body)

	for outcome, n := range map[string]string{"wal_hit": "2", "absent": "1", "base_hit": "0", "late_base_hit": "0"} {
		counted := metricValue(t, body, `rollstore_reads_total{outcome="`+outcome+`"}`)
		timed := metricValue(t, body, `rollstore_read_duration_seconds_count{outcome="`+outcome+`"}`)
		if counted != n || timed != n {
			t.Errorf("%s: counted %s, timed %s, want %s", outcome, counted, timed, n)
		}
		metricValue(t, body, `rollstore_read_duration_seconds_bucket{outcome="`+outcome+`",le="+Inf"}`)
	}
	var results []string
	for _, m := range regexp.MustCompile(`(?m)^rollstore_appends_forwarded_total\{result="([a-z_]+)"\} 0$`).FindAllStringSubmatch(body, -1) {
		results = append(results, m[1])
	}
	sort.Strings(results)
	if got := strings.Join(results, " "); got != "committed failed not_owner refused unknown unreachable" {
		t.Errorf("rollstore_appends_forwarded_total at zero for %q, want every result", got)
	}
	metricValue(t, body, `rollstore_forward_duration_seconds_count{result="committed"}`)
}
