package expiry

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCell is the TTL lookup and timestamp of one event among 1000
// tenants.
func BenchmarkCell(b *testing.B) {
	p := &Policy{Strategy: DefaultExpiration, DefaultTTL: 48 * time.Hour, Tenants: map[string]time.Duration{}}
	for i := range 1000 {
		p.Tenants[fmt.Sprintf("tenant-%d", i)] = time.Duration(i+1) * time.Hour
	}
	base := time.Date(2026, 11, 21, 9, 0, 0, 123456789, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		_ = p.Cell("tenant-517", base)
	}
}
