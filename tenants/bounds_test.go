package tenants

import (
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/expiry"
)

// A tenant may be a mapping of ttl and its bounds, in flow or block style;
// the scalar form stays valid. max_ttl defaults to the tenant's own TTL
// (an event may shorten its retention, not lengthen it), min_ttl to 0; the
// top-level bounds are the defaults of tenants without their own and the
// bounds of unlisted tenants.
func TestBounds(t *testing.T) {
	cfg, err := Parse([]byte(`strategy: default-expiration
default_ttl: 2d
tenants:
  acme: {ttl: 1h, max_ttl: 3h, min_ttl: 10m}
  globex:
    ttl: 90d
    min_ttl: 7d
  initech: 1d
`))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy
	want := map[string]expiry.Bounds{
		"acme":    {Min: 10 * time.Minute, Max: 3 * time.Hour},
		"globex":  {Min: 7 * 24 * time.Hour, Max: 90 * 24 * time.Hour},
		"initech": {Min: 0, Max: 24 * time.Hour},
		"unknown": {Min: 0, Max: 48 * time.Hour},
	}
	for tenant, w := range want {
		if b, _ := p.TenantBounds(tenant); b != w {
			t.Errorf("%s: bounds %+v, want %+v", tenant, b, w)
		}
	}
	if p.TTL("acme") != time.Hour || p.TTL("globex") != 90*24*time.Hour {
		t.Errorf("TTLs %v %v", p.TTL("acme"), p.TTL("globex"))
	}

	cfg, err = Parse([]byte("default_ttl: 2d\nmin_ttl: 5m\nmax_ttl: 7d\ntenants:\n  acme: 1h\n  globex: {ttl: 3d, max_ttl: 30d}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for tenant, w := range map[string]expiry.Bounds{
		"acme":    {Min: 5 * time.Minute, Max: 7 * 24 * time.Hour},
		"globex":  {Min: 5 * time.Minute, Max: 30 * 24 * time.Hour},
		"unknown": {Min: 5 * time.Minute, Max: 7 * 24 * time.Hour},
	} {
		if b, _ := cfg.Policy.TenantBounds(tenant); b != w {
			t.Errorf("top-level bounds, %s: %+v, want %+v", tenant, b, w)
		}
	}
}

// Bounds that contradict a TTL, or that are not durations, are refused
// with the line, the field and the values: the reloader keeps the last
// good file.
func TestBadBounds(t *testing.T) {
	tests := []struct{ file, want string }{
		{"default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, max_ttl: 30m}\n", "line 3: tenants.acme: TTL 1h is longer than max_ttl 30m"},
		{"default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, min_ttl: 2h}\n", "line 3: tenants.acme: TTL 1h is shorter than min_ttl 2h"},
		{"default_ttl: 2d\nmax_ttl: 7d\ntenants:\n  acme: 30d\n", "line 4: tenants.acme: TTL 30d is longer than the top-level max_ttl 7d (line 2): give acme a max_ttl of its own"},
		{"default_ttl: 2d\nmin_ttl: 1h\ntenants:\n  acme: 30m\n", "tenants.acme: TTL 30m is shorter than the top-level min_ttl 1h (line 2)"},
		{"default_ttl: 2d\nmax_ttl: 1d\n", "line 1: default_ttl: TTL 2d is longer than max_ttl 1d"},
		{"default_ttl: 2d\ntenants:\n  acme: {max_ttl: 3h}\n", "line 3: tenants.acme: ttl is missing"},
		{"default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, max: 3h}\n", "tenants.acme.max: unknown field (known: ttl, min_ttl, max_ttl)"},
		{"default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, max_ttl: soon}\n", `tenants.acme.max_ttl: invalid duration "soon"`},
		{"default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, min_ttl: -1m}\n", `tenants.acme.min_ttl: "-1m" must not be negative`},
		{"default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, max_ttl: 100000d}\n", `tenants.acme.max_ttl: "100000d" is longer than 3650d`},
		{"default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, max_ttl: 2h500us}\n", `"2h500us" is finer than a millisecond`},
		{"default_ttl: 2d\nmax_ttl: 0s\n", `max_ttl: "0s" must be positive`},
		{"default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, ttl: 2h}\n", "tenants.acme.ttl: duplicate key"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.file))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q:\n got %v\nwant %q", tt.file, err, tt.want)
		}
	}
}

// An edit of bounds alone is a change of its tenant, said with the bounds;
// a max_ttl left to follow the TTL is not said twice.
func TestCompareBounds(t *testing.T) {
	old, err := Parse([]byte("default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, max_ttl: 3h}\n  globex: 3d\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse([]byte("default_ttl: 2d\ntenants:\n  acme: {ttl: 1h, max_ttl: 7d, min_ttl: 10m}\n  globex: 4d\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := Compare(old.Policy, cfg.Policy)
	if len(p.Tenants) != 2 || !p.SafeAtRuntime() {
		t.Fatalf("plan %+v", p)
	}
	if got, want := p.Tenants[0].String(), "acme 1h→1h, own TTLs 0s..3h→10m..7d"; got != want {
		t.Errorf("bounds edit said %q, want %q", got, want)
	}
	if got, want := p.Tenants[1].String(), "globex 3d→4d"; got != want {
		t.Errorf("TTL edit said %q, want %q", got, want)
	}
	b, err := p.Tenants[0].MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back TenantChange
	if err := back.UnmarshalJSON(b); err != nil || back != p.Tenants[0] {
		t.Errorf("JSON %s read back as %+v, %v", b, back, err)
	}
}

// A running worker's reloader refuses bounds that contradict a TTL and
// keeps the last good file; a bounds edit that holds is applied, and its
// log says it.
func TestReloadBounds(t *testing.T) {
	r, path, logs := newReloader(t, base)
	good := r.Current()
	write(t, path, strings.Replace(base, "acme: 1h", "acme: {ttl: 1h, max_ttl: 30m}", 1))
	if r.Reload() || r.Current() != good {
		t.Fatal("contradictory bounds applied")
	}
	if s := r.Status(); s.LastOK || !strings.Contains(s.LastError, "tenants.acme: TTL 1h is longer than max_ttl 30m") {
		t.Errorf("status %+v", s)
	}
	write(t, path, strings.Replace(base, "acme: 1h", "acme: {ttl: 1h, max_ttl: 3h}", 1))
	if !r.Reload() {
		t.Fatalf("bounds edit refused: %+v", r.Status())
	}
	if b, _ := r.Current().Policy.TenantBounds("acme"); b.Max != 3*time.Hour {
		t.Errorf("acme's bounds after the reload: %+v", b)
	}
	if !strings.Contains(logs.String(), "own TTLs 0s..1h→0s..3h") {
		t.Errorf("reload log does not name the bounds change:\n%s", logs)
	}
}
