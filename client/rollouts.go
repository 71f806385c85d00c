package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	mediaNDJSON = "application/x-ndjson"
	mediaArrow  = "application/vnd.apache.arrow.stream"
)

// Sized wraps r, which yields exactly n bytes, so that Put and
// PutBatchArrow send Content-Length n rather than a chunked body. Readers
// whose length the client can tell (*bytes.Reader, *bytes.Buffer,
// *strings.Reader, regular files) need no wrapping.
func Sized(r io.Reader, n int64) io.Reader { return &sized{r: r, n: n} }

type sized struct {
	r io.Reader
	n int64
}

func (s *sized) Read(p []byte) (int, error) { return s.r.Read(p) }

// bodyLength reports the length of body if it is known, else -1.
func bodyLength(body io.Reader) (io.Reader, int64) {
	switch b := body.(type) {
	case nil:
		return http.NoBody, 0
	case *sized:
		return b.r, b.n
	case *bytes.Reader:
		return b, int64(b.Len())
	case *bytes.Buffer:
		return b, int64(b.Len())
	case *strings.Reader:
		return b, int64(b.Len())
	case interface {
		io.Seeker
		Stat() (fs.FileInfo, error)
	}:
		fi, err := b.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			break
		}
		off, err := b.Seek(0, io.SeekCurrent)
		if err != nil || off > fi.Size() {
			break
		}
		return body, fi.Size() - off
	}
	return body, -1
}

// newBodyRequest builds a request whose body streams from body, with
// Content-Length when its length is known and chunked otherwise.
func (c *Client) newBodyRequest(ctx context.Context, method, escapedPath string, body io.Reader) (*http.Request, error) {
	r, n := bodyLength(body)
	req, err := c.newRequest(ctx, method, escapedPath, nil, r)
	if err != nil {
		return nil, err
	}
	req.ContentLength = n
	if n == 0 {
		req.Body, req.GetBody = http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	return req, nil
}

// asciiJSON marshals v with every non-ASCII character escaped, so that it
// survives as an HTTP header value through any proxy.
func asciiJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			out = append(out, b[i])
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		i += size
		if r >= 0x10000 {
			r -= 0x10000
			out = fmt.Appendf(out, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
	}
	return out, nil
}

// Put stores one rollout: f's fields, and the payload streamed from
// payload (nil for an empty one). The answer comes once the record and its
// payload are durable. A retry with the same content answers with Created
// false; other content under the id is ErrConflict. The payload's SHA-256
// travels with it (Repr-Digest; see attachDigest for when it cannot), so a
// payload damaged on its way is refused rather than stored.
func (c *Client) Put(ctx context.Context, table, id string, f Fields, payload io.Reader) (PutResult, error) {
	hdr, err := asciiJSON(f.wire())
	if err != nil {
		return PutResult{}, fmt.Errorf("rollstore client: encoding the record fields: %w", err)
	}
	req, err := c.newBodyRequest(ctx, http.MethodPut, rolloutPath(table, id), payload)
	if err != nil {
		return PutResult{}, err
	}
	req.Header.Set("Rollstore-Record", string(hdr))
	if f.ContentType != "" {
		req.Header.Set("Content-Type", f.ContentType)
	}
	if err := attachDigest(req, payload); err != nil {
		return PutResult{}, fmt.Errorf("rollstore client: hashing the payload: %w", err)
	}
	var res PutResult
	status, err := c.sendJSON(req, &res.Record, http.StatusCreated, http.StatusOK)
	res.Created = status == http.StatusCreated
	return res, err
}

// batchLine is one NDJSON line of a batch.
type batchLine struct {
	ID          string `json:"id"`
	ContentType string `json:"content_type,omitempty"`
	Payload     []byte `json:"payload,omitempty"`
	recordFields
}

// PutBatch stores items all or nothing, as one NDJSON batch (encoded in
// memory; the server bounds a batch by --max-batch-body). A bad item
// rejects the batch: the *APIError's Line names it (from 1, in items
// order) and nothing is written.
func (c *Client) PutBatch(ctx context.Context, table string, items []BatchItem) (BatchResult, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // one line per item
	for i, it := range items {
		if err := enc.Encode(batchLine{ID: it.ID, ContentType: it.ContentType, Payload: it.Payload, recordFields: it.Fields.wire()}); err != nil {
			return BatchResult{}, fmt.Errorf("rollstore client: encoding batch item %d (%s): %w", i, it.ID, err)
		}
	}
	return c.postBatch(ctx, table, mediaNDJSON, &buf)
}

// PutBatchArrow stores a batch given as an Arrow IPC stream, streamed from
// stream, whose columns are matched to the table schema by name (id and
// rollout_id required). A bad row rejects the batch, named by the
// *APIError's Row (from 0).
func (c *Client) PutBatchArrow(ctx context.Context, table string, stream io.Reader) (BatchResult, error) {
	return c.postBatch(ctx, table, mediaArrow, stream)
}

func (c *Client) postBatch(ctx context.Context, table, mediaType string, body io.Reader) (BatchResult, error) {
	req, err := c.newBodyRequest(ctx, http.MethodPost, tablePath(table, "rollouts"), body)
	if err != nil {
		return BatchResult{}, err
	}
	req.Header.Set("Content-Type", mediaType)
	var res BatchResult
	_, err = c.sendJSON(req, &res, http.StatusCreated, http.StatusOK)
	return res, err
}

// ReadOption qualifies a read.
type ReadOption func(*readOptions)

type readOptions struct {
	version     uint64
	rng         string
	ifNoneMatch string
	err         error
}

// AtVersion reads base version v (pinned): ErrGone once it was collected,
// ErrNotFound (code version_not_found) if it never existed.
func AtVersion(v uint64) ReadOption { return func(o *readOptions) { o.version = v } }

// Range reads n bytes of a payload from offset; n < 0 reads to the end.
// A range that starts at or past the end is a 416 *APIError (code
// range_not_satisfiable); one that runs past the end is cut at the end.
// HTTP has no empty range: n == 0 is an error.
func Range(offset, n int64) ReadOption {
	return func(o *readOptions) {
		switch {
		case offset < 0 || n == 0:
			o.err = fmt.Errorf("rollstore client: Range(%d, %d): want offset >= 0 and n != 0", offset, n)
		case n < 0:
			o.rng = fmt.Sprintf("bytes=%d-", offset)
		default:
			o.rng = fmt.Sprintf("bytes=%d-%d", offset, offset+n-1)
		}
	}
}

// LastBytes reads the last n bytes of a payload (all of it if it is
// shorter); n must be positive.
func LastBytes(n int64) ReadOption {
	return func(o *readOptions) {
		if n <= 0 {
			o.err = fmt.Errorf("rollstore client: LastBytes(%d): want n > 0", n)
			return
		}
		o.rng = fmt.Sprintf("bytes=-%d", n)
	}
}

// IfNoneMatch makes a payload read answer ErrNotModified if the payload's
// ETag is etag (as Payload or PayloadInfo reported it).
func IfNoneMatch(etag string) ReadOption { return func(o *readOptions) { o.ifNoneMatch = etag } }

func readOpts(opts []ReadOption) readOptions {
	var o readOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

func (o readOptions) query() url.Values {
	if o.version == 0 {
		return nil
	}
	return url.Values{"version": {strconv.FormatUint(o.version, 10)}}
}

// Get returns a record's metadata. Range options do not apply.
func (c *Client) Get(ctx context.Context, table, id string, opts ...ReadOption) (Record, error) {
	o := readOpts(opts)
	if o.rng != "" || o.ifNoneMatch != "" || o.err != nil {
		return Record{}, errors.New("rollstore client: Get takes AtVersion only; ranges and IfNoneMatch apply to payloads")
	}
	var rec Record
	_, err := c.doJSON(ctx, http.MethodGet, rolloutPath(table, id), o.query(), &rec, http.StatusOK)
	return rec, err
}

// PayloadInfo describes a payload, or the part of it a read returns.
type PayloadInfo struct {
	Size         int64 // the whole payload's size
	Offset       int64 // first byte returned
	Length       int64 // bytes returned
	Partial      bool  // a byte range (206) rather than the whole payload
	ContentType  string
	ETag         string // quoted SHA-256, for IfNoneMatch
	LastModified time.Time
	RequestID    string // the id the server logged the request under
}

// PayloadReader streams a payload's bytes from the server. Read it to the
// end (a stream cut short fails with an error, never a silent EOF) and
// Close it.
type PayloadReader struct {
	PayloadInfo
	body io.ReadCloser
}

func (p *PayloadReader) Read(b []byte) (int, error) { return p.body.Read(b) }

// Close releases the connection.
func (p *PayloadReader) Close() error { return p.body.Close() }

// Payload opens a payload for reading, whole or the byte range of a Range
// or LastBytes option. The bytes stream from the server as they are read.
func (c *Client) Payload(ctx context.Context, table, id string, opts ...ReadOption) (*PayloadReader, error) {
	resp, err := c.payloadRequest(ctx, http.MethodGet, table, id, opts)
	if err != nil {
		return nil, err
	}
	info, err := payloadInfo(resp)
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	return &PayloadReader{PayloadInfo: info, body: resp.Body}, nil
}

// StatPayload returns what Payload would, without the bytes (HEAD).
func (c *Client) StatPayload(ctx context.Context, table, id string, opts ...ReadOption) (PayloadInfo, error) {
	resp, err := c.payloadRequest(ctx, http.MethodHead, table, id, opts)
	if err != nil {
		return PayloadInfo{}, err
	}
	resp.Body.Close()
	return payloadInfo(resp)
}

func (c *Client) payloadRequest(ctx context.Context, method, table, id string, opts []ReadOption) (*http.Response, error) {
	o := readOpts(opts)
	if o.err != nil {
		return nil, o.err
	}
	req, err := c.newRequest(ctx, method, rolloutPath(table, id)+"/payload", o.query(), nil)
	if err != nil {
		return nil, err
	}
	if o.rng != "" {
		req.Header.Set("Range", o.rng)
	}
	if o.ifNoneMatch != "" {
		req.Header.Set("If-None-Match", o.ifNoneMatch)
	}
	// Payload bytes are whatever the writer stored: no transparent gzip.
	req.Header.Set("Accept-Encoding", "identity")
	return c.send(req, http.StatusOK, http.StatusPartialContent)
}

func payloadInfo(resp *http.Response) (PayloadInfo, error) {
	h := resp.Header
	info := PayloadInfo{ContentType: h.Get("Content-Type"), ETag: h.Get("ETag"), Length: resp.ContentLength, RequestID: h.Get("X-Request-Id")}
	if t, err := http.ParseTime(h.Get("Last-Modified")); err == nil {
		info.LastModified = t
	}
	if resp.StatusCode != http.StatusPartialContent {
		info.Size = resp.ContentLength
		return info, nil
	}
	info.Partial = true
	var first, last int64
	if _, err := fmt.Sscanf(h.Get("Content-Range"), "bytes %d-%d/%d", &first, &last, &info.Size); err != nil {
		return info, fmt.Errorf("rollstore client: a 206 with Content-Range %q: %w", h.Get("Content-Range"), err)
	}
	info.Offset, info.Length = first, last-first+1
	return info, nil
}

// MaxLookupIDs is how many ids GetMany sends in one request: the server's
// default --max-lookup-ids.
const MaxLookupIDs = 1000

// GetMany returns the metadata of many records, one result per id in the
// order of ids: Found with the record, or not found (an absent id is never
// an error). AtVersion pins every lookup to one base version (ErrGone once
// it was collected); range options do not apply. More than MaxLookupIDs
// ids are sent as several requests, one after another; the first error
// ends the call. No ids: no request, no results.
func (c *Client) GetMany(ctx context.Context, table string, ids []string, opts ...ReadOption) ([]LookupResult, error) {
	o := readOpts(opts)
	if o.rng != "" || o.ifNoneMatch != "" || o.err != nil {
		return nil, errors.New("rollstore client: GetMany takes AtVersion only; ranges and IfNoneMatch apply to payloads")
	}
	out := make([]LookupResult, 0, len(ids))
	for start := 0; start < len(ids); start += MaxLookupIDs {
		chunk := ids[start:min(start+MaxLookupIDs, len(ids))]
		body, err := json.Marshal(struct {
			IDs []string `json:"ids"`
		}{chunk})
		if err != nil {
			return nil, fmt.Errorf("rollstore client: encoding the ids: %w", err)
		}
		req, err := c.newBodyRequest(ctx, http.MethodPost, tablePath(table, "lookup"), bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		if q := o.query(); q != nil {
			req.URL.RawQuery = q.Encode()
		}
		req.Header.Set("Content-Type", "application/json")
		var res struct {
			Results []LookupResult `json:"results"`
		}
		if _, err := c.sendJSON(req, &res, http.StatusOK); err != nil {
			return nil, err
		}
		if len(res.Results) != len(chunk) {
			return nil, fmt.Errorf("rollstore client: %d results for %d ids", len(res.Results), len(chunk))
		}
		out = append(out, res.Results...)
	}
	return out, nil
}

// List returns one page of records in id order.
func (c *Client) List(ctx context.Context, table string, opts ListOptions) (Page, error) {
	q := url.Values{}
	for k, v := range map[string]string{"rollout_id": opts.RolloutID, "problem_id": opts.ProblemID,
		"policy_version": opts.PolicyVersion, "prefix": opts.Prefix, "start_after": opts.StartAfter,
		"page_token": opts.PageToken} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Version > 0 {
		q.Set("version", strconv.FormatUint(opts.Version, 10))
	}
	var p Page
	_, err := c.doJSON(ctx, http.MethodGet, tablePath(table, "rollouts"), q, &p, http.StatusOK)
	return p, err
}

// All iterates over every record of a listing, fetching pages of
// opts.Limit as it goes (from opts.PageToken, if set). It stops at the
// first error, which it yields.
func (c *Client) All(ctx context.Context, table string, opts ListOptions) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for {
			p, err := c.List(ctx, table, opts)
			if err != nil {
				yield(Record{}, err)
				return
			}
			for _, r := range p.Records {
				if !yield(r, nil) {
					return
				}
			}
			if p.NextPageToken == "" {
				return
			}
			opts.PageToken = p.NextPageToken
		}
	}
}

// Scan streams the table as an Arrow IPC stream (in the table's schema),
// for any Arrow reader (arrow-go's ipc.NewReader, pyarrow, …). Close it.
func (c *Client) Scan(ctx context.Context, table string, opts ScanOptions) (io.ReadCloser, error) {
	q := url.Values{}
	if opts.Version > 0 {
		q.Set("version", strconv.FormatUint(opts.Version, 10))
	}
	if opts.Payloads {
		q.Set("payloads", "true")
	}
	req, err := c.newRequest(ctx, http.MethodGet, tablePath(table, "scan"), q, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
