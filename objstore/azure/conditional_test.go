package azure_test

// A conditional Put whose first try certainly wrote nothing (refused with
// 503 ServerBusy, or a connection never made) and whose resend fails its
// condition wrote nothing: ErrPrecondition, so that a merger replans and a
// writer knows it was fenced, rather than "outcome unknown". Offline: a
// fake transport plays the service.

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure"
)

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func resp(req *http.Request, code int, h http.Header) *http.Response {
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: h, Body: http.NoBody, Request: req}
}

func TestConditionalPutAfterARefusedTry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(req *http.Request) (*http.Response, error)
	}{
		{"throttled 503 ServerBusy", func(req *http.Request) (*http.Response, error) {
			return resp(req, 503, http.Header{"X-Ms-Error-Code": {"ServerBusy"}}), nil
		}},
		{"connection refused", func(*http.Request) (*http.Response, error) {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var puts atomic.Int32
			tr := rtFunc(func(req *http.Request) (*http.Response, error) {
				switch req.Method {
				case http.MethodPut:
					if puts.Add(1) == 1 {
						return tc.first(req)
					}
					// The resend: another writer replaced the blob meanwhile.
					return resp(req, 412, http.Header{"X-Ms-Error-Code": {"ConditionNotMet"}}), nil
				case http.MethodHead:
					h := http.Header{}
					h.Set("ETag", `"0xOTHER"`)
					h.Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
					h.Set("Content-Length", "5")
					h.Set("x-ms-meta-rollstore_commit", "someone-else")
					return resp(req, 200, h), nil
				}
				return resp(req, 500, nil), nil
			})
			b, err := azure.New(t.Context(), azure.Config{
				Container: "offline", Auth: azure.AuthConnectionString,
				ConnectionString: "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
					"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
					"BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;",
				Retry:      azure.RetryConfig{RetryDelay: time.Millisecond, MaxElapsed: -1},
				HTTPClient: &http.Client{Transport: tr},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			_, err = b.Put(t.Context(), "k", bytes.NewReader([]byte("mine")), objstore.PutOptions{IfMatch: `"0xBEFORE"`})
			if n := puts.Load(); n != 2 {
				t.Fatalf("%d PUTs, want 2", n)
			}
			if !errors.Is(err, objstore.ErrPrecondition) {
				t.Errorf("first try certainly wrote nothing (%s), resend failed its condition: %v; want ErrPrecondition", tc.name, err)
			}
		})
	}
}
