package forget

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/retention"
	"github.com/cellttl/cellttl/rowkey"
	"github.com/cellttl/cellttl/testkit/testenv"
)

// BenchmarkTenantRowsGone is what a tenant's rows cost to take away: by
// the key range's drop (worker offboard), then its second pass over the
// range left empty, against deleting them row by row as a scan does
// (forget's way, per user). BENCH_TENANT_ROWS sets the rows (10,000).
//
//	BENCH_TENANT_ROWS=200000 go test -run '^$' -bench TenantRowsGone -benchtime 1x ./retention/forget
func BenchmarkTenantRowsGone(b *testing.B) {
	n := 10_000
	if v := os.Getenv("BENCH_TENANT_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	dc, ac := testenv.Clients(b)
	tbl := testenv.Table(b, ac, dc, 48*time.Hour)
	ctx := context.Background()
	fill := func() {
		b.StopTimer()
		defer b.StartTimer()
		keys := make([]string, 0, 1000)
		muts := make([]*bigtable.Mutation, 0, 1000)
		for i := range n {
			m := bigtable.NewMutation()
			m.Set("c", "event", bigtable.Now(), []byte(`{"event_id":"e"}`))
			keys, muts = append(keys, rowkey.Key("acme", fmt.Sprintf("u-%d", i%5000), fmt.Sprintf("e-%d", i), time.Now().UnixMilli())), append(muts, m)
			if len(keys) == cap(keys) || i == n-1 {
				if errs, err := dc.Open(tbl.Table).ApplyBulk(ctx, keys, muts); err != nil || errs != nil {
					b.Fatal(err, errs)
				}
				keys, muts = keys[:0], muts[:0]
			}
		}
	}
	b.Run(fmt.Sprintf("drop/rows=%d", n), func(b *testing.B) {
		for range b.N {
			fill()
			if err := ac.DropRowRange(ctx, tbl.Table, rowkey.TenantPrefix("acme")); err != nil {
				b.Fatal(err)
			}
			if rep, err := retention.DeleteTenantRows(ctx, dc.Open(tbl.Table), "acme", false, nil); err != nil || rep.Rows != 0 {
				b.Fatalf("second pass: %+v, %v", rep, err)
			}
		}
	})
	b.Run(fmt.Sprintf("scan/rows=%d", n), func(b *testing.B) {
		for range b.N {
			fill()
			if rep, err := retention.DeleteTenantRows(ctx, dc.Open(tbl.Table), "acme", false, nil); err != nil || rep.Rows != int64(n) {
				b.Fatalf("scan: %+v, %v", rep, err)
			}
		}
	})
}
