package tablemeta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/internal/release"
)

const (
	// Heartbeat is how often a worker records its tenants file version
	// again while it runs the same one: a version nobody has recorded
	// for LiveWithin is one no worker runs any more.
	Heartbeat = 5 * time.Minute
	// LiveWithin: a version seen this recently is one workers run.
	LiveWithin = 3 * Heartbeat
	// forgottenAfter: the columns of a version no worker has recorded for
	// this long are deleted when a worker records its own (the newest
	// started is always kept), so that the row holds the versions of
	// about a month, not of the fleet's whole history.
	forgottenAfter = 30 * 24 * time.Hour
)

// Version is a tenants file version the workers recorded.
type Version struct {
	Version string `json:"version"`
	// Started is when a worker last started running it: its start, or a
	// reload to it.
	Started time.Time `json:"started"`
	// Seen is when a worker last recorded it: that, or a heartbeat.
	Seen time.Time `json:"seen"`
}

// RecordVersion records that a worker runs version, since started, at now;
// it deletes the columns of versions no worker has recorded for a month.
// A write only ever adds a newer cell or deletes cells older than a month,
// so workers recording at once cannot undo each other.
func (s *Store) RecordVersion(ctx context.Context, version string, started, now time.Time) error {
	rec, err := s.Read(ctx)
	if err != nil {
		return err
	}
	m := bigtable.NewMutation()
	m.Set(Family, colStarted+version, at(started), nil)
	m.Set(Family, colSeen+version, at(now), nil)
	cutoff := at(now.Add(-forgottenAfter))
	for i, v := range rec.Versions {
		// The newest started (the last by Started) stays, however old.
		if v.Version != version && i < len(rec.Versions)-1 && at(v.Seen) < cutoff {
			m.DeleteTimestampRange(Family, colStarted+v.Version, 0, cutoff)
			m.DeleteTimestampRange(Family, colSeen+v.Version, 0, cutoff)
		}
	}
	if err := s.tbl.Apply(ctx, Key, m); err != nil {
		return fmt.Errorf("record tenants file version %s in %s: %w", version, s.name, err)
	}
	return nil
}

// Recorder keeps the record of the tenants file version one worker runs:
// at start, at each reload to another version, and every Heartbeat.
type Recorder struct {
	store *Store
	log   *slog.Logger
	now   func() time.Time

	mu            sync.Mutex
	version       string
	started, seen time.Time
	lastErr       string // of the last failed write, said once
}

// NewRecorder returns a recorder writing to store.
func NewRecorder(store *Store, log *slog.Logger) *Recorder {
	return &Recorder{store: store, log: log, now: time.Now}
}

// State records version as the one the worker runs; a version other than
// the last recorded starts now.
func (r *Recorder) Record(ctx context.Context, version string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if version != r.version {
		r.version, r.started = version, now
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.store.RecordVersion(ctx, r.version, r.started, now); err != nil {
		r.seen = time.Time{} // due again at the next poll
		return err
	}
	r.seen = now
	return nil
}

// Run records current() whenever it is another version than the last
// recorded (a reload: asked at each signal of wake, and every poll), and
// every Heartbeat, until ctx ends; then once more if a reload has not been
// recorded yet, so that the record names the version the worker ran last.
// A failed write is logged once, and tried again at the next poll.
func (r *Recorder) Run(ctx context.Context, poll time.Duration, current func() string, wake <-chan struct{}) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if v := current(); r.pending(v, false) {
				fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				r.record(fctx, v)
				cancel()
			}
			return
		case <-t.C:
		case <-wake:
		}
		if v := current(); r.pending(v, true) {
			r.record(ctx, v)
		}
	}
}

// pending reports whether v is to be recorded: another version than the
// last recorded, a write that failed, or, with heartbeat, one Heartbeat
// since the last.
func (r *Recorder) pending(v string, heartbeat bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return v != r.version || r.seen.IsZero() || (heartbeat && r.now().Sub(r.seen) >= Heartbeat)
}

// record records v, logging a failure once and a version recorded.
func (r *Recorder) record(ctx context.Context, v string) {
	r.mu.Lock()
	changed := v != r.version
	r.mu.Unlock()
	err := r.Record(ctx, v)
	switch {
	case err != nil && ctx.Err() == nil && err.Error() != r.lastErr:
		r.lastErr = err.Error()
		r.log.Warn("could not record the tenants file version this worker runs (worker forget checks its tenants file against it); trying again", "config_version", v, "err", err)
	case err == nil && (changed || r.lastErr != ""):
		r.lastErr = ""
		r.log.Info("recorded the tenants file version this worker runs", "config_version", v, "table", r.store.name)
	}
}

// Outcomes of a VersionCheck.
const (
	Matches     = "matches"
	Differs     = "differs"
	NotRecorded = "not_recorded"
)

// VersionCheck is a tenants file version checked against the workers'.
//
// The rule: the workers' version is the one a worker started running last
// (at its start or a reload) among those some worker recorded within
// LiveWithin, or, when none did (the workers are stopped), among all those
// recorded. A file checks when it is that version. During a rollout the
// new version is started last, so it is the workers' while the old one
// still runs on a few pods; a rollback starts the old one again, which
// makes it the workers' again; a canary removed stops being seen, and
// after LiveWithin no longer counts.
type VersionCheck struct {
	// Version is the file checked.
	Version string `json:"version"`
	// Outcome is Matches, Differs or NotRecorded (no worker has recorded
	// a version: the workers are of an earlier release, or none has run
	// on the table).
	Outcome string `json:"outcome"`
	// Workers is the workers' version by the rule.
	Workers *Version `json:"workers_version,omitempty"`
	// Live are the versions recorded within LiveWithin.
	Live []string `json:"live_versions,omitempty"`
	// Overridden is set by a command that went on although it differs.
	Overridden bool `json:"overridden,omitempty"`
}

// CheckVersion checks version against rec at now.
func CheckVersion(rec State, version string, now time.Time) VersionCheck {
	c := VersionCheck{Version: version, Outcome: NotRecorded}
	var live []Version
	for _, v := range rec.Versions {
		if now.Sub(v.Seen) <= LiveWithin {
			live = append(live, v)
			c.Live = append(c.Live, v.Version)
		}
	}
	pool := live
	if len(pool) == 0 {
		pool = rec.Versions
	}
	if len(pool) == 0 {
		return c
	}
	// Versions are sorted by Started: the last started last.
	newest := pool[len(pool)-1]
	c.Workers = &newest
	c.Outcome = Differs
	if newest.Version == version {
		c.Outcome = Matches
	}
	return c
}

// String says what was checked, and what was found, in one sentence.
func (c VersionCheck) String() string {
	if c.Outcome == NotRecorded {
		return fmt.Sprintf("tenants file version %s not checked: no worker has recorded the version it runs (workers of an earlier release, or none has run on this table)", c.Version)
	}
	w := c.Workers
	of := fmt.Sprintf("started %s, last recorded %s", w.Started.Format(time.RFC3339), w.Seen.Format(time.RFC3339))
	live := "no worker recorded a version within " + duration.Format(LiveWithin) + ": the last recorded counts"
	if len(c.Live) > 0 {
		live = "recorded within " + duration.Format(LiveWithin) + ": " + strings.Join(c.Live, ", ")
	}
	if c.Outcome == Matches {
		return fmt.Sprintf("tenants file version %s is the workers' (%s; %s)", c.Version, of, live)
	}
	return fmt.Sprintf("tenants file version %s is not the workers' %s (%s; %s)", c.Version, w.Version, of, live)
}

// AllowVersionFlag lets worker forget erase with a tenants file other than
// the workers'.
const AllowVersionFlag = "--allow-tenants-version-mismatch"

// ErrVersionDiffers is a tenants file refused for not being the workers'.
var ErrVersionDiffers = errors.New("not the workers' tenants file")

// versionRefused is CheckTenantsVersion's refusal: it says why in full,
// and is ErrVersionDiffers.
type versionRefused string

func (e versionRefused) Error() string        { return string(e) }
func (e versionRefused) Is(target error) bool { return target == ErrVersionDiffers }

// CheckTenantsVersion checks worker forget's tenants file version against
// the one the workers recorded last (CheckVersion), and refuses another
// (an error wrapping ErrVersionDiffers) unless allow: forget sets how long
// a ledger record lives from the tenant's longest TTL in its own file.
// Nothing recorded (workers of an earlier release) is said, not refused:
// an erasure must not wait for an upgrade.
func (s *Store) CheckTenantsVersion(ctx context.Context, version string, allow bool, log *slog.Logger) (*VersionCheck, error) {
	rec, err := s.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the tenants file version the workers run: %w", err)
	}
	if err := rec.CheckWriter(s.name, release.Version); err != nil {
		return nil, fmt.Errorf("refusing to erase: %w", err)
	}
	c := CheckVersion(rec, version, time.Now())
	switch {
	case c.Outcome == Differs && !allow:
		return nil, versionRefused(fmt.Sprintf("refusing to erase: %s. forget sets how long each ledger record lives from the tenant's longest TTL in its own tenants file: "+
			"from a file other than the workers' (a TTL lengthened since), a record can expire while copies it must suppress can still be written. "+
			"Run forget with the workers' tenants file, or pass %s (a flag only)", c, AllowVersionFlag))
	case c.Outcome == Differs:
		c.Overridden = true
		log.Warn("erasing with a tenants file other than the workers' ("+AllowVersionFlag+")", "check", c.String())
	case c.Outcome == NotRecorded:
		log.Warn("tenants file not checked against the workers'", "check", c.String())
	}
	return &c, nil
}
