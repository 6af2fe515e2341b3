package tenants

import (
	"bytes"
	"context"
	"fmt"
	"github.com/cellttl/cellttl/expiry"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

const base = "strategy: default-expiration\ndefault_ttl: 2d\ntenants:\n  acme: 1h\n"

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func newReloader(t *testing.T, content string) (*Reloader, string, *logBuf) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	write(t, path, content)
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	return NewReloader(path, cfg, time.Hour, slog.New(slog.NewTextHandler(logs, nil))), path, logs
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReloadTenantEdit(t *testing.T) {
	r, path, logs := newReloader(t, base)
	v0 := r.Current().Version
	if r.Reload() {
		t.Error("reloaded an unchanged file")
	}
	write(t, path, strings.Replace(base, "acme: 1h", "acme: 2h\n  newco: 30m", 1))
	if !r.Reload() {
		t.Fatalf("edit not applied: %+v", r.Status())
	}
	c := r.Current()
	if c.Policy.TTL("acme") != 2*time.Hour || c.Policy.TTL("newco") != 30*time.Minute || c.Version == v0 {
		t.Errorf("after reload: acme %s newco %s version %s", c.Policy.TTL("acme"), c.Policy.TTL("newco"), c.Version)
	}
	if s := r.Status(); !s.LastOK || s.Version != c.Version || s.Reloads != 1 {
		t.Errorf("status %+v", s)
	}
	if !strings.Contains(logs.String(), "acme 1h→2h") {
		t.Errorf("reload log does not name the change:\n%s", logs)
	}
}

func TestReloadRefusesBadEditOnce(t *testing.T) {
	r, path, logs := newReloader(t, base)
	good := r.Current()
	write(t, path, base+"  globex: 0s\n")
	for range 5 {
		if r.Reload() {
			t.Fatal("bad edit applied")
		}
	}
	if r.Current() != good {
		t.Error("config changed after a bad edit")
	}
	s := r.Status()
	if s.LastOK || !strings.Contains(s.LastError, `line 5: tenants.globex: TTL "0s" must be positive`) || s.Version != good.Version {
		t.Errorf("status %+v", s)
	}
	if n := strings.Count(logs.String(), "edit refused"); n != 1 {
		t.Errorf("refusal logged %d times over 5 polls, want once", n)
	}
	// Another bad content is logged again; reverting clears the error.
	write(t, path, base+"  globex: soon\n")
	r.Reload()
	if n := strings.Count(logs.String(), "edit refused"); n != 2 {
		t.Errorf("a second distinct bad edit logged %d refusals in all, want 2", n)
	}
	write(t, path, base)
	r.Reload()
	if s := r.Status(); !s.LastOK || s.LastError != "" {
		t.Errorf("after revert: %+v", s)
	}
}

func TestReloadRefusesGCRuleChange(t *testing.T) {
	for name, edit := range map[string]string{
		"default_ttl": strings.Replace(base, "default_ttl: 2d", "default_ttl: 3d", 1),
		"strategy":    strings.Replace(base, "default-expiration", "one-second", 1),
	} {
		t.Run(name, func(t *testing.T) {
			r, path, logs := newReloader(t, base)
			good := r.Current()
			write(t, path, edit)
			if r.Reload() || r.Current() != good {
				t.Fatal("GC-rule change applied at runtime")
			}
			want := "worker setup --update-gc-policy --tenants " + path
			if !strings.Contains(r.Status().LastError, want) || !strings.Contains(logs.String(), "running_default_ttl=2d") {
				t.Errorf("refusal does not give the command %q and both values:\n%s", want, logs)
			}
		})
	}
}

// Under one-second the GC rule is max-age 1s whatever default_ttl says, and
// nothing written moves: a default_ttl edit is an ordinary reload.
func TestReloadOneSecondDefaultTTL(t *testing.T) {
	one := strings.Replace(base, "default-expiration", "one-second", 1)
	r, path, _ := newReloader(t, one)
	write(t, path, strings.Replace(one, "default_ttl: 2d", "default_ttl: 3d", 1))
	if !r.Reload() || r.Current().Policy.DefaultTTL != 72*time.Hour {
		t.Errorf("one-second default_ttl edit refused: %+v", r.Status())
	}
}

// A Kubernetes ConfigMap volume: tenants.yaml -> ..data/tenants.yaml, and an
// update swaps the ..data symlink to a new directory.
func TestReloadConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "..2026_11_21_1"), filepath.Join(dir, "..2026_11_21_2")
	for v, content := range map[string]string{v1: base, v2: strings.Replace(base, "1h", "4h", 1)} {
		if err := os.Mkdir(v, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(v, "tenants.yaml"), content)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Base(v1), filepath.Join(dir, "..data")))
	must(os.Symlink("..data/tenants.yaml", filepath.Join(dir, "tenants.yaml")))
	path := filepath.Join(dir, "tenants.yaml")
	cfg, err := Load(path)
	must(err)
	r := NewReloader(path, cfg, time.Hour, slog.New(slog.DiscardHandler))
	// The atomic swap kubelet does: a new symlink renamed over ..data.
	must(os.Symlink(filepath.Base(v2), filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	if !r.Reload() || r.Current().Policy.TTL("acme") != 4*time.Hour {
		t.Errorf("symlink swap not picked up: %+v", r.Status())
	}
}

func TestRunReloadsOnSignal(t *testing.T) {
	r, path, _ := newReloader(t, base)
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, hup); close(done) }()
	defer func() { cancel(); <-done }()
	write(t, path, strings.Replace(base, "1h", "5h", 1))
	hup <- syscall.SIGHUP // the poll interval is an hour: only the signal can do it
	deadline := time.Now().Add(5 * time.Second)
	for r.Current().Policy.TTL("acme") != 5*time.Hour {
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not reload")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Readers never see a torn config while reloads happen (run with -race).
func TestReloadUnderConcurrentReads(t *testing.T) {
	r, path, _ := newReloader(t, base)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				c := r.Current()
				ttl := c.Policy.TTL("acme")
				if ttl != time.Hour && ttl != 2*time.Hour {
					t.Errorf("acme TTL %s", ttl)
					return
				}
				// Version and policy come from one file.
				if (ttl == time.Hour) != (c.Version == Version([]byte(base))) {
					t.Errorf("version %s with acme %s", c.Version, ttl)
					return
				}
			}
		})
	}
	for i := range 200 {
		content := base
		if i%2 == 0 {
			content = strings.Replace(base, "1h", "2h", 1)
		}
		write(t, path, content)
		r.Reload()
	}
	cancel()
	wg.Wait()
}

func TestCompare(t *testing.T) {
	parse := func(s string) *Config {
		c, err := Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old := parse("default_ttl: 2d\ntenants:\n  acme: 1h\n  globex: 3d\n  gone: 5h\n")
	p := Compare(old.Policy, parse("default_ttl: 2d\ntenants:\n  acme: 2h\n  globex: 3d\n  newco: 1h\n").Policy)
	if !p.SafeAtRuntime() || p.GCRuleChange || len(p.Tenants) != 3 {
		t.Fatalf("tenant edits: %+v", p)
	}
	want := []TenantChange{
		{Tenant: "acme", OldTTL: time.Hour, NewTTL: 2 * time.Hour, OldListed: true, NewListed: true,
			OldBounds: expiry.Bounds{Max: time.Hour}, NewBounds: expiry.Bounds{Max: 2 * time.Hour}},
		{Tenant: "gone", OldTTL: 5 * time.Hour, NewTTL: 48 * time.Hour, OldListed: true, NewListed: false,
			OldBounds: expiry.Bounds{Max: 5 * time.Hour}, NewBounds: expiry.Bounds{Max: 48 * time.Hour}},
		{Tenant: "newco", OldTTL: 48 * time.Hour, NewTTL: time.Hour, OldListed: false, NewListed: true,
			OldBounds: expiry.Bounds{Max: 48 * time.Hour}, NewBounds: expiry.Bounds{Max: time.Hour}},
	}
	for i, c := range want {
		if p.Tenants[i] != c {
			t.Errorf("change %d: %+v, want %+v", i, p.Tenants[i], c)
		}
	}
	p = Compare(old.Policy, parse("default_ttl: 3d\ntenants:\n  acme: 1h\n  globex: 3d\n  gone: 5h\n").Policy)
	if p.SafeAtRuntime() || p.ExpiryShift != Shift(24*time.Hour) || p.ReplicatedSteps {
		t.Errorf("default_ttl 2d→3d: %+v", p)
	}
	p = Compare(old.Policy, parse("default_ttl: 200d\ntenants:\n  acme: 1h\n  globex: 3d\n  gone: 5h\n").Policy)
	if !p.ReplicatedSteps {
		t.Errorf("default_ttl 2d→200d must be raised in steps on replicated tables: %+v", p)
	}
	if !Compare(old.Policy, old.Policy).Empty() {
		t.Error("a file compared with itself is not empty")
	}
}

func TestReloadMetrics(t *testing.T) {
	r, path, _ := newReloader(t, base)
	reader := sdkmetric.NewManualReader()
	if err := r.RegisterMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")); err != nil {
		t.Fatal(err)
	}
	collect := func() (ok int64, version string) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				g, _ := m.Data.(metricdata.Gauge[int64])
				for _, dp := range g.DataPoints {
					switch m.Name {
					case "cellttl.config.reload.ok":
						ok = dp.Value
					case "cellttl.config.info":
						v, _ := dp.Attributes.Value("config_version")
						version = v.AsString()
					}
				}
			}
		}
		return ok, version
	}
	if ok, v := collect(); ok != 1 || v != r.Current().Version {
		t.Errorf("at start: ok %d version %q", ok, v)
	}
	write(t, path, "bogus: 1\n")
	r.Reload()
	if ok, v := collect(); ok != 0 || v != r.Current().Version {
		t.Errorf("after a bad edit: ok %d version %q, want 0 and the running %q", ok, v, r.Current().Version)
	}
}

// Polling applies content only when two polls in a row read the same:
// a file caught mid-write is left alone until the write is over.
func TestPollWaitsForContentToSettle(t *testing.T) {
	full := base + "  globex: 3d\n  initech: 5h\n"
	r, path, _ := newReloader(t, full)
	clock := time.Unix(1_800_000_000, 0)
	r.now = func() time.Time { return clock }
	poll := func() bool { clock = clock.Add(r.interval); return r.Poll() }
	edited := strings.Replace(full, "acme: 1h", "acme: 2h", 1)
	prefix := edited[:strings.Index(edited, "  globex")] // valid YAML: acme alone
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(prefix); err != nil {
		t.Fatal(err)
	}
	if poll() {
		t.Fatalf("a half-written file was applied at the first poll that read it: globex %s", r.Current().Policy.TTL("globex"))
	}
	if _, err := f.WriteString(edited[len(prefix):]); err != nil {
		t.Fatal(err)
	}
	if poll() {
		t.Fatal("content that changed since the last poll was applied")
	}
	clock = clock.Add(r.interval - time.Nanosecond)
	if r.Poll() {
		t.Fatal("content read the same for less than an interval was applied")
	}
	if !poll() {
		t.Fatalf("settled content not applied: %+v", r.Status())
	}
	c := r.Current().Policy
	if c.TTL("acme") != 2*time.Hour || c.TTL("globex") != 72*time.Hour || c.TTL("initech") != 5*time.Hour {
		t.Errorf("applied acme %s globex %s initech %s", c.TTL("acme"), c.TTL("globex"), c.TTL("initech"))
	}
	if poll() || r.Status().Reloads != 1 {
		t.Errorf("a settled file applied again: %+v", r.Status())
	}
}

// A file written in place slowly, line by line, while the worker polls and
// events read the config: every config an event sees is the old file or
// the new one, never a prefix that drops tenants to the default TTL.
func TestSlowInPlaceWriteIsNeverAppliedHalfWay(t *testing.T) {
	tenantsOf := func(ttl string) string {
		var b strings.Builder
		b.WriteString("strategy: default-expiration\ndefault_ttl: 2d\ntenants:\n")
		for i := range 12 {
			fmt.Fprintf(&b, "  t%02d: %s\n", i, ttl)
		}
		return b.String()
	}
	old, edited := tenantsOf("1h"), tenantsOf("3h")
	r, path, _ := newReloader(t, old)
	// Polls land mid-write, while every pause of the writer stays well
	// below the interval, even on a loaded machine.
	r.interval = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, nil); close(done) }()
	var torn atomic.Value
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for ctx.Err() == nil {
				p := r.Current().Policy
				first := p.TTL("t00")
				for i := range 12 {
					if ttl := p.TTL(fmt.Sprintf("t%02d", i)); ttl != first {
						torn.Store(fmt.Sprintf("t00 %s but t%02d %s", first, i, ttl))
					}
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.SplitAfter(edited, "\n") {
		if _, err := f.WriteString(line); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // 15 lines: the write spans more than a poll interval
	}
	f.Close()
	deadline := time.Now().Add(5 * time.Second)
	for r.Current().Policy.TTL("t11") != 3*time.Hour && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	readers.Wait()
	if s, ok := torn.Load().(string); ok {
		t.Errorf("an event saw a half-written file: %s", s)
	}
	if got := r.Current().Policy.TTL("t11"); got != 3*time.Hour {
		t.Errorf("the finished edit was not applied: t11 %s", got)
	}
}

// The notes of an edit say the reload rules that apply to it.
func TestPlanNotes(t *testing.T) {
	parse := func(y string) *Config {
		t.Helper()
		c, err := Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old := parse("default_ttl: 2d\ntenants:\n  acme: 1h\n  globex: 3h\n")
	cur := parse("default_ttl: 2d\nunlisted_tenants: dead-letter\nrecord_real_timestamp: true\ntenants:\n  acme: 2h\n")
	notes := strings.Join(Compare(old.Policy, cur.Policy).Notes(old.Unlisted, cur.Unlisted), "\n")
	for _, want := range []string{"per-tenant edits apply", "tenants removed (globex) are dead-lettered", "unlisted_tenants default_ttl → dead-letter", "record_real_timestamp false → true"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if n := Compare(old.Policy, old.Policy).Notes(old.Unlisted, old.Unlisted); n == nil || len(n) != 0 {
		t.Errorf("no edit: notes %q, want none (and not nil)", n)
	}
}
