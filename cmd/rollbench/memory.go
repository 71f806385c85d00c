package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/azure"
)

const (
	metricHeapObjects = "/memory/classes/heap/objects:bytes"
	metricAllocs      = "/gc/heap/allocs:bytes"
)

type memResult struct {
	who       string
	size      int64
	dur       time.Duration
	heapPeak  uint64 // peak of live+unswept heap objects minus the baseline
	allocated uint64 // bytes allocated on the heap during the upload
	samples   int    // heap samples taken (target: one per millisecond)
	rssBase   int64  // VmRSS when the peak was reset, bytes
	rssPeak   int64  // VmHWM after the upload, bytes; -1 if not available
	hwmReset  bool   // whether /proc/self/clear_refs reset the peak
	reqs      snap
}

func readMetric(s []metrics.Sample) uint64 {
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// procStatus reads a "VmXXX:   123 kB" field of /proc/self/status in bytes.
func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil {
			return -1
		}
		return kb << 10
	}
	return -1
}

// measureMemory runs upload alone while a goroutine samples the heap every
// millisecond. The peak RSS is reset first by writing 5 to
// /proc/self/clear_refs (Linux ≥ 4.0), so VmHWM afterwards is this upload's.
func measureMemory(who string, size int64, tl *tally, upload func() error) (memResult, error) {
	res := memResult{who: who, size: size, rssPeak: -1}
	runtime.GC()
	debug.FreeOSMemory()
	heap := []metrics.Sample{{Name: metricHeapObjects}}
	allocs := []metrics.Sample{{Name: metricAllocs}}
	base := readMetric(heap)
	alloc0 := readMetric(allocs)
	res.hwmReset = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	res.rssBase = procStatus("VmRSS")
	before := tl.snap()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var peak uint64
	wg.Go(func() {
		s := []metrics.Sample{{Name: metricHeapObjects}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			v := readMetric(s)
			peak = max(peak, v)
			res.samples++
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	start := time.Now()
	err := upload()
	res.dur = time.Since(start)
	close(stop)
	wg.Wait()
	peak = max(peak, readMetric(heap))
	if peak > base {
		res.heapPeak = peak - base
	}
	res.allocated = readMetric(allocs) - alloc0
	if res.hwmReset {
		res.rssPeak = procStatus("VmHWM")
	}
	res.reqs = tl.snap().sub(before)
	if err != nil {
		return res, fmt.Errorf("%s: %w", who, err)
	}
	logf("memory %-9s %d MB in %v: heap peak +%.1f MiB, allocated %.1f MiB, peak RSS %.1f MiB (base %.1f MiB), %d samples",
		who, size/1e6, res.dur.Round(time.Millisecond), mib(res.heapPeak), mib(res.allocated), mib(res.rssPeak), mib(res.rssBase), res.samples)
	return res, nil
}

func mib[T int64 | uint64](v T) float64 { return float64(v) / (1 << 20) }

// benchMemory measures one large append through rollstore and the same
// bytes through the raw SDK's UploadStream (objstore/azure's block size and
// concurrency), one after the other, each alone.
func benchMemory(ctx context.Context, e *env, wdb *engine.DB, size int64) ([]memResult, error) {
	const table = "memory"
	if err := wdb.CreateTable(ctx, table); err != nil {
		return nil, err
	}
	tb, err := wdb.Table(ctx, table)
	if err != nil {
		return nil, err
	}
	// Warm the writer (its recovery lists and reads) outside the measurement.
	if _, err := tb.Append(ctx, record("memory-warm", 0), newStream("memory-warm", 1024), 1024); err != nil {
		return nil, err
	}
	var out []memResult
	raw, err := measureMemory("raw SDK", size, e.rawT, func() error {
		_, err := e.raw.UploadStream(ctx, e.rawContainer, "memory/huge", newStream("memory-huge", size), &azblob.UploadStreamOptions{
			BlockSize: azure.DefaultBlockSize, Concurrency: azure.DefaultUploadConcurrency,
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	rs, err := measureMemory("rollstore", size, e.rs, func() error {
		_, err := tb.Append(ctx, record("memory-huge", 1), newStream("memory-huge", size), size)
		return err
	})
	if err != nil {
		return nil, err
	}
	out = append(out, rs, raw)
	// Check the row: the declared size came back and the bytes are readable.
	rec, err := tb.Get(ctx, "memory-huge", engine.ReadOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading back the %d-byte row: %w", size, err)
	}
	if rec.PayloadSize != size {
		return nil, fmt.Errorf("the %d-byte row reads back with payload_size %d", size, rec.PayloadSize)
	}
	return out, nil
}
