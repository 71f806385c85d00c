package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore"
)

// Server serves one engine.DB over HTTP.
type Server struct {
	db  *engine.DB
	cfg Config
	log *slog.Logger
	mux *http.ServeMux
	// redirect answers paths that are not in canonical form.
	redirect http.Handler
	// connect answers CONNECT, which the router would answer itself.
	connect http.Handler
	// metricsMux is the handler of the separate, unauthenticated metrics
	// listener (MetricsHandler).
	metricsMux *http.ServeMux
	metrics    *metrics
	tokens     [][sha256.Size]byte
	// clients bounds what one client holds (nil: no bound).
	clients *clientShares
	// sem holds one token per API request being served, uploads one per
	// upload among them.
	sem, uploads chan struct{}
	// waiting holds one token per feed long-poll being served (they hold
	// no request slot; see feedSlot).
	waiting chan struct{}
	// drained is closed when the drain starts: waiting long-polls answer
	// at once.
	drained chan struct{}
	// lag tracks the consumer groups this process served, whose lag
	// gauges the lag loop refreshes (consumers.go).
	lag consumerLag
	// relays relays waiting long-polls to the partitions' owners
	// (feedrelay.go).
	relays feedRelays

	// fwd is the client of forwarded commits (one pool of kept-alive
	// connections to the other writers); payloadStore the engine's store,
	// to delete the payload of a write that could not be forwarded.
	fwd          *http.Client
	payloadStore objstore.Bucket

	draining atomic.Bool
	// warmed is set once every table's snapshot was loaded, which is what
	// readiness means beyond "the store answers".
	warmed atomic.Bool
	warmMu sync.Mutex

	// passLog holds the recent merges the status page shows (ui.go).
	passLog passLog
	uiKeys  uiKeys
}

// New returns a Server over db. It starts nothing: Serve does, or a test
// mounts Handler.
func New(db *engine.DB, cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// A batch is committed as one segment: it holds at most as many rows.
	if rows := db.Config().SegmentMaxRows; cfg.MaxBatchRows == 0 || cfg.MaxBatchRows > rows {
		cfg.MaxBatchRows = rows
	}
	s := &Server{
		db:         db,
		cfg:        cfg,
		log:        cfg.Logger,
		mux:        http.NewServeMux(),
		metricsMux: http.NewServeMux(),
		sem:        make(chan struct{}, cfg.MaxConcurrentRequests),
		uploads:    make(chan struct{}, cfg.MaxConcurrentUploads),
		waiting:    make(chan struct{}, cfg.FeedMaxWaiting),
		drained:    make(chan struct{}),
		lag:        consumerLag{served: map[groupKey]time.Time{}},
		relays:     feedRelays{tables: map[*engine.Table]chan struct{}{}},
	}
	for _, t := range cfg.AuthTokens {
		s.tokens = append(s.tokens, sha256.Sum256([]byte(t)))
	}
	s.clients = newClientShares(cfg.MaxClientShare, cfg.MaxConcurrentRequests, cfg.MaxConcurrentUploads, cfg.FeedMaxWaiting, db.Config().MaxPayloadInFlight)
	s.metrics = newMetrics(db)
	for _, c := range cfg.Collectors {
		if err := s.metrics.reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	s.fwd = cfg.ForwardClient
	if s.fwd == nil {
		s.fwd = newForwardClient()
	}
	if cfg.Store != nil {
		if s.payloadStore, err = objstore.Prefixed(cfg.Store, cfg.StorePrefix); err != nil {
			return nil, fmt.Errorf("store prefix: %w", err)
		}
	}
	s.routes()
	return s, nil
}

// newForwardClient is the client of forwarded commits: connections are
// made quickly or not at all (a refused or unreachable owner is answered
// 503 at once), kept alive between commits, and an owner that takes a
// commit but does not answer is given up on after a bound well above a
// commit's worst case (the store's retry budget).
func newForwardClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler { return s }

// MetricsHandler returns the handler of a metrics-only listener: GET
// /metrics without a token even when AuthTokens are set, 404 for anything
// else. Serve it on a port that only the scraper can reach; the API's own
// /metrics keeps requiring the token.
func (s *Server) MetricsHandler() http.Handler { return s.metricsMux }

// StartDrain makes readiness fail and every later API request be refused
// with 503 "draining", while requests already running finish. Serve calls
// it when its context ends; it cannot be undone.
func (s *Server) StartDrain() {
	if !s.draining.Swap(true) {
		close(s.drained)
		s.metrics.draining.Set(1)
		s.log.Info("draining: readiness fails, new requests are refused")
	}
}

// Serve serves on ln until ctx is done, running the merger alongside, then
// drains within Config.DrainTimeout: readiness fails and new requests are
// refused, the merger stops, requests in flight finish (or are cut off at
// the bound), the listener closes. Then db is closed within
// Config.CloseTimeout, which seals the generations this process wrote and
// releases its shard. It returns nil after a clean drain.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler: s.Handler(),
		// No ReadTimeout or WriteTimeout: bodies stream for as long as they
		// take; stalls are caught by the upload idle timeout instead.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Room for the record header plus ordinary headers; a larger
		// header block is refused by net/http with 431.
		MaxHeaderBytes: s.maxHeaderBytes(),
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// Requests net/http refuses before any handler runs (431, 400)
		// are answered in JSON too; see parserErrorConn.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		ConnState: func(c net.Conn, st http.ConnState) {
			// Between two requests of a connection, what it writes next
			// may be net/http's own answer again: Idle follows every
			// response (Active is not reported again for a request that
			// fails to parse on a kept-alive connection).
			if pc, ok := c.(*parserErrorConn); ok && (st == http.StateActive || st == http.StateIdle) {
				pc.handled.Store(false)
			}
		},
	}
	ln = parserErrorListener{ln, s}
	mergeCtx, stopMerger := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMerger()
	var wg sync.WaitGroup
	wg.Go(func() { s.RunMerger(mergeCtx) })
	wg.Go(func() { s.joinLoop(mergeCtx, 2*time.Second) })
	wg.Go(func() { s.lagLoop(mergeCtx) })
	wg.Go(func() {
		if err := s.warm(mergeCtx); err != nil {
			s.log.Warn("loading tables at startup (readiness retries)", "err", err)
		}
	})

	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	s.log.Info("serving", "addr", ln.Addr().String())

	select {
	case err := <-served:
		stopMerger()
		wg.Wait()
		return errors.Join(fmt.Errorf("serving on %s: %w", ln.Addr(), err), s.closeDB())
	case <-ctx.Done():
	}

	start := time.Now()
	drainCtx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	s.StartDrain()
	stopMerger()
	if s.cfg.DrainDelay > 0 {
		t := time.NewTimer(s.cfg.DrainDelay)
		select {
		case <-t.C:
		case <-drainCtx.Done():
		}
		t.Stop()
	}
	var errs []error
	if err := hs.Shutdown(drainCtx); err != nil {
		hs.Close()
		errs = append(errs, fmt.Errorf("drain: requests still running after %v: %w", s.cfg.DrainTimeout, err))
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	wg.Wait()
	if err := s.closeDB(); err != nil {
		errs = append(errs, fmt.Errorf("drain: closing the database: %w", err))
	}
	s.log.Info("drained", "took", time.Since(start).Round(time.Millisecond), "clean", len(errs) == 0)
	return errors.Join(errs...)
}

// closeDB closes the database within CloseTimeout, counted from now: a
// drain that overran its own bound must still seal and release the shard.
func (s *Server) closeDB() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseTimeout)
	defer cancel()
	return s.db.Close(ctx)
}
