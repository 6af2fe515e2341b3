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
	"os"
	"strconv"
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
	// ShortestTTL is the shortest TTL the file gives anyone (default_ttl
	// included): the longest a copy of an event whose tenant cannot be
	// trusted may live.
	ShortestTTL time.Duration
	// Version is a short hash of the file's bytes; it names the config in
	// logs, metrics and traces.
	Version string

	raw []byte
}

// Load reads and parses a tenants file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tenants file: %w", err)
	}
	cfg, err := Parse(data)
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
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, lineErr(&next, "", "more than one YAML document")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("line 1: the file must be a YAML mapping with strategy, default_ttl and tenants")
	}
	p := &expiry.Policy{Strategy: expiry.DefaultExpiration, Tenants: map[string]time.Duration{}}
	var errs []error
	report := func(err error) { errs = append(errs, err) }

	var defaultTTL, tenantsNode *yaml.Node
	unlisted := UnlistedDefaultTTL
	seen := map[string]*yaml.Node{}
	root := doc.Content[0]
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
		case "unlisted_tenants":
			switch u := Unlisted(v.Value); {
			case v.Kind == yaml.ScalarNode && (u == UnlistedDefaultTTL || u == UnlistedDeadLetter):
				unlisted = u
			default:
				report(lineErr(v, "unlisted_tenants", "%q is not a policy (want default_ttl or dead-letter)", v.Value))
			}
		default:
			report(lineErr(k, k.Value, "unknown field (known: strategy, default_ttl, record_real_timestamp, unlisted_tenants, tenants)"))
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

	if tenantsNode != nil {
		errs = append(errs, parseTenants(tenantsNode, p.Tenants)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	shortest := p.DefaultTTL
	for _, ttl := range p.Tenants {
		shortest = min(shortest, ttl)
	}
	return &Config{Policy: p, Unlisted: unlisted, ShortestTTL: shortest, Version: Version(data), raw: data}, nil
}

func parseTenants(n *yaml.Node, into map[string]time.Duration) []error {
	if n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return []error{lineErr(n, "tenants", "must be a mapping of tenant id to TTL, e.g. acme: 1h")}
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
		d, err := parseTTL(v, "tenants."+id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if d%time.Millisecond != 0 {
			errs = append(errs, lineErr(v, "tenants."+id, "%q is finer than a millisecond, the cell timestamp granularity", v.Value))
			continue
		}
		into[id] = d
	}
	return errs
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
