package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/envflag"
	"github.com/cellttl/cellttl/rowkey"
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

// Retime moves the cells of the tenants' rows to the timestamps policy
// gives them: for each row whose cells are not all at the rule's timestamp
// (one version each), one row mutation sets each column at the new
// timestamp, with its newest value, and deletes every other version. A row
// whose new expiry has passed is deleted, and so is one already expired as
// it stands (re-timing never brings back an expired event). Rows are
// visited in key order; a crash leaves each row either wholly old or
// wholly new, and running again (or Resume) finishes the job: Retime is
// idempotent.
func Retime(ctx context.Context, tbl *bigtable.Table, family string, policy *expiry.Policy, o RetimeOptions) (Report, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 5 * time.Second
	}
	for _, t := range o.Tenants {
		if err := rowkey.ValidateID("tenant", t); err != nil {
			return Report{}, err
		}
	}
	if o.WrittenUnder == nil {
		o.WrittenUnder = policy
	}
	job := o.Job
	job.Tenants, job.Shard = o.Tenants, o.Shard.String()
	if o.Shard.Count == 0 {
		job.Shard = All.String()
	}
	cp := &checkpoint{path: o.Checkpoint, For: job, Done: map[string]string{}}
	if o.DryRun {
		cp.path = "" // a plan marks nothing done
	}
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	passes := max(1, o.Passes)
	pass, err := resume(cp, &o, job, passes)
	if err != nil || pass > passes {
		return Report{}, err
	}
	var total Report
	for ; pass <= passes; pass++ {
		if cp.Pass != pass {
			if pass > 1 {
				// From the end of the last pass, also when an interruption
				// came between the two.
				wait := time.Until(cp.Ended.Add(o.PassDelay))
				o.Log.Info("waiting before the next pass, for rows written under the old tenants file", "pass", pass, "delay", max(wait, 0).Round(time.Second))
				select {
				case <-ctx.Done():
					return total, ctx.Err()
				case <-time.After(wait):
				}
			}
			if err := cp.start(pass); err != nil {
				return total, err
			}
		}
		r, err := retimePass(ctx, tbl, family, policy, o, cp, pass)
		total.add(r)
		if err != nil {
			return total, err
		}
		if err := cp.end(time.Now()); err != nil {
			return total, err
		}
		if o.DryRun || cp.Changed == 0 {
			break
		}
	}
	return total, nil
}

// resume loads the checkpoint when o.Resume, and returns the pass to run
// first: past passes when the checkpoint records the last pass done.
func resume(cp *checkpoint, o *RetimeOptions, job Job, passes int) (int, error) {
	if o.Resume {
		found, err := cp.load(job)
		switch {
		case errors.Is(err, errOtherStep):
			o.Log.Info("the checkpoint is of an earlier step: this one starts from its first row", "checkpoint", o.Checkpoint, "step", job.Step)
		case err != nil:
			return 0, err
		case !found:
			o.Log.Info("no checkpoint yet: starting from the first row", "checkpoint", o.Checkpoint)
		}
	}
	if cp.Pass == 0 {
		return 1, nil
	}
	// Resumed: the pass under way goes on; after a pass that ended, the
	// next runs if that one changed rows.
	if cp.Ended.IsZero() {
		return cp.Pass, nil
	}
	if cp.Changed == 0 || cp.Pass >= passes {
		o.Log.Info("the checkpoint records the last pass done: nothing left to do", "checkpoint", o.Checkpoint, "pass", cp.Pass)
		return passes + 1, nil
	}
	return cp.Pass + 1, nil
}

// retimePass visits every row of the tenants once.
func retimePass(ctx context.Context, tbl *bigtable.Table, family string, policy *expiry.Policy, o RetimeOptions, cp *checkpoint, pass int) (rep Report, err error) {
	ctx, span := tracerOf(o.Tracers).Start(ctx, "cellttl.retime.pass", trace.WithAttributes(attribute.Int("cellttl.pass", pass), attribute.Bool("cellttl.dry_run", o.DryRun)))
	defer func() { endSpan(span, rep, err) }()
	start := time.Now()
	p := &retimer{tbl: tbl, family: family, policy: policy, o: &o, cp: cp, pass: pass, changedBefore: cp.Changed,
		start: start, lastProgress: start, pace: pacer{perSecond: o.RowsPerSecond, start: start}}
	tenants, err := p.tenants(ctx)
	if err != nil {
		return p.rep, err
	}
	for ti, tenant := range tenants {
		if err := p.tenant(ctx, tenant, ti, len(tenants)); err != nil {
			return p.rep, err
		}
	}
	if o.Progress != nil {
		pr := progress(pass, "", p.rep, start, 1)
		pr.Completed = true
		o.Progress(pr)
	}
	return p.rep, nil
}

// retimer is one pass of Retime under way.
type retimer struct {
	tbl    *bigtable.Table
	family string
	policy *expiry.Policy
	o      *RetimeOptions
	cp     *checkpoint
	pass   int
	// changedBefore is what this pass changed before an interruption.
	changedBefore int64
	rep           Report
	start         time.Time
	lastProgress  time.Time
	pace          pacer
	// The mutations planned and not yet applied, and their rows.
	keys []string
	muts []*bigtable.Mutation
}

// tenants lists the tenants the pass visits: the table as one when no
// tenant is named.
func (p *retimer) tenants(ctx context.Context) ([]string, error) {
	switch {
	case p.o.Tenants == nil && p.o.Shard.Count > 1:
		// Every row, in shards: a shard is a run of hash buckets of each
		// tenant, so the tenants the table holds are listed first (one
		// row read per tenant), in every pass: one whose first rows came
		// since is taken by the next.
		return tenantsIn(ctx, p.tbl)
	case p.o.Tenants == nil:
		return []string{wholeTable}, nil
	}
	return p.o.Tenants, nil
}

// rowRange is the range of tenant's rows the pass still has to visit, ok
// false when the checkpoint says it visited them all.
func (p *retimer) rowRange(tenant string) (_ bigtable.RowSet, ok bool) {
	from, to := p.o.Shard.tenantRange(tenant)
	if tenant == wholeTable {
		from, to = "", ""
	}
	if last, ok := p.cp.Done[tenant]; ok {
		if last == doneMark {
			return nil, false
		}
		// The bucket reached, re-read from its start: the checkpoint
		// holds no ids, and re-timing a row twice changes nothing.
		from = max(from, last)
	}
	if to == "" {
		return bigtable.InfiniteRange(from), true
	}
	return bigtable.NewRange(from, to), true
}

// tenant visits the rows of tenant, the ti-th of n.
func (p *retimer) tenant(ctx context.Context, tenant string, ti, n int) error {
	rng, ok := p.rowRange(tenant)
	if !ok {
		return nil
	}
	var flushErr error
	now := p.o.Now()
	readErr := p.tbl.ReadRows(ctx, rng, func(r bigtable.Row) bool {
		row := readRow(r, p.family)
		p.rep.Scanned++
		if m := plan(&row, tenant, p.policy, p.o.WrittenUnder, p.o.ledger(), now, &p.rep); m != nil {
			p.keys, p.muts = append(p.keys, row.key), append(p.muts, m)
		}
		if p.rep.Scanned%batchRows == 0 {
			if flushErr = p.flush(ctx, tenant, row.key); flushErr != nil {
				return false
			}
			now = p.o.Now()
		}
		if p.o.Progress != nil && time.Since(p.lastProgress) >= p.o.ProgressEvery {
			p.lastProgress = time.Now()
			p.o.Progress(progress(p.pass, tenant, p.rep, p.start, (float64(ti)+p.o.Shard.progress(row.key, tenant))/float64(n)))
		}
		return p.pace.wait(ctx, p.rep.Scanned)
	}, familyFilter(p.family))
	if flushErr != nil {
		return flushErr
	}
	if readErr != nil {
		return fmt.Errorf("read the rows of tenant %s: %w", tenant, readErr)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := p.flush(ctx, tenant, ""); err != nil {
		return err
	}
	return p.cp.save(tenant, doneMark, p.changed())
}

// changed is what the pass changed, an interrupted run of it included.
func (p *retimer) changed() int64 { return p.changedBefore + p.rep.Changed() }

// flush applies the mutations planned (none on a dry run) and, when
// lastKey is set, records in the checkpoint that the rows up to it are
// done.
func (p *retimer) flush(ctx context.Context, tenant, lastKey string) error {
	if len(p.muts) > 0 && !p.o.DryRun {
		if err := p.apply(ctx); err != nil {
			return err
		}
	}
	p.keys, p.muts = p.keys[:0], p.muts[:0]
	if lastKey != "" {
		return p.cp.save(tenant, rowkey.Position(lastKey), p.changed())
	}
	return nil
}

// apply writes the mutations planned.
func (p *retimer) apply(ctx context.Context) error {
	// Counted before they are written: an interruption after Bigtable
	// applied them, but before the checkpoint said so, must not make the
	// pass look as if it changed nothing (its resume finds the rows
	// already changed), which would skip the next pass. Counting too many
	// costs a pass.
	if err := p.cp.count(p.changed()); err != nil {
		return err
	}
	// A user erased since these rows were planned: their rows are
	// deleted, not re-timed (forget may have deleted them already, and a
	// rewrite would bring them back). The write is bounded by
	// attemptTimeout, so that it cannot land after forget's second pass.
	if p.o.ErasuresHeld != nil {
		if err := p.o.ErasuresHeld(); err != nil {
			return err
		}
	}
	if l := p.o.ledger(); l.Len() > 0 {
		for i, k := range p.keys {
			if l.ErasedKey(k, erasure.Position{}) {
				p.muts[i] = bigtable.NewMutation()
				p.muts[i].DeleteRow()
			}
		}
	}
	return applyBulk(ctx, tracerOf(p.o.Tracers), p.tbl, p.keys, p.muts)
}

// ledger is the erasure ledger in force, nil when there is none.
func (o *RetimeOptions) ledger() *erasure.Ledger {
	if o.Erasures == nil {
		return nil
	}
	return o.Erasures()
}

// tenantsIn lists the tenants whose rows the table holds, in key order,
// reading one row key per tenant: it skips each tenant's rows by jumping to
// the end of its prefix. Keys outside cellttl's layout are passed over.
func tenantsIn(ctx context.Context, tbl *bigtable.Table) ([]string, error) {
	var out []string
	from := ""
	for {
		var key string
		err := tbl.ReadRows(ctx, bigtable.InfiniteRange(from), func(r bigtable.Row) bool { key = r.Key(); return false },
			bigtable.LimitRows(1), bigtable.RowFilter(bigtable.ChainFilters(bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())))
		if err != nil {
			return nil, fmt.Errorf("list the tenants of the table: %w", err)
		}
		if key == "" {
			return out, nil
		}
		tenant, _, ok := strings.Cut(key, string(rowkey.Sep))
		if !ok || rowkey.ValidateID("tenant", tenant) != nil {
			from = key + "\x00" // a foreign key: the next one
			continue
		}
		out = append(out, tenant)
		from = rowkey.PrefixEnd(rowkey.TenantPrefix(tenant))
		if from == "" {
			return out, nil
		}
	}
}

// wholeTable stands for every row of the table where a tenant is expected.
const wholeTable = "\x00(every tenant)"

// plan decides a row's fate, counts it, and returns its mutation (nil when
// it stays as it is).
func plan(row *row, tenant string, policy, writtenUnder *expiry.Policy, ledger *erasure.Ledger, now time.Time, rep *Report) *bigtable.Mutation {
	if !row.layout || (tenant != wholeTable && row.parts.Tenant != tenant) || len(row.cells) == 0 {
		rep.Foreign++
		return nil
	}
	if ledger.Erased(row.parts.Tenant, row.parts.User, row.parts.Millis, erasure.Position{}) {
		rep.Deleted++
		rep.Erased++
		rep.Bytes += row.bytes
		m := bigtable.NewMutation()
		m.DeleteRow()
		return m
	}
	cell, ttl, ok := row.cell(policy)
	if !ok {
		// A ttl cell that cannot be read: where the row belongs is
		// unknown, so it is left as it is.
		rep.Foreign++
		return nil
	}
	ts := bigtable.Timestamp(cell.Timestamp)
	// Expired, as the row stands or under the file: deleted now rather
	// than left to GC, and never brought back by a later timestamp.
	follows := row.follows(ts)
	current := cell.Expiry
	if !follows {
		current = writtenUnder.ExpiryOf(int64(row.newest()))
	}
	if expiry.Expired(cell.Expiry, now) || expiry.Expired(current, now) {
		rep.Deleted++
		rep.Bytes += row.bytes
		m := bigtable.NewMutation()
		m.DeleteRow()
		return m
	}
	if follows {
		rep.Unchanged++
		return nil
	}
	rep.Bytes += row.bytes
	rep.Rewritten++
	rep.expiry(cell.Expiry)
	return retimeMutation(row, ts, ttl)
}

// retimeMutation sets each column of row at ts with its newest value (the
// ttl column with ttl, the TTL the row now lives, when the row has one),
// and deletes every other version: one mutation, applied atomically.
func retimeMutation(row *row, ts bigtable.Timestamp, ttl []byte) *bigtable.Mutation {
	m := bigtable.NewMutation()
	for col, versions := range row.cells {
		family := versions[0].Column[:len(versions[0].Column)-len(col)-1]
		newest := versions[0]
		for _, v := range versions[1:] {
			if v.Timestamp > newest.Timestamp {
				newest = v
			}
		}
		for _, v := range versions {
			if v.Timestamp != ts {
				// Timestamps are whole milliseconds: the range holds v alone.
				m.DeleteTimestampRange(family, col, v.Timestamp, v.Timestamp+1000)
			}
		}
		value := newest.Value
		if col == rowkey.ColumnTTL && ttl != nil {
			value = ttl
		}
		m.Set(family, col, ts, value)
	}
	return m
}

// attemptTimeout bounds one bulk write of a retention job, the client's
// own retries included: the default --write-timeout of the workers, which
// worker forget's wait between its passes counts on.
const attemptTimeout = 30 * time.Second

// applyBulk applies the mutations; a row that fails fails the batch.
func applyBulk(ctx context.Context, tracer trace.Tracer, tbl *bigtable.Table, keys []string, muts []*bigtable.Mutation) error {
	ctx, span := tracer.Start(ctx, "cellttl.retention.apply", trace.WithAttributes(attribute.Int("cellttl.batch.rows", len(keys))))
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	errs, err := tbl.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return fmt.Errorf("apply %d row mutations: %w", len(keys), err)
	}
	for i, e := range errs {
		if e != nil {
			return fmt.Errorf("%s: %w", rowkey.Describe(keys[i]), e)
		}
	}
	return nil
}

func progress(pass int, tenant string, rep Report, start time.Time, done float64) Progress {
	el := time.Since(start)
	p := Progress{Pass: pass, Tenant: tenant, Report: rep, ETA: -1}
	if el > 0 {
		p.Rate = float64(rep.Scanned) / el.Seconds()
	}
	if done > 0 && done <= 1 {
		p.ETA = time.Duration(float64(el) * (1 - done) / done).Truncate(time.Second)
	}
	return p
}

// pacer holds a scan to a number of rows per second.
type pacer struct {
	perSecond int
	start     time.Time
}

// wait sleeps until row n is due; false when ctx ends.
func (p *pacer) wait(ctx context.Context, n int64) bool {
	if p.perSecond <= 0 {
		return ctx.Err() == nil
	}
	due := p.start.Add(time.Duration(float64(n) / float64(p.perSecond) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
