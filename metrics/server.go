package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/aitherion/dpu/internal/backoff"
)

// Bounds of the metrics server.
const (
	readHeaderTimeout = 5 * time.Second
	scrapeTimeout     = 10 * time.Second
	maxScrapes        = 4 // scrapes in flight; more are answered 503
	closeTimeout      = time.Second
	// MaxConns is how many connections the server holds open at once;
	// further ones wait in the kernel's accept queue (they cost the agent
	// no descriptor) until one closes.
	MaxConns = 16
	// IdleTimeout closes a keep-alive connection that sends no request
	// for this long (a scraper reconnects at its next scrape).
	IdleTimeout = 10 * time.Second
)

// ListenOption configures Listen.
type ListenOption func(*listenConfig)

type listenConfig struct {
	log *slog.Logger
}

// WithLogger makes the server log to l (failed accepts); the default
// discards.
func WithLogger(l *slog.Logger) ListenOption {
	return func(c *listenConfig) {
		if l != nil {
			c.log = l
		}
	}
}

// Server serves an Exporter over HTTP.
type Server struct {
	ln  *limitListener
	srv *http.Server
}

// Listen binds addr (host:port; port 0 picks one) for e's metrics. An
// address without a host (":9464") binds the loopback address, not every
// interface: whoever wants the metrics on a network names its address.
func Listen(addr string, e *Exporter, opts ...ListenOption) (*Server, error) {
	cfg := listenConfig{log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	addr, err := LoopbackDefault(addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	tl, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	ln := newLimitListener(tl, MaxConns, cfg.log)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{
		MaxRequestsInFlight: maxScrapes,
		Timeout:             scrapeTimeout,
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "dpu-agent: metrics at /metrics\n")
	})
	return &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout: scrapeTimeout, WriteTimeout: 2 * scrapeTimeout, IdleTimeout: IdleTimeout}}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// AcceptErrors returns how many accepts failed (the HTTP server backs off
// and serves on).
func (s *Server) AcceptErrors() uint64 { return s.ln.errs.Load() }

// LoopbackDefault returns addr with the loopback host where it names none
// (":9464" becomes "127.0.0.1:9464").
func LoopbackDefault(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// limitListener holds at most n accepted connections open: Accept waits
// for a slot before it takes the next connection from the kernel, so
// connections beyond the bound cost no descriptor. A failed accept (out
// of descriptors or kernel memory) is counted, logged and retried after a
// back-off (internal/backoff): Accept returns
// an error only once the listener is closed, so no accept error ends the
// HTTP server (net/http ends it on any error it does not deem temporary,
// ENOBUFS and ENOMEM among them).
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
	errs  atomic.Uint64
	log   *slog.Logger
}

func newLimitListener(l net.Listener, n int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), done: make(chan struct{}), log: log}
}

// Accept waits for a free slot (or Close), then accepts, backing off
// while accepts fail.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	var wait backoff.Accept
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
		}
		if errors.Is(err, net.ErrClosed) {
			<-l.slots
			return nil, err
		}
		l.errs.Add(1)
		delay := wait.Failed()
		l.log.Warn("metrics accept failed", "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-l.done:
			t.Stop()
			<-l.slots
			return nil, net.ErrClosed
		}
	}
}

// Close closes the listener and ends a wait for a slot.
func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back once, on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Serve answers scrapes until ctx ends or Close is called; it returns nil
// then.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// Close stops the server: scrapes in flight get closeTimeout to finish.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}
