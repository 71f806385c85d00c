package rowfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ErrCorrupt reports a file or batch that does not decode as written.
var ErrCorrupt = errors.New("rowfile: corrupt file")

// Column positions in Schema. Payload is last on purpose (see package doc).
const (
	colID = iota
	colRolloutID
	colProblemID
	colSequence
	colRole
	colCreatedAt
	colContentType
	colReward
	colPolicyVersion
	colMetadata
	colPayloadSize
	colPayloadSHA256
	colPayloadRef
	colPayload
	numCols
)

// Schema is the one Arrow schema of rollout rows: WAL segments, base data
// files and exports all use it.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "rollout_id", Type: arrow.BinaryTypes.String},
	{Name: "problem_id", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "sequence", Type: arrow.PrimitiveTypes.Int64},
	{Name: "role", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "created_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	{Name: "content_type", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "policy_version", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "metadata", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "payload_size", Type: arrow.PrimitiveTypes.Int64},
	{Name: "payload_sha256", Type: &arrow.FixedSizeBinaryType{ByteWidth: 32}},
	{Name: "payload_ref", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "payload", Type: arrow.BinaryTypes.Binary, Nullable: true},
}, nil)

// Batch locates one record batch inside a file: [Offset, Offset+Length) is a
// complete encapsulated IPC message.
type Batch struct {
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	Rows   int    `json:"rows"`
	MinID  string `json:"min_id"`
	MaxID  string `json:"max_id"`
}

// Loc locates one row: its batch and row within it, and the byte span of its
// inline payload within the file (PLen 0 and POff 0 for external payloads).
type Loc struct {
	ID    string
	Batch int32
	Row   int32
	POff  int64
	PLen  int64
	// Ref is the payload object key for external payloads.
	Ref string
}

// Layout is what a reader needs to serve point reads from a file without
// opening it: batch ranges, and row locations sorted by id.
type Layout struct {
	Size    int64
	Batches []Batch
	Rows    []Loc // sorted by ID
}

// Find returns the location of id, using binary search.
func (l *Layout) Find(id string) (Loc, bool) {
	i := sort.Search(len(l.Rows), func(i int) bool { return l.Rows[i].ID >= id })
	if i < len(l.Rows) && l.Rows[i].ID == id {
		return l.Rows[i], true
	}
	return Loc{}, false
}

// MemSize estimates the memory a Layout holds, for byte-bounded caches.
func (l *Layout) MemSize() int64 {
	n := int64(64 + len(l.Batches)*80)
	for i := range l.Rows {
		n += int64(len(l.Rows[i].ID)+len(l.Rows[i].Ref)) + 64
	}
	return n
}

// Options bound batch sizes. Smaller batches make metadata lookups cheaper;
// larger ones compress and scan better.
type Options struct {
	BatchRows  int   // default 256
	BatchBytes int64 // inline payload bytes per batch, default 64 KiB
}

func (o Options) withDefaults() Options {
	if o.BatchRows <= 0 {
		o.BatchRows = 256
	}
	if o.BatchBytes <= 0 {
		// A metadata read fetches its row's whole batch, inline payloads
		// included: keep that near the size of one typical payload.
		o.BatchBytes = 64 << 10
	}
	return o
}

// Encode writes rows (sorted by id here; ids must be unique) as an Arrow IPC
// file and returns its bytes and layout.
func Encode(rows []Record, opts Options) ([]byte, *Layout, error) {
	opts = opts.withDefaults()
	sorted := make([]*Record, len(rows))
	for i := range rows {
		sorted[i] = &rows[i]
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	for i := range sorted {
		if !sorted[i].Inline() && sorted[i].Payload != nil {
			return nil, nil, fmt.Errorf("rowfile: %q has both an external payload and inline bytes", sorted[i].ID)
		}
	}
	for i := 1; i < len(sorted); i++ {
		if sorted[i].ID == sorted[i-1].ID {
			return nil, nil, fmt.Errorf("rowfile: duplicate id %q in one file", sorted[i].ID)
		}
	}

	var buf countingBuffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(Schema), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, nil, err
	}
	lay := &Layout{Rows: make([]Loc, 0, len(sorted))}
	for start := 0; start < len(sorted); {
		end, inline := start, int64(0)
		for end < len(sorted) && end-start < opts.BatchRows {
			n := int64(len(sorted[end].Payload))
			if end > start && inline+n > opts.BatchBytes {
				break
			}
			inline += n
			end++
		}
		chunk := sorted[start:end]
		rec := build(chunk)
		before := buf.Len()
		err := w.Write(rec)
		rec.Release()
		if err != nil {
			return nil, nil, fmt.Errorf("rowfile: encode: %w", err)
		}
		off := int64(before)
		if len(lay.Batches) == 0 {
			off = headerLen() // the file header is written lazily with the first batch
		}
		b := Batch{Offset: off, Length: int64(buf.Len()) - off, Rows: len(chunk),
			MinID: chunk[0].ID, MaxID: chunk[len(chunk)-1].ID}
		bi := int32(len(lay.Batches))
		lay.Batches = append(lay.Batches, b)
		// The payload column's data buffer is the last buffer of the body,
		// padded to 8 bytes: its start is the batch end minus that.
		pos := b.Offset + b.Length - pad8(inline)
		for r, rec := range chunk {
			loc := Loc{ID: rec.ID, Batch: bi, Row: int32(r), Ref: rec.PayloadRef}
			if rec.Inline() {
				loc.POff, loc.PLen = pos, int64(len(rec.Payload))
				pos += loc.PLen
			}
			lay.Rows = append(lay.Rows, loc)
		}
		start = end
	}
	if err := w.Close(); err != nil {
		return nil, nil, fmt.Errorf("rowfile: encode: %w", err)
	}
	data := buf.Bytes()
	lay.Size = int64(len(data))
	// Trust the computed spans only after checking them against the bytes.
	for i, loc := range lay.Rows {
		rec := sorted[i]
		if !rec.Inline() {
			continue
		}
		if loc.POff < 0 || loc.POff+loc.PLen > lay.Size || !bytes.Equal(data[loc.POff:loc.POff+loc.PLen], rec.Payload) {
			return nil, nil, fmt.Errorf("rowfile: payload span of %q does not match the encoded bytes (arrow IPC layout changed?)", rec.ID)
		}
	}
	return data, lay, nil
}

func pad8(n int64) int64 { return (n + 7) &^ 7 }

type countingBuffer struct{ bytes.Buffer }

func build(rows []*Record) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, Schema)
	defer b.Release()
	str := func(i int) *array.StringBuilder { return b.Field(i).(*array.StringBuilder) }
	optStr := func(i int, v string) {
		if v == "" {
			str(i).AppendNull()
		} else {
			str(i).Append(v)
		}
	}
	for _, r := range rows {
		str(colID).Append(r.ID)
		str(colRolloutID).Append(r.RolloutID)
		optStr(colProblemID, r.ProblemID)
		b.Field(colSequence).(*array.Int64Builder).Append(r.Sequence)
		optStr(colRole, r.Role)
		b.Field(colCreatedAt).(*array.TimestampBuilder).Append(arrow.Timestamp(r.CreatedAt.UnixMicro()))
		optStr(colContentType, r.ContentType)
		if r.Reward != nil {
			b.Field(colReward).(*array.Float64Builder).Append(*r.Reward)
		} else {
			b.Field(colReward).AppendNull()
		}
		optStr(colPolicyVersion, r.PolicyVersion)
		optStr(colMetadata, string(r.Metadata))
		b.Field(colPayloadSize).(*array.Int64Builder).Append(r.PayloadSize)
		b.Field(colPayloadSHA256).(*array.FixedSizeBinaryBuilder).Append(r.PayloadSHA256[:])
		optStr(colPayloadRef, r.PayloadRef)
		// Exports may carry an external payload's bytes too.
		if r.Inline() || r.Payload != nil {
			b.Field(colPayload).(*array.BinaryBuilder).Append(r.Payload)
		} else {
			b.Field(colPayload).AppendNull()
		}
	}
	return b.NewRecordBatch()
}

var (
	schemaOnce sync.Once
	schemaMsg  []byte // the encapsulated schema message of a stream
)

// streamSchema returns the schema message a stream starts with; together
// with one batch message and an end-of-stream marker it makes a valid stream,
// which is how a single batch fetched by range is decoded.
func streamSchema() []byte {
	schemaOnce.Do(func() {
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(Schema))
		if err := w.Close(); err != nil {
			panic(fmt.Sprintf("rowfile: encoding the schema: %v", err))
		}
		schemaMsg = bytes.Clone(buf.Bytes()[:buf.Len()-len(eos)])
	})
	return schemaMsg
}

var eos = []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}

// headerLen is the length of a file's header: magic padded to 8, then the
// schema message.
func headerLen() int64 { return 8 + int64(len(streamSchema())) }

// DecodeBatch decodes one batch message (the bytes of a Batch range).
// withPayload=false drops inline payload bytes from the records.
func DecodeBatch(msg []byte, withPayload bool) ([]Record, error) {
	r, err := ipc.NewReader(io.MultiReader(bytes.NewReader(streamSchema()), bytes.NewReader(msg), bytes.NewReader(eos)),
		ipc.WithSchema(Schema))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer r.Release()
	var out []Record
	for r.Next() {
		out = appendRecords(out, r.RecordBatch(), withPayload)
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return out, nil
}

// Decode reads every row of a whole file held in memory.
func Decode(data []byte, withPayload bool) ([]Record, error) {
	fr, err := ipc.NewFileReader(bytes.NewReader(data), ipc.WithSchema(Schema))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer fr.Close()
	var out []Record
	for i := 0; i < fr.NumRecords(); i++ {
		rec, err := fr.RecordBatchAt(i)
		if err != nil {
			return nil, fmt.Errorf("%w: batch %d: %v", ErrCorrupt, i, err)
		}
		out = appendRecords(out, rec, withPayload)
		rec.Release()
	}
	return out, nil
}

// LayoutOf rebuilds the layout of a whole file held in memory, for files
// whose layout was not kept (a segment of a generation not yet sealed). The
// batch boundaries come from walking the file's messages in order; payload
// spans are derived as in Encode and verified against the bytes.
func LayoutOf(data []byte) (*Layout, []Record, error) {
	if len(data) < 16 || !bytes.HasPrefix(data, []byte("ARROW1")) {
		return nil, nil, fmt.Errorf("%w: not an Arrow IPC file", ErrCorrupt)
	}
	src := bytes.NewReader(data[8:])
	mr := ipc.NewMessageReader(src)
	defer mr.Release()
	pos := func() int64 { return int64(len(data)) - int64(src.Len()) }
	lay := &Layout{Size: int64(len(data))}
	var all []Record
	for {
		start := pos()
		msg, err := mr.Message()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		typ := msg.Type()
		msg.Release()
		if typ != ipc.MessageRecordBatch {
			continue
		}
		end := pos()
		rows, err := DecodeBatch(data[start:end], true)
		if err != nil {
			return nil, nil, err
		}
		bi := int32(len(lay.Batches))
		b := Batch{Offset: start, Length: end - start, Rows: len(rows)}
		if len(rows) > 0 {
			b.MinID, b.MaxID = rows[0].ID, rows[len(rows)-1].ID
		}
		var inline int64
		for _, r := range rows {
			inline += int64(len(r.Payload))
		}
		p := end - pad8(inline)
		for j := range rows {
			loc := Loc{ID: rows[j].ID, Batch: bi, Row: int32(j), Ref: rows[j].PayloadRef}
			if rows[j].Inline() {
				loc.POff, loc.PLen = p, int64(len(rows[j].Payload))
				if p < start || p+loc.PLen > end || !bytes.Equal(data[p:p+loc.PLen], rows[j].Payload) {
					return nil, nil, fmt.Errorf("%w: payload span of %q", ErrCorrupt, rows[j].ID)
				}
				p += loc.PLen
			}
			lay.Rows = append(lay.Rows, loc)
		}
		lay.Batches = append(lay.Batches, b)
		all = append(all, rows...)
	}
	sort.Slice(lay.Rows, func(i, j int) bool { return lay.Rows[i].ID < lay.Rows[j].ID })
	return lay, all, nil
}

func appendRecords(out []Record, rec arrow.RecordBatch, withPayload bool) []Record {
	cols := rec.Columns()
	str := func(i int) *array.String { return cols[i].(*array.String) }
	for r := 0; r < int(rec.NumRows()); r++ {
		x := Record{
			ID:            str(colID).Value(r),
			RolloutID:     str(colRolloutID).Value(r),
			ProblemID:     str(colProblemID).Value(r),
			Sequence:      cols[colSequence].(*array.Int64).Value(r),
			Role:          str(colRole).Value(r),
			CreatedAt:     time.UnixMicro(int64(cols[colCreatedAt].(*array.Timestamp).Value(r))).UTC(),
			ContentType:   str(colContentType).Value(r),
			PolicyVersion: str(colPolicyVersion).Value(r),
			PayloadSize:   cols[colPayloadSize].(*array.Int64).Value(r),
			PayloadRef:    str(colPayloadRef).Value(r),
		}
		if cols[colReward].IsValid(r) {
			v := cols[colReward].(*array.Float64).Value(r)
			x.Reward = &v
		}
		if m := str(colMetadata).Value(r); m != "" {
			x.Metadata = []byte(m)
		}
		copy(x.PayloadSHA256[:], cols[colPayloadSHA256].(*array.FixedSizeBinary).Value(r))
		if withPayload && cols[colPayload].IsValid(r) {
			x.Payload = bytes.Clone(cols[colPayload].(*array.Binary).Value(r))
			if x.Payload == nil {
				x.Payload = []byte{}
			}
		}
		out = append(out, x)
	}
	return out
}

// StreamWriter writes rows as an Arrow IPC stream with Schema, for exports.
type StreamWriter struct{ w *ipc.Writer }

// NewStreamWriter starts a stream on w.
func NewStreamWriter(w io.Writer) *StreamWriter {
	return &StreamWriter{w: ipc.NewWriter(w, ipc.WithSchema(Schema), ipc.WithAllocator(memory.DefaultAllocator))}
}

// Write writes rows as one record batch.
func (s *StreamWriter) Write(rows []Record) error {
	if len(rows) == 0 {
		return nil
	}
	ptrs := make([]*Record, len(rows))
	for i := range rows {
		ptrs[i] = &rows[i]
	}
	rec := build(ptrs)
	defer rec.Release()
	return s.w.Write(rec)
}

// Close ends the stream.
func (s *StreamWriter) Close() error { return s.w.Close() }

// ReadStream decodes an Arrow IPC stream whose schema has at least the
// columns id and rollout_id; missing optional columns read as empty. It is
// how batch appends in Arrow form are accepted.
func ReadStream(r io.Reader, fn func(row int, rec Record) error) error {
	rd, err := ipc.NewReader(r, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer rd.Release()
	row := 0
	for rd.Next() {
		batch := rd.RecordBatch()
		recs, err := recordsByName(batch)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if err := fn(row, rec); err != nil {
				return err
			}
			row++
		}
	}
	if err := rd.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return nil
}

// recordsByName reads a batch whose columns are matched by name and type,
// so clients may send a subset of Schema in any order.
func recordsByName(batch arrow.RecordBatch) ([]Record, error) {
	sc := batch.Schema()
	col := func(name string, want arrow.DataType) (arrow.Array, error) {
		idx := sc.FieldIndices(name)
		if len(idx) == 0 {
			return nil, nil
		}
		c := batch.Column(idx[0])
		if !arrow.TypeEqual(c.DataType(), want) {
			return nil, fmt.Errorf("%w: column %s is %s, want %s", ErrInvalidRecord, name, c.DataType(), want)
		}
		return c, nil
	}
	cols := make([]arrow.Array, numCols)
	for i, f := range Schema.Fields() {
		c, err := col(f.Name, f.Type)
		if err != nil {
			return nil, err
		}
		cols[i] = c
	}
	if cols[colID] == nil || cols[colRolloutID] == nil {
		return nil, fmt.Errorf("%w: columns id and rollout_id are required", ErrInvalidRecord)
	}
	str := func(i, r int) string {
		if cols[i] == nil || cols[i].IsNull(r) {
			return ""
		}
		return cols[i].(*array.String).Value(r)
	}
	out := make([]Record, batch.NumRows())
	for r := range out {
		x := Record{ID: str(colID, r), RolloutID: str(colRolloutID, r), ProblemID: str(colProblemID, r),
			Role: str(colRole, r), ContentType: str(colContentType, r), PolicyVersion: str(colPolicyVersion, r)}
		if c := cols[colSequence]; c != nil && c.IsValid(r) {
			x.Sequence = c.(*array.Int64).Value(r)
		}
		if c := cols[colCreatedAt]; c != nil && c.IsValid(r) {
			x.CreatedAt = time.UnixMicro(int64(c.(*array.Timestamp).Value(r))).UTC()
		}
		if c := cols[colReward]; c != nil && c.IsValid(r) {
			v := c.(*array.Float64).Value(r)
			x.Reward = &v
		}
		if m := str(colMetadata, r); m != "" {
			x.Metadata = []byte(m)
		}
		if c := cols[colPayload]; c != nil && c.IsValid(r) {
			x.Payload = bytes.Clone(c.(*array.Binary).Value(r))
		}
		if x.Payload == nil {
			x.Payload = []byte{}
		}
		out[r] = x
	}
	return out, nil
}
