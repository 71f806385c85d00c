package main

import (
	"fmt"
	"maps"
	"strings"
)

// interpret turns the measurements into the report's closing notes. Every
// statement is computed from this run's counts, so it stays true when the
// engine changes; the explanations attached to a count only appear when the
// count shows the behaviour they explain.
func (r *report) interpret() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	// Failures first.
	if e := reclaimFailure(r.quiet, r.load); e != "" {
		add("**Correctness failure under reclamation:** `%s`. A WAL object that a shard's head names (a segment, or a sealed "+
			"generation's seal record, found by a snapshot refresh that HEADs the registry and the active shards' heads) was "+
			"reclaimed by a merge, and the read failed with the store's not-found error instead of moving to the newer base that "+
			"holds those rows (a refresh that meets a reclaimed file starts over from the newest base; a read retries a vanished "+
			"file at most twice). The service maps this to 500 `missing_file`.", e)
	}

	// Appends.
	if len(r.appends) > 0 {
		var parts []string
		for _, a := range r.appends {
			parts = append(parts, fmt.Sprintf("%s %s", a.label, ratio(a.rs.rowsPerSec(), a.raw.rowsPerSec())))
		}
		add("**Appends** run at %s of the raw SDK's rows/s at the same concurrency.", strings.Join(parts, ", "))
		a := r.appends[0]
		rows := float64(a.rs.rows)
		segs := float64(a.rs.reqs.ops["PutIfAbsent segment"])
		reads := map[string]int64{}
		for k, v := range a.rs.reqs.ops {
			if !strings.HasPrefix(k, "Put") {
				reads[k] = v
			}
		}
		if segs > 0 && float64(total(reads))/rows >= 1 {
			add("Small appends are group-committed (%.1f rows per WAL segment put), yet each acknowledged %s row cost %s HTTP requests, "+
				"%s of them reads: %s per row. Before committing, every Append looks its id up (the immutability check); for a new id "+
				"that is a base miss → snapshot refresh (shared by concurrent appends) → WAL miss → the final “latest base once more” "+
				"check, which is not shared (on a table without a base version yet, each latest-version probe is a GET of the "+
				"`_latest.json` hint plus a HEAD of version 1). Against Azurite's single thread these reads, not the segment writes, "+
				"bound small-append throughput.",
				rows/segs, a.label, trimFloat(float64(total(a.rs.reqs.http))/rows), trimFloat(float64(total(reads))/rows), perUnit(reads, int(rows)))
		}
		for _, a := range r.appends {
			if a.size > 1<<20 || a.rs.reqs.ops["PutIfAbsent segment"] == 0 {
				continue
			}
			rows := float64(a.rs.rows)
			segs := float64(a.rs.reqs.ops["PutIfAbsent segment"])
			refreshes := float64(a.rs.reqs.ops["Head registry"])
			add("%s appends: %.1f rows per segment, %s HTTP requests per row (raw: 1), %.1f existence-check refreshes per segment; "+
				"%s of raw rows/s. A shard commits one segment at a time — the segment's PUT, then the head's swap, then the next "+
				"segment (doc.go, step 3) — so one shard has one PUT in flight where the baseline has %d.",
				a.label, rows/segs, trimFloat(float64(total(a.rs.reqs.http))/rows), refreshes/segs,
				ratio(a.rs.rowsPerSec(), a.raw.rowsPerSec()), a.conc)
		}
		if len(r.appends) >= 3 {
			l := r.appends[2]
			add("Large (%s) appends stream in 4 MiB blocks, 4 in flight, as the baseline's `UploadStream` does: %s HTTP requests per payload vs the raw %s "+
				"(the extra ones are the id lookup and the segment put), plus a SHA-256 of the stream.",
				l.label, trimFloat(float64(total(l.rs.reqs.http))/float64(l.rs.rows)), trimFloat(float64(total(l.raw.reqs.http))/float64(l.raw.rows)))
		}
	}

	// Memory.
	if len(r.memory) == 2 {
		rs, raw := r.memory[0], r.memory[1]
		rssNote := ""
		if rs.rssPeak >= 0 && raw.rssPeak >= 0 {
			rssNote = fmt.Sprintf(", RSS +%.1f MiB vs +%.1f MiB", mib(rs.rssPeak-rs.rssBase), mib(raw.rssPeak-raw.rssBase))
		}
		add("**Memory** of one %d MB append: Go heap peak +%.1f MiB vs +%.1f MiB for the raw `UploadStream`%s — bounded by block size × "+
			"upload concurrency (4 MiB × 4, buffers reused from block to block) plus the 1 MiB inline-threshold probe, not by the payload "+
			"size. The SDK's buffers are `mmap`s outside the Go heap, objstore/azure's are Go memory, so compare RSS.",
			rs.size/1e6, mib(rs.heapPeak), mib(raw.heapPeak), rssNote)
	}

	if r.quiet != nil && r.load != nil {
		r.interpretReads(add)
	}
	for _, sc := range r.scalings {
		r.interpretScaling(add, sc)
	}
	if r.sustain != nil {
		r.interpretSustain(add)
	}
	add("The machine is shared (load average %s at start, %s at end): p99 and max in particular move between runs; compare ratios "+
		"within one run, not absolute numbers across runs.", r.load0, r.load1)
	return out
}

func (r *report) interpretReads(add func(string, ...any)) {
	q := r.quiet
	raw := q.series[kRaw].summary()
	desc := func(ph *readPhase, k string) (string, float64, float64, int) {
		n := len(ph.series[k].total)
		t := ph.tallies[k].snap()
		return perUnit(t.ops, n), float64(total(t.http)) / float64(max(n, 1)), float64(t.bytes) / float64(max(n, 1)), n
	}
	perRead := func(ph *readPhase, k, op string) float64 {
		n := len(ph.series[k].total)
		return float64(ph.tallies[k].snap().ops[op]) / float64(max(n, 1))
	}
	warm := q.series[kWarm].summary()
	if ops, _, _, n := desc(q, kWarm); n > 0 {
		t := q.tallies[kWarm].snap()
		only := len(t.ops) == 1 && t.ops["GetRange data-file"] == int64(n)
		note := ""
		if only {
			note = " — exactly the one ranged GET of the payload span the design promises (batch metadata from the cache, no list)"
		}
		add("**Warm base hit**: %s per read%s; p50 %s ms = %s the raw GET's.", ops, note, fms(warm.p50), dratio(warm.p50, raw.p50))
	}
	if ops, _, bytes, n := desc(q, kCold); n > 0 {
		s := q.series[kCold].summary()
		note := ""
		if bytes > 2*float64(r.o.readSize) {
			note = fmt.Sprintf(" It received %.0f KB per read for a %.0f KB payload: the first lookup in a record batch fetches the whole batch to "+
				"decode the row's metadata, and a batch carries the inline payload bytes of all its rows (up to 64 KiB by default), so a cold "+
				"process reads %.0f× the payload. The payload column is last, so the metadata buffers precede the payload bytes in a batch: "+
				"a metadata-only range, or row metadata kept in the cached file index, would avoid this.",
				bytes/1e3, float64(r.o.readSize)/1e3, bytes/float64(r.o.readSize))
		}
		add("**Cold base hit** (fresh process, snapshot resident): %s per read; p50 %s ms = %s raw.%s", ops, fms(s.p50), dratio(s.p50, raw.p50), note)
	}
	if ops, _, _, n := desc(q, kWAL); n > 0 {
		s := q.series[kWAL].summary()
		probes := perRead(q, kWAL, "Head head") + perRead(q, kWAL, "Head registry") + perRead(q, kWAL, "Head manifest")
		note := ""
		if probes >= 1 {
			note = fmt.Sprintf(" The difference from a warm base hit (p50 %s ms) is the snapshot refresh a resident-snapshot miss makes so that "+
				"writes acknowledged before the read are visible: %.2f HEADs per read (the registry, the active shards' heads, whose "+
				"metadata carries the layout of the segment each counts last, and the next base manifest), no listing — that, "+
				"not the payload GET, dominates a WAL hit.",
				fms(warm.p50), probes)
		}
		add("**WAL hit**: %s per read; p50 %s ms = %s raw.%s", ops, fms(s.p50), dratio(s.p50, raw.p50), note)
	}
	if ops, _, _, n := desc(q, kAbsent); n > 0 {
		s := q.series[kAbsent].summary()
		note := ""
		if perRead(q, kAbsent, "Head manifest") >= 3 {
			note = " Finding the latest version is two HEADs (the known version — is it still there? — then the next one), and a miss " +
				"does it twice (in the refresh, and in the final check the design requires), so an absent answer is 5 sequential " +
				"round trips; issuing each probe's two HEADs concurrently would make it 3."
		}
		add("**Absent id**: %s per lookup; p50 %s ms = %s raw GET, max %s ms.%s", ops, fms(s.p50), dratio(s.p50, raw.p50), fms(s.max), note)
	}

	// Under load.
	if l := r.load; l != nil && l.load != nil {
		lraw := l.series[kRaw].summary()
		var parts []string
		for _, k := range l.kinds {
			if k == kRaw {
				continue
			}
			s := l.series[k].summary()
			parts = append(parts, fmt.Sprintf("%s %s ms (%s raw max)", kindNames[k], fms(s.max), dratio(s.max, lraw.max)))
		}
		add("**Under load** the maximum latencies were: %s. The raw GET's own p50 went from %s ms (quiet) to %s ms and its max to %s ms: "+
			"Azurite's single thread and the 2 vCPUs are shared with the %d MB stream and the merges, which the baseline suffers too.",
			strings.Join(parts, "; "), fms(raw.p50), fms(lraw.p50), fms(lraw.max), l.load.hugeSize/1e6)
		if st := l.stats[kRecent]; st != nil {
			add("Recent rows (the generation just sealed, merged and reclaimed while being read) were served %d times from the WAL, %d from "+
				"the base, %d from a base newer than the one the reader knew when the read began; retries after a reclaimed file: %d; missing-file errors: %d; "+
				"%d generations were reclaimed during the phase.",
				st.get("WAL hits"), st.get("base hits"), st.get("late base hits"), st.get("retries"), st.get("missing-file errors"), l.load.reclaimed)
		}
		if segGets := perRead(l, kAbsent, "Get segment"); segGets > 0 {
			_, _, bytes, _ := desc(l, kAbsent)
			add("Under load an absent lookup also downloaded %.2f whole WAL segments on average (%.0f KB received per lookup vs %.1f KB quiet): "+
				"a refresh learns the layout of an open, unsealed generation's segments by GETting each new segment whole, inline "+
				"payloads included (cached afterwards). Every reader process pays this for every segment the writer commits.",
				segGets, bytes/1e3, float64(q.tallies[kAbsent].snap().bytes)/1e3/float64(max(len(q.series[kAbsent].total), 1)))
		}
		if ops, _, _, n := desc(l, kWarm); n > 0 {
			t := l.tallies[kWarm].snap()
			qt := q.tallies[kWarm].snap()
			if !maps.Equal(keysOf(t.ops), keysOf(qt.ops)) {
				add("Warm base hits under load made %s per read (quiet: %s): the reader's snapshot moves to new base versions "+
					"(its misses refresh it), and compaction moves rows to new files whose batches are not cached yet.",
					ops, perUnit(qt.ops, len(q.series[kWarm].total)))
			}
		}
	}
}

func keysOf(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k := range m {
		out[k] = 1
	}
	return out
}

// reclaimFailure returns the first read error that is a WAL object gone
// missing, or "".
func reclaimFailure(phases ...*readPhase) string {
	for _, ph := range phases {
		if ph == nil {
			continue
		}
		for _, e := range ph.errs {
			if strings.Contains(e, "/wal/") && strings.Contains(e, "not found") {
				return firstLine(e)
			}
		}
	}
	return ""
}
