// Package rowfile defines the rollout record, its one Arrow schema, and the
// Arrow IPC files rollstore writes for WAL segments and base data files.
//
// Every file is a plain Arrow IPC file any Arrow reader can open (pyarrow,
// Polars, apache-arrow). What makes point reads cheap is known at write time
// and kept where one small read finds it: the byte range of every record
// batch (a metadata lookup is one ranged GET of one batch), and for every row
// its payload's span, size, checksum and content type (a payload read is one
// ranged GET of exactly its bytes, with every response header known before).
// The payload column is last in the schema, which puts a batch's payload
// bytes contiguously at the end of its body; the writer computes each row's
// span from that rule and verifies it byte for byte against the encoded file
// before trusting it.
//
// Where the layout lives: a base data file's layout is its index object
// (MarshalLayout, kept beside the file). A WAL segment carries its own
// layout in the schema metadata at the head of the file, under the key
// "rollstore.layout", with offsets relative to the end of that header; a
// reader learns a segment's rows from one ranged GET of its first bytes
// (ReadHeader), never downloading the segment. The schema metadata also
// names the schema version ("rollstore.schema_version"), and the metadata
// column is tagged with the canonical arrow.json extension type.
package rowfile

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
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

// SchemaVersion is the version of Schema, recorded in every file's schema
// metadata. Readers refuse files of a newer version.
const SchemaVersion = 1

// Schema metadata keys.
const (
	MetaSchemaVersion = "rollstore.schema_version"
	MetaLayout        = "rollstore.layout"
)

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

// jsonField tags a string field with the canonical arrow.json extension
// type. Extension types travel as field metadata in IPC, so readers that
// know arrow.json (pyarrow, arrow-go's extensions) see JSON, and the rest
// see a plain string column.
func jsonField(name string) arrow.Field {
	return arrow.Field{Name: name, Type: arrow.BinaryTypes.String, Nullable: true,
		Metadata: arrow.NewMetadata([]string{"ARROW:extension:name", "ARROW:extension:metadata"}, []string{"arrow.json", ""})}
}

var fields = []arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "rollout_id", Type: arrow.BinaryTypes.String},
	{Name: "problem_id", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "sequence", Type: arrow.PrimitiveTypes.Int64},
	{Name: "role", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "created_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	{Name: "content_type", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "policy_version", Type: arrow.BinaryTypes.String, Nullable: true},
	jsonField("metadata"),
	{Name: "payload_size", Type: arrow.PrimitiveTypes.Int64},
	{Name: "payload_sha256", Type: &arrow.FixedSizeBinaryType{ByteWidth: 32}},
	{Name: "payload_ref", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "payload", Type: arrow.BinaryTypes.Binary, Nullable: true},
}

// Schema is the one Arrow schema of rollout rows: WAL segments, base data
// files and exports all use it.
var Schema = schemaWith(nil, nil)

func schemaWith(keys, values []string) *arrow.Schema {
	md := arrow.NewMetadata(append([]string{MetaSchemaVersion}, keys...), append([]string{fmt.Sprint(SchemaVersion)}, values...))
	return arrow.NewSchema(fields, &md)
}

// Batch locates one record batch inside a file: [Offset, Offset+Length) is a
// complete encapsulated IPC message.
type Batch struct {
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	Rows   int    `json:"rows"`
	MinID  string `json:"min_id"`
	MaxID  string `json:"max_id"`
}

// Loc locates one row and says what a payload response needs: its batch and
// row within it, and its payload's size, checksum, content type, and either
// the byte span of the inline payload within the file or the key of the
// payload's own object.
type Loc struct {
	ID    string
	Batch int32
	Row   int32
	// POff and PLen are the inline payload's span (0, 0 for external).
	POff int64
	PLen int64
	// Ref is the payload object key for external payloads.
	Ref         string
	Size        int64
	SHA256      [32]byte
	ContentType string
	// CreatedAt is the row's creation time in Unix microseconds.
	CreatedAt int64
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
	n := int64(64 + len(l.Batches)*96)
	for i := range l.Rows {
		n += int64(len(l.Rows[i].ID)+len(l.Rows[i].Ref)) + 128
	}
	return n
}

// shift moves every offset by d (relative layouts become absolute).
func (l *Layout) shift(d int64) {
	for i := range l.Batches {
		l.Batches[i].Offset += d
	}
	for i := range l.Rows {
		if l.Rows[i].Ref == "" {
			l.Rows[i].POff += d
		}
	}
}

// Options shape a file.
type Options struct {
	BatchRows  int   // default 256
	BatchBytes int64 // inline payload bytes per batch, default 64 KiB
	// EmbedLayout writes the layout into the file's schema metadata (WAL
	// segments); without it the caller keeps the layout (data files).
	EmbedLayout bool
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
// file and returns its bytes and layout (offsets absolute).
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
	// Cut the rows into batches and build them once; the file may be
	// written twice (to learn the offsets the embedded layout records).
	var chunks [][]*Record
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
		chunks = append(chunks, sorted[start:end])
		start = end
	}
	recs := make([]arrow.RecordBatch, len(chunks))
	for i, c := range chunks {
		recs[i] = build(c, fileRule)
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()

	// Memory is the rows, their Arrow batches and one buffer of the file's
	// size: an embedded layout needs the batches' offsets before the
	// header is written, so a first pass only counts bytes.
	var data []byte
	var hdr int64
	var blocks [][2]int64
	var err error
	if !opts.EmbedLayout {
		data, _, hdr, blocks, err = writeFile(Schema, recs, encodedSizeHint(sorted))
		if err != nil {
			return nil, nil, err
		}
	}
	var size int64
	if opts.EmbedLayout {
		if _, size, hdr, blocks, err = writeFile(Schema, recs, -1); err != nil {
			return nil, nil, err
		}
	}
	lay := layoutOf(chunks, blocks, hdr) // relative to the end of the header
	if opts.EmbedLayout {
		enc := base64.StdEncoding.EncodeToString(MarshalLayout(lay))
		var hdr2 int64
		var blocks2 [][2]int64
		data, _, hdr2, blocks2, err = writeFile(schemaWith([]string{MetaLayout}, []string{enc}), recs, int(size)+len(enc)+1024)
		if err != nil {
			return nil, nil, err
		}
		for i := range blocks {
			if blocks[i][0]-hdr != blocks2[i][0]-hdr2 || blocks[i][1] != blocks2[i][1] {
				return nil, nil, fmt.Errorf("rowfile: batch %d moved between encodings", i)
			}
		}
		hdr = hdr2
	}
	lay.shift(hdr)
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

// writeFile encodes recs as an IPC file with schema sc. It returns the
// bytes (nil when sizeHint < 0: then it only measures), the file's size,
// the header length (magic and schema message) and each batch's [offset,
// length). sizeHint >= 0 sizes the buffer up front.
func writeFile(sc *arrow.Schema, recs []arrow.RecordBatch, sizeHint int) ([]byte, int64, int64, [][2]int64, error) {
	out := &sink{keep: sizeHint >= 0}
	if out.keep {
		out.buf = make([]byte, 0, sizeHint)
	}
	w, err := ipc.NewFileWriter(out, ipc.WithSchema(sc), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, 0, 0, nil, err
	}
	var hdr int64
	blocks := make([][2]int64, len(recs))
	for i, rec := range recs {
		before := out.n
		if err := w.Write(rec); err != nil {
			return nil, 0, 0, nil, fmt.Errorf("rowfile: encode: %w", err)
		}
		if i == 0 {
			// The header is written lazily with the first batch.
			hdr, err = headerLength(out.buf)
			if err != nil {
				return nil, 0, 0, nil, err
			}
			before = hdr
		}
		blocks[i] = [2]int64{before, out.n - before}
	}
	if err := w.Close(); err != nil {
		return nil, 0, 0, nil, fmt.Errorf("rowfile: encode: %w", err)
	}
	if len(recs) == 0 {
		if hdr, err = headerLength(out.buf); err != nil {
			return nil, 0, 0, nil, err
		}
	}
	if !out.keep {
		return nil, out.n, hdr, blocks, nil
	}
	return out.buf, out.n, hdr, blocks, nil
}

// sink collects what writeFile writes, or (keep false) counts it and keeps
// only the first bytes, enough to parse the header.
type sink struct {
	buf  []byte
	n    int64
	keep bool
}

func (s *sink) Write(p []byte) (int, error) {
	switch {
	case s.keep:
		s.buf = append(s.buf, p...)
	case len(s.buf) < 16:
		s.buf = append(s.buf, p[:min(len(p), 16-len(s.buf))]...)
	}
	s.n += int64(len(p))
	return len(p), nil
}

// encodedSizeHint estimates a file's size from its rows, generously: a
// buffer that has to grow holds up to twice the file while it does.
func encodedSizeHint(rows []*Record) int {
	n := 64 << 10 // header, footer, per-batch metadata and padding
	for _, r := range rows {
		n += len(r.Payload) + len(r.Metadata) + len(r.ID) + len(r.RolloutID) + len(r.ProblemID) +
			len(r.Role) + len(r.ContentType) + len(r.PolicyVersion) + len(r.PayloadRef) + 160
	}
	return n
}

// headerLength parses the length of a file's header: 8 bytes of magic and
// padding, then the encapsulated schema message (continuation marker,
// little-endian int32 metadata length, metadata; a schema has no body).
// It returns an error wrapping io.ErrShortBuffer when b holds less than
// the first 16 bytes.
func headerLength(b []byte) (int64, error) {
	if len(b) < 16 {
		return 0, fmt.Errorf("rowfile: header: %w", io.ErrShortBuffer)
	}
	if !bytes.HasPrefix(b, []byte("ARROW1")) || binary.LittleEndian.Uint32(b[8:12]) != 0xFFFFFFFF {
		return 0, fmt.Errorf("%w: not an Arrow IPC file", ErrCorrupt)
	}
	n := int64(int32(binary.LittleEndian.Uint32(b[12:16])))
	if n <= 0 || n > 1<<30 {
		return 0, fmt.Errorf("%w: schema message of %d bytes", ErrCorrupt, n)
	}
	return 16 + n, nil
}

func layoutOf(chunks [][]*Record, blocks [][2]int64, hdr int64) *Layout {
	lay := &Layout{}
	for bi, chunk := range chunks {
		var inline int64
		for _, r := range chunk {
			inline += int64(len(r.Payload))
		}
		b := Batch{Offset: blocks[bi][0] - hdr, Length: blocks[bi][1], Rows: len(chunk),
			MinID: chunk[0].ID, MaxID: chunk[len(chunk)-1].ID}
		lay.Batches = append(lay.Batches, b)
		// The payload column's data buffer is the last buffer of the body,
		// padded to 8 bytes: its start is the batch end minus that.
		pos := b.Offset + b.Length - pad8(inline)
		for r, rec := range chunk {
			loc := Loc{ID: rec.ID, Batch: int32(bi), Row: int32(r), Ref: rec.PayloadRef,
				Size: rec.PayloadSize, SHA256: rec.PayloadSHA256, ContentType: rec.ContentType, CreatedAt: rec.CreatedAt.UnixMicro()}
			if rec.Inline() {
				loc.POff, loc.PLen = pos, int64(len(rec.Payload))
				pos += loc.PLen
			}
			lay.Rows = append(lay.Rows, loc)
		}
	}
	return lay
}

// HeaderPrefetch is how many leading bytes of a segment to read to find its
// header (layout included) in one request, in the common case.
const HeaderPrefetch = 16 << 10

// HeaderSize returns how many leading bytes of a file hold its header, from
// at least its first 16 bytes.
func HeaderSize(prefix []byte) (int64, error) { return headerLength(prefix) }

// ReadHeader returns the layout a segment embeds, from the file's leading
// bytes (at least HeaderSize of them) and its total size (0 if unknown).
func ReadHeader(prefix []byte, size int64) (*Layout, error) {
	hdr, err := headerLength(prefix)
	if err != nil {
		return nil, err
	}
	if int64(len(prefix)) < hdr {
		return nil, fmt.Errorf("rowfile: header of %d bytes, have %d: %w", hdr, len(prefix), io.ErrShortBuffer)
	}
	r, err := ipc.NewReader(bytes.NewReader(prefix[8:hdr]), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	defer r.Release()
	md := r.Schema().Metadata()
	if v := md.FindKey(MetaSchemaVersion); v < 0 || md.Values()[v] != fmt.Sprint(SchemaVersion) {
		return nil, fmt.Errorf("%w: unsupported schema version", ErrCorrupt)
	}
	i := md.FindKey(MetaLayout)
	if i < 0 {
		return nil, fmt.Errorf("%w: no embedded layout", ErrCorrupt)
	}
	raw, err := base64.StdEncoding.DecodeString(md.Values()[i])
	if err != nil {
		return nil, fmt.Errorf("%w: embedded layout: %v", ErrCorrupt, err)
	}
	lay, err := UnmarshalLayout(raw)
	if err != nil {
		return nil, err
	}
	lay.shift(hdr)
	lay.Size = size
	for _, b := range lay.Batches {
		if b.Offset < hdr || (size > 0 && b.Offset+b.Length > size) {
			return nil, fmt.Errorf("%w: batch outside the file", ErrCorrupt)
		}
	}
	return lay, nil
}

func pad8(n int64) int64 { return (n + 7) &^ 7 }

// payloadRule says what the payload column holds for a row.
type payloadRule int

const (
	// fileRule: inline payload bytes (empty is empty), external payloads null.
	fileRule payloadRule = iota
	// exportRule: the bytes when loaded, null when left out.
	exportRule
	// omitRule: always null (a scan without payloads).
	omitRule
)

func build(rows []*Record, rule payloadRule) arrow.RecordBatch {
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
		pb := b.Field(colPayload).(*array.BinaryBuilder)
		switch {
		case rule == fileRule && r.Inline(), rule == exportRule && r.Payload != nil:
			pb.Append(r.Payload)
		default:
			pb.AppendNull()
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
		if out, err = appendRecords(out, r.RecordBatch(), withPayload); err != nil {
			return nil, err
		}
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return out, nil
}

// Decode reads every row of a whole file held in memory.
func Decode(data []byte, withPayload bool) ([]Record, error) {
	fr, err := ipc.NewFileReader(bytes.NewReader(data))
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
		out, err = appendRecords(out, rec, withPayload)
		rec.Release()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// stringsOf returns a string column, also when it arrives as an extension
// array (arrow.json on a process that registered the extension type).
func stringsOf(a arrow.Array) (*array.String, bool) {
	if ext, ok := a.(array.ExtensionArray); ok {
		a = ext.Storage()
	}
	s, ok := a.(*array.String)
	return s, ok
}

func appendRecords(out []Record, rec arrow.RecordBatch, withPayload bool) ([]Record, error) {
	cols := rec.Columns()
	if len(cols) != numCols {
		return nil, fmt.Errorf("%w: %d columns, want %d", ErrCorrupt, len(cols), numCols)
	}
	strs := make([]*array.String, numCols)
	for _, i := range []int{colID, colRolloutID, colProblemID, colRole, colContentType, colPolicyVersion, colMetadata, colPayloadRef} {
		s, ok := stringsOf(cols[i])
		if !ok {
			return nil, fmt.Errorf("%w: column %d is %s", ErrCorrupt, i, cols[i].DataType())
		}
		strs[i] = s
	}
	for r := 0; r < int(rec.NumRows()); r++ {
		x := Record{
			ID:            strs[colID].Value(r),
			RolloutID:     strs[colRolloutID].Value(r),
			ProblemID:     strs[colProblemID].Value(r),
			Sequence:      cols[colSequence].(*array.Int64).Value(r),
			Role:          strs[colRole].Value(r),
			CreatedAt:     time.UnixMicro(int64(cols[colCreatedAt].(*array.Timestamp).Value(r))).UTC(),
			ContentType:   strs[colContentType].Value(r),
			PolicyVersion: strs[colPolicyVersion].Value(r),
			PayloadSize:   cols[colPayloadSize].(*array.Int64).Value(r),
			PayloadRef:    strs[colPayloadRef].Value(r),
		}
		if cols[colReward].IsValid(r) {
			v := cols[colReward].(*array.Float64).Value(r)
			x.Reward = &v
		}
		if m := strs[colMetadata].Value(r); m != "" {
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
	return out, nil
}

// StreamWriter writes rows as an Arrow IPC stream with Schema, for exports.
type StreamWriter struct {
	w    *ipc.Writer
	rule payloadRule
}

// NewStreamWriter starts a stream on w. With payloads, a row's payload
// column holds its bytes when the row carries them (Payload non-nil) and is
// null when they were left out; without, it is null for every row, so that
// "omitted" and "empty" differ.
func NewStreamWriter(w io.Writer, payloads bool) *StreamWriter {
	rule := omitRule
	if payloads {
		rule = exportRule
	}
	return &StreamWriter{w: ipc.NewWriter(w, ipc.WithSchema(Schema), ipc.WithAllocator(memory.DefaultAllocator)), rule: rule}
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
	rec := build(ptrs, s.rule)
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
		got := c.DataType()
		if ext, ok := got.(arrow.ExtensionType); ok {
			got = ext.StorageType()
		}
		if !arrow.TypeEqual(got, want) {
			return nil, fmt.Errorf("%w: column %s is %s, want %s", ErrInvalidRecord, name, c.DataType(), want)
		}
		if ext, ok := c.(array.ExtensionArray); ok {
			c = ext.Storage()
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
