package server

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"
)

// errDownloadIdle and errDownloadSlow: a reader that stops reading, or
// reads slower than the minimum rate, is cut off, so that it gives back
// its request slot and its share of the in-flight payload budget.
var (
	errDownloadIdle = errors.New("download stalled: the client read nothing within the idle timeout")
	errDownloadSlow = errors.New("download too slow: the client read below the minimum download rate")
)

// downloadWriter is a streamed answer (a payload, a scan) written with the
// bounds an upload's body is read with: a pacer of DownloadIdleTimeout and
// DownloadMinRate sets the write deadline before every write. Once a write
// fails the answer is cut (headers are out).
type downloadWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	pace pacer
	n    int64
	// cause is why a write failed, errDownloadIdle or errDownloadSlow, or
	// nil.
	cause error
}

// newDownload wraps w; with DownloadIdleTimeout negative it sets no
// deadlines.
func (s *Server) newDownload(w http.ResponseWriter) *downloadWriter {
	d := &downloadWriter{ResponseWriter: w, pace: pacer{idle: s.cfg.DownloadIdleTimeout}}
	if d.pace.idle > 0 {
		d.rc = http.NewResponseController(w)
		d.pace.minRate = s.cfg.DownloadMinRate
	}
	return d
}

func (d *downloadWriter) Write(p []byte) (int, error) {
	if d.cause != nil {
		return 0, d.cause
	}
	start := time.Now()
	if d.rc != nil {
		// A writer that cannot set deadlines leaves the answer unbounded;
		// that is no reason to refuse it.
		_ = d.rc.SetWriteDeadline(start.Add(d.pace.wait(d.n + int64(len(p)))))
	}
	n, err := d.ResponseWriter.Write(p)
	d.pace.waited += time.Since(start)
	d.n += int64(n)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if d.pace.slow {
			d.cause = fmt.Errorf("%w: %d bytes in %v of waiting, below %d bytes/s", errDownloadSlow, d.n, d.pace.waited.Round(time.Millisecond), d.pace.minRate)
		} else {
			d.cause = fmt.Errorf("%w (%v, after %d bytes)", errDownloadIdle, d.pace.idle, d.n)
		}
		return n, d.cause
	}
	return n, err
}

// Flush lets a scan push what it has written.
func (d *downloadWriter) Flush() {
	if d.rc != nil {
		_ = d.rc.Flush()
	} else if f, ok := d.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (d *downloadWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
