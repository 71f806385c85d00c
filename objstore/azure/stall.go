package azure

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// stallGuard abandons a try the store stops answering: a store that
// accepts connections and then says nothing (a hung process, a silently
// dropped connection) would otherwise hold every request until the
// caller's context ends, since nothing else bounds a try. It runs once per
// try, inside the SDK's retry policy, and arms one timer of d:
//
//   - while the request body is being sent, every chunk the transport
//     takes re-arms it, so a large upload that progresses is never cut;
//   - once the request is out, it bounds the wait for the answer (status,
//     headers and, except for downloads, the body the SDK reads in one go),
//     and is further cut to the end of the operation's retry budget, so a
//     store that does not answer is reported within that budget;
//   - while a body the SDK does not read into memory streams (downloads,
//     batch answers), it bounds each read, never the transfer.
//
// A try it cuts fails with a transport timeout (stallError), which is
// retried within the budget like any lost connection, counts as possibly
// sent for conditional Puts (sendCounter), and ends as ErrUnavailable.
type stallGuard struct{ d time.Duration }

// budgetEndKey carries the end of an operation's retry budget (a
// time.Time) in its context; retryBudget sets it.
type budgetEndKey struct{}

// stallError is the error of a try cut for want of an answer. It is a
// timeout in net.Error's sense, and deliberately not context.Canceled,
// which would mean the caller gave up.
type stallError struct {
	d    time.Duration
	what string
}

func (e *stallError) Error() string {
	return fmt.Sprintf("azure: the store sent nothing for %v %s", e.d.Round(time.Millisecond), e.what)
}
func (e *stallError) Timeout() bool   { return true }
func (e *stallError) Temporary() bool { return true }

type phase int

const (
	sending   phase = iota // the transport is reading the request body
	awaiting               // the request is out; waiting for the answer
	streaming              // a download body is being read by the caller
	finished
)

// tryWatch is one try's timer and what it does when it fires.
type tryWatch struct {
	d      time.Duration
	end    time.Time // of the retry budget; zero: none
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	phase  phase
	timer  *time.Timer
	fired  *stallError // set when the timer cut the try
	inRead bool
}

func (g stallGuard) Do(req *policy.Request) (*http.Response, error) {
	parent := req.Raw().Context()
	ctx, cancel := context.WithCancelCause(parent)
	w := &tryWatch{d: g.d, cancel: cancel}
	if end, ok := parent.Value(budgetEndKey{}).(time.Time); ok {
		w.end = end
	}
	try := req.Clone(ctx)
	if body := try.Raw().Body; body != nil && body != http.NoBody {
		try.Raw().Body = &sendBody{ReadCloser: body, w: w, left: try.Raw().ContentLength}
		w.arm(sending, w.d, "while sending the request")
	} else {
		w.await()
	}
	resp, err := try.Next()
	if stalled := w.stop(); stalled != nil {
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		cancel(stalled)
		return nil, &url.Error{Op: req.Raw().Method, URL: req.Raw().URL.Redacted(), Err: stalled}
	}
	if err != nil || downloaded(resp) {
		// The SDK has read the whole answer into memory (it does for all
		// but downloads and batches): nothing left to watch.
		cancel(nil)
		return resp, err
	}
	resp.Body = &watchedBody{ReadCloser: resp.Body, w: w}
	return resp, nil
}

// arm (re)starts the timer for phase p, unless the try has moved past it.
func (w *tryWatch) arm(p phase, d time.Duration, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armLocked(p, d, what)
}

func (w *tryWatch) armLocked(p phase, d time.Duration, what string) {
	if w.phase > p || w.fired != nil {
		return
	}
	w.phase = p
	if w.timer != nil {
		w.timer.Stop()
	}
	w.timer = time.AfterFunc(d, func() { w.fire(p, d, what) })
}

// await arms the timer for the answer: d, cut to the end of the retry
// budget while that is still ahead (a request whose upload outlasted the
// budget while progressing still gets d).
func (w *tryWatch) await() {
	d := w.d
	if !w.end.IsZero() {
		if left := time.Until(w.end); left > 0 && left < d {
			d = left
		}
	}
	w.arm(awaiting, d, "after the request went out")
}

func (w *tryWatch) fire(p phase, d time.Duration, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.phase != p || w.fired != nil || (p == streaming && !w.inRead) {
		return // overtaken by a later phase or a finished read
	}
	w.fired = &stallError{d: d, what: what}
	w.cancel(w.fired)
}

// stop ends the request's phases, returning the stall that cut it, if any.
func (w *tryWatch) stop() *stallError {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.phase < streaming {
		w.phase = streaming
	}
	return w.fired
}

// sendBody re-arms the timer for every chunk of the request body the
// transport takes, and switches to awaiting the answer at its end.
type sendBody struct {
	io.ReadCloser
	w    *tryWatch
	left int64 // bytes of a known length still to send; <= 0: unknown
}

func (b *sendBody) Read(p []byte) (int, error) {
	known := b.left > 0
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	switch {
	case err != nil, known && b.left <= 0:
		b.w.await()
	case n > 0:
		b.w.arm(sending, b.w.d, "while sending the request")
	}
	return n, err
}

// watchedBody bounds each read of a streamed response body by d.
type watchedBody struct {
	io.ReadCloser
	w *tryWatch
}

func (b *watchedBody) Read(p []byte) (int, error) {
	w := b.w
	w.mu.Lock()
	if w.fired != nil {
		err := w.fired
		w.mu.Unlock()
		return 0, err
	}
	w.inRead = true
	w.armLocked(streaming, w.d, "while a download body was being read")
	w.mu.Unlock()

	n, err := b.ReadCloser.Read(p)

	w.mu.Lock()
	w.inRead = false
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.fired != nil && err != nil && err != io.EOF {
		err = &url.Error{Op: "read", URL: "response body", Err: w.fired}
	}
	w.mu.Unlock()
	if err != nil {
		w.cancel(nil)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	w := b.w
	w.mu.Lock()
	w.phase = finished
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	err := b.ReadCloser.Close()
	w.cancel(nil)
	return err
}

// downloaded reports whether the SDK read resp's body into memory, as it
// does for every answer but downloads and batch answers (its own
// in-memory body has a Bytes method).
func downloaded(resp *http.Response) bool {
	_, ok := resp.Body.(interface{ Bytes() []byte })
	return ok
}
