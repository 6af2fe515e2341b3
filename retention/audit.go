package retention

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"cloud.google.com/go/bigtable"
	"go.opentelemetry.io/otel/trace"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/rowkey"
)

// AuditOptions say what to audit.
type AuditOptions struct {
	// Tenants to audit; every row of the table when empty.
	Tenants []string
	// Shard is this process's part of the rows (all when zero).
	Shard Shard
	// Sample stops after this many rows per tenant (of the table when
	// Tenants is empty); 0 reads them all.
	Sample int64
	Now    func() time.Time
	// Erasures is the erasure ledger (nil: none): a row it covers is
	// reported, and makes the audit unclean.
	Erasures *erasure.Ledger
	// Tracers records the audit's span (nil: none).
	Tracers trace.TracerProvider
}

// TenantAudit is what the audit found for one tenant.
type TenantAudit struct {
	Tenant string `json:"tenant"`
	TTL    string `json:"ttl"`
	// LiveRows and LiveBytes are what a correct reader returns now.
	LiveRows  int64 `json:"live_rows"`
	LiveBytes int64 `json:"live_bytes"`
	// ExpiredRows are rows past their expiry that GC has not collected yet:
	// storage paid for while GC is lazy.
	ExpiredRows  int64 `json:"expired_rows"`
	ExpiredBytes int64 `json:"expired_bytes"`
	// RuleBreaking are rows with a cell whose timestamp is not the rule's
	// under the current file, or with more than one version: written under
	// another TTL, or by another writer. `worker retime` repairs them.
	RuleBreaking int64 `json:"rule_breaking"`
	// ErasedRows are rows of users the erasure ledger says were erased,
	// with event times it covers: they should not exist (a forget that
	// failed part-way, a restore from backup, a writer that ignores the
	// ledger). Run worker forget again for them.
	ErasedRows int64 `json:"erased_rows"`
	// LongerThanOwnTTL are rows whose event gave its own TTL (a ttl
	// cell) and which hold a live cell expiring after the event's time
	// plus that TTL: a version written without --ttl-from (a replay, a
	// redrive or a rollout without the flag) that outlives what the event
	// asked for. `worker retime` repairs them while the ttl cell is
	// there; once it is collected, nothing can tell.
	LongerThanOwnTTL int64 `json:"longer_than_own_ttl"`
	// LeavesWithin counts the live rows by when they expire.
	LeavesWithin map[string]int64 `json:"leaves_within"`
	// OffboardedAt is when the tenant left (worker offboard), while the
	// ledger's offboarding is in force: every row of it is then counted in
	// ErasedRows.
	OffboardedAt *time.Time `json:"offboarded_at,omitempty"`
}

// AuditReport is the whole audit.
type AuditReport struct {
	At      time.Time      `json:"at"`
	Tenants []*TenantAudit `json:"tenants"`
	// Foreign are rows whose key is not in cellttl's layout.
	Foreign        int64    `json:"foreign"`
	ForeignSamples []string `json:"foreign_samples,omitempty"`
	// LongerThanOwnTTLSamples name a few of the rows counted under
	// LongerThanOwnTTL, as rowkey.Describe names rows (never the ids, nor a hash of them).
	LongerThanOwnTTLSamples []string `json:"longer_than_own_ttl_samples,omitempty"`
}

// Clean reports whether every cell follows the rule and every key the
// layout.
func (r *AuditReport) Clean() bool {
	if r.Foreign > 0 {
		return false
	}
	for _, t := range r.Tenants {
		if t.RuleBreaking > 0 || t.ErasedRows > 0 || t.LongerThanOwnTTL > 0 {
			return false
		}
	}
	return true
}

// Horizons of LeavesWithin, in order.
var horizons = []struct {
	name string
	d    time.Duration
}{{"hour", time.Hour}, {"day", 24 * time.Hour}, {"week", 7 * 24 * time.Hour}, {"later", 1<<63 - 1}}

// Audit reads the rows (every version of every cell of the family) and
// checks each against policy.
func Audit(ctx context.Context, tbl Table, family string, policy *expiry.Policy, o AuditOptions) (_ *AuditReport, err error) {
	ctx, span := tracerOf(o.Tracers).Start(ctx, "cellttl.audit")
	defer func() { endSpan(span, Report{}, err) }()
	if o.Now == nil {
		o.Now = time.Now
	}
	now := o.Now()
	a := &auditor{family: family, policy: policy, erasures: o.Erasures, now: now, rep: &AuditReport{At: now}, byTenant: map[string]*TenantAudit{}}
	var ranges []bigtable.RowRange
	if len(o.Tenants) == 0 {
		if o.Shard.Count > 1 {
			return nil, errors.New("--shard needs --tenant: shards split each tenant's rows by hash bucket, the same way in every process")
		}
		ranges = append(ranges, bigtable.InfiniteRange(""))
	}
	for _, id := range o.Tenants {
		if err := rowkey.ValidateID("tenant", id); err != nil {
			return nil, err
		}
		a.tenant(id)
		ranges = append(ranges, bigtable.NewRange(o.Shard.tenantRange(id)))
	}
	for _, rng := range ranges {
		opts := []bigtable.ReadOption{familyFilter(family)}
		if o.Sample > 0 {
			opts = append(opts, bigtable.LimitRows(o.Sample))
		}
		err := tbl.ReadRows(ctx, rng, func(r bigtable.Row) bool { a.visit(r); return true }, opts...)
		if err != nil {
			return nil, fmt.Errorf("audit: read rows: %w", err)
		}
	}
	rep := a.rep
	for _, t := range a.byTenant {
		rep.Tenants = append(rep.Tenants, t)
	}
	sort.Slice(rep.Tenants, func(i, j int) bool { return rep.Tenants[i].Tenant < rep.Tenants[j].Tenant })
	return rep, nil
}

// auditor is one Audit under way.
type auditor struct {
	family   string
	policy   *expiry.Policy
	erasures *erasure.Ledger
	now      time.Time
	rep      *AuditReport
	byTenant map[string]*TenantAudit
}

// tenant returns the audit of tenant id, started at its first row.
func (a *auditor) tenant(id string) *TenantAudit {
	t, ok := a.byTenant[id]
	if !ok {
		t = &TenantAudit{Tenant: id, TTL: fmtTTL(a.policy.TTL(id)), LeavesWithin: map[string]int64{}}
		if at, ok := a.erasures.LeftAt(id); ok {
			t.OffboardedAt = &at
		}
		for _, h := range horizons {
			t.LeavesWithin[h.name] = 0
		}
		a.byTenant[id] = t
	}
	return t
}

// visit checks one row.
func (a *auditor) visit(r bigtable.Row) {
	row := readRow(r, a.family)
	if !row.layout || len(row.cells) == 0 {
		a.rep.Foreign++
		if len(a.rep.ForeignSamples) < 5 {
			// Named by its size: the key may hold ids, and an audit's
			// output is a scheduled job's log.
			a.rep.ForeignSamples = append(a.rep.ForeignSamples, rowkey.Describe(row.key))
		}
		return
	}
	t := a.tenant(row.parts.Tenant)
	if a.erasures.Erased(row.parts.Tenant, row.parts.User, row.parts.Millis, erasure.Position{}) {
		t.ErasedRows++
	}
	cell, _, ok := row.cell(a.policy)
	if !ok || !row.follows(bigtable.Timestamp(cell.Timestamp)) {
		t.RuleBreaking++
	}
	if a.longerThanOwnTTL(&row) {
		t.LongerThanOwnTTL++
		if len(a.rep.LongerThanOwnTTLSamples) < 5 {
			a.rep.LongerThanOwnTTLSamples = append(a.rep.LongerThanOwnTTLSamples, rowkey.Describe(row.key))
		}
	}
	// Live as a reader sees it: the newest cell's own expiry under the
	// policy's GC rule, whatever the rule says it should be.
	exp := a.policy.ExpiryOf(int64(row.newest()))
	if expiry.Expired(exp, a.now) {
		t.ExpiredRows++
		t.ExpiredBytes += row.bytes
		return
	}
	t.LiveRows++
	t.LiveBytes += row.bytes
	left := exp.Sub(a.now)
	for _, h := range horizons {
		if left <= h.d {
			t.LeavesWithin[h.name]++
			break
		}
	}
}

// longerThanOwnTTL reports whether a row whose event gave its own TTL holds
// a live cell, of any column or version, that expires after the event's
// time plus the TTL its newest ttl cell says it lives. The ttl cell is read
// whether or not it has expired: as long as GC has not collected it, it
// says what the event asked for.
func (a *auditor) longerThanOwnTTL(r *row) bool {
	vs := r.cells[rowkey.ColumnTTL]
	if len(vs) == 0 {
		return false
	}
	newest := vs[0]
	for _, v := range vs[1:] {
		if v.Timestamp > newest.Timestamp {
			newest = v
		}
	}
	effective, _, err := rowkey.ParseTTL(newest.Value)
	if err != nil {
		return false // unreadable: counted as breaking the rule
	}
	limit := r.base().Add(effective)
	for _, vs := range r.cells {
		for _, v := range vs {
			exp := a.policy.ExpiryOf(int64(v.Timestamp))
			if !expiry.Expired(exp, a.now) && exp.After(limit) {
				return true
			}
		}
	}
	return false
}
