package erasure_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cellttl/cellttl/erasure"
)

// BenchmarkErased is the hot path's question to a ledger holding the
// working set of ten million erasures over three years (150,000 in force,
// over 1,000 tenants): an event of a user not erased, and of one erased.
// It uses the package's exported API alone, so that the same file times
// a build from before (BENCHMARKS.md).
func BenchmarkErased(b *testing.B) {
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	const n = 150_000
	recs := make([]erasure.Erasure, 0, n)
	for i := range n {
		exp := now.Add(14 * 24 * time.Hour)
		if i%8 == 0 {
			exp = time.Time{} // never
		}
		recs = append(recs, erasure.Erasure{Tenant: fmt.Sprintf("tenant-%04d", i%1000), User: fmt.Sprintf("user-%09d", i), UpTo: now, Expires: exp})
	}
	l := erasure.NewLedger(recs, now)
	if l.Len() != n {
		b.Fatal(l.Len())
	}
	// The same with 100 tenants offboarded (worker offboard), none the
	// event's: what each asks more.
	for i := range 100 {
		recs = append(recs, erasure.Erasure{Tenant: fmt.Sprintf("gone-%03d", i), Offboard: true, UpTo: erasure.Whole, RecordedAt: now})
	}
	offboarded := erasure.NewLedger(recs, now)
	at := now.Add(-time.Hour).UnixMilli()
	for _, c := range []struct {
		name, user string
		want       bool
		l          *erasure.Ledger
	}{{"not erased", "user-999999999", false, l}, {"erased", "user-000004242", true, l},
		{"not erased, 100 tenants offboarded", "user-999999999", false, offboarded}, {"erased, 100 tenants offboarded", "user-000004242", true, offboarded}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if c.l.Erased("tenant-0242", c.user, at, erasure.Position{}) != c.want {
					b.Fatal("wrong answer")
				}
			}
		})
	}
}
