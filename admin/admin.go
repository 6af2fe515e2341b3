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
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/internal/envflag"
)

// Check is one readiness condition.
type Check struct {
	Name string
	// Fn returns nil when the condition holds. It is given a context with a
	// short deadline.
	Fn func(ctx context.Context) error
}

// Server is the admin HTTP server, and the pprof server beside it when
// asked for.
type Server struct {
	srv    *http.Server
	pprof  *http.Server // nil: no profiles
	log    *slog.Logger
	checks []Check
	every  time.Duration
	status func(url.Values) any
	wg     sync.WaitGroup
	stop   chan struct{}
	once   sync.Once // closes stop

	mu      sync.Mutex
	ready   *readiness // the last run of the checks; nil before the first
	running []bool     // checks[i] is still running from an earlier run
}

// readiness is one run of the checks.
type readiness struct {
	at     time.Time
	ok     bool
	report string
	passed []bool // by check
}

// CheckTimeout bounds each readiness check.
const CheckTimeout = 3 * time.Second

// New returns a server for c. metrics may be nil. The checks run every
// c.ReadinessInterval, not per request: a probe, a load balancer or anyone
// who reaches the port cannot make the worker send Bigtable requests.
func New(c Config, metrics http.Handler, status func(url.Values) any, checks []Check, log *slog.Logger) *Server {
	s := &Server{log: log, checks: checks, status: status, every: c.ReadinessInterval, stop: make(chan struct{})}
	if s.every <= 0 {
		s.every = DefaultConfig().ReadinessInterval
	}
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
	s.srv = &http.Server{Addr: c.Addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if c.PprofAddr != "" {
		// Profiles of the running worker on a listener of their own, never
		// the admin port: whoever reaches them can hold the CPU profiler
		// and read every goroutine's stack.
		pm := http.NewServeMux()
		pm.HandleFunc("GET /debug/pprof/", pprof.Index)
		pm.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		pm.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		s.pprof = &http.Server{Addr: PprofListenAddr(c.PprofAddr), Handler: pm, ReadHeaderTimeout: 5 * time.Second}
	}
	return s
}

// PprofListenAddr is where --pprof-addr listens: a port alone (":6060")
// means the loopback interface, never every interface.
func PprofListenAddr(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// check runs every check at once and keeps the result. A check that
// does not return within CheckTimeout (one that ignores its context) is
// reported as such and not waited for, and not started again until it
// returns: a hung dependency cannot hold the readiness, nor pile up
// goroutines.
func (s *Server) check(ctx context.Context) {
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(s.checks))
	errs := make([]error, len(s.checks))
	started := 0
	s.mu.Lock()
	if s.running == nil {
		s.running = make([]bool, len(s.checks))
	}
	for i, c := range s.checks {
		if s.running[i] {
			errs[i] = fmt.Errorf("still running since an earlier check, more than %s ago", CheckTimeout)
			continue
		}
		s.running[i] = true
		started++
		go func() {
			cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
			defer cancel()
			err := c.Fn(cctx)
			s.mu.Lock()
			s.running[i] = false
			s.mu.Unlock()
			results <- result{i, err}
		}()
	}
	s.mu.Unlock()
	answered := make([]bool, len(s.checks))
	timeout := time.NewTimer(CheckTimeout + time.Second)
	defer timeout.Stop()
wait:
	for range started {
		select {
		case r := <-results:
			errs[r.i], answered[r.i] = r.err, true
		case <-timeout.C:
			break wait
		}
	}
	var b strings.Builder
	r := &readiness{at: time.Now(), ok: true, passed: make([]bool, len(s.checks))}
	for i, c := range s.checks {
		err := errs[i]
		if err == nil && !answered[i] && s.isRunning(i) {
			err = fmt.Errorf("no answer within %s", CheckTimeout)
		}
		r.passed[i] = err == nil
		if err != nil {
			r.ok = false
			fmt.Fprintf(&b, "%s: not ready: %v\n", c.Name, err)
		} else {
			fmt.Fprintf(&b, "%s: ok\n", c.Name)
		}
	}
	r.report = b.String()
	s.mu.Lock()
	s.ready = r
	s.mu.Unlock()
}

func (s *Server) isRunning(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[i]
}

// readyz answers from the last run of the checks: 200 when all held, 503
// otherwise or before the first run, one line per check, and when they
// ran.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	r := s.ready
	s.mu.Unlock()
	if r == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not checked yet")
		return
	}
	// Results older than two rounds mean the checks stopped running: not
	// a reason to go on answering 200.
	if age := time.Since(r.at); s.stale(r) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%sstale: the checks last ran %s ago\n", r.report, age.Round(time.Millisecond))
		return
	}
	if !r.ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintf(w, "%s(checked %s ago)\n", r.report, time.Since(r.at).Round(time.Millisecond))
}

// stale reports whether r is older than two rounds of the checks.
func (s *Server) stale(r *readiness) bool {
	return time.Since(r.at) > 2*s.every+CheckTimeout+time.Second
}

// RegisterMetrics reports readiness as /readyz answers it, check by check:
// cellttl.ready is 1 for a check that passed in the last run, 0 for one
// that failed, and 0 for all before the first run or once the runs have
// stopped. A scrape sees what the kubelet's probe sees, per pod, also
// where the probe's answer is not recorded.
func (s *Server) RegisterMetrics(m metric.Meter) error {
	ready, err := m.Int64ObservableGauge("cellttl.ready",
		metric.WithDescription("1 while the readiness check named by check passes, 0 while it fails (or has not run); /readyz answers 200 when every check is 1"))
	if err != nil {
		return fmt.Errorf("register readiness metric: %w", err)
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s.mu.Lock()
		r := s.ready
		s.mu.Unlock()
		for i, c := range s.checks {
			v := int64(0)
			if r != nil && !s.stale(r) && r.passed[i] {
				v = 1
			}
			o.ObserveInt64(ready, v, metric.WithAttributes(attribute.String("check", c.Name)))
		}
		return nil
	}, ready)
	if err != nil {
		return fmt.Errorf("register readiness metric: %w", err)
	}
	return nil
}

// Start listens and serves in the background, and runs the readiness
// checks every interval; Shutdown stops it. It returns the admin address.
func (s *Server) Start() (net.Addr, error) {
	ln, err := net.Listen("tcp", s.srv.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin server: %w", err)
	}
	if s.pprof != nil {
		pl, err := net.Listen("tcp", s.pprof.Addr)
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("pprof server: %w", err)
		}
		s.log.Info("pprof listening", "addr", pl.Addr().String())
		s.serve(s.pprof, pl)
	}
	s.serve(s.srv, ln)
	s.wg.Go(func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { <-s.stop; cancel() }()
		t := time.NewTicker(s.every)
		defer t.Stop()
		for {
			s.check(ctx)
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	})
	return ln.Addr(), nil
}

func (s *Server) serve(srv *http.Server, ln net.Listener) {
	s.wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server stopped", "addr", srv.Addr, "err", err)
		}
	})
}

// Shutdown stops the servers and the checks, and waits for them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() { close(s.stop) })
	err := s.srv.Shutdown(ctx)
	if s.pprof != nil {
		err = errors.Join(err, s.pprof.Shutdown(ctx))
	}
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("admin server shutdown: %w", err)
	}
	return nil
}

// Config is where the admin server listens.
type Config struct {
	Addr string // empty: no admin server
	// PprofAddr, when set, serves Go's profiles there; a port alone is
	// the loopback interface. Empty: no profiles.
	PprofAddr string
	// ReadinessInterval is how often the readiness checks run.
	ReadinessInterval time.Duration
}

// DefaultConfig returns the defaults the flags document.
//
// The admin server listens on loopback unless told otherwise: it is
// unauthenticated, and a pod's probes and scraper are given the address
// they reach it by (the manifests set CELLTTL_ADMIN_ADDR=:8080).
func DefaultConfig() Config {
	return Config{Addr: "127.0.0.1:8080", ReadinessInterval: 5 * time.Second}
}

// RegisterFlags declares the flags that fill c, with c's values as their
// defaults.
func (c *Config) RegisterFlags(f *envflag.FlagSet) {
	f.Section("Admin server")
	f.String(&c.Addr, "admin-addr", "ADMIN_ADDR", c.Addr, "address of /healthz, /readyz, /status and /metrics (empty: off); unauthenticated: reachable by the scraper and the probes only (docs/security.md)")
	f.String(&c.PprofAddr, "pprof-addr", "PPROF_ADDR", c.PprofAddr, "serve Go's profiles (/debug/pprof/) on this address of their own; a port alone (:6060) is the loopback interface (empty: off)")
	f.Advanced()
	f.Duration(&c.ReadinessInterval, "readiness-interval", "READINESS_INTERVAL", c.ReadinessInterval, "how often the readiness checks run (Bigtable probe included); /readyz answers from the last run")
}

// Validate checks the settings, naming the flag at fault.
func (c Config) Validate() error {
	var errs []error
	for _, a := range []struct{ flag, addr string }{{"--admin-addr", c.Addr}, {"--pprof-addr", c.PprofAddr}} {
		if a.addr == "" {
			continue
		}
		_, port, err := net.SplitHostPort(a.addr)
		if err == nil {
			if n, perr := strconv.Atoi(port); perr != nil || n < 0 || n > 65535 {
				err = fmt.Errorf("port %q is not a number from 0 to 65535", port)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port, :port or empty: %w", a.flag, a.addr, err))
		}
	}
	if c.PprofAddr != "" && c.Addr == "" {
		errs = append(errs, errors.New("--pprof-addr needs --admin-addr: the profiles are served beside the admin server"))
	}
	if c.ReadinessInterval <= 0 {
		errs = append(errs, fmt.Errorf("--readiness-interval %s: must be positive", c.ReadinessInterval))
	}
	return errors.Join(errs...)
}
