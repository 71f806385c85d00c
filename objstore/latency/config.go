// Package latency wraps an objstore.Bucket in a latency model of a remote
// object store, for benchmarks.
//
// Azurite, the emulator rollstore's tests and cmd/rollbench run against,
// serves one request at a time on one Node.js thread: N requests issued in
// parallel take N times one request there, so it cannot show what a design
// that probes N objects in parallel costs on Azure Blob Storage, where they
// overlap. Wrapped around the memory backend, this package can: every call
// sleeps for a latency drawn from a distribution per operation (HEAD, GET's
// first byte, PUT, conditional PUT, DELETE, LIST, lease calls), bodies
// additionally take their size over a per-stream bandwidth, and calls sleep
// independently of each other, so parallel calls overlap as they would on
// the service. The model counts the requests it charged, per operation.
//
// It is a model, not a measurement: it has no throttling, no per-partition
// or per-account limits, no queueing on the server and no correlation
// between calls. Its numbers are only as good as its Config (see
// DefaultConfig for where the defaults come from), and what it is good for
// is comparing two ways of reaching the same data under the same model —
// rollstore's lookups against a raw GET of the same bytes, at 1 or at 64
// writers — not predicting absolute latencies on Azure.
//
// The wrapper is transparent apart from time: every call's arguments,
// results and errors pass through unchanged (it passes the objstoretest
// conformance suite with a zero Config), and a Bucket that can lease
// (objstore.Leaser) stays one, so the engine finds the same capabilities
// through it.
package latency

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Op is an operation of the model: a kind of request to the store, with a
// latency distribution of its own.
type Op string

// The operations. Each maps the objstore calls onto the REST requests they
// are on Azure, and each such request is charged and counted once.
const (
	// OpHead is Head (Get Blob Properties).
	OpHead Op = "head"
	// OpGet is Get and GetRange (Get Blob): the latency to the first byte;
	// the body then arrives at Config.Bandwidth.
	OpGet Op = "get"
	// OpPut is an unconditional Put (Put Blob): the latency, plus the
	// body's size at Config.Bandwidth.
	OpPut Op = "put"
	// OpPutIf is a conditional Put (Put Blob with If-None-Match: * or
	// If-Match): the latency, plus the body's size at Config.Bandwidth.
	OpPutIf Op = "put_if"
	// OpDelete is Delete, DeleteIfMatch (Delete Blob), and each batch of
	// up to Config.DeleteBatch keys of a DeleteMany (Blob Batch), the
	// batches one after another as objstore/azure sends them.
	OpDelete Op = "delete"
	// OpList is each page of up to Config.ListPage entries of a List
	// (List Blobs), charged before the page's first entry is delivered.
	OpList Op = "list"
	// OpLease is AcquireLease, and a held lease's Renew and Release
	// (Lease Blob).
	OpLease Op = "lease"
)

// Ops lists every operation, in the order reports show them.
var Ops = []Op{OpHead, OpGet, OpPut, OpPutIf, OpDelete, OpList, OpLease}

// Dist is a latency distribution given by its median and its 99th
// percentile: lognormal, ln(latency) ~ Normal(ln P50, σ) with
// σ = ln(P99/P50) / 2.326 (2.326 is the standard normal's 99th
// percentile). P99 == P50 is a constant latency; the zero Dist is no
// latency at all.
//
// Lognormal because service latencies are positive and right-skewed with a
// long tail, and because two quantiles fix it; a model with a hard floor
// (a shifted exponential) would add a parameter nobody publishes.
type Dist struct {
	P50, P99 time.Duration
}

// z99 is the 99th percentile of the standard normal distribution.
const z99 = 2.3263478740408408

// validate rejects a distribution that cannot be drawn from.
func (d Dist) validate() error {
	switch {
	case d.P50 < 0 || d.P99 < 0:
		return fmt.Errorf("negative latency (p50 %v, p99 %v)", d.P50, d.P99)
	case d.P99 < d.P50:
		return fmt.Errorf("p99 %v below p50 %v", d.P99, d.P50)
	case d.P50 == 0 && d.P99 != 0:
		return fmt.Errorf("p99 %v with a zero p50: a lognormal needs a positive median", d.P99)
	}
	return nil
}

// sigma is the lognormal's σ.
func (d Dist) sigma() float64 {
	if d.P50 <= 0 || d.P99 <= d.P50 {
		return 0
	}
	return math.Log(float64(d.P99)/float64(d.P50)) / z99
}

// at is the latency at standard normal deviate z: the p50 at z = 0, the
// p99 at z = 2.326.
func (d Dist) at(z float64) time.Duration {
	if d.P50 <= 0 {
		return 0
	}
	return time.Duration(float64(d.P50) * math.Exp(d.sigma()*z))
}

// Clock is the time source the model sleeps on. Tests pass one that
// records the sleeps instead of waiting, so that what the model charged is
// asserted exactly, whatever the machine's speed.
type Clock interface {
	Now() time.Time
	// Sleep waits for d, or until ctx is done, when it returns ctx.Err().
	// It is called from many goroutines at once.
	Sleep(ctx context.Context, d time.Duration) error
}

// Config is the model: one latency distribution per operation, the
// bandwidth of one body's transfer, and the seed of the draws.
//
// DefaultConfig (StandardConfig) and PremiumConfig are anchored on what
// Microsoft publishes about Azure Blob Storage, which is targets and
// qualitative latency statements, not per-operation percentiles:
//
//   - Scalability and performance targets for Blob storage
//     (https://learn.microsoft.com/azure/storage/blobs/scalability-targets):
//     a single blob serves up to 500 requests per second; a single page
//     blob up to 60 MiB/s; a single block blob up to the account's
//     ingress/egress limits, its "high-throughput" path starting at Put
//     Blob or Put Block sizes above 4 MiB (standard) or 256 KiB (premium).
//   - Performance and scalability checklist for Blob storage
//     (https://learn.microsoft.com/azure/storage/blobs/storage-performance-checklist):
//     the same per-blob target (500 requests per second), and that
//     approaching a target raises latency before it throttles (503/500).
//   - Latency in Blob storage
//     (https://learn.microsoft.com/azure/storage/blobs/storage-blobs-latency):
//     for small objects the time is "predominantly spent handling the
//     request, rather than transferring data", and premium block blobs
//     offer "significantly lower and more consistent latency" than
//     standard.
//   - Scalability targets for premium block blob storage accounts
//     (https://learn.microsoft.com/azure/storage/blobs/scalability-targets-premium-block-blobs):
//     premium is "optimized for applications that use smaller,
//     kilobyte-range objects" needing "consistent low-latency storage".
//   - Azure Block Blob storage performance tiers (the 2019 page, at
//     https://github.com/MicrosoftDocs/azure-docs/blob/014513711acd0485c5226261c073205c2d693631/articles/storage/blobs/storage-blob-performance-tiers.md):
//     premium is "optimized for high transaction rates and single-digit
//     consistent storage latency", standard "for high capacity and high
//     throughput".
//   - Hot, Cool, and Archive access tiers (the 2021 page, at
//     https://github.com/MicrosoftDocs/azure-docs/blob/0089f187e7d58912b9095acc2c17247623f340d9/articles/storage/blobs/access-tiers-overview.md):
//     latency (time to first byte) of the hot and cool tiers:
//     "milliseconds".
//
// From these: premium's p50 and p99 are both single-digit milliseconds;
// standard's p50 is a few milliseconds (the hot tier's "milliseconds",
// 2–3× premium's) with a p99 five times its p50 (less consistent); writes
// cost more than reads, a LIST more than a HEAD; a body streams at 60 MiB/s
// per request, the single-blob figure the targets publish (for page
// blobs; a block blob's is the account's limit, which one stream of a
// benchmark client does not reach). The per-operation numbers are this
// package's assumptions within those statements, not published figures:
// set them from your own account's Success E2E Latency metric when you
// have one.
type Config struct {
	Head, Get, Put, PutIf, Delete, List, Lease Dist
	// Bandwidth is the transfer rate of one body, in bytes per second:
	// a Get's body is delivered at it while it is read, a Put's body takes
	// its size at it. 0 transfers instantly.
	Bandwidth float64
	// ListPage is the number of entries per List page (Azure: 5,000);
	// DeleteBatch the number of keys per DeleteMany batch (Azure: 256).
	// 0 means Azure's.
	ListPage, DeleteBatch int
	// Seed seeds the draws: the same seed gives the same sequence of
	// latencies. Which call gets which draw follows the order the calls
	// draw in, so runs repeat exactly only where that order does (one
	// caller at a time).
	Seed uint64
	// Clock is the time source; nil is the real one.
	Clock Clock
}

// Azure's page and batch sizes.
const (
	AzureListPage    = 5000
	AzureDeleteBatch = 256
)

// DefaultBandwidth is the default per-stream transfer rate: 60 MiB/s, the
// single-blob throughput target the scalability targets publish.
const DefaultBandwidth = 60 << 20

// DefaultConfig is StandardConfig.
func DefaultConfig() Config { return StandardConfig() }

// StandardConfig models a standard general-purpose v2 account, hot tier,
// reached from a client in the same region, for small objects (see Config
// for the sources and what is assumed).
func StandardConfig() Config {
	ms := func(p50, p99 float64) Dist {
		return Dist{P50: time.Duration(p50 * float64(time.Millisecond)), P99: time.Duration(p99 * float64(time.Millisecond))}
	}
	return Config{
		Head:      ms(5, 25),
		Get:       ms(6, 30),
		Put:       ms(8, 40),
		PutIf:     ms(8, 40),
		Delete:    ms(6, 30),
		List:      ms(10, 50),
		Lease:     ms(8, 40),
		Bandwidth: DefaultBandwidth,
		Seed:      1,
	}
}

// PremiumConfig models a premium block blob account: every p50 and p99 in
// single-digit milliseconds ("single-digit consistent storage latency").
func PremiumConfig() Config {
	ms := func(p50, p99 float64) Dist {
		return Dist{P50: time.Duration(p50 * float64(time.Millisecond)), P99: time.Duration(p99 * float64(time.Millisecond))}
	}
	return Config{
		Head:      ms(2, 6),
		Get:       ms(2.5, 7),
		Put:       ms(3.5, 9),
		PutIf:     ms(3.5, 9),
		Delete:    ms(2.5, 7),
		List:      ms(4, 9),
		Lease:     ms(3.5, 9),
		Bandwidth: DefaultBandwidth,
		Seed:      1,
	}
}

// For returns op's distribution in c, to read or set; nil for an unknown
// op.
func (c *Config) For(op Op) *Dist {
	switch op {
	case OpHead:
		return &c.Head
	case OpGet:
		return &c.Get
	case OpPut:
		return &c.Put
	case OpPutIf:
		return &c.PutIf
	case OpDelete:
		return &c.Delete
	case OpList:
		return &c.List
	case OpLease:
		return &c.Lease
	}
	return nil
}

// Validate reports a Config the model cannot use.
func (c Config) Validate() error {
	for _, op := range Ops {
		if err := c.For(op).validate(); err != nil {
			return fmt.Errorf("latency: %s: %w", op, err)
		}
	}
	if c.Bandwidth < 0 || c.ListPage < 0 || c.DeleteBatch < 0 {
		return fmt.Errorf("latency: negative bandwidth, list page or delete batch")
	}
	return nil
}

// transfer is how long n bytes take at the configured bandwidth.
func (c Config) transfer(n int64) time.Duration {
	if c.Bandwidth <= 0 || n <= 0 {
		return 0
	}
	return time.Duration(float64(n) / c.Bandwidth * float64(time.Second))
}

// realClock is time.Now and a timer.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
