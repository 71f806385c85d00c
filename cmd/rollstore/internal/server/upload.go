package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
)

// uploadBody is a request body read with an idle timeout, a minimum rate
// (UploadIdleTimeout and UploadMinRate, applied by a pacer as the read
// deadline before every Read) and a size limit. It
// remembers why the body failed, because the engine may report the failure
// in its own words: the handler asks explain, not the error's chain.
type uploadBody struct {
	r     io.Reader
	ctx   context.Context
	rc    *http.ResponseController
	pace  pacer
	limit int64
	n     int64
	hooks hook.Func
	// cause is the first failure, one of errUploadIdle, errUploadSlow,
	// errTruncated, errBodyLimit, errMalformedBody, errClientGone,
	// errDigestMismatch, or nil.
	cause error
	// digest checks the payload against the SHA-256 its writer sent;
	// declared is the body's Content-Length (-1 if unknown), the point
	// at which a header digest is checked even if the reader stops there.
	digest   *digestCheck
	declared int64
}

// newUploadBody wraps r.Body. limit < 0 means no limit of its own (the
// engine's MaxPayload still applies).
func (s *Server) newUploadBody(w http.ResponseWriter, r *http.Request, limit int64) *uploadBody {
	b := &uploadBody{r: r.Body, ctx: r.Context(), pace: pacer{idle: s.cfg.UploadIdleTimeout}, limit: limit, hooks: s.cfg.Hooks, declared: r.ContentLength}
	if b.pace.idle > 0 {
		b.rc = http.NewResponseController(w)
		b.pace.minRate = s.cfg.UploadMinRate
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
	start := time.Now()
	if b.rc != nil {
		// ErrNotSupported (a writer that cannot set deadlines) leaves the
		// upload without these bounds; it is not a reason to refuse it.
		_ = b.rc.SetReadDeadline(start.Add(b.pace.wait(b.n + 1)))
	}
	n, err := b.r.Read(p)
	b.pace.waited += time.Since(start)
	if b.n == 0 && n > 0 {
		_ = b.hooks.Call(b.ctx, "upload:first-bytes")
	}
	b.n += int64(n)
	if b.digest != nil {
		b.digest.h.Write(p[:n])
	}
	switch {
	case b.limit >= 0 && b.n > b.limit:
		b.cause = fmt.Errorf("%w: more than %d bytes", errBodyLimit, b.limit)
		return n, b.cause
	case b.digest != nil && (err == io.EOF || err == nil && b.n == b.declared && b.digest.want != nil):
		if derr := b.digest.verify(err == io.EOF); derr != nil {
			b.cause = derr
			return n, b.cause
		}
		return n, err
	case err == nil || err == io.EOF:
		return n, err
	}
	b.cause = b.why(err)
	return n, b.cause
}

// why names a failed body read. A client that went away (the connection
// reset or closed under the read) is not answered and not a server fault;
// anything else net/http reports while reading a body it already framed is
// the client's malformed framing (a bad chunk), a 400.
func (b *uploadBody) why(err error) error {
	var mbe *http.MaxBytesError
	var ne *net.OpError
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) && b.pace.slow:
		return fmt.Errorf("%w: %d bytes in %v of waiting, below %d bytes/s", errUploadSlow, b.n, b.pace.waited.Round(time.Millisecond), b.pace.minRate)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w (%v, after %d bytes)", errUploadIdle, b.pace.idle, b.n)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: got %d bytes", errTruncated, b.n)
	case errors.As(err, &mbe):
		return fmt.Errorf("%w: more than %d bytes", errBodyLimit, mbe.Limit)
	case errors.As(err, &ne), errors.Is(err, net.ErrClosed), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		b.ctx.Err() != nil:
		return fmt.Errorf("%w after %d bytes: %v", errClientGone, b.n, err)
	case errors.Is(err, http.ErrBodyReadAfterClose):
		return err // ours, not the client's
	}
	return fmt.Errorf("%w after %d bytes: %v", errMalformedBody, b.n, err)
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
