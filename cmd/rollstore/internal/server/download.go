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
// bounds an upload's body is read with: before every write it sets the
// connection's write deadline to the earlier of DownloadIdleTimeout from
// now and the moment by which the client must have taken the next bytes
// to average DownloadMinRate after a head start of DownloadIdleTimeout.
// Only the time spent waiting for the client counts, not the time the
// store takes to deliver the bytes, so a slow store never makes a client
// look slow. Once a write fails the answer is cut (headers are out).
type downloadWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	idle    time.Duration
	minRate int64 // bytes per second; 0: none
	waited  time.Duration
	n       int64
	slow    bool
	// cause is why a write failed, errDownloadIdle or errDownloadSlow, or
	// nil.
	cause error
}

// newDownload wraps w; with DownloadIdleTimeout negative it sets no
// deadlines.
func (s *Server) newDownload(w http.ResponseWriter) *downloadWriter {
	d := &downloadWriter{ResponseWriter: w, idle: s.cfg.DownloadIdleTimeout}
	if d.idle > 0 {
		d.rc = http.NewResponseController(w)
		d.minRate = s.cfg.DownloadMinRate
	}
	return d
}

func (d *downloadWriter) Write(p []byte) (int, error) {
	if d.cause != nil {
		return 0, d.cause
	}
	start := time.Now()
	if d.rc != nil {
		wait := d.idle
		d.slow = false
		if d.minRate > 0 {
			left := d.idle + time.Duration(float64(d.n+int64(len(p)))/float64(d.minRate)*float64(time.Second)) - d.waited
			if left < wait {
				wait, d.slow = left, true
			}
		}
		// A writer that cannot set deadlines leaves the answer unbounded;
		// that is no reason to refuse it.
		_ = d.rc.SetWriteDeadline(start.Add(wait))
	}
	n, err := d.ResponseWriter.Write(p)
	d.waited += time.Since(start)
	d.n += int64(n)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if d.slow {
			d.cause = fmt.Errorf("%w: %d bytes in %v of waiting, below %d bytes/s", errDownloadSlow, d.n, d.waited.Round(time.Millisecond), d.minRate)
		} else {
			d.cause = fmt.Errorf("%w (%v, after %d bytes)", errDownloadIdle, d.idle, d.n)
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
