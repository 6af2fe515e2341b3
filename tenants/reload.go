package tenants

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellttl/cellttl/internal/duration"
)

// Reloader keeps the tenants configuration in force and replaces it when the
// file changes. It polls the file's content rather than watching it: a
// Kubernetes ConfigMap volume swaps a symlink, which a watch on the file
// misses, while a changed hash is always seen. A new config is validated in
// full and checked against the running one before it is swapped in, in one
// atomic store: each event is processed under exactly one version.
//
// A file written in place (an editor, `cat >`, a configuration tool) can be
// read half-written, and a valid prefix would drop the tenants cut off to
// the default TTL. So polling applies new content only once it has read the
// same content for at least one poll interval: a write whose pauses are all
// shorter than the interval is never applied torn, and an edit takes effect
// one to two intervals after it is finished. (Counting polls would not do:
// a ticker that fell behind fires twice in a row.) SIGHUP applies the file
// at once; the operator who sends it has finished writing.
type Reloader struct {
	path     string
	interval time.Duration
	log      *slog.Logger
	cur      atomic.Pointer[Config]

	mu     sync.Mutex
	status ReloadStatus
	// seen is the content of the last read, good or bad, and seenSince when
	// it was first read: content unchanged for an interval has settled.
	seen      []byte
	seenSince time.Time
	now       func() time.Time
	// decided is the last content applied or refused, so that a file that
	// stays as it is is judged once.
	decided []byte
	// applied is signalled (without blocking) at each config applied.
	applied chan struct{}
	// gate, when set, may refuse a new config (SetGate).
	gate func(cur, next *Config) error
}

// SetGate makes apply ask gate before it takes a new config: an error
// refuses it, and the same content is judged again at the next poll.
// Set before Run.
func (r *Reloader) SetGate(gate func(cur, next *Config) error) { r.gate = gate }

// ReloadStatus describes the last reload attempt.
type ReloadStatus struct {
	// Version runs now.
	Version string `json:"version"`
	// LastOK is false when the last changed content was refused.
	LastOK bool `json:"last_ok"`
	// LastError says why, when LastOK is false.
	LastError string `json:"last_error,omitempty"`
	// RefusedVersion is the version of the refused content.
	RefusedVersion string    `json:"refused_version,omitempty"`
	LastChange     time.Time `json:"last_change"`
	Reloads        int       `json:"reloads"`
}

// NewReloader starts from initial, the config already loaded from path.
func NewReloader(path string, initial *Config, interval time.Duration, log *slog.Logger) *Reloader {
	r := &Reloader{path: path, interval: interval, log: log, now: time.Now, applied: make(chan struct{}, 1)}
	r.cur.Store(initial)
	r.status = ReloadStatus{Version: initial.Version, LastOK: true, LastChange: time.Now()}
	r.seen, r.decided = initial.raw, initial.raw
	return r
}

// Current returns the config in force. It never blocks: events call it.
func (r *Reloader) Current() *Config { return r.cur.Load() }

// Applied receives after each new config is applied (one signal may stand
// for several): for what must follow the config in force at once, such as
// the record of the version the worker runs.
func (r *Reloader) Applied() <-chan struct{} { return r.applied }

// Status returns the state of reloading.
func (r *Reloader) Status() ReloadStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Run polls every interval, applying content that has settled, and applies
// the file at once on each value of hup (SIGHUP), until ctx ends.
func (r *Reloader) Run(ctx context.Context, hup <-chan os.Signal) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Poll()
		case <-hup:
			r.log.Info("reloading tenants file on signal", "path", r.path)
			r.Reload()
		}
	}
}

// Poll reads the file and applies it if it changed, is valid and safe, and
// has read the same for an interval. It reports whether a new config is in
// force.
func (r *Reloader) Poll() bool {
	src, err := readSource(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.unreadable(err)
		return false
	}
	data := src.bytes()
	now := r.now()
	if !bytes.Equal(data, r.seen) {
		r.seen, r.seenSince = data, now // changed: it may still be being written
		return false
	}
	if now.Sub(r.seenSince) < r.interval {
		return false
	}
	return r.apply(src)
}

// Reload reads the file and applies it at once if it changed and is valid
// and safe. It reports whether a new config is in force.
func (r *Reloader) Reload() bool {
	src, err := readSource(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.unreadable(err)
		return false
	}
	r.seen = src.bytes()
	return r.apply(src)
}

// unreadable records a failed read. A missing file mid-swap is transient;
// it is said once, and the content is judged afresh when it is back.
func (r *Reloader) unreadable(err error) {
	r.seen, r.decided = nil, nil
	r.refuse(nil, err)
}

// apply judges content read from the file or directory; r.mu is held.
func (r *Reloader) apply(src source) bool {
	data := src.bytes()
	if bytes.Equal(data, r.decided) {
		return false
	}
	r.decided = data
	if cur := r.cur.Load(); bytes.Equal(data, cur.raw) {
		// A refused edit was reverted: the file says what runs again.
		if !r.status.LastOK {
			r.status.LastOK, r.status.LastError, r.status.RefusedVersion = true, "", ""
			r.log.Info("tenants file is back to the config in force", "path", r.path, "config_version", cur.Version)
		}
		return false
	}
	next, err := src.parse()
	if err != nil {
		r.refuse(data, fmt.Errorf("%s: %w", r.path, err))
		return false
	}
	cur := r.cur.Load()
	if r.gate != nil {
		if err := r.gate(cur, next); err != nil {
			// Judged again at each poll: the gate's answer may change
			// (the erasure ledger of a tenant rejoined reaches the worker).
			r.decided = nil
			r.refuse(data, fmt.Errorf("%s: %w", r.path, err))
			return false
		}
	}
	plan := CompareConfigs(cur, next)
	if !plan.SafeAtRuntime() {
		r.refuse(data, fmt.Errorf("%s changes the family's GC rule (strategy %s → %s, default_ttl %s → %s), which a running worker never does: "+
			"it would move the expiry of every cell already written. To apply it deliberately run `worker setup --update-gc-policy --tenants %s`, then restart the workers",
			r.path, cur.Policy.Strategy, next.Policy.Strategy, duration.Format(cur.Policy.DefaultTTL), duration.Format(next.Policy.DefaultTTL), r.path),
			"running_strategy", cur.Policy.Strategy.String(), "new_strategy", next.Policy.Strategy.String(),
			"running_default_ttl", duration.Format(cur.Policy.DefaultTTL), "new_default_ttl", duration.Format(next.Policy.DefaultTTL))
		return false
	}
	r.cur.Store(next)
	select {
	case r.applied <- struct{}{}:
	default: // a signal is pending: it stands for this one too
	}
	r.status = ReloadStatus{Version: next.Version, LastOK: true, LastChange: time.Now(), Reloads: r.status.Reloads + 1}
	changes := make([]string, 0, len(plan.Tenants))
	for _, c := range plan.Tenants {
		changes = append(changes, c.String())
	}
	r.log.Info("tenants file reloaded", "path", r.path, "old_version", cur.Version, "config_version", next.Version,
		"tenants", len(next.Policy.Tenants), "changes", changes, "record_real_timestamp", next.Policy.RecordRealTimestamp)
	return true
}

// refuse keeps the running config and records why; the log line is written
// once per distinct content, not at every poll.
func (r *Reloader) refuse(data []byte, err error, attrs ...any) {
	version := ""
	if data != nil {
		version = Version(data)
	}
	if !r.status.LastOK && r.status.RefusedVersion == version && r.status.LastError == err.Error() {
		return
	}
	r.status.LastOK, r.status.LastError, r.status.RefusedVersion = false, err.Error(), version
	args := append([]any{"path", r.path, "config_version", r.status.Version, "refused_version", version, "err", err}, attrs...)
	r.log.Error("tenants file edit refused; the last good config keeps running", args...)
}

// RegisterMetrics reports the reload state through m: whether the last edit
// was applied, and which version runs.
func (r *Reloader) RegisterMetrics(m metric.Meter) error {
	ok, err := m.Int64ObservableGauge("cellttl.config.reload.ok",
		metric.WithDescription("1 when the last change of the tenants file was applied, 0 when it was refused and the last good config keeps running"))
	if err != nil {
		return fmt.Errorf("register reload metric: %w", err)
	}
	info, err := m.Int64ObservableGauge("cellttl.config.info",
		metric.WithDescription("1, labelled with the version (a hash) of the tenants config in force"))
	if err != nil {
		return fmt.Errorf("register config metric: %w", err)
	}
	reloads, err := m.Int64ObservableCounter("cellttl.config.reloads",
		metric.WithDescription("tenants file changes applied since start"))
	if err != nil {
		return fmt.Errorf("register reloads metric: %w", err)
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := r.Status()
		v := int64(0)
		if s.LastOK {
			v = 1
		}
		o.ObserveInt64(ok, v)
		o.ObserveInt64(info, 1, metric.WithAttributes(attribute.String("config_version", s.Version)))
		o.ObserveInt64(reloads, int64(s.Reloads))
		return nil
	}, ok, info, reloads)
	if err != nil {
		return fmt.Errorf("register config metrics callback: %w", err)
	}
	return nil
}
