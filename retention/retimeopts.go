package retention

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/envflag"
)

// RetimeOptions tune a Retime.
type RetimeOptions struct {
	// Tenants whose rows to re-time; every row of the table when nil (a
	// migration that changes the strategy moves every cell).
	Tenants []string
	// WrittenUnder is the policy the rows not yet re-timed were written
	// under, which says whether one has already expired as it stands; the
	// policy given to Retime when nil (the GC rule has not changed, and
	// both read a timestamp the same way).
	WrittenUnder *expiry.Policy
	// Shard is this process's part of each tenant's rows (all when zero).
	Shard Shard
	// DryRun computes the plan and changes nothing.
	DryRun bool
	// RowsPerSecond bounds the rows scanned per second; 0 for no bound.
	RowsPerSecond int
	// Checkpoint is a file that records the pass under way and the last
	// row done, after every batch; empty for none. Resume goes on where it
	// stands, in the pass it records; it refuses a checkpoint written for
	// another Job.
	Checkpoint string
	Resume     bool
	// Job names what is re-timed, for the checkpoint: its table, family,
	// tenants file version and, in a migration, step (Retime fills in the
	// tenants and the shard).
	Job Job
	// Passes is how many passes run at most: a pass that changes nothing
	// ends the run. A second pass re-times rows a worker still on the old
	// tenants file wrote during the first (see docs/retention.md). 1 when 0.
	Passes int
	// PassDelay separates the passes: long enough for batches computed
	// under the old file to have been written.
	PassDelay time.Duration
	// Progress, when set, is called about every ProgressEvery and once at
	// the end of each pass.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// Now is the clock that decides what has expired; time.Now when nil.
	Now func() time.Time
	Log *slog.Logger
	// Erasures returns the erasure ledger in force (nil: none). A row of
	// an erased user is deleted, never re-timed: a new timestamp would
	// give it a new life. ErasuresHeld, when set, says why the ledger
	// cannot be trusted now (not read for too long): the run then stops
	// rather than write under it (run it again; it is idempotent).
	Erasures     func() *erasure.Ledger
	ErasuresHeld func() error
	// Tracers records the spans of the passes, the steps and the batches
	// applied (nil: none).
	Tracers trace.TracerProvider
}

// RegisterFlags declares the flags that fill o and that retime and migrate
// share, with o's values as their defaults.
func (o *RetimeOptions) RegisterFlags(f *envflag.FlagSet) {
	f.Section("Re-timing")
	f.Int(&o.RowsPerSecond, "rows-per-second", "", o.RowsPerSecond, "rows scanned per second at most (0: no limit)")
	f.String(&o.Checkpoint, "checkpoint", "", o.Checkpoint, "file recording the pass and the last row done, to --resume from after an interruption")
	f.Bool(&o.Resume, "resume", "", o.Resume, "go on where the --checkpoint file says (from the start when there is no file yet)")
	f.Value(&o.Shard, "shard", "", "this process's part I/N of the rows, by hash bucket, I from 0 (a Kubernetes Indexed Job's completion index): N processes share the work without overlap")
}

// Validate checks the settings the flags gave, naming the flag at fault.
func (o RetimeOptions) Validate() error {
	var errs []error
	if o.RowsPerSecond < 0 {
		errs = append(errs, fmt.Errorf("--rows-per-second %d: must not be negative", o.RowsPerSecond))
	}
	if o.Resume && o.Checkpoint == "" {
		errs = append(errs, errors.New("--resume needs --checkpoint, the file the interrupted run wrote"))
	}
	if o.Passes < 0 {
		errs = append(errs, fmt.Errorf("--passes %d: must not be negative", o.Passes))
	}
	if o.PassDelay < 0 {
		errs = append(errs, fmt.Errorf("--pass-delay %s: must not be negative", o.PassDelay))
	}
	return errors.Join(errs...)
}

// Progress is where a Retime stands.
type Progress struct {
	Pass      int
	Tenant    string
	Report    Report
	Rate      float64       // rows scanned per second, this pass
	ETA       time.Duration // to the end of this pass; -1 when unknown
	Completed bool          // the pass is over
}

// Report counts what a Retime did (or, dry, would do).
type Report struct {
	Scanned   int64 `json:"scanned"`
	Rewritten int64 `json:"rewritten"` // re-timed: the row's cells moved to the new timestamp
	Deleted   int64 `json:"deleted"`   // its new (or current) expiry has passed, or its user was erased
	Erased    int64 `json:"erased"`    // of Deleted: the erasure ledger covers its user and time
	Unchanged int64 `json:"unchanged"` // already at the rule's timestamp
	Foreign   int64 `json:"foreign"`   // keys outside cellttl's layout: left alone
	// Vanished are, of Rewritten, rows deleted (by worker forget) between
	// their read and their rewrite: left deleted, never written back.
	Vanished int64 `json:"vanished,omitempty"`
	// Bytes are the values of the rows rewritten or deleted.
	Bytes int64 `json:"bytes"`
	// NewExpiryFirst and NewExpiryLast bound the new expiries of the rows
	// rewritten.
	NewExpiryFirst time.Time `json:"new_expiry_first,omitzero"`
	NewExpiryLast  time.Time `json:"new_expiry_last,omitzero"`
}

// Changed is the number of rows rewritten or deleted.
func (r Report) Changed() int64 { return r.Rewritten + r.Deleted }

func (r *Report) add(o Report) {
	r.Scanned += o.Scanned
	r.Rewritten += o.Rewritten
	r.Deleted += o.Deleted
	r.Erased += o.Erased
	r.Unchanged += o.Unchanged
	r.Foreign += o.Foreign
	r.Vanished += o.Vanished
	r.Bytes += o.Bytes
	r.expiry(o.NewExpiryFirst)
	r.expiry(o.NewExpiryLast)
}

func (r *Report) expiry(t time.Time) {
	if t.IsZero() {
		return
	}
	if r.NewExpiryFirst.IsZero() || t.Before(r.NewExpiryFirst) {
		r.NewExpiryFirst = t
	}
	if t.After(r.NewExpiryLast) {
		r.NewExpiryLast = t
	}
}

// batchRows is how many row mutations go into one ApplyBulk, and the
// granularity of the checkpoint.
const batchRows = 500

// ledger is the erasure ledger in force, nil when there is none.
func (o *RetimeOptions) ledger() *erasure.Ledger {
	if o.Erasures == nil {
		return nil
	}
	return o.Erasures()
}
