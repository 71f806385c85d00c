package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rollstore/rollstore/client"
	"github.com/rollstore/rollstore/engine"
)

// commitBody is a commit's JSON body.
func commitBody(cursor, member string) string {
	if member == "" {
		return fmt.Sprintf(`{"cursor":%q}`, cursor)
	}
	return fmt.Sprintf(`{"cursor":%q,"member":%q}`, cursor, member)
}

func (e *testEnv) commit(table, group, body string) response {
	e.t.Helper()
	return e.do("POST", "/v1/tables/"+table+"/consumers/"+group+"/commit", strings.NewReader(body), "Content-Type", "application/json")
}

// TestConsumerGroupSplitsPartitionsAndRefusesStaleCommits: two members
// split the partitions round-robin by name; a member's commit of its
// assignment before the other joined is refused (409 rebalanced, nothing
// stored), and its next read starts from the group's committed positions.
func TestConsumerGroupSplitsPartitionsAndRefusesStaleCommits(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 4)
	var ids []string
	for i := range 24 {
		id := fmt.Sprintf("g-%02d", i)
		e.mustPut("t", id, []byte(id))
		ids = append(ids, id)
	}
	// w0 alone: every partition.
	p0, r := e.feedPage("t", "group", "g", "member", "w0", "max_rows", "100")
	if len(p0.Rows) != 24 || !slices.Equal(p0.Partitions, []int{0, 1, 2, 3}) || r.header.Get(hdrPartitions) != "0,1,2,3" ||
		r.header.Get(hdrRebalanced) != "false" || r.header.Get(hdrEpoch) != fmt.Sprint(p0.Epoch) {
		t.Fatalf("w0 alone: %d rows, partitions %v, headers %v", len(p0.Rows), p0.Partitions, r.header)
	}
	checkFeedOrder(t, p0.Rows, ids, nil)
	// w0 commits half of what it read through a named position: the
	// cursor after its first page of 10.
	first, _ := e.feedPage("t", "group", "g", "member", "w0", "max_rows", "10", "commit", "false")
	want(t, e.commit("t", "g", commitBody(first.Cursor, "w0")), http.StatusOK, "")

	// w1 joins: the epoch moves on, w0 keeps 0 and 2, w1 gets 1 and 3.
	p1, _ := e.feedPage("t", "group", "g", "member", "w1", "max_rows", "100")
	if p1.Epoch <= p0.Epoch || !slices.Equal(p1.Partitions, []int{1, 3}) {
		t.Fatalf("w1 joined: epoch %d (w0 had %d), partitions %v", p1.Epoch, p0.Epoch, p1.Partitions)
	}
	for _, row := range p1.Rows {
		if row.Partition != 1 && row.Partition != 3 {
			t.Fatalf("w1 got a row of partition %d", row.Partition)
		}
	}

	// w0's cursor of the old epoch: its commit is refused, and stores nothing.
	before, err := e.client.ConsumerGroupOf(context.Background(), "t", "g")
	if err != nil {
		t.Fatal(err)
	}
	r = e.commit("t", "g", commitBody(p0.Cursor, "w0"))
	want(t, r, http.StatusConflict, codeRebalanced)
	after, err := e.client.ConsumerGroupOf(context.Background(), "t", "g")
	if err != nil || !sameCommitted(before, after) {
		t.Fatalf("a refused commit changed the group: %+v → %+v (%v)", before.Committed, after.Committed, err)
	}
	if n := testutil.ToFloat64(e.srv.metrics.feedCommits.WithLabelValues("rebalanced")); n != 1 {
		t.Fatalf("rebalanced commits counted %v", n)
	}

	// w0 reads on with its old cursor: the read says so, and starts from
	// the committed positions of its partitions 0 and 2.
	p, r := e.feedPage("t", "group", "g", "member", "w0", "cursor", p0.Cursor, "max_rows", "100")
	if !p.Rebalanced || r.header.Get(hdrRebalanced) != "true" || !slices.Equal(p.Partitions, []int{0, 2}) || p.Epoch != p1.Epoch {
		t.Fatalf("w0 after the rebalance: %+v", p)
	}
	committed := map[int]uint64{}
	for part, pos := range after.Committed {
		committed[part] = pos.Offset
	}
	var want02 []string
	for _, row := range p0.Rows {
		if (row.Partition == 0 || row.Partition == 2) && row.Offset >= committed[row.Partition] {
			want02 = append(want02, row.ID)
		}
	}
	checkFeedOrder(t, p.Rows, want02, committed)

	// Its current cursor commits; the group shows the positions and lag.
	r = e.commit("t", "g", commitBody(p.Cursor, "w0"))
	want(t, r, http.StatusOK, "")
	var gv client.ConsumerGroup
	r.decode(t, &gv)
	if gv.Group != "g" || gv.Epoch != p1.Epoch || len(gv.Members) != 2 || gv.Members[0].Name != "w0" || !slices.Equal(gv.Members[0].Partitions, []int{0, 2}) {
		t.Fatalf("group after the commit: %+v", gv)
	}
	for _, part := range []int{0, 2} {
		if _, ok := gv.Committed[part]; !ok {
			t.Fatalf("partition %d not committed: %+v", part, gv.Committed)
		}
	}

	// A commit via the feed (commit=true, the default) and w1's leave.
	p2, _ := e.feedPage("t", "group", "g", "member", "w1", "cursor", p1.Cursor)
	if p2.Rebalanced || len(p2.Rows) != 0 {
		t.Fatalf("w1 reading on: %+v", p2)
	}
	g, err := e.client.ConsumerGroupOf(context.Background(), "t", "g")
	if err != nil || g.LagRows != 0 || len(g.Partitions) != 4 {
		t.Fatalf("after both committed everything: %+v %v", g, err)
	}
	want(t, e.do("DELETE", "/v1/tables/t/consumers/g/members/w1", nil), http.StatusNoContent, "")
	g, err = e.client.ConsumerGroupOf(context.Background(), "t", "g")
	if err != nil || len(g.Members) != 1 || g.Epoch <= p1.Epoch || !slices.Equal(g.Members[0].Partitions, []int{0, 1, 2, 3}) {
		t.Fatalf("after w1 left: %+v %v", g, err)
	}

	// Listed, in the table's status, then deleted.
	gs, err := e.client.Consumers(context.Background(), "t")
	if err != nil || len(gs) != 1 || gs[0].Group != "g" {
		t.Fatalf("consumers: %+v %v", gs, err)
	}
	st, err := e.client.TableStatus(context.Background(), "t")
	if err != nil || len(st.Consumers) != 1 || st.Consumers[0].Group != "g" {
		t.Fatalf("status consumers: %+v %v", st.Consumers, err)
	}
	want(t, e.do("DELETE", "/v1/tables/t/consumers/g", nil), http.StatusNoContent, "")
	want(t, e.do("GET", "/v1/tables/t/consumers/g", nil), http.StatusNotFound, codeGroupNotFound)
	want(t, e.do("DELETE", "/v1/tables/t/consumers/g", nil), http.StatusNotFound, codeGroupNotFound)
}

func sameCommitted(a, b client.ConsumerGroup) bool {
	if len(a.Committed) != len(b.Committed) {
		return false
	}
	for p, pos := range a.Committed {
		if b.Committed[p].Offset != pos.Offset {
			return false
		}
	}
	return true
}

// TestNamedConsumerCommitsMoveForwardOnly: without members, a commit
// stores each partition's position unless an older one; workers commit
// their own partitions under one name.
func TestNamedConsumerCommitsMoveForwardOnly(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 2)
	for i := range 10 {
		e.mustPut("t", fmt.Sprintf("n-%d", i), []byte("x"))
	}
	early, _ := e.feedPage("t", "max_rows", "2")
	late, _ := e.feedPage("t", "max_rows", "100")
	r := e.commit("t", "trainer", commitBody(late.Cursor, ""))
	want(t, r, http.StatusOK, "")
	var g client.ConsumerGroup
	r.decode(t, &g)
	if g.LagRows != 0 || len(g.Members) != 0 {
		t.Fatalf("after committing everything: %+v", g)
	}
	// The older cursor is ignored, not stored.
	want(t, e.commit("t", "trainer", commitBody(early.Cursor, "")), http.StatusOK, "")
	got, err := e.client.ConsumerGroupOf(context.Background(), "t", "trainer")
	if err != nil || got.LagRows != 0 {
		t.Fatalf("an older commit moved the positions back: %+v %v", got, err)
	}
	// One worker per partition, each committing its own.
	for part := range 2 {
		p, _ := e.feedPage("t", "partitions", fmt.Sprint(part), "max_rows", "100")
		want(t, e.commit("t", "per-part", commitBody(p.Cursor, "")), http.StatusOK, "")
	}
	pp, err := e.client.ConsumerGroupOf(context.Background(), "t", "per-part")
	if err != nil || len(pp.Committed) != 2 || pp.LagRows != 0 {
		t.Fatalf("per-partition commits: %+v %v", pp, err)
	}
}

func TestConsumerRoutesRefuseBadInput(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 2)
	p, _ := e.feedPage("t")
	for _, c := range []struct {
		body, ctype string
		status      int
		code        string
	}{
		{`{"cursor":"zzz"}`, "application/json", 400, codeBadCursor},
		{`{}`, "application/json", 400, codeBadCursor},
		{`{"cursor":"x","colour":1}`, "application/json", 400, codeInvalidArgument},
		{`not json`, "application/json", 400, codeInvalidArgument},
		{commitBody(p.Cursor, "-bad"), "application/json", 400, codeInvalidArgument},
		{commitBody(p.Cursor, ""), "text/plain", 415, codeUnsupportedMedia},
		// A member's commit of a cursor no group gave it.
		{commitBody(p.Cursor, "w0"), "application/json", 409, codeRebalanced},
	} {
		r := e.do("POST", "/v1/tables/t/consumers/g/commit", strings.NewReader(c.body), "Content-Type", c.ctype)
		if r.status != c.status || r.errCode() != c.code {
			t.Errorf("commit %s (%s): %d %s, want %d %s", c.body, c.ctype, r.status, r.body, c.status, c.code)
		}
	}
	want(t, e.commit("t", "bad..name!", commitBody(p.Cursor, "")), http.StatusBadRequest, codeInvalidArgument)
	want(t, e.do("GET", "/v1/tables/t/consumers/"+strings.Repeat("g", 65), nil), http.StatusBadRequest, codeInvalidArgument)
	want(t, e.do("GET", "/v1/tables/t/consumers/g?x=1", nil), http.StatusBadRequest, codeInvalidArgument)
	want(t, e.do("GET", "/v1/tables/t/consumers/g", nil), http.StatusNotFound, codeGroupNotFound)
	want(t, e.do("GET", "/v1/tables/nope/consumers", nil), http.StatusNotFound, codeTableNotFound)
	want(t, e.do("DELETE", "/v1/tables/t/consumers/g/members/.m", nil), http.StatusBadRequest, codeInvalidArgument)
	if gs, err := e.client.Consumers(context.Background(), "t"); err != nil || len(gs) != 0 {
		t.Fatalf("refused commits stored groups: %+v %v", gs, err)
	}
	// A table without partitions has no feed and no consumers.
	if err := e.db.CreateTableWith(context.Background(), "legacy", engine.TableOptions{Partitions: -1}); err != nil {
		t.Fatal(err)
	}
	st, err := e.client.TableStatus(context.Background(), "legacy")
	if err != nil || len(st.Consumers) != 0 {
		t.Fatalf("legacy status: %+v %v", st, err)
	}
	r := e.do("GET", "/v1/tables/legacy", nil)
	if !strings.Contains(string(r.body), `"consumers":[]`) {
		t.Fatalf("legacy status: %s", r.body)
	}
}

// TestConsumerLagGaugesFollowTheGroupsServed: the lag loop's refresh sets
// the gauges of the groups this server served from their status, and
// drops a deleted group's.
func TestConsumerLagGaugesFollowTheGroupsServed(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 2)
	for i := range 6 {
		e.mustPut("t", fmt.Sprintf("l-%d", i), []byte("x"))
	}
	first, _ := e.feedPage("t", "group", "g", "member", "m", "max_rows", "2")
	_, _ = e.feedPage("t", "group", "g", "member", "m", "max_rows", "1", "cursor", first.Cursor)
	ctx := context.Background()
	e.srv.refreshConsumerLag(ctx)
	g, err := e.client.ConsumerGroupOf(ctx, "t", "g")
	if err != nil {
		t.Fatal(err)
	}
	if g.LagRows != 4 {
		t.Fatalf("group lag %d rows after committing 2 of 6", g.LagRows)
	}
	if got := testutil.ToFloat64(e.srv.metrics.consumerLagRows.WithLabelValues("t", "g")); got != 4 {
		t.Fatalf("rollstore_feed_consumer_lag_rows %v, want 4", got)
	}
	want(t, e.do("DELETE", "/v1/tables/t/consumers/g", nil), http.StatusNoContent, "")
	metrics, err := e.client.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(metrics), `rollstore_feed_consumer_lag_rows{group="g"`) {
		t.Fatal("a deleted group's lag gauge is still exported")
	}
	for _, name := range []string{"rollstore_feed_requests_total", "rollstore_feed_rows_total", "rollstore_feed_waiting", "rollstore_feed_commits_total"} {
		if !strings.Contains(string(metrics), name) {
			t.Errorf("metrics without %s", name)
		}
	}
}

// TestClientConsumer: the Go client's member commits as it reads, sees a
// rebalance, commits explicitly and leaves.
func TestClientConsumer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createTableWith("t", 2)
	for i := range 8 {
		e.mustPut("t", fmt.Sprintf("c-%d", i), []byte("x"))
	}
	a := e.client.Consumer("t", "g", "a", client.FeedOptions{MaxRows: 3})
	total := 0
	for {
		p, err := a.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Rows) == 0 {
			break
		}
		total += len(p.Rows)
	}
	if total != 8 {
		t.Fatalf("a read %d rows of 8", total)
	}
	g, err := e.client.ConsumerGroupOf(ctx, "t", "g")
	if err != nil || g.LagRows != 0 {
		t.Fatalf("after a read everything (committing as it went): %+v %v", g, err)
	}
	b := e.client.Consumer("t", "g", "b", client.FeedOptions{})
	if _, err := b.Next(ctx); err != nil {
		t.Fatal(err)
	}
	// a's cursor is of the epoch before b joined.
	if _, err := a.Commit(ctx); !errors.Is(err, client.ErrRebalanced) || !errors.Is(err, client.ErrConflict) {
		t.Fatalf("a's stale commit: %v", err)
	}
	p, err := a.Next(ctx)
	if err != nil || !p.Rebalanced || len(p.Partitions) != 1 {
		t.Fatalf("a after the rebalance: %+v %v", p, err)
	}
	if _, err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if g, err := e.client.ConsumerGroupOf(ctx, "t", "g"); err != nil || len(g.Members) != 1 || g.Members[0].Name != "a" {
		t.Fatalf("after b left: %+v %v", g, err)
	}
	if _, err := e.client.ConsumerGroupOf(ctx, "t", "none"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("absent group: %v", err)
	}
	if err := e.client.DeleteConsumer(ctx, "t", "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Consumer("t", "g", "a", client.FeedOptions{Partitions: []int{0}}).Next(ctx); err == nil {
		t.Fatal("a consumer with partitions of its own was accepted")
	}
}

func TestNamedConsumerWorkerResumesAtItsCommits(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 2)
	var ids []string
	for i := range 12 {
		ids = append(ids, fmt.Sprintf("w-%02d", i))
		e.mustPut("t", ids[i], []byte("x"))
	}
	// A worker of partition 0 reads two pages; the second request commits
	// the first page's cursor.
	first, _ := e.feedPage("t", "group", "trainer", "partitions", "0", "max_rows", "2")
	second, _ := e.feedPage("t", "group", "trainer", "partitions", "0", "max_rows", "2", "cursor", first.Cursor)
	if len(first.Rows) != 2 || len(second.Rows) == 0 {
		t.Fatalf("pages of %d and %d rows", len(first.Rows), len(second.Rows))
	}
	// Restarted without its cursor, it resumes after the committed page:
	// the second page comes again, the first does not.
	again, _ := e.feedPage("t", "group", "trainer", "partitions", "0", "max_rows", "2")
	if len(again.Rows) == 0 || again.Rows[0].Record.ID != second.Rows[0].Record.ID || again.Rows[0].Offset != 2 {
		t.Fatalf("after a restart: %+v, want the page after the committed one (%s at offset 2)", again.Rows, second.Rows[0].Record.ID)
	}
	// commit=false reads without committing; partition 1, never
	// committed, starts at its oldest row.
	rest, _ := e.feedPage("t", "group", "trainer", "partitions", "0,1", "max_rows", "100", "commit", "false", "cursor", again.Cursor)
	g, err := e.client.ConsumerGroupOf(context.Background(), "t", "trainer")
	if err != nil || g.Committed[0].Offset != 2 || len(g.Committed) != 1 {
		t.Fatalf("commit=false moved the positions: %+v %v", g, err)
	}
	seen := map[string]bool{}
	for _, r := range append(append(first.Rows, again.Rows...), rest.Rows...) {
		seen[r.Record.ID] = true
	}
	if len(seen) != len(ids) {
		t.Fatalf("read %d of %d rows across the restart", len(seen), len(ids))
	}
	// A member without its group is refused.
	want(t, e.do("GET", feedPath("t", "member", "m0"), nil), http.StatusBadRequest, codeInvalidArgument)
}
