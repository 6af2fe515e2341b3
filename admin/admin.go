// Package admin serves the worker's operational HTTP endpoints: liveness,
// readiness, a JSON status page and the metrics exposition.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/cellttl/cellttl/internal/envflag"
)

// Check is one readiness condition.
type Check struct {
	Name string
	// Fn returns nil when the condition holds. It is given a context with a
	// short deadline.
	Fn func(ctx context.Context) error
}

// Server is the admin HTTP server.
type Server struct {
	srv    *http.Server
	log    *slog.Logger
	checks []Check
	status func(url.Values) any
	wg     sync.WaitGroup
}

// CheckTimeout bounds each readiness check.
const CheckTimeout = 3 * time.Second

// New returns a server for addr. metrics may be nil.
func New(addr string, metrics http.Handler, status func(url.Values) any, checks []Check, log *slog.Logger) *Server {
	s := &Server{log: log, checks: checks, status: status}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Alive: the process serves HTTP. Nothing else, so that a slow
		// dependency never gets the worker restarted.
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.status(r.URL.Query()))
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	// Profiles of the running worker (CPU, heap, goroutines), on the admin
	// port, which is internal like /metrics.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	s.srv = &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return s
}

// readyz runs every check and answers 200 when all hold, 503 otherwise,
// with one line per check either way.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	type result struct {
		name string
		err  error
	}
	results := make([]result, len(s.checks))
	var wg sync.WaitGroup
	for i, c := range s.checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), CheckTimeout)
			defer cancel()
			results[i] = result{c.Name, c.Fn(ctx)}
		})
	}
	wg.Wait()
	var b strings.Builder
	ready := true
	for _, res := range results {
		if res.err != nil {
			ready = false
			fmt.Fprintf(&b, "%s: not ready: %v\n", res.name, res.err)
		} else {
			fmt.Fprintf(&b, "%s: ok\n", res.name)
		}
	}
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write([]byte(b.String()))
}

// Start listens and serves in the background; Shutdown stops it.
func (s *Server) Start() (net.Addr, error) {
	ln, err := net.Listen("tcp", s.srv.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin server: %w", err)
	}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server stopped", "err", err)
		}
	})
	return ln.Addr(), nil
}

// Shutdown stops the server and waits for it.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("admin server shutdown: %w", err)
	}
	return nil
}

// Config is where the admin server listens.
type Config struct {
	Addr string // empty: no admin server
}

// DefaultConfig returns the defaults the flags document.
func DefaultConfig() Config { return Config{Addr: ":8080"} }

// RegisterFlags declares the flags that fill c, with c's values as their
// defaults.
func (c *Config) RegisterFlags(f *envflag.FlagSet) {
	f.String(&c.Addr, "admin-addr", "ADMIN_ADDR", c.Addr, "address of /healthz, /readyz, /status and /metrics (empty: off)")
}

// Validate checks the settings, naming the flag at fault.
func (c Config) Validate() error {
	if c.Addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("--admin-addr %q: want host:port, :port or empty: %w", c.Addr, err)
	}
	return nil
}
