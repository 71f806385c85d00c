// Package azure is the Azure Blob Storage backend of objstore, and the only
// package of the service that imports the Azure SDK (the benchmark,
// cmd/rollbench, and the staging fixture's raw-SDK baseline also import it,
// to measure rollstore against plain SDK calls).
//
// Every key is a block blob in one container. Failures are translated to
// objstore's sentinels in one function (mapError), so callers never see SDK
// types unless they unwrap for detail.
//
// Two Azure behaviours shape the write path. A create-if-absent Put whose
// response is lost is retried by the SDK and then fails with 409 although it
// won, so every conditional Put carries a random commit id in its metadata
// and a 409/412 is checked against it. And the SDK's multi-block uploads do
// not apply access conditions to their final commit, so conditional Puts
// always go out as one Put Blob request, bounded by Config.MaxSinglePut.
package azure

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/rollstore/rollstore/objstore"
)

// Bucket is an objstore.Bucket on one Azure Blob container. It is safe for
// concurrent use; create one per container and share it.
type Bucket struct {
	client     *container.Client
	container  string
	httpClient *http.Client // Close releases its idle connections if ownsHTTP
	ownsHTTP   bool

	blockSize      int64
	concurrency    int
	maxSinglePut   int64
	maxReadRetries int

	// noBatch is set once the service has refused a blob batch, so later
	// DeleteMany calls go straight to individual deletes.
	noBatch atomic.Bool
}

var _ objstore.Bucket = (*Bucket)(nil)

// New returns a Bucket for cfg.Container. It makes no request unless
// cfg.CreateContainer is set; use Check to verify access.
func New(ctx context.Context, cfg Config) (*Bucket, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Bucket{
		container:      cfg.Container,
		httpClient:     cfg.HTTPClient,
		blockSize:      cfg.BlockSize,
		concurrency:    cfg.UploadConcurrency,
		maxSinglePut:   cfg.MaxSinglePut,
		maxReadRetries: cfg.Retry.MaxReadRetries,
	}
	if b.httpClient == nil {
		connect := 30 * time.Second
		if cfg.Retry.MaxElapsed > 0 {
			connect = min(connect, cfg.Retry.MaxElapsed)
		}
		b.httpClient = newHTTPClient(cfg.MaxConnsPerHost, connect)
		b.ownsHTTP = true
	}
	retry := policy.RetryOptions{
		MaxRetries:    int32(cfg.Retry.MaxRetries),
		TryTimeout:    cfg.Retry.TryTimeout,
		RetryDelay:    cfg.Retry.RetryDelay,
		MaxRetryDelay: cfg.Retry.MaxRetryDelay,
	}
	var perCall []policy.Policy
	if cfg.Retry.MaxElapsed > 0 {
		perCall = append(perCall, retryBudget{opts: retry, budget: cfg.Retry.MaxElapsed})
	}
	// sendCounter comes first so that it sees the tries stallGuard cut.
	perRetry := []policy.Policy{sendCounter{}}
	if cfg.Retry.StallTimeout > 0 {
		perRetry = append(perRetry, stallGuard{d: cfg.Retry.StallTimeout})
	}
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport:        b.httpClient,
		Retry:            retry,
		PerCallPolicies:  perCall,
		PerRetryPolicies: perRetry,
		Telemetry:        policy.TelemetryOptions{ApplicationID: "rollstore"},
	}}

	b.client, err = NewContainerClient(cfg, b.httpClient, opts)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("azure: %s credentials for container %s: %w", cfg.Auth, cfg.Container, err)
	}

	if cfg.CreateContainer {
		_, err := b.client.Create(ctx, nil)
		if err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
			b.Close()
			return nil, mapError(opCreateContainer, cfg.Container, err)
		}
	}
	return b, nil
}

// NewContainerClient returns an azblob client of cfg.Container with the
// credentials cfg.Auth selects (token credentials, from workload identity or
// DefaultAzureCredential, fetch their tokens over hc) and the pipeline
// settings in opts. It is how New connects, and it is exported for the one
// other place that needs a plain SDK client with the same credentials: the
// staging fixture's raw-SDK baseline, which measures what rollstore adds.
func NewContainerClient(cfg Config, hc *http.Client, opts *container.ClientOptions) (*container.Client, error) {
	switch cfg.Auth {
	case AuthConnectionString:
		return container.NewClientFromConnectionString(cfg.ConnectionString, cfg.Container, opts)
	case AuthSharedKey:
		cred, err := container.NewSharedKeyCredential(cfg.AccountName, cfg.AccountKey)
		if err != nil {
			return nil, err
		}
		return container.NewClientWithSharedKeyCredential(containerURL(cfg), cred, opts)
	case AuthWorkloadIdentity:
		cred, err := azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{
			ClientOptions: azcore.ClientOptions{Transport: hc},
		})
		if err != nil {
			return nil, err
		}
		return container.NewClient(containerURL(cfg), tokenCredential{cred}, opts)
	case AuthDefault:
		cred, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{
			ClientOptions: azcore.ClientOptions{Transport: hc},
		})
		if err != nil {
			return nil, err
		}
		return container.NewClient(containerURL(cfg), tokenCredential{cred}, opts)
	}
	return nil, fmt.Errorf("unknown auth mode %q", cfg.Auth)
}

// containerURL is the container's URL for the modes that do not parse a
// connection string.
func containerURL(cfg Config) string {
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = "https://" + cfg.AccountName + ".blob.core.windows.net"
	}
	return strings.TrimSuffix(endpoint, "/") + "/" + url.PathEscape(cfg.Container)
}

// NewHTTPClient returns the transport New builds when Config.HTTPClient is
// nil: at most maxConns connections to the host, kept idle for reuse, and
// connect as the bound on dialling (and, up to 10s, on the TLS handshake).
// The staging fixture's raw-SDK baseline uses it too, so neither side has a
// connection-handling advantage.
func NewHTTPClient(maxConns int, connect time.Duration) *http.Client {
	return newHTTPClient(maxConns, connect)
}

// newHTTPClient returns a client tuned for many concurrent requests to a
// single host. net/http's default keeps only two idle connections per host
// (the SDK's own, ten), so under load most connections would be closed after
// one request and re-dialled, TLS handshake included.
func newHTTPClient(maxConns int, connect time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		MaxConnsPerHost:     maxConns,
		MaxIdleConnsPerHost: maxConns,
		MaxIdleConns:        maxConns,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: min(10*time.Second, connect),
		// Blob Storage speaks HTTP/1.1, so parallelism comes from the pool
		// of connections above rather than from multiplexing.
		ForceAttemptHTTP2:     false,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
	}}
}

// Container returns the container name.
func (b *Bucket) Container() string { return b.container }

// Check verifies that the container exists and the credentials are
// accepted, returning ErrContainerNotFound, ErrAuth or ErrThrottled
// (wrapped) when not. It is meant for readiness probes.
func (b *Bucket) Check(ctx context.Context) error {
	if _, err := b.client.GetProperties(ctx, nil); err != nil {
		return mapError(opCheck, b.container, err)
	}
	return nil
}

// Close releases idle connections of the transport New built. The Bucket
// must not be used afterwards.
func (b *Bucket) Close() error {
	if b.ownsHTTP {
		b.httpClient.CloseIdleConnections()
	}
	return nil
}

// tokenCredential marks failures to obtain a token, so mapError can tell
// them from the service refusing a token (both are ErrAuth) and, above all,
// from transport errors.
type tokenCredential struct{ cred azcore.TokenCredential }

func (c tokenCredential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	tok, err := c.cred.GetToken(ctx, opts)
	if err != nil && ctx.Err() == nil {
		err = &credentialError{err}
	}
	return tok, err
}

type credentialError struct{ err error }

func (e *credentialError) Error() string { return "azure: obtaining a token: " + e.err.Error() }
func (e *credentialError) Unwrap() error { return e.err }
