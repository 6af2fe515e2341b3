package tenants

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxMetricTenants bounds the tenants whose counts are metric series of
// their own: 8 counters a tenant, on every pod, is what a metrics backend
// pays for each (docs/operations.md, "Metrics").
const MaxMetricTenants = 100

// RestTenants is the metric label of the listed tenants whose counts are
// no series of their own (see MetricTenants): summed.
const RestTenants = "_rest"

// Labelled reports whether tenant's counts are metric series of their own:
// a tenant of metric_tenants, or, without that key, any listed tenant of a
// file that lists at most MaxMetricTenants. Every other is counted under
// RestTenants; /status has each tenant's exact counts.
func (c *Config) Labelled(tenant string) bool {
	if c.metricTenants != nil {
		return c.metricTenants[tenant]
	}
	_, listed := c.Policy.Tenants[tenant]
	return listed && len(c.Policy.Tenants) <= MaxMetricTenants
}

// parseMetricTenants reads metric_tenants: a list of listed tenants, at
// most MaxMetricTenants. listed is checked once every key is read.
func parseMetricTenants(n *yaml.Node) (map[string]*yaml.Node, []error) {
	if n.Kind != yaml.SequenceNode {
		return nil, []error{lineErr(n, "metric_tenants", "must be a list of tenant ids, e.g. [acme, globex]")}
	}
	if len(n.Content) > MaxMetricTenants {
		return nil, []error{lineErr(n, "metric_tenants", "lists %d tenants, more than %d: each is 8 series on every pod", len(n.Content), MaxMetricTenants)}
	}
	out := make(map[string]*yaml.Node, len(n.Content))
	var errs []error
	for _, v := range n.Content {
		if v.Kind != yaml.ScalarNode {
			errs = append(errs, lineErr(v, "metric_tenants", "must be a tenant id"))
			continue
		}
		if prev, dup := out[v.Value]; dup {
			errs = append(errs, lineErr(v, "metric_tenants", "%q listed twice (first at line %d)", v.Value, prev.Line))
			continue
		}
		out[v.Value] = v
	}
	return out, errs
}

// checkMetricTenants refuses a metric tenant the file does not list: a
// typo would silently count it under RestTenants.
func checkMetricTenants(ids map[string]*yaml.Node, listed map[string]time.Duration, offboarded map[string]bool) []error {
	var errs []error
	for id, v := range ids {
		switch _, ok := listed[id]; {
		case offboarded[id]:
			errs = append(errs, lineErr(v, "metric_tenants", "%q is offboarded: it has no metric series", id))
		case !ok:
			errs = append(errs, lineErr(v, "metric_tenants", "%q is not a tenant of the file", id))
		}
	}
	return errs
}

// metricTenantsOf reads metric_tenants (n nil: the key is absent, and so
// is the set) against the tenants the file lists.
func metricTenantsOf(n *yaml.Node, listed map[string]time.Duration, offboarded map[string]bool) (map[string]bool, []error) {
	if n == nil {
		return nil, nil
	}
	ids, errs := parseMetricTenants(n)
	errs = append(errs, checkMetricTenants(ids, listed, offboarded)...)
	out := make(map[string]bool, len(ids))
	for id := range ids {
		out[id] = true
	}
	return out, errs
}
