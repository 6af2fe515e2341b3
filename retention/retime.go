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
	"github.com/cellttl/cellttl/rowkey"
)

// Retime moves the cells of the tenants' rows to the timestamps policy
// gives them: for each row whose cells are not all at the rule's timestamp
// (one version each), one row mutation sets each column at the new
// timestamp, with its newest value, and deletes every other version. A row
// whose new expiry has passed is deleted, and so is one already expired as
// it stands (re-timing never brings back an expired event). Rows are
// visited in key order; a crash leaves each row either wholly old or
// wholly new, and running again (or Resume) finishes the job: Retime is
// idempotent.
func Retime(ctx context.Context, tbl Table, family string, policy *expiry.Policy, o RetimeOptions) (Report, error) {
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
func retimePass(ctx context.Context, tbl Table, family string, policy *expiry.Policy, o RetimeOptions, cp *checkpoint, pass int) (rep Report, err error) {
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
	tbl    Table
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
	// The mutations planned and not yet applied, their rows, and which
	// are rewrites (plan).
	keys     []string
	muts     []*bigtable.Mutation
	rewrites []bool
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
		ledger := p.o.ledger()
		// A user the ledger holds compact is looked up before the row is
		// planned: its rows are deleted, not left as they are.
		if flushErr = ledger.ResolveKey(ctx, row.key); flushErr != nil {
			return false
		}
		if m, rewrite := plan(&row, tenant, p.policy, p.o.WrittenUnder, ledger, now, &p.rep); m != nil {
			p.keys, p.muts, p.rewrites = append(p.keys, row.key), append(p.muts, m), append(p.rewrites, rewrite)
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
	p.keys, p.muts, p.rewrites = p.keys[:0], p.muts[:0], p.rewrites[:0]
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
	// The users the ledger holds compact are looked up first, which may
	// take a while; then the ledger's age is checked and the ledger taken,
	// so that the write follows one no older than the bound.
	for {
		if err := p.resolve(ctx, p.o.ledger()); err != nil {
			return err
		}
		if p.o.ErasuresHeld != nil {
			if err := p.o.ErasuresHeld(); err != nil {
				return err
			}
		}
		if p.o.ledger().KnownKeys(p.keys) {
			break // else a reread came between: look up again under it
		}
	}
	if l := p.o.ledger(); l.Len() > 0 {
		for i, k := range p.keys {
			if l.ErasedKey(k, erasure.Position{}) {
				p.muts[i], p.rewrites[i] = deleteRow(), false
			}
		}
	}
	// Deletions in bulk; rewrites each on the condition that its row is
	// still there (applyRewrites): the ledger judges by time alone here,
	// since a row does not carry its record's place in the topic.
	var delKeys, setKeys []string
	var dels, sets []*bigtable.Mutation
	for i, k := range p.keys {
		if p.rewrites[i] {
			setKeys, sets = append(setKeys, k), append(sets, p.muts[i])
		} else {
			delKeys, dels = append(delKeys, k), append(dels, p.muts[i])
		}
	}
	if len(delKeys) > 0 {
		if err := applyBulk(ctx, tracerOf(p.o.Tracers), p.tbl, delKeys, dels); err != nil {
			return err
		}
	}
	vanished, err := applyRewrites(ctx, tracerOf(p.o.Tracers), p.tbl, p.family, setKeys, sets)
	p.rep.Vanished += vanished
	return err
}

// resolve looks up, in l, the users of the rows planned.
func (p *retimer) resolve(ctx context.Context, l *erasure.Ledger) error {
	for _, k := range p.keys {
		if err := l.ResolveKey(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// tenantsIn lists the tenants whose rows the table holds, in key order,
// reading one row key per tenant: it skips each tenant's rows by jumping to
// the end of its prefix. Keys outside cellttl's layout are passed over.
func tenantsIn(ctx context.Context, tbl Table) ([]string, error) {
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
