package main

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/cellttl/cellttl/pipeline"
	"github.com/cellttl/cellttl/tenants"
)

// /status?tenants=true is paged: 2,500 tenants come in pages of 1,000 (or
// limit=), each page's next the after= of the following, every tenant
// once, the counted ones too.
func TestStatusTenantsArePaged(t *testing.T) {
	t.Parallel()
	var file strings.Builder
	file.WriteString("default_ttl: 2d\ntenants:\n")
	for i := range 2500 {
		fmt.Fprintf(&file, "  t-%04d: 1h\n", i)
	}
	cfg, err := tenants.Parse([]byte(file.String()))
	if err != nil {
		t.Fatal(err)
	}
	stats := &pipeline.Stats{}
	stats.Tenant(pipeline.UnlistedTenants).Consumed.Add(1)
	for _, limit := range []string{"", "700"} {
		seen, pages, after := map[string]bool{}, 0, ""
		for {
			page, next := tenantPage(cfg, stats, url.Values{"after": {after}, "limit": {limit}})
			pages++
			for id := range page {
				if seen[id] {
					t.Fatalf("limit %q: %s on two pages", limit, id)
				}
				seen[id] = true
			}
			if next == "" {
				break
			}
			after = next
		}
		want := map[string]int{"": 3, "700": 4}[limit]
		if len(seen) != 2501 || pages != want {
			t.Errorf("limit %q: %d tenants over %d pages, want 2501 over %d", limit, len(seen), pages, want)
		}
	}
	if page, next := tenantPage(cfg, stats, url.Values{"limit": {"999999"}}); len(page) != 2501 || next != "" {
		t.Errorf("limit=999999 gave %d and next %q, want all 2501 (within the most, %d) on one page", len(page), next, maxTenantPage)
	}
}
