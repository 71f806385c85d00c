package azure

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// retryBudget gives every operation its own retry decision, which gives up
// once the next backoff could end more than budget after the operation's
// first try began. Without it a store that is down costs each request the
// SDK's whole backoff schedule (about 15 s with the defaults) before its
// error, and a readiness probe or a client times out first.
//
// It runs once per operation, before the SDK's retry policy, and hands
// that policy the decision through the per-call retry options.
type retryBudget struct {
	opts   policy.RetryOptions // the client's own
	budget time.Duration
}

// retryStatuses are the statuses the SDK retries by default.
var retryStatuses = []int{http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
	http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}

func (p retryBudget) Do(req *policy.Request) (*http.Response, error) {
	start := time.Now()
	o := p.opts
	try := 0
	o.ShouldRetry = func(resp *http.Response, err error) bool {
		try++
		if err == nil && !slices.Contains(retryStatuses, resp.StatusCode) {
			return false
		}
		return time.Since(start)+max(maxBackoff(p.opts, try), retryAfter(resp)) <= p.budget
	}
	ctx := context.WithValue(req.Raw().Context(), budgetEndKey{}, start.Add(p.budget))
	return req.WithContext(policy.WithRetryOptions(ctx, o)).Next()
}

// sendCounter counts the tries of an operation (whose context carries a
// counter: withSends) that may have been carried out without the client
// learning it: no answer after the request may have gone out, or an answer
// saying the service lost track (500 OperationTimedOut, a gateway's 502 or
// 504). A conditional Put whose condition fails with no such try before
// wrote nothing; one with such a try may have won on it. Refusals (503
// ServerBusy, 429) and connections never made are not counted.
type sendCounter struct{}

type sendsKey struct{}

func withSends(ctx context.Context) (context.Context, *atomic.Int32) {
	n := new(atomic.Int32)
	return context.WithValue(ctx, sendsKey{}, n), n
}

func (sendCounter) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	if n, ok := req.Raw().Context().Value(sendsKey{}).(*atomic.Int32); ok && unanswered(resp, err) {
		n.Add(1)
	}
	return resp, err
}

func unanswered(resp *http.Response, err error) bool {
	if err != nil {
		var op *net.OpError
		return !errors.As(err, &op) || op.Op != "dial"
	}
	switch resp.StatusCode {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryAfter is the wait a response asks for, which the SDK honours
// instead of its own backoff.
func retryAfter(resp *http.Response) time.Duration {
	if resp == nil {
		return 0
	}
	for _, h := range []string{"retry-after-ms", "x-ms-retry-after-ms"} {
		if ms, err := strconv.Atoi(resp.Header.Get(h)); err == nil && ms > 0 {
			return time.Duration(ms) * time.Millisecond
		}
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// maxBackoff is the longest the SDK waits after failed try number try
// (its schedule: (2^try - 1) × RetryDelay, jittered by up to 1.3, capped).
func maxBackoff(o policy.RetryOptions, try int) time.Duration {
	delay := o.RetryDelay
	switch {
	case delay < 0:
		delay = 0
	case delay == 0:
		delay = 800 * time.Millisecond // the SDK's default
	}
	d := time.Duration(float64(delay) * float64(int64(1)<<min(try, 30)-1) * 1.3)
	if o.MaxRetryDelay > 0 && d > o.MaxRetryDelay {
		d = o.MaxRetryDelay
	}
	return d
}
