package expiry

import (
	"math/rand/v2"
	"testing"
	"testing/quick"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The worked example of the TTL reference: default 48h, acme 1h, globex 72h.
func TestWorkedExample(t *testing.T) {
	base := mustTime(t, "2026-04-30T09:00:00.123456Z")
	def := &Policy{Strategy: DefaultExpiration, DefaultTTL: 48 * time.Hour, Tenants: map[string]time.Duration{"acme": time.Hour, "globex": 72 * time.Hour}}
	one := &Policy{Strategy: OneSecond, DefaultTTL: 48 * time.Hour, Tenants: def.Tenants}
	tests := []struct {
		name          string
		p             *Policy
		tenant        string
		wantTimestamp string
		wantExpiry    string
	}{
		{"acme 47h earlier", def, "acme", "2026-04-28T10:00:00.123Z", "2026-04-30T10:00:00.123Z"},
		{"globex 24h later", def, "globex", "2026-05-01T09:00:00.123Z", "2026-05-03T09:00:00.123Z"},
		{"unknown tenant gets the default", def, "initech", "2026-04-30T09:00:00.123Z", "2026-05-02T09:00:00.123Z"},
		{"one-second acme: timestamp is the expiry", one, "acme", "2026-04-30T10:00:00.123Z", "2026-04-30T10:00:00.123Z"},
		{"one-second unknown tenant", one, "x", "2026-05-02T09:00:00.123Z", "2026-05-02T09:00:00.123Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.p.Cell(tt.tenant, base)
			if want := mustTime(t, tt.wantTimestamp).UnixMicro(); c.Timestamp != want {
				t.Errorf("timestamp = %s, want %s", time.UnixMicro(c.Timestamp).UTC().Format(time.RFC3339Nano), tt.wantTimestamp)
			}
			if want := mustTime(t, tt.wantExpiry); !c.Expiry.Equal(want) {
				t.Errorf("expiry = %s, want %s", c.Expiry.Format(time.RFC3339Nano), tt.wantExpiry)
			}
			if got := tt.p.ExpiryOf(c.Timestamp); !got.Equal(c.Expiry) {
				t.Errorf("ExpiryOf(timestamp) = %s, want %s", got, c.Expiry)
			}
		})
	}
}

func TestGCMaxAge(t *testing.T) {
	p := &Policy{Strategy: DefaultExpiration, DefaultTTL: 48 * time.Hour}
	if got := p.GCMaxAge(); got != 48*time.Hour {
		t.Errorf("default-expiration max-age = %s, want 48h", got)
	}
	p.Strategy = OneSecond
	if got := p.GCMaxAge(); got != time.Second {
		t.Errorf("one-second max-age = %s, want 1s", got)
	}
}

func randomPolicy(r *rand.Rand, s Strategy) (*Policy, time.Duration, time.Time) {
	def := time.Duration(1+r.Int64N(3650*24*3600)) * time.Second
	ttl := time.Duration(1000+r.Int64N(3650*24*3600*1000)) * time.Millisecond
	// Any instant between 1900 and 2200, with nanoseconds.
	base := time.Unix(-2208988800+r.Int64N(9467280000), r.Int64N(1e9)).UTC()
	return &Policy{Strategy: s, DefaultTTL: def, Tenants: map[string]time.Duration{"t": ttl}}, ttl, base
}

// Property: under default-expiration, timestamp + default_ttl equals
// trunc_ms(base) + tenant_ttl; under one-second the timestamp is that sum.
// Either way the timestamp is a whole millisecond.
func TestTimestampProperty(t *testing.T) {
	for _, s := range []Strategy{DefaultExpiration, OneSecond} {
		t.Run(s.String(), func(t *testing.T) {
			f := func(seed1, seed2 uint64) bool {
				r := rand.New(rand.NewPCG(seed1, seed2))
				p, ttl, base := randomPolicy(r, s)
				c := p.Cell("t", base)
				// trunc_ms, computed independently of TruncMillis.
				truncBase := time.UnixMilli(floorDiv(base.UnixNano(), 1e6)).UTC()
				want := truncBase.Add(ttl).UnixMicro()
				var lhs int64
				if s == DefaultExpiration {
					lhs = c.Timestamp + p.DefaultTTL.Microseconds()
				} else {
					lhs = c.Timestamp
				}
				if lhs != want {
					t.Logf("base %s ttl %s default %s: got %d want %d", base, ttl, p.DefaultTTL, lhs, want)
					return false
				}
				return c.Timestamp%1000 == 0 && c.Expiry.UnixMicro() == want
			}
			if err := quick.Check(f, &quick.Config{MaxCount: 20000}); err != nil {
				t.Error(err)
			}
		})
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && (a < 0) {
		q--
	}
	return q
}

func TestMillisecondGranularity(t *testing.T) {
	p := &Policy{Strategy: DefaultExpiration, DefaultTTL: time.Hour}
	for _, base := range []string{
		"2026-04-30T09:00:00.123999999Z", // truncated, never rounded up
		"2026-04-30T09:00:00.123000001Z",
		"2026-04-30T09:00:00.123Z",
	} {
		c := p.Cell("x", mustTime(t, base))
		if want := mustTime(t, "2026-04-30T09:00:00.123Z").UnixMicro(); c.Timestamp != want {
			t.Errorf("base %s: timestamp %d, want %d", base, c.Timestamp, want)
		}
	}
	// Before 1970 truncation goes towards the past too, keeping the
	// timestamp a multiple of 1000.
	pre := time.Unix(-1, 999_500_000) // 1969-12-31T23:59:59.9995
	if c := p.Cell("x", pre); c.Timestamp%1000 != 0 || c.Expiry.UnixMicro() != -500+time.Hour.Microseconds()-500 {
		t.Errorf("pre-1970 base: timestamp %d expiry %d", c.Timestamp, c.Expiry.UnixMicro())
	}
}

// ReadFrom must hide exactly the cells that are Expired, whatever the
// strategy: the write rule and the read rule come from one place.
func TestReadFromAgreesWithExpired(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []Strategy{DefaultExpiration, OneSecond} {
		for range 20000 {
			p, _, base := randomPolicy(r, s)
			c := p.Cell("t", base)
			// A "now" within a few ms of the expiry, where off-by-one bites.
			now := c.Expiry.Add(time.Duration(r.Int64N(5000)-2500) * time.Microsecond)
			visible := c.Timestamp >= p.ReadFrom(now)
			if visible == Expired(c.Expiry, now) {
				t.Fatalf("%s: expiry %s now %s: visible=%t expired=%t", s, c.Expiry.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), visible, Expired(c.Expiry, now))
			}
		}
	}
}

func TestParseStrategy(t *testing.T) {
	for _, s := range []Strategy{DefaultExpiration, OneSecond} {
		got, err := ParseStrategy(s.String())
		if err != nil || got != s {
			t.Errorf("ParseStrategy(%q) = %v, %v", s.String(), got, err)
		}
	}
	if _, err := ParseStrategy("one_second"); err == nil {
		t.Error("ParseStrategy accepted one_second")
	}
}
