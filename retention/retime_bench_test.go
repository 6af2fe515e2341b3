package retention

import (
	"testing"
	"time"

	"github.com/cellttl/cellttl/sink"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// BenchmarkRetime re-times 5,000 rows of one tenant, every one a rewrite,
// against the Bigtable emulator when BIGTABLE_EMULATOR_HOST names one:
// what the conditional rewrites cost against bulk writes. b.N rounds,
// each from freshly seeded rows; rows/s is the figure.
func BenchmarkRetime(b *testing.B) {
	dc, ac := testenv.Clients(b)
	old, now := policy(b, "default_ttl: 2d\ntenants:\n  acme: 3h\n"), policy(b, "default_ttl: 2d\ntenants:\n  acme: 1h\n")
	ages := make([]time.Duration, 5000)
	for i := range ages {
		ages[i] = time.Duration(i%100) * time.Second
	}
	var rows, took float64
	for b.Loop() {
		b.StopTimer()
		tgt := sink.Target(testenv.Table(b, ac, dc, old.GCMaxAge()))
		seed(b, dc, tgt, old, "acme", ages)
		b.StartTimer()
		start := time.Now()
		rep, err := Retime(ctx, dc.Open(tgt.Table), tgt.Family, now, RetimeOptions{Tenants: []string{"acme"}, Passes: 1})
		took += time.Since(start).Seconds()
		if err != nil || rep.Rewritten != int64(len(ages)) {
			b.Fatalf("%+v, %v", rep, err)
		}
		rows += float64(rep.Rewritten)
	}
	b.ReportMetric(rows/took, "rows/s")
}
