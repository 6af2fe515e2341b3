package retention

import (
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/rowkey"
)

// A row whose event gave its own TTL is stored longer than it when a live
// cell, of any column or version, expires after the event's time plus the
// TTL its newest ttl cell holds, that cell expired or not (GC has not taken
// it yet); a row at its own TTL, one whose other version is shorter, and
// one without a ttl cell are not.
func TestAuditLongerThanOwnTTL(t *testing.T) {
	p := policy(t, "default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, max_ttl: 3h}\n")
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	base := now.Add(-40 * time.Minute) // an event of 40 minutes ago
	key := rowkey.Key("acme", "u-1", "e-1", base.UnixMilli())
	ts := func(ttl time.Duration) bigtable.Timestamp { return bigtable.Timestamp(p.CellTTL(ttl, base).Timestamp) }
	ttlCell := func(ttl time.Duration) bigtable.ReadItem {
		return bigtable.ReadItem{Row: key, Column: "c:" + rowkey.ColumnTTL, Timestamp: ts(ttl), Value: rowkey.AppendTTL(nil, ttl, ttl)}
	}
	event := func(ttl time.Duration) bigtable.ReadItem {
		return bigtable.ReadItem{Row: key, Column: "c:" + rowkey.ColumnEvent, Timestamp: ts(ttl), Value: []byte(`{}`)}
	}
	for _, c := range []struct {
		name  string
		cells []bigtable.ReadItem
		want  bool
	}{
		{"at its own TTL", []bigtable.ReadItem{event(30 * time.Minute), ttlCell(30 * time.Minute)}, false},
		{"a replay at the tenant's TTL, own cells expired", []bigtable.ReadItem{event(time.Hour), event(30 * time.Minute), ttlCell(30 * time.Minute)}, true},
		{"a replay at the tenant's TTL, own cells live", []bigtable.ReadItem{event(time.Hour), event(50 * time.Minute), ttlCell(50 * time.Minute)}, true},
		{"a shorter version beside it", []bigtable.ReadItem{event(time.Hour), event(2 * time.Hour), ttlCell(2 * time.Hour)}, false},
		{"no ttl cell", []bigtable.ReadItem{event(time.Hour)}, false},
		{"an unreadable ttl cell", []bigtable.ReadItem{event(time.Hour), {Row: key, Column: "c:" + rowkey.ColumnTTL, Timestamp: ts(time.Minute), Value: []byte("x")}}, false},
	} {
		a := &auditor{family: "c", policy: p, now: now, rep: &AuditReport{}, byTenant: map[string]*TenantAudit{}}
		a.visit(bigtable.Row{"c": c.cells})
		if got := a.tenant("acme").LongerThanOwnTTL == 1; got != c.want {
			t.Errorf("%s: longer than its own TTL %t, want %t", c.name, got, c.want)
		}
	}
}
