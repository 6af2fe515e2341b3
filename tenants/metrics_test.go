package tenants

import (
	"fmt"
	"strings"
	"testing"
)

// metric_tenants names the tenants whose counts are series of their own;
// without it, every tenant of a file of at most MaxMetricTenants is. A
// tenant the file does not list, a duplicate, more than the bound, or
// something else than a list is refused, naming the line and value.
func TestMetricTenants(t *testing.T) {
	cfg, err := Parse([]byte("default_ttl: 2d\nmetric_tenants: [acme]\ntenants:\n  acme: 1h\n  globex: 2h\n"))
	if err != nil || !cfg.Labelled("acme") || cfg.Labelled("globex") || cfg.Labelled("initech") {
		t.Errorf("metric_tenants [acme]: %v, acme %t globex %t", err, cfg.Labelled("acme"), cfg.Labelled("globex"))
	}
	cfg, err = Parse([]byte("default_ttl: 2d\ntenants:\n  acme: 1h\n  globex: 2h\n"))
	if err != nil || !cfg.Labelled("acme") || !cfg.Labelled("globex") || cfg.Labelled("initech") {
		t.Errorf("a small file without metric_tenants: %v", err)
	}
	var big strings.Builder
	big.WriteString("default_ttl: 2d\ntenants:\n")
	for i := range MaxMetricTenants + 1 {
		fmt.Fprintf(&big, "  t-%d: 1h\n", i)
	}
	if cfg, err = Parse([]byte(big.String())); err != nil || cfg.Labelled("t-0") {
		t.Errorf("a file of %d tenants without metric_tenants labels t-0: %v", MaxMetricTenants+1, err)
	}
	many := make([]string, MaxMetricTenants+1)
	for i := range many {
		many[i] = fmt.Sprintf("t-%d", i)
	}
	for _, c := range []struct{ yaml, want string }{
		{"metric_tenants: [acme, initech]", `line 2: metric_tenants: "initech" is not a tenant of the file`},
		{"metric_tenants: [acme, acme]", `"acme" listed twice (first at line 2)`},
		{"metric_tenants: acme", "must be a list of tenant ids"},
		{"metric_tenants: [" + strings.Join(many, ", ") + "]", "lists 101 tenants, more than 100"},
	} {
		_, err := Parse([]byte("default_ttl: 2d\n" + c.yaml + "\ntenants:\n  acme: 1h\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40s: %v, want %q", c.yaml, err, c.want)
		}
	}
}
