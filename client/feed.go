package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// FeedOptions choose what a feed reader (or a consumer-group member)
// reads. Zero values mean the server's defaults: from the oldest retained
// row, every partition, 1000 rows and 16 MiB per page, no payload bytes
// carried, no wait.
type FeedOptions struct {
	// Cursor resumes a reader from the cursor of an earlier page (a
	// reader's Cursor()); "latest" reads only rows acknowledged after the
	// first request. For a Consumer it is the cursor its first Next
	// commits and continues from, when it is of the member's current
	// assignment.
	Cursor string
	// Partitions to read (not for a Consumer: the group assigns them).
	Partitions []int
	MaxRows    int
	MaxBytes   int64
	// Payloads is a budget of payload bytes to carry in each page; rows
	// beyond it carry PayloadURL only. AllPayloads carries up to
	// MaxBytes.
	Payloads    int64
	AllPayloads bool
	// Wait long-polls: a page with no row comes back only after waiting
	// this long for one (the server lowers it to its --feed-max-wait).
	Wait time.Duration
	// Filters (exact match); rows filtered out still advance the cursor.
	RolloutID, ProblemID, PolicyVersion string
	// Columns projects the record's fields (id and the feed's own always
	// come); nil: every field.
	Columns []string
}

// FeedRow is one row of the feed: the record, where it stands in its
// partition, and its payload's bytes or where to read them.
type FeedRow struct {
	Record
	Partition int
	// Offset is the row's sequence number in its partition (from 0,
	// dense, never reused).
	Offset  uint64
	AckedAt time.Time
	// Carried: Payload holds the payload's bytes (the page's payload
	// budget had room). Otherwise PayloadURL is the payload's path on the
	// server (Client.Payload reads it by id too).
	Carried    bool
	Payload    []byte
	PayloadURL string
}

// UnmarshalJSON reads a row as the server sends it: the record's fields
// (Record's own decoding) and the feed's.
func (r *FeedRow) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &r.Record); err != nil {
		return err
	}
	var aux struct {
		Partition  int       `json:"partition"`
		Offset     uint64    `json:"offset"`
		AckedAt    time.Time `json:"acked_at"`
		Payload    *[]byte   `json:"payload"`
		PayloadURL string    `json:"payload_url"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	r.Partition, r.Offset, r.AckedAt, r.PayloadURL = aux.Partition, aux.Offset, aux.AckedAt, aux.PayloadURL
	r.Carried, r.Payload = aux.Payload != nil, nil
	if aux.Payload != nil {
		r.Payload = *aux.Payload
	}
	return nil
}

// FeedPage is one answer of the feed.
type FeedPage struct {
	Rows []FeedRow `json:"rows"`
	// Cursor resumes after this page (also when it holds no row).
	Cursor string `json:"cursor"`
	// LagRows counts the rows acknowledged in the partitions read after
	// Cursor, as of this read.
	LagRows uint64 `json:"lag_rows"`
	// Partitions read: for a group member, its assignment.
	Partitions []int `json:"partitions"`
	// Epoch (group members) is the group's epoch; Rebalanced says the
	// cursor sent was of an earlier assignment: it was not committed, and
	// the page starts from the group's committed positions.
	Epoch      uint64 `json:"epoch"`
	Rebalanced bool   `json:"rebalanced"`
}

// CursorExpiredError is the feed's 410: the cursor is older than the
// feed's retention (or of a dropped incarnation of the table). Oldest is
// the oldest cursor the feed takes now; SetCursor(Oldest) resumes there,
// skipping what was lost.
type CursorExpiredError struct {
	*APIError
	Oldest string
}

func (e *CursorExpiredError) Unwrap() error { return e.APIError }

// FeedReader reads a table's feed page after page, keeping its cursor.
// It is not safe for concurrent use.
type FeedReader struct {
	c      *Client
	table  string
	opts   FeedOptions
	cursor string
}

// Feed returns a reader of table's feed from opts.Cursor.
func (c *Client) Feed(table string, opts FeedOptions) *FeedReader {
	return &FeedReader{c: c, table: table, opts: opts, cursor: opts.Cursor}
}

// Cursor is where the next page starts: the cursor of the last page read
// (or the one the reader started from).
func (f *FeedReader) Cursor() string { return f.cursor }

// SetCursor makes the next page start from cursor.
func (f *FeedReader) SetCursor(cursor string) { f.cursor = cursor }

// Next reads the next page; the reader then continues after it. With
// Wait, a page with no row comes back only at the end of the wait. A
// cursor past retention is a *CursorExpiredError (errors.Is ErrGone and
// ErrCursorExpired).
func (f *FeedReader) Next(ctx context.Context) (*FeedPage, error) {
	q := f.opts.query(f.cursor)
	if len(f.opts.Partitions) > 0 {
		q.Set("partitions", joinInts(f.opts.Partitions))
	}
	page, err := f.c.feedPage(ctx, f.table, q)
	if err != nil {
		return nil, err
	}
	f.cursor = page.Cursor
	return page, nil
}

func (o FeedOptions) query(cursor string) url.Values {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if o.MaxRows > 0 {
		q.Set("max_rows", strconv.Itoa(o.MaxRows))
	}
	if o.MaxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(o.MaxBytes, 10))
	}
	switch {
	case o.AllPayloads:
		q.Set("payloads", "all")
	case o.Payloads > 0:
		q.Set("payloads", strconv.FormatInt(o.Payloads, 10))
	}
	if o.Wait > 0 {
		q.Set("wait", strconv.FormatFloat(o.Wait.Seconds(), 'f', -1, 64))
	}
	for k, v := range map[string]string{"rollout_id": o.RolloutID, "problem_id": o.ProblemID, "policy_version": o.PolicyVersion} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if len(o.Columns) > 0 {
		q.Set("columns", strings.Join(o.Columns, ","))
	}
	return q
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// maxFeedPage bounds the JSON of one page: the server's largest page
// (--feed-max-bytes, 64 MiB) with its payloads in base64.
const maxFeedPage = 128 << 20

func (c *Client) feedPage(ctx context.Context, table string, q url.Values) (*FeedPage, error) {
	req, err := c.newRequest(ctx, http.MethodGet, tablePath(table, "feed"), q, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rollstore client: %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		ae := readError(req, resp)
		if ae.Code == codeCursorExpired {
			return nil, &CursorExpiredError{APIError: ae, Oldest: ae.oldestCursor}
		}
		return nil, ae
	}
	var page FeedPage
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxFeedPage))
	if err := dec.Decode(&page); err != nil {
		return nil, fmt.Errorf("rollstore client: %s %s: decoding the answer: %w", req.Method, req.URL.Redacted(), err)
	}
	if page.Cursor == "" {
		return nil, fmt.Errorf("rollstore client: %s %s: the answer has no cursor", req.Method, req.URL.Redacted())
	}
	return &page, nil
}

// Consumer is a member of a consumer group: the group splits the table's
// partitions among its members, and keeps the positions they committed.
// It is not safe for concurrent use.
type Consumer struct {
	c                    *Client
	table, group, member string
	opts                 FeedOptions
	cursor               string
}

// Consumer returns a member of group reading table (it joins with its
// first Next). opts.Partitions must be empty.
func (c *Client) Consumer(table, group, member string, opts FeedOptions) *Consumer {
	return &Consumer{c: c, table: table, group: group, member: member, opts: opts, cursor: opts.Cursor}
}

// Cursor is the cursor of the last page read.
func (m *Consumer) Cursor() string { return m.cursor }

// Next commits the cursor of the previous page (its rows are taken as
// processed) and reads the next page of the member's partitions. After a
// rebalance (page.Rebalanced) the commit was refused and the page starts
// from the group's committed positions: rows of the previous page may
// come again, here or to another member.
func (m *Consumer) Next(ctx context.Context) (*FeedPage, error) {
	if len(m.opts.Partitions) > 0 {
		return nil, errors.New("rollstore client: a consumer reads the partitions its group assigns; FeedOptions.Partitions must be empty")
	}
	q := m.opts.query(m.cursor)
	q.Set("group", m.group)
	q.Set("member", m.member)
	page, err := m.c.feedPage(ctx, m.table, q)
	if err != nil {
		return nil, err
	}
	m.cursor = page.Cursor
	return page, nil
}

// Commit commits the cursor of the last page read now (Next would commit
// it with the next read). ErrRebalanced if the group changed since that
// page: resume with Next.
func (m *Consumer) Commit(ctx context.Context) (ConsumerGroup, error) {
	if m.cursor == "" || m.cursor == "latest" {
		return ConsumerGroup{}, errors.New("rollstore client: nothing read yet to commit")
	}
	return m.c.CommitConsumer(ctx, m.table, m.group, m.member, m.cursor)
}

// Close leaves the group: its partitions go to the other members at once
// rather than after the session timeout.
func (m *Consumer) Close(ctx context.Context) error {
	_, err := m.c.doJSON(ctx, http.MethodDelete, tablePath(m.table, "consumers", PathEscape(m.group), "members", PathEscape(m.member)),
		nil, nil, http.StatusNoContent)
	return err
}

// ConsumerGroup is a consumer group (or a named consumer, a group without
// members) with its committed positions and lag.
type ConsumerGroup struct {
	Group string `json:"group"`
	// Epoch counts membership changes.
	Epoch   uint64           `json:"epoch"`
	Members []ConsumerMember `json:"members"`
	// Committed is the committed position per partition.
	Committed   map[int]CommittedPosition `json:"committed"`
	CommittedAt time.Time                 `json:"committed_at"`
	LagRows     uint64                    `json:"lag_rows"`
	LagSeconds  float64                   `json:"lag_seconds"`
	Partitions  []PartitionLag            `json:"partitions"`
}

// ConsumerMember is a member of a group and its assigned partitions.
type ConsumerMember struct {
	Name       string    `json:"name"`
	Partitions []int     `json:"partitions"`
	Beat       time.Time `json:"beat"`
}

// CommittedPosition is where a group resumes in one partition: the
// offset of the next row, and when the row before it was acknowledged.
type CommittedPosition struct {
	Offset  uint64    `json:"offset"`
	AckedAt time.Time `json:"acked_at"`
}

// PartitionLag is a group's position in one partition against what the
// partition acknowledged.
type PartitionLag struct {
	Partition  int     `json:"partition"`
	Committed  uint64  `json:"committed"`
	Acked      uint64  `json:"acked"`
	LagRows    uint64  `json:"lag_rows"`
	LagSeconds float64 `json:"lag_seconds"`
}

// Consumers lists a table's consumer groups.
func (c *Client) Consumers(ctx context.Context, table string) ([]ConsumerGroup, error) {
	var out struct {
		Consumers []ConsumerGroup `json:"consumers"`
	}
	_, err := c.doJSON(ctx, http.MethodGet, tablePath(table, "consumers"), nil, &out, http.StatusOK)
	return out.Consumers, err
}

// ConsumerGroupOf returns one group; ErrNotFound (code group_not_found)
// if there is none.
func (c *Client) ConsumerGroupOf(ctx context.Context, table, group string) (ConsumerGroup, error) {
	var g ConsumerGroup
	_, err := c.doJSON(ctx, http.MethodGet, tablePath(table, "consumers", PathEscape(group)), nil, &g, http.StatusOK)
	return g, err
}

// CommitConsumer commits cursor's positions under group. Without member
// (a named consumer) each partition's position only moves forward; with
// member the cursor must be of the member's current assignment, else
// ErrRebalanced.
func (c *Client) CommitConsumer(ctx context.Context, table, group, member, cursor string) (ConsumerGroup, error) {
	body, err := json.Marshal(struct {
		Cursor string `json:"cursor"`
		Member string `json:"member,omitempty"`
	}{cursor, member})
	if err != nil {
		return ConsumerGroup{}, err
	}
	req, err := c.newRequest(ctx, http.MethodPost, tablePath(table, "consumers", PathEscape(group), "commit"), nil, bytes.NewReader(body))
	if err != nil {
		return ConsumerGroup{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	var g ConsumerGroup
	_, err = c.sendJSON(req, &g, http.StatusOK)
	return g, err
}

// DeleteConsumer deletes a group and its committed positions.
func (c *Client) DeleteConsumer(ctx context.Context, table, group string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, tablePath(table, "consumers", PathEscape(group)), nil, nil, http.StatusNoContent)
	return err
}
