package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
)

// net/http answers some requests itself, before any handler runs: a
// header block over MaxHeaderBytes (431), a request it cannot parse (400,
// sometimes with a reason), an unknown transfer coding (501). It writes
// those answers straight to the connection, in plain text, in one write
// of a fixed shape:
//
//	HTTP/1.1 <status line>\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n<text>
//
// and closes the connection. A parserErrorConn recognises that write, and
// only while no handler has run for the request being read (handled is
// cleared when net/http starts a request and set when a handler starts),
// so no response of ours is ever touched, and writes the same status as
// JSON with a request id instead, logging and counting it like any answer.
type parserErrorConn struct {
	net.Conn
	s       *Server
	handled atomic.Bool
}

type connKey struct{}

type parserErrorListener struct {
	net.Listener
	s *Server
}

func (l parserErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &parserErrorConn{Conn: c, s: l.s}, nil
}

const parserErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *parserErrorConn) Write(b []byte) (int, error) {
	if c.handled.Load() || !bytes.HasPrefix(b, []byte("HTTP/1.1 ")) {
		return c.Conn.Write(b)
	}
	statusLine, text, ok := bytes.Cut(b[len("HTTP/1.1 "):], []byte(parserErrorHeaders))
	if !ok || bytes.ContainsAny(statusLine, "\r\n") || len(statusLine) < 3 {
		return c.Conn.Write(b)
	}
	status, err := strconv.Atoi(string(statusLine[:3]))
	if err != nil || status < 400 {
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(c.s.parserErrorAnswer(c, status, string(text))); err != nil {
		return 0, err
	}
	return len(b), nil
}

// CloseWrite lets net/http half-close after a 431, as it does on a bare
// TCP connection.
func (c *parserErrorConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// parserErrorAnswer is the whole HTTP response replacing net/http's.
func (s *Server) parserErrorAnswer(c net.Conn, status int, text string) []byte {
	code, msg := codeMalformedRequest, "malformed request: "+text
	switch status {
	case http.StatusHTTPVersionNotSupported:
		// A version net/http does not speak is the client's mistake: a
		// 4xx, so that it is not counted as the server's failure.
		status, msg = http.StatusBadRequest, "malformed request: unsupported HTTP version (HTTP/1.0, HTTP/1.1 and HTTP/2 are served)"
	case http.StatusRequestHeaderFieldsTooLarge:
		code, msg = codeHeaderTooLarge, fmt.Sprintf("request headers exceed %d bytes", s.maxHeaderBytes())
	}
	id := newRequestID()
	var body bytes.Buffer
	_ = json.NewEncoder(&body).Encode(errorBody{Error: errorDetail{Code: code, Message: msg, RequestID: id}})
	var out bytes.Buffer
	fmt.Fprintf(&out, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n"+
		"X-Request-Id: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", status, http.StatusText(status), id, body.Len())
	out.Write(body.Bytes())

	s.metrics.requests.WithLabelValues("(unparsed)", "OTHER", strconv.Itoa(status)).Observe(0)
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "request", slog.String("request_id", id), slog.String("route", "(unparsed)"),
		slog.Int("status", status), slog.String("remote", c.RemoteAddr().String()), slog.String("err", text))
	return out.Bytes()
}

// maxHeaderBytes is what Serve lets net/http read of a request's headers.
func (s *Server) maxHeaderBytes() int { return s.cfg.MaxRecordHeaderBytes + 64<<10 }
