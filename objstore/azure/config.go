package azure

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// AuthMode selects how a Bucket authenticates. It is always explicit: New
// never infers it from which Config fields happen to be set, so a forgotten
// variable fails loudly instead of silently switching credentials.
type AuthMode string

const (
	// AuthConnectionString uses Config.ConnectionString (account name, key
	// and endpoint in one string, as Azurite and the portal print it).
	AuthConnectionString AuthMode = "connection-string"
	// AuthSharedKey uses Config.AccountName and Config.AccountKey.
	AuthSharedKey AuthMode = "shared-key"
	// AuthWorkloadIdentity uses the federated token the AKS workload
	// identity webhook mounts (AZURE_CLIENT_ID, AZURE_TENANT_ID,
	// AZURE_FEDERATED_TOKEN_FILE).
	AuthWorkloadIdentity AuthMode = "workload-identity"
	// AuthDefault uses azidentity's DefaultAzureCredential chain
	// (environment, workload identity, managed identity, Azure CLI, ...).
	AuthDefault AuthMode = "default"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultBlockSize         = 4 << 20
	DefaultUploadConcurrency = 4
	DefaultMaxSinglePut      = 64 << 20
	DefaultMaxConnsPerHost   = 256
	DefaultMaxRetries        = 4
	DefaultRetryDelay        = 500 * time.Millisecond
	DefaultMaxRetryDelay     = 30 * time.Second
	DefaultMaxReadRetries    = 3
	// A store that answers nothing is reported after about
	// DefaultMaxElapsed. The stall timeout is long enough that a store
	// that is only slow is not taken for a hung one: Azurite on a busy
	// two-core machine was seen taking more than 2 s to answer a staged
	// 4 MiB block.
	DefaultMaxElapsed   = 8 * time.Second
	DefaultStallTimeout = 5 * time.Second

	// MaxSinglePutLimit caps Config.MaxSinglePut. Above it the SDK's own
	// buffered uploads switch to a block-list commit that drops access
	// conditions, so keeping conditional writes well below it keeps them
	// atomic whatever path a future change takes.
	MaxSinglePutLimit = 256 << 20

	minBlockSize = 1 << 20    // the SDK silently raises smaller blocks to this
	maxBlockSize = 4000 << 20 // the service's limit for one staged block
)

// Config describes one container and how to reach it.
type Config struct {
	// Container is the container every key lives in.
	Container string

	// Auth selects the credential; it is required.
	Auth AuthMode

	// ConnectionString is used by AuthConnectionString, and only by it.
	ConnectionString string
	// AccountName is the storage account; required by AuthSharedKey, and by
	// the identity modes unless Endpoint is set.
	AccountName string
	// AccountKey is the base64 shared key for AuthSharedKey.
	AccountKey string
	// Endpoint overrides the blob service URL, for example
	// https://acct.blob.core.windows.net or an Azurite address
	// http://127.0.0.1:10000/devstoreaccount1. Not allowed with
	// AuthConnectionString, whose string carries its own endpoint.
	Endpoint string

	// CreateContainer makes New create the container if it is missing.
	CreateContainer bool

	// BlockSize is the size of each staged block of a streamed upload, and
	// the largest unconditional body sent in a single request. Memory used
	// by one streamed upload is about BlockSize × UploadConcurrency.
	// Default 4 MiB; at least 1 MiB.
	BlockSize int64
	// UploadConcurrency bounds the blocks of one streamed upload in flight.
	// Default 4.
	UploadConcurrency int
	// MaxSinglePut is the largest conditional Put: conditional bodies go out
	// in one request so the condition applies atomically, and bodies that
	// are not seekable are buffered up to this size. Default 64 MiB; at most
	// MaxSinglePutLimit.
	MaxSinglePut int64
	// MaxConnsPerHost bounds the connections to the blob endpoint, and as
	// many are kept idle for reuse. Default 256.
	MaxConnsPerHost int

	// Retry tunes the SDK's retry policy.
	Retry RetryConfig

	// HTTPClient replaces the tuned transport New builds, for proxies or
	// instrumentation. MaxConnsPerHost is then ignored, and the client's
	// Timeout must be zero: bodies stream for as long as they take.
	HTTPClient *http.Client
}

// RetryConfig tunes retries. Zero fields take the defaults; a negative
// MaxRetries or MaxReadRetries disables that kind of retry.
type RetryConfig struct {
	// MaxRetries is how often one request is retried after a transport
	// error, 408, 429 or 5xx. Default 4.
	MaxRetries int
	// RetryDelay is the first backoff; it doubles per retry (with jitter)
	// up to MaxRetryDelay, unless the service sends Retry-After.
	// Defaults 500ms and 30s.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// TryTimeout bounds one attempt including reading its response body
	// (the SDK's own bound). Off by default, because a large body
	// legitimately streams for longer than any sensible per-request bound;
	// StallTimeout is what cuts a store that stops answering.
	TryTimeout time.Duration
	// StallTimeout abandons a try the store stops answering, as a transport
	// timeout: retried within MaxElapsed, then ErrUnavailable. It bounds
	// the wait for an answer once a request is out (further cut to the end
	// of MaxElapsed), each pause while a request body is sent, and each
	// read of a download body: never a whole transfer that progresses, so
	// large payloads are not cut. A conditional Put cut this way may have
	// landed, as one whose answer was lost. Default 2s; negative disables
	// it (a hung store then holds a request until its context ends).
	StallTimeout time.Duration
	// MaxReadRetries is how often a download whose connection breaks
	// mid-body is resumed from where it stopped. Default 3.
	MaxReadRetries int
	// MaxElapsed bounds how long one request keeps failing before its error
	// is returned, so that a store that is down is reported within seconds
	// rather than after every backoff: no retry is made whose backoff would
	// end more than MaxElapsed after the request's first try began, and
	// connecting (dial and TLS handshake) takes at most MaxElapsed. A try
	// waiting for its answer is cut at the budget's end (see StallTimeout);
	// one sending or receiving a body that progresses is not. Default 4s; negative disables it
	// (MaxRetries alone bounds retries, and connecting may take 30s).
	MaxElapsed time.Duration
}

// Validate reports whether New would accept c, without contacting the
// service, so a command can refuse a bad configuration before it starts
// anything.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// ValidateContainerName applies the service's container naming rules.
func ValidateContainerName(name string) error { return validateContainerName(name) }

// withDefaults validates c and fills in its zero fields.
func (c Config) withDefaults() (Config, error) {
	if err := validateContainerName(c.Container); err != nil {
		return c, err
	}
	switch c.Auth {
	case AuthConnectionString:
		if c.ConnectionString == "" {
			return c, errors.New("azure: auth connection-string needs ConnectionString")
		}
		if c.AccountName != "" || c.AccountKey != "" || c.Endpoint != "" {
			return c, errors.New("azure: auth connection-string takes account, key and endpoint from the string; leave AccountName, AccountKey and Endpoint empty")
		}
	case AuthSharedKey:
		if c.AccountName == "" || c.AccountKey == "" {
			return c, errors.New("azure: auth shared-key needs AccountName and AccountKey")
		}
		if c.ConnectionString != "" {
			return c, errors.New("azure: auth shared-key does not use ConnectionString")
		}
	case AuthWorkloadIdentity, AuthDefault:
		if c.AccountName == "" && c.Endpoint == "" {
			return c, fmt.Errorf("azure: auth %s needs AccountName or Endpoint", c.Auth)
		}
		if c.ConnectionString != "" || c.AccountKey != "" {
			return c, fmt.Errorf("azure: auth %s does not use ConnectionString or AccountKey", c.Auth)
		}
	case "":
		return c, errors.New(`azure: Auth is required: "connection-string", "shared-key", "workload-identity" or "default"`)
	default:
		return c, fmt.Errorf(`azure: unknown Auth %q: want "connection-string", "shared-key", "workload-identity" or "default"`, c.Auth)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return c, fmt.Errorf("azure: Endpoint %q: want an http(s) URL such as https://acct.blob.core.windows.net", c.Endpoint)
		}
	}

	switch {
	case c.BlockSize == 0:
		c.BlockSize = DefaultBlockSize
	case c.BlockSize < minBlockSize || c.BlockSize > maxBlockSize:
		return c, fmt.Errorf("azure: BlockSize %d: want %d..%d", c.BlockSize, minBlockSize, maxBlockSize)
	}
	switch {
	case c.UploadConcurrency == 0:
		c.UploadConcurrency = DefaultUploadConcurrency
	case c.UploadConcurrency < 0:
		return c, fmt.Errorf("azure: UploadConcurrency %d: must be positive", c.UploadConcurrency)
	}
	switch {
	case c.MaxSinglePut == 0:
		c.MaxSinglePut = DefaultMaxSinglePut
	case c.MaxSinglePut < 0 || c.MaxSinglePut > MaxSinglePutLimit:
		return c, fmt.Errorf("azure: MaxSinglePut %d: want 1..%d", c.MaxSinglePut, MaxSinglePutLimit)
	}
	switch {
	case c.MaxConnsPerHost == 0:
		c.MaxConnsPerHost = DefaultMaxConnsPerHost
	case c.MaxConnsPerHost < 0:
		return c, fmt.Errorf("azure: MaxConnsPerHost %d: must be positive", c.MaxConnsPerHost)
	}
	if c.HTTPClient != nil && c.HTTPClient.Timeout != 0 {
		return c, errors.New("azure: HTTPClient.Timeout must be zero; use contexts or Retry.TryTimeout")
	}

	r := &c.Retry
	if r.MaxRetries == 0 {
		r.MaxRetries = DefaultMaxRetries
	}
	if r.RetryDelay == 0 {
		r.RetryDelay = DefaultRetryDelay
	}
	if r.MaxRetryDelay == 0 {
		r.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if r.MaxReadRetries == 0 {
		r.MaxReadRetries = DefaultMaxReadRetries
	}
	if r.MaxElapsed == 0 {
		r.MaxElapsed = DefaultMaxElapsed
	}
	if r.StallTimeout == 0 {
		r.StallTimeout = DefaultStallTimeout
	}
	if r.RetryDelay < 0 || r.MaxRetryDelay < 0 || r.TryTimeout < 0 {
		return c, errors.New("azure: Retry delays and TryTimeout must not be negative")
	}
	return c, nil
}

// validateContainerName applies the service's naming rules up front, so a
// typo is a clear configuration error rather than a 400 on first use.
func validateContainerName(name string) error {
	if len(name) < 3 || len(name) > 63 {
		return fmt.Errorf("azure: container name %q: length must be 3..63", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(name)-1 && name[i-1] != '-':
		default:
			return fmt.Errorf("azure: container name %q: want lower-case letters, digits and single inner hyphens", name)
		}
	}
	return nil
}
