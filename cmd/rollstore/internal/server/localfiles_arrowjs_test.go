package server

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/local"
)

// readFilesJS is run by node: it opens every Arrow IPC file named on its
// command line with the apache-arrow package and prints, per file, its
// rows' ids, payload sizes, inline payloads and payload references.
const readFilesJS = `
const fs = require('fs');
const arrow = require('apache-arrow');
const out = [];
for (const path of process.argv.slice(1)) {
  let table;
  try {
    table = arrow.tableFromIPC(fs.readFileSync(path));
  } catch (e) {
    console.error(path + ': ' + e);
    process.exit(2);
  }
  const col = (name) => table.getChild(name);
  const rows = [];
  if (col('id') != null) {
    for (let i = 0; i < table.numRows; i++) {
      const payload = col('payload') == null ? null : col('payload').get(i);
      rows.push({
        id: col('id').get(i),
        payload_size: Number(col('payload_size').get(i)),
        payload: payload == null ? null : Buffer.from(payload).toString('hex'),
        payload_ref: col('payload_ref') == null ? null : col('payload_ref').get(i),
      });
    }
  }
  out.push({path, num_rows: table.numRows, rows});
}
console.log(JSON.stringify(out));
`

// TestLocalFilesReadByArrowJS writes rows through the engine onto a local
// folder, merges some into a base data file and leaves the rest in a WAL
// segment, then has apache-arrow open every .arrow file straight from the
// folder: each must open, the rows of all of them together must be exactly
// the rows written (ids and payloads), and an external payload's
// payload_ref must name its file under the folder.
//
// Any .arrow object with no rows (a claim or seal record, say) must open
// too; it adds nothing to the union.
func TestLocalFilesReadByArrowJS(t *testing.T) {
	mods := arrowJS(t)
	ctx := t.Context()
	root := t.TempDir()
	store, err := local.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := testEngineConfig()
	db, err := engine.Open(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(ctx) })
	if err := db.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	tb, err := db.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}

	// Payloads alternate between inline and above InlineMax (own objects).
	payloads := map[string][]byte{}
	appendRows := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			id := fmt.Sprintf("row-%03d", i)
			size := 100 + i
			if i%3 == 0 {
				size = int(cfg.InlineMax) + 1000 + i
			}
			p := payloadOf(id, size)
			payloads[id] = p
			rec := engine.Record{ID: id, RolloutID: "r", Sequence: int64(i)}
			if _, err := tb.Append(ctx, rec, bytes.NewReader(p), int64(len(p))); err != nil {
				t.Fatalf("Append(%s): %v", id, err)
			}
		}
	}
	appendRows(0, 12)
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := tb.Merge(ctx, engine.MergeOptions{})
	if err != nil || res.Rows != 12 {
		t.Fatalf("Merge = %+v, %v; want 12 rows merged", res, err)
	}
	appendRows(12, 20)
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && strings.HasPrefix(d.Name(), ".rollstore"):
			return filepath.SkipDir // the store's own files
		case !d.IsDir() && strings.HasSuffix(p, ".arrow"):
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", append([]string{"-e", readFilesJS}, files...)...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node could not read the files: %v\n%s", err, stderr.Bytes())
	}
	var got []struct {
		Path    string `json:"path"`
		NumRows int    `json:"num_rows"`
		Rows    []struct {
			ID          string  `json:"id"`
			PayloadSize int64   `json:"payload_size"`
			Payload     *string `json:"payload"`
			PayloadRef  *string `json:"payload_ref"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	if len(got) != len(files) {
		t.Fatalf("node read %d files of %d", len(got), len(files))
	}

	seen := map[string]bool{}
	rowsIn := map[string]int{} // "base" or "wal": rows found in such files
	for _, f := range got {
		rel, _ := filepath.Rel(root, f.Path)
		rel = filepath.ToSlash(rel)
		if len(f.Rows) != f.NumRows {
			t.Errorf("%s: %d rows, %d with ids", rel, f.NumRows, len(f.Rows))
		}
		// t/<incarnation>/base/data/… or t/<incarnation>/wal/…
		switch parts := strings.SplitN(rel, "/", 4); {
		case len(parts) == 4 && parts[2] == "base":
			rowsIn["base"] += f.NumRows
		case len(parts) == 4 && parts[2] == "wal":
			rowsIn["wal"] += f.NumRows
		}
		for _, row := range f.Rows {
			want, ok := payloads[row.ID]
			switch {
			case !ok:
				t.Errorf("%s: row %q was never written", rel, row.ID)
				continue
			case row.PayloadSize != int64(len(want)):
				t.Errorf("%s: %s has payload_size %d, want %d", rel, row.ID, row.PayloadSize, len(want))
			case row.Payload != nil:
				if *row.Payload != hex.EncodeToString(want) {
					t.Errorf("%s: %s: inline payload differs", rel, row.ID)
				}
			case row.PayloadRef != nil && *row.PayloadRef != "":
				// No --prefix here, so the reference is the file's name
				// under the folder.
				data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(*row.PayloadRef)))
				if err != nil || !bytes.Equal(data, want) {
					t.Errorf("%s: %s: payload_ref %q: read %d bytes, %v; want the payload's %d", rel, row.ID, *row.PayloadRef, len(data), err, len(want))
				}
			default:
				t.Errorf("%s: %s has neither an inline payload nor a payload_ref", rel, row.ID)
			}
			seen[row.ID] = true
		}
	}
	if !maps.Equal(seen, mapOf(slices.Collect(maps.Keys(payloads)))) {
		t.Errorf("rows in the files: %d distinct ids, want the %d written", len(seen), len(payloads))
	}
	if rowsIn["base"] < 12 || rowsIn["wal"] < 8 {
		t.Errorf("rows read from base data files %d, from WAL segments %d; want at least 12 and 8", rowsIn["base"], rowsIn["wal"])
	}
	t.Logf("apache-arrow read %d .arrow files: %v rows", len(files), rowsIn)
}

func mapOf(keys []string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}
