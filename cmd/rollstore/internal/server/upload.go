package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// uploadBody is a request body read with an idle timeout and a size limit.
// Before every Read it pushes the connection's read deadline UploadIdle
// ahead, so a client that keeps sending may take as long as it needs while
// one that stalls is cut off after the idle timeout. It remembers why the
// body failed, because the engine may report the failure in its own words:
// the handler asks explain, not the error's chain.
type uploadBody struct {
	r     io.Reader
	rc    *http.ResponseController
	idle  time.Duration
	limit int64
	n     int64
	// cause is the first failure, one of errUploadIdle, errTruncated or
	// errBodyLimit, or nil.
	cause error
}

// newUploadBody wraps r.Body. limit < 0 means no limit of its own (the
// engine's MaxPayload still applies).
func newUploadBody(w http.ResponseWriter, r *http.Request, idle time.Duration, limit int64) *uploadBody {
	b := &uploadBody{r: r.Body, idle: idle, limit: limit}
	if idle > 0 {
		b.rc = http.NewResponseController(w)
	}
	return b
}

func (b *uploadBody) Read(p []byte) (int, error) {
	if b.cause != nil {
		return 0, b.cause
	}
	if b.limit >= 0 && int64(len(p)) > b.limit-b.n+1 {
		p = p[:b.limit-b.n+1] // one byte past the limit proves it was exceeded
	}
	if b.rc != nil {
		// ErrNotSupported (a writer that cannot set deadlines) leaves the
		// upload without an idle timeout; it is not a reason to refuse it.
		_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	switch {
	case b.limit >= 0 && b.n > b.limit:
		b.cause = fmt.Errorf("%w: more than %d bytes", errBodyLimit, b.limit)
		return n, b.cause
	case err == nil || err == io.EOF:
		return n, err
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.cause = fmt.Errorf("%w (%v, after %d bytes)", errUploadIdle, b.idle, b.n)
	case errors.Is(err, io.ErrUnexpectedEOF):
		b.cause = fmt.Errorf("%w: got %d bytes", errTruncated, b.n)
	default:
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			b.cause = fmt.Errorf("%w: more than %d bytes", errBodyLimit, mbe.Limit)
		}
	}
	if b.cause != nil {
		return n, b.cause
	}
	return n, err
}

// done clears the deadline so the connection serves its next request
// normally.
func (b *uploadBody) done() {
	if b.rc != nil {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// explain returns the error to answer for err, an error of the code that
// read the body: the body's own failure if it had one.
func (b *uploadBody) explain(err error) error {
	if b.cause != nil {
		return b.cause
	}
	return err
}
