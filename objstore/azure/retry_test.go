package azure

import (
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

// devConnectionString addresses endpoint with Azurite's published
// development account, so a Bucket can be built without Azurite.
func devConnectionString(endpoint string) string {
	return "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
		"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
		"BlobEndpoint=" + endpoint + "/devstoreaccount1;"
}

func newOffline(t *testing.T, endpoint string, tweak func(*Config)) *Bucket {
	t.Helper()
	cfg := Config{Container: "offline", Auth: AuthConnectionString, ConnectionString: devConnectionString(endpoint)}
	if tweak != nil {
		tweak(&cfg)
	}
	b, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestRetryBudget: a request that keeps failing is retried while its next
// backoff would end within MaxElapsed of its first try, then its error is
// returned: with a 100ms first backoff (schedule 0.1, 0.3, 0.7 s, each
// jittered by 0.8..1.3) and a 1s budget, that is exactly three tries,
// where MaxRetries alone would make five.
func TestRetryBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(req *http.Request) (*http.Response, error)
		want error
	}{
		{"refused", func(*http.Request) (*http.Response, error) {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}, objstore.ErrUnavailable},
		{"busy", func(req *http.Request) (*http.Response, error) {
			h := http.Header{"X-Ms-Error-Code": {"ServerBusy"}}
			return &http.Response{StatusCode: 503, Status: "503 Server Busy", Header: h, Body: http.NoBody, Request: req}, nil
		}, objstore.ErrThrottled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tries atomic.Int32
			b := newOffline(t, "http://127.0.0.1:1", func(c *Config) {
				c.Retry = RetryConfig{RetryDelay: 100 * time.Millisecond, MaxElapsed: time.Second}
				c.HTTPClient = &http.Client{Transport: transportFunc(func(req *http.Request) (*http.Response, error) {
					tries.Add(1)
					return tc.fail(req)
				})}
			})
			start := time.Now()
			_, err := b.Head(t.Context(), "k")
			took := time.Since(start)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Head: %v, want %v", err, tc.want)
			}
			if n := tries.Load(); n != 3 {
				t.Errorf("%d tries, want 3", n)
			}
			if took > time.Second {
				t.Errorf("failed after %v, budget 1s", took)
			}
		})
	}
	// Without a budget, MaxRetries decides.
	var tries atomic.Int32
	b := newOffline(t, "http://127.0.0.1:1", func(c *Config) {
		c.Retry = RetryConfig{RetryDelay: time.Millisecond, MaxElapsed: -1}
		c.HTTPClient = &http.Client{Transport: transportFunc(func(*http.Request) (*http.Response, error) {
			tries.Add(1)
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		})}
	})
	if _, err := b.Head(t.Context(), "k"); !errors.Is(err, objstore.ErrUnavailable) || tries.Load() != DefaultMaxRetries+1 {
		t.Fatalf("no budget: %v after %d tries, want ErrUnavailable after %d", err, tries.Load(), DefaultMaxRetries+1)
	}
}

// TestUnreachableEndpoint: against a port nobody listens on, with the
// transport New builds, every kind of call fails with ErrUnavailable
// within the default budget.
func TestUnreachableEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	b := newOffline(t, "http://"+addr, nil)
	ctx := t.Context()
	for name, call := range map[string]func() error{
		"check": func() error { return b.Check(ctx) },
		"head":  func() error { _, err := b.Head(ctx, "k"); return err },
		"list": func() error {
			return b.List(ctx, "", objstore.ListOptions{}, func(objstore.Entry) error { return nil })
		},
	} {
		start := time.Now()
		err := call()
		if !errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrContainerNotFound) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
		if took := time.Since(start); took > DefaultMaxElapsed {
			t.Errorf("%s: failed after %v, budget %v", name, took, DefaultMaxElapsed)
		}
	}
}

type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
