// Package tenants reads tenants.yaml, the per-tenant retention file, into an
// expiry.Policy. Parsing is strict: unknown fields, duplicate keys, bad
// durations, TTLs out of range and invalid tenant ids are errors that name
// the line and the value, because a silently ignored typo here changes how
// long customer data is kept.
package tenants

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/duration"
	"github.com/cellttl/cellttl/rowkey"
)

// Bounds on any TTL. Below a second, GC (whole seconds of max-age) cannot
// follow; beyond ten years a value is far more likely a typo than a policy.
const (
	MinTTL = time.Second
	MaxTTL = 3650 * duration.Day
)

// Unlisted is what happens to an event whose tenant the file does not list.
type Unlisted string

const (
	// UnlistedDefaultTTL writes it with default_ttl (the default, and the
	// behaviour before the setting existed).
	UnlistedDefaultTTL Unlisted = "default_ttl"
	// UnlistedDeadLetter sends it to the dead-letter topic, reason
	// unlisted_tenant: a misspelt tenant id then keeps no data for
	// default_ttl that its contract may not allow.
	UnlistedDeadLetter Unlisted = "dead-letter"
)

// Config is a parsed tenants.yaml.
type Config struct {
	Policy *expiry.Policy
	// Unlisted is the unlisted_tenants policy.
	Unlisted Unlisted
	// WriteRate is max_write_rate: the rows per second each worker may
	// send to Bigtable, 0 when the file sets no cap. A reload applies it
	// at the next write.
	WriteRate float64
	// ShortestTTL is the shortest TTL the file gives anyone (default_ttl
	// included): the longest a copy of an event whose tenant cannot be
	// trusted may live.
	ShortestTTL time.Duration
	// Version is a short hash of the file's bytes; it names the config in
	// logs, metrics and traces.
	Version string
	// Offboarded are the tenants listed as `offboarded` (worker offboard
	// erased them): none of their events is written or dead-lettered,
	// whatever the erasure ledger holds yet, and they are not in Policy.
	Offboarded map[string]bool
	// metricTenants is metric_tenants, nil when the file has none (see
	// Labelled).
	metricTenants map[string]bool

	raw []byte
}

// Load reads and parses a tenants file, or a directory of them (see
// source).
func Load(path string) (*Config, error) {
	src, err := readSource(path)
	if err != nil {
		return nil, err
	}
	cfg, err := src.parse()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Version hashes a tenants file's content.
func Version(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// Parse parses tenants.yaml content. All problems found are reported, each
// as "line N: field: message".
func Parse(data []byte) (*Config, error) {
	root, err := decode(data)
	if err != nil {
		return nil, err
	}
	return parseRoot(root, data)
}

// decode reads one YAML document holding a mapping, its root.
func decode(data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			// Nothing but comments, or nothing: a placeholder (deploy/k8s's
			// base ships one), never a config of no tenants.
			return nil, errors.New("line 1: the file holds nothing but comments: it must be a YAML mapping with strategy, default_ttl and tenants")
		}
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, lineErr(&next, "", "more than one YAML document")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("line 1: the file must be a YAML mapping with strategy, default_ttl and tenants")
	}
	return doc.Content[0], nil
}

// parseRoot reads a decoded file's mapping; data is what it was read from
// (the config's raw bytes and version).
func parseRoot(root *yaml.Node, data []byte) (*Config, error) {
	p := &expiry.Policy{Strategy: expiry.DefaultExpiration, Tenants: map[string]time.Duration{}}
	var errs []error
	report := func(err error) { errs = append(errs, err) }

	var defaultTTL, tenantsNode, minNode, maxNode, metricNode *yaml.Node
	unlisted := UnlistedDefaultTTL
	var writeRate float64
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if prev, dup := seen[k.Value]; dup {
			report(lineErr(k, k.Value, "duplicate key (first at line %d)", prev.Line))
			continue
		}
		seen[k.Value] = k
		switch k.Value {
		case "strategy":
			s, err := expiry.ParseStrategy(v.Value)
			if err != nil || v.Kind != yaml.ScalarNode {
				report(lineErr(v, "strategy", "%q is not a strategy (want default-expiration or one-second)", v.Value))
				continue
			}
			p.Strategy = s
		case "default_ttl":
			defaultTTL = v
		case "record_real_timestamp":
			b, err := strconv.ParseBool(v.Value)
			if err != nil || v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
				report(lineErr(v, "record_real_timestamp", "%q is not true or false", v.Value))
				continue
			}
			p.RecordRealTimestamp = b
		case "tenants":
			tenantsNode = v
		case "min_ttl":
			minNode = v
		case "max_ttl":
			maxNode = v
		case "metric_tenants":
			metricNode = v
		case "max_write_rate":
			n, err := strconv.ParseUint(v.Value, 10, 32)
			if err != nil || v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
				report(lineErr(v, "max_write_rate", "%q is not a number of rows per second (a whole number; 0 for no cap)", v.Value))
				continue
			}
			writeRate = float64(n)
		case "unlisted_tenants":
			switch u := Unlisted(v.Value); {
			case v.Kind == yaml.ScalarNode && (u == UnlistedDefaultTTL || u == UnlistedDeadLetter):
				unlisted = u
			default:
				report(lineErr(v, "unlisted_tenants", "%q is not a policy (want default_ttl or dead-letter)", v.Value))
			}
		default:
			report(lineErr(k, k.Value, "unknown field (known: strategy, default_ttl, min_ttl, max_ttl, record_real_timestamp, unlisted_tenants, metric_tenants, max_write_rate, tenants)"))
		}
	}

	if defaultTTL == nil {
		report(errors.New("line 1: default_ttl is missing"))
	} else if d, err := parseTTL(defaultTTL, "default_ttl"); err != nil {
		report(err)
	} else if d%time.Second != 0 {
		report(lineErr(defaultTTL, "default_ttl", "%q is not a whole number of seconds (it becomes the family's GC max-age)", defaultTTL.Value))
	} else {
		p.DefaultTTL = d
	}

	// The top-level bounds are the defaults of every tenant without its
	// own, and the bounds of unlisted tenants.
	var defaults boundNodes
	if minNode != nil {
		defaults.min, defaults.minNode = parseBound(minNode, "min_ttl", &errs)
	}
	if maxNode != nil {
		defaults.max, defaults.maxNode = parseBound(maxNode, "max_ttl", &errs)
	}
	if p.DefaultTTL > 0 {
		if b, err := defaults.bounds(p.DefaultTTL, "default_ttl", defaultTTL, "", nil); err != nil {
			report(err)
		} else {
			p.DefaultBounds = b
		}
	}
	offboarded := map[string]bool{}
	if tenantsNode != nil {
		p.Bounds = map[string]expiry.Bounds{}
		errs = append(errs, parseTenants(tenantsNode, p, defaults, offboarded)...)
	}
	metricTenants, merrs := metricTenantsOf(metricNode, p.Tenants, offboarded)
	if errs = append(errs, merrs...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	shortest := p.DefaultTTL
	for _, ttl := range p.Tenants {
		shortest = min(shortest, ttl)
	}
	return &Config{Policy: p, Unlisted: unlisted, WriteRate: writeRate, ShortestTTL: shortest, Version: Version(data), Offboarded: offboarded, metricTenants: metricTenants, raw: data}, nil
}

// boundNodes are min_ttl and max_ttl as read (nil nodes when not given).
type boundNodes struct {
	min, max         time.Duration
	minNode, maxNode *yaml.Node
}

// bounds checks min <= ttl <= max and fills in what is not given: min
// defaults to 0, max to ttl itself, so that an event may shorten its
// retention but not lengthen it unless the file says so. field names the
// TTL ("default_ttl", "tenants.acme"); inherited, when set, are the
// top-level bounds a tenant without its own takes.
func (b boundNodes) bounds(ttl time.Duration, field string, ttlNode *yaml.Node, tenant string, inherited *boundNodes) (expiry.Bounds, error) {
	own := b
	if inherited != nil {
		if b.minNode == nil {
			b.min, b.minNode = inherited.min, inherited.minNode
		}
		if b.maxNode == nil {
			b.max, b.maxNode = inherited.max, inherited.maxNode
		}
	}
	out := expiry.Bounds{Min: b.min, Max: ttl}
	if b.maxNode != nil {
		out.Max = b.max
	}
	// says names the bound, and where it came from when it is inherited.
	says := func(n, ownNode *yaml.Node, name string, d time.Duration) string {
		if n != ownNode {
			return fmt.Sprintf("the top-level %s %s (line %d): give %s a %s of its own", name, duration.Format(d), n.Line, tenant, name)
		}
		return name + " " + duration.Format(d)
	}
	if b.minNode != nil && out.Min > ttl {
		return out, lineErr(ttlNode, field, "TTL %s is shorter than %s; an event could never keep the tenant's own TTL",
			duration.Format(ttl), says(b.minNode, own.minNode, "min_ttl", out.Min))
	}
	if b.maxNode != nil && out.Max < ttl {
		return out, lineErr(ttlNode, field, "TTL %s is longer than %s; an event could never keep the tenant's own TTL",
			duration.Format(ttl), says(b.maxNode, own.maxNode, "max_ttl", out.Max))
	}
	return out, nil
}

// parseBound reads a min_ttl or max_ttl: 0 (min_ttl only) up to MaxTTL,
// whole milliseconds.
func parseBound(n *yaml.Node, field string, errs *[]error) (time.Duration, *yaml.Node) {
	if n.Kind != yaml.ScalarNode || n.Value == "" {
		*errs = append(*errs, lineErr(n, field, "want a duration such as 1h or 2d"))
		return 0, nil
	}
	d, err := duration.Parse(n.Value)
	switch {
	case err != nil:
		*errs = append(*errs, lineErr(n, field, "%v", err))
	case d < 0:
		*errs = append(*errs, lineErr(n, field, "%q must not be negative", n.Value))
	case d == 0 && strings.HasSuffix(field, "max_ttl"):
		*errs = append(*errs, lineErr(n, field, "%q must be positive", n.Value))
	case d > MaxTTL:
		*errs = append(*errs, lineErr(n, field, "%q is longer than %s", n.Value, duration.Format(MaxTTL)))
	case d%time.Millisecond != 0:
		*errs = append(*errs, lineErr(n, field, "%q is finer than a millisecond, the cell timestamp granularity", n.Value))
	default:
		return d, n
	}
	return 0, nil
}

// tenantFields are the keys of a tenant given as a mapping.
const tenantFields = "ttl, min_ttl, max_ttl"

func parseTenants(n *yaml.Node, p *expiry.Policy, defaults boundNodes, offboarded map[string]bool) []error {
	if n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return []error{lineErr(n, "tenants", "must be a mapping of tenant id to TTL, e.g. acme: 1h or acme: {ttl: 1h, max_ttl: 3h} (or acme: offboarded, for a tenant that has left)")}
	}
	var errs []error
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		id := k.Value
		if line, dup := lines[id]; dup {
			errs = append(errs, lineErr(k, "tenants."+id, "duplicate tenant (first at line %d)", line))
			continue
		}
		lines[id] = k.Line
		if err := rowkey.ValidateID("tenant id", id); err != nil {
			errs = append(errs, lineErr(k, "tenants", "%v", err))
			continue
		}
		field := "tenants." + id
		if v.Kind == yaml.ScalarNode && v.Value == Offboarded {
			offboarded[id] = true // no TTL: none of its events is written
			continue
		}
		ttlNode, own, ok := tenantEntry(v, field, &errs)
		if !ok {
			continue
		}
		d, err := parseTTL(ttlNode, field)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if d%time.Millisecond != 0 {
			errs = append(errs, lineErr(ttlNode, field, "%q is finer than a millisecond, the cell timestamp granularity", ttlNode.Value))
			continue
		}
		b, err := own.bounds(d, field, ttlNode, id, &defaults)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.Tenants[id] = d
		p.Bounds[id] = b
	}
	return errs
}

// Offboarded is the value of a tenant that has left (acme: offboarded):
// kept in the file to say so, with no TTL.
const Offboarded = "offboarded"

// tenantEntry reads a tenant's value: a TTL (acme: 1h) or a mapping of
// ttl and its bounds (acme: {ttl: 1h, max_ttl: 3h}).
func tenantEntry(v *yaml.Node, field string, errs *[]error) (*yaml.Node, boundNodes, bool) {
	var b boundNodes
	if v.Kind != yaml.MappingNode {
		return v, b, true
	}
	var ttl *yaml.Node
	n := len(*errs)
	seen := map[string]int{}
	for j := 0; j+1 < len(v.Content); j += 2 {
		fk, fv := v.Content[j], v.Content[j+1]
		if line, dup := seen[fk.Value]; dup {
			*errs = append(*errs, lineErr(fk, field+"."+fk.Value, "duplicate key (first at line %d)", line))
			continue
		}
		seen[fk.Value] = fk.Line
		switch fk.Value {
		case "ttl":
			ttl = fv
		case "min_ttl":
			b.min, b.minNode = parseBound(fv, field+".min_ttl", errs)
		case "max_ttl":
			b.max, b.maxNode = parseBound(fv, field+".max_ttl", errs)
		default:
			*errs = append(*errs, lineErr(fk, field+"."+fk.Value, "unknown field (known: %s)", tenantFields))
		}
	}
	if ttl == nil {
		*errs = append(*errs, lineErr(v, field, "ttl is missing (a tenant given as a mapping has ttl, and optionally min_ttl and max_ttl)"))
	}
	return ttl, b, len(*errs) == n
}

func parseTTL(n *yaml.Node, field string) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode || n.Value == "" {
		return 0, lineErr(n, field, "want a duration such as 1h or 2d")
	}
	d, err := duration.Parse(n.Value)
	if err != nil {
		return 0, lineErr(n, field, "%v", err)
	}
	if d <= 0 {
		return 0, lineErr(n, field, "TTL %q must be positive", n.Value)
	}
	if d < MinTTL || d > MaxTTL {
		return 0, lineErr(n, field, "TTL %q is outside %s..%s", n.Value, duration.Format(MinTTL), duration.Format(MaxTTL))
	}
	return d, nil
}

func lineErr(n *yaml.Node, field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if field == "" {
		return fmt.Errorf("line %d: %s", n.Line, msg)
	}
	return fmt.Errorf("line %d: %s: %s", n.Line, field, msg)
}
