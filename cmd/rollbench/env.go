package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	// The raw-SDK baseline. Outside objstore/azure, this command is the one
	// place in rollstore allowed to import the Azure SDK, because it IS the
	// thing rollstore is measured against: the same bytes through the plain
	// SDK, with the same transport and retry settings.
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure"
	"github.com/rollstore/rollstore/objstore/latency"
	"github.com/rollstore/rollstore/objstore/memory"
)

// EnvConnectionString is set by ./test/azurite/azurite.sh run.
const EnvConnectionString = "ROLLSTORE_AZURITE_CONNECTION_STRING"

// env is everything the phases share: the rollstore side (an objstore over
// azure.Bucket, counted) and the raw-SDK side, each in its own fresh
// container of the same Azurite, each with its own connection pool built by
// the same function. With -store latency, both sides are one memory bucket
// behind one latency model instead (setupLatency), and there is no SDK.
type env struct {
	opts *options

	endpoint string // blob endpoint, for the report (never the key)

	az    *azure.Bucket
	store objstore.Bucket // what every engine.Open of the bench gets
	rs    *tally          // every rollstore request (objstore and HTTP level)

	raw          *azblob.Client // nil with -store latency
	rawContainer string
	rawT         *tally // every raw-side request (HTTP level; objstore level with -store latency)

	// base is the raw side of the reads: the raw GET and HEAD every
	// lookup is compared with.
	base baseline

	// lat is the latency model with -store latency (nil on Azurite); its
	// bucket is what every engine of the run, the writers included, and
	// the raw side reach.
	lat *latency.Model

	rsContainer string

	// procs are the child processes started so far; cleanup stops any
	// still running.
	procs []*proc

	mu       sync.Mutex
	problems []string // correctness failures found along the way
	warnings []string // other errors: reported, not failing the run
	// writers are the engines of the run's writers, by shard name: where
	// routedAppend forwards a row to its partition's owner.
	writers map[string]*engine.DB
}

func (e *env) addWriter(name string, db *engine.DB) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.writers == nil {
		e.writers = map[string]*engine.DB{}
	}
	e.writers[name] = db
}

// writer is the env's router.
func (e *env) writer(name string) *engine.DB {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.writers[name]
}

// warn records an error that is not a read's (an append refused or timed
// out under load, a status call that timed out): the report lists it near
// the top, and the run does not fail for it.
func (e *env) warn(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	logf("WARNING: %s", firstLine(s))
	e.warnings = append(e.warnings, s)
}

// problem records a failure that fails the run (the report lists it in its
// FAILED section) without stopping the phase.
func (e *env) problem(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	logf("PROBLEM: %s", firstLine(s))
	e.problems = append(e.problems, s)
}

// newHTTPClient builds the transport objstore/azure builds for itself: its
// newHTTPClient is unexported, so this is a copy of it (keep the two in
// step). Both sides get one, each with its own pool, so neither side gets a
// connection-reuse advantage: azure.Config.HTTPClient hands ours to
// objstore/azure, azcore.ClientOptions.Transport to the raw client.
func newHTTPClient(maxConns int, all *tally) *http.Client {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		MaxConnsPerHost:       maxConns,
		MaxIdleConnsPerHost:   maxConns,
		MaxIdleConns:          maxConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ForceAttemptHTTP2:     false,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
	}
	return &http.Client{Transport: &countingTransport{next: tr, all: all}}
}

func setup(ctx context.Context, o *options) (*env, error) {
	if o.store == storeLatency {
		return setupLatency(o)
	}
	cs := os.Getenv(EnvConnectionString)
	if cs == "" {
		return nil, fmt.Errorf("%s is not set: run under the Azurite harness, e.g. ./test/azurite/azurite.sh run -- go run ./cmd/rollbench", EnvConnectionString)
	}
	e := &env{opts: o, endpoint: blobEndpoint(cs), rs: newTally(), rawT: newTally()}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	suffix := hex.EncodeToString(rnd[:])
	e.rsContainer = "rollbench-" + suffix
	e.rawContainer = "rollbench-raw-" + suffix

	az, err := azure.New(ctx, azure.Config{
		Auth:             azure.AuthConnectionString,
		ConnectionString: cs,
		Container:        e.rsContainer,
		CreateContainer:  true,
		HTTPClient:       newHTTPClient(azure.DefaultMaxConnsPerHost, e.rs),
	})
	if err != nil {
		return nil, fmt.Errorf("rollstore side: %w", err)
	}
	e.az = az
	e.store = newCountingBucket(az, e.rs, nil)

	// The raw client gets objstore/azure's default retry settings too.
	e.raw, err = azblob.NewClientFromConnectionString(cs, &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: newHTTPClient(azure.DefaultMaxConnsPerHost, e.rawT),
		Retry: policy.RetryOptions{
			MaxRetries:    azure.DefaultMaxRetries,
			RetryDelay:    azure.DefaultRetryDelay,
			MaxRetryDelay: azure.DefaultMaxRetryDelay,
		},
	}})
	if err != nil {
		return nil, fmt.Errorf("raw SDK client: %w", err)
	}
	if _, err := e.raw.CreateContainer(ctx, e.rawContainer, nil); err != nil {
		return nil, fmt.Errorf("raw SDK: creating container %s: %w", e.rawContainer, err)
	}
	e.base = azureBaseline{e}
	return e, nil
}

// setupLatency is the env of -store latency: one memory bucket behind one
// latency model. The engines reach it through their counting buckets, the
// raw side directly (counted by a counting bucket of its own), so both
// sides pay the same model in the same run. Writers run in this process
// (see startChild): a memory bucket cannot be shared between processes.
func setupLatency(o *options) (*env, error) {
	m, err := latency.New(memory.New(), o.lat)
	if err != nil {
		return nil, err
	}
	e := &env{opts: o, endpoint: "objstore/memory behind objstore/latency", rs: newTally(), rawT: newTally(), lat: m}
	e.store = newCountingBucket(m.Bucket(), e.rs, nil)
	e.base = storeBaseline{b: newCountingBucket(m.Bucket(), e.rawT, nil)}
	return e, nil
}

// cleanup deletes both containers (Azurite itself goes away with the
// harness, but a long-lived Azurite should not keep gigabytes of bench data).
func (e *env) cleanup(ctx context.Context) error {
	var errs []error
	if err := stopAll(e.procs); err != nil {
		errs = append(errs, err)
	}
	if e.raw == nil {
		return errors.Join(errs...)
	}
	for _, c := range []string{e.rsContainer, e.rawContainer} {
		if _, err := e.raw.DeleteContainer(ctx, c, nil); err != nil {
			errs = append(errs, err)
		}
	}
	_ = e.az.Close()
	return errors.Join(errs...)
}

// writerConfig is the writer-and-merger process: the service's defaults
// (engine.DefaultConfig, as `rollstore serve` uses; a zero engine.Config
// would disable the caches) with zero reclaim grace, so merged generations
// are deleted while reads are in flight.
func writerConfig() engine.Config {
	c := engine.DefaultConfig()
	c.Shard = "bench-0"
	c.ReclaimGrace = 0
	return c
}

// readerConfig is a reader process: defaults, no writer shard.
func readerConfig() engine.Config {
	return engine.DefaultConfig()
}

// uncachedReaderConfig is a reader process without payload cache: its hits
// fetch the payload's bytes from the store, which is what the latency goals
// of hits are about (the cache has a goal of its own).
func uncachedReaderConfig() engine.Config {
	c := engine.DefaultConfig()
	c.PayloadCacheBytes = 0
	return c
}

func blobEndpoint(cs string) string {
	for part := range strings.SplitSeq(cs, ";") {
		if v, ok := strings.CutPrefix(part, "BlobEndpoint="); ok {
			return v
		}
	}
	return "(connection string without BlobEndpoint)"
}

// baseline is the raw side of the reads: the same bytes fetched with no
// engine in between, what every lookup's latency is divided by.
type baseline interface {
	// upload stores the raw blob name.
	upload(ctx context.Context, name string, data []byte) error
	// open opens the whole raw blob name, returning once its response
	// headers are in.
	open(ctx context.Context, name string) (io.ReadCloser, error)
	// openSpan opens a range of an object the engine wrote.
	openSpan(ctx context.Context, sp span) (io.ReadCloser, error)
	// head fetches the properties of the raw blob name.
	head(ctx context.Context, name string) error
}

// azureBaseline is the raw Azure SDK: raw blobs in the raw container,
// spans read from the rollstore container.
type azureBaseline struct{ e *env }

func (a azureBaseline) upload(ctx context.Context, name string, data []byte) error {
	_, err := a.e.raw.UploadBuffer(ctx, a.e.rawContainer, name, data, nil)
	return err
}

func (a azureBaseline) open(ctx context.Context, name string) (io.ReadCloser, error) {
	resp, err := a.e.raw.DownloadStream(ctx, a.e.rawContainer, name, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func (a azureBaseline) openSpan(ctx context.Context, sp span) (io.ReadCloser, error) {
	resp, err := a.e.raw.DownloadStream(ctx, a.e.rsContainer, sp.key, &azblob.DownloadStreamOptions{Range: azblob.HTTPRange{Offset: sp.off, Count: sp.n}})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func (a azureBaseline) head(ctx context.Context, name string) error {
	_, err := a.e.raw.ServiceClient().NewContainerClient(a.e.rawContainer).NewBlobClient(name).GetProperties(ctx, nil)
	return err
}

// storeBaseline is plain objstore calls on the store the engines use (the
// latency model's bucket): raw blobs under rawPrefix, which no table's
// keys start with (a table name cannot begin with a dot).
type storeBaseline struct{ b objstore.Bucket }

const rawPrefix = ".raw/"

func (s storeBaseline) upload(ctx context.Context, name string, data []byte) error {
	_, err := s.b.Put(ctx, rawPrefix+name, bytes.NewReader(data), objstore.PutOptions{Size: int64(len(data))})
	return err
}

func (s storeBaseline) open(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, _, err := s.b.Get(ctx, rawPrefix+name)
	return rc, err
}

func (s storeBaseline) openSpan(ctx context.Context, sp span) (io.ReadCloser, error) {
	return s.b.GetRange(ctx, sp.key, sp.off, sp.n)
}

func (s storeBaseline) head(ctx context.Context, name string) error {
	_, err := s.b.Head(ctx, rawPrefix+name)
	return err
}
