package server

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// arrowJSVersion is the apache-arrow npm package the scan test reads with.
const arrowJSVersion = "21.2.0"

// arrowJS returns a node_modules folder holding apache-arrow, installing it
// once into the user cache (or ROLLSTORE_ARROWJS_DIR) with npm. It skips
// the test when node or npm is missing or the install fails, unless
// ROLLSTORE_REQUIRE_ARROWJS=1 makes that a failure.
func arrowJS(t *testing.T) string {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("ROLLSTORE_REQUIRE_ARROWJS") == "1" {
		fail = t.Fatalf
	}
	if _, err := exec.LookPath("node"); err != nil {
		fail("node not found: %v", err)
	}
	dir := os.Getenv("ROLLSTORE_ARROWJS_DIR")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			fail("no cache folder: %v", err)
		}
		dir = filepath.Join(cache, "rollstore-test", "arrowjs-"+arrowJSVersion)
	}
	mods := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(mods, "apache-arrow", "package.json")); err == nil {
		return mods
	}
	if _, err := exec.LookPath("npm"); err != nil {
		fail("npm not found: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--no-save", "--prefix", dir, "apache-arrow@"+arrowJSVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		fail("npm install apache-arrow: %v\n%s", err, out)
	}
	return mods
}

// readScanJS is run by node: it reads an Arrow IPC stream file with the
// apache-arrow package and prints what it found as JSON.
const readScanJS = `
const fs = require('fs');
const arrow = require('apache-arrow');
const table = arrow.tableFromIPC(fs.readFileSync(process.argv[1]));
const col = (name) => table.getChild(name);
const rows = [];
for (let i = 0; i < table.numRows; i++) {
  const payload = col('payload').get(i);
  rows.push({
    id: col('id').get(i),
    rollout_id: col('rollout_id').get(i),
    sequence: Number(col('sequence').get(i)),
    reward: col('reward').get(i),
    payload_size: Number(col('payload_size').get(i)),
    payload_sha256: Buffer.from(col('payload_sha256').get(i)).toString('hex'),
    payload: payload == null ? null : Buffer.from(payload).toString('hex'),
  });
}
console.log(JSON.stringify({fields: table.schema.fields.map(f => f.name), rows}));
`

// TestScanReadByArrowJS checks the scan output with a reader nobody here
// wrote: the Apache Arrow JavaScript implementation.
func TestScanReadByArrowJS(t *testing.T) {
	mods := arrowJS(t)
	e := newEnv(t)
	e.createTable("t")
	for i := range 3 {
		id := fmt.Sprint("js-", i)
		rec := fmt.Sprintf(`{"rollout_id":"r%d","sequence":%d,"reward":%d.5}`, i, i, i)
		want(t, e.put("t", id, rec, payloadOf(id, 3000*i)), http.StatusCreated, "") // inline and external
		if i == 1 {
			e.merge("t") // the base and the WAL in one scan
		}
	}
	r := e.do("GET", "/v1/tables/t/scan?payloads=true", nil)
	want(t, r, http.StatusOK, "")
	file := filepath.Join(t.TempDir(), "scan.arrows")
	if err := os.WriteFile(file, r.body, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "-e", readScanJS, file)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got struct {
		Fields []string
		Rows   []struct {
			ID            string   `json:"id"`
			RolloutID     string   `json:"rollout_id"`
			Sequence      int64    `json:"sequence"`
			Reward        *float64 `json:"reward"`
			PayloadSize   int64    `json:"payload_size"`
			PayloadSHA256 string   `json:"payload_sha256"`
			Payload       *string  `json:"payload"`
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	if len(got.Fields) != 14 || got.Fields[0] != "id" || got.Fields[13] != "payload" {
		t.Fatalf("fields %v", got.Fields)
	}
	if len(got.Rows) != 3 {
		t.Fatalf("%d rows", len(got.Rows))
	}
	for i, row := range got.Rows {
		id := fmt.Sprint("js-", i)
		payload := payloadOf(id, 3000*i)
		m := e.do("GET", rolloutURL("t", id), nil)
		var meta recordViewJSON
		m.decode(t, &meta)
		if row.ID != id || row.RolloutID != fmt.Sprint("r", i) || row.Sequence != int64(i) || row.Reward == nil ||
			*row.Reward != float64(i)+0.5 || row.PayloadSize != int64(len(payload)) || row.PayloadSHA256 != meta.PayloadSHA256 ||
			row.Payload == nil || *row.Payload != hex.EncodeToString(payload) {
			t.Errorf("row %d as read by apache-arrow: %+v", i, row)
		}
	}
}

type recordViewJSON struct {
	PayloadSHA256 string `json:"payload_sha256"`
}
