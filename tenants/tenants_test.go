package tenants

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellttl/cellttl/expiry"
)

func TestGoodFiles(t *testing.T) {
	tests := []struct {
		file     string
		strategy expiry.Strategy
		def      time.Duration
		record   bool
		ttls     map[string]time.Duration
		unlisted Unlisted
	}{
		{"good.yaml", expiry.DefaultExpiration, 48 * time.Hour, true, map[string]time.Duration{
			"acme": time.Hour, "globex": 72 * time.Hour, "initech": 36 * time.Hour, "hooli": 90 * time.Minute}, UnlistedDefaultTTL},
		{"one-second.yaml", expiry.OneSecond, 36 * time.Hour, false, map[string]time.Duration{"acme": time.Hour}, UnlistedDeadLetter},
		{"minimal.yaml", expiry.DefaultExpiration, time.Hour, false, map[string]time.Duration{}, UnlistedDefaultTTL},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			cfg, err := Load(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			p := cfg.Policy
			if p.Strategy != tt.strategy || p.DefaultTTL != tt.def || p.RecordRealTimestamp != tt.record {
				t.Errorf("got strategy %s default %s record %t", p.Strategy, p.DefaultTTL, p.RecordRealTimestamp)
			}
			if len(p.Tenants) != len(tt.ttls) {
				t.Errorf("got %d tenants, want %d", len(p.Tenants), len(tt.ttls))
			}
			for id, want := range tt.ttls {
				if got := p.TTL(id); got != want {
					t.Errorf("TTL(%s) = %s, want %s", id, got, want)
				}
			}
			if got := p.TTL("not-listed"); got != tt.def {
				t.Errorf("unlisted tenant TTL = %s, want default %s", got, tt.def)
			}
			if cfg.Unlisted != tt.unlisted {
				t.Errorf("unlisted_tenants %q, want %q", cfg.Unlisted, tt.unlisted)
			}
			if len(cfg.Version) != 12 {
				t.Errorf("version %q, want 12 hex digits", cfg.Version)
			}
		})
	}
}

// Every bad file is refused with an error that names the line and quotes
// the value or field at fault.
func TestBadFiles(t *testing.T) {
	want := map[string][]string{
		"duplicate-tenant.bad.yaml":    {"line 6", "tenants.acme", "duplicate tenant (first at line 4)"},
		"duplicate-key.bad.yaml":       {"line 3", "default_ttl", "duplicate key"},
		"unknown-field.bad.yaml":       {"line 3", "retention", "unknown field"},
		"bad-duration.bad.yaml":        {"line 3", "tenants.acme", `"soon"`},
		"zero-ttl.bad.yaml":            {"line 3", "tenants.acme", `"0s" must be positive`},
		"negative-ttl.bad.yaml":        {"line 3", "tenants.acme", `"-1h" must be positive`},
		"absurd-ttl.bad.yaml":          {"line 3", "tenants.acme", `"100000d" is outside 1s..3650d`},
		"sub-millisecond.bad.yaml":     {"line 3", "tenants.acme", `"1h1500us" is finer than a millisecond`},
		"fractional-default.bad.yaml":  {"line 1", "default_ttl", `"90500ms" is not a whole number of seconds`},
		"bad-strategy.bad.yaml":        {"line 1", "strategy", `"two-second"`},
		"missing-default.bad.yaml":     {"default_ttl is missing"},
		"hash-in-tenant.bad.yaml":      {"line 3", `"ac#me"`, "'#'"},
		"bad-bool.bad.yaml":            {"line 2", "record_real_timestamp", `"yes please"`},
		"tenants-list.bad.yaml":        {"line 2", "tenants", "mapping"},
		"not-a-mapping.bad.yaml":       {"line 1", "mapping"},
		"comments-only.bad.yaml":       {"line 1", "nothing but comments", "strategy, default_ttl and tenants"},
		"bad-indent.bad.yaml":          {"line 4"},
		"bad-unlisted.bad.yaml":        {"line 2", "unlisted_tenants", `"drop" is not a policy`},
		"bad-write-rate.bad.yaml":      {"line 2", "max_write_rate", `"5k" is not a number of rows per second`},
		"negative-write-rate.bad.yaml": {"line 2", "max_write_rate", `"-10"`},
		"metric-offboarded.bad.yaml":   {"line 2", "metric_tenants", `"acme" is offboarded`},
		"offboarded-ttl.bad.yaml":      {"line 3", "tenants.acme", `"offboarded"`},
	}
	files, _ := filepath.Glob("testdata/*.bad.yaml")
	if len(files) != len(want) {
		t.Errorf("%d bad files in testdata, %d in the table", len(files), len(want))
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			_, err := Load(f)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), f) {
				t.Errorf("error %q does not name the file", err)
			}
			for _, s := range want[name] {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestAllErrorsReported(t *testing.T) {
	_, err := Parse([]byte("default_ttl: 0s\nbogus: 1\ntenants:\n  a: 1x\n"))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, s := range []string{"line 1: default_ttl", "line 2: bogus", "line 4: tenants.a"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

// The repo's own tenants.yaml is valid and is the documented ten-customer
// example: most at two days, one at an hour, one at three days.
func TestShippedFile(t *testing.T) {
	cfg, err := Load("../tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy
	count := map[time.Duration]int{}
	for _, ttl := range p.Tenants {
		count[ttl]++
	}
	if len(p.Tenants) != 10 || count[time.Hour] != 1 || count[72*time.Hour] != 1 || count[48*time.Hour] != 8 || p.DefaultTTL != 48*time.Hour {
		t.Errorf("tenants.yaml: default %s, TTL counts %v", p.DefaultTTL, count)
	}
}

func TestVersionChangesWithContent(t *testing.T) {
	a, _ := os.ReadFile("testdata/good.yaml")
	b := append([]byte{}, a...)
	b = append(b, '\n')
	if Version(a) == Version(b) || Version(a) != Version(append([]byte{}, a...)) {
		t.Error("version is not a function of the bytes")
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		data, _ := os.ReadFile(file)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever is accepted satisfies the invariants the worker relies on.
		p := cfg.Policy
		if p.DefaultTTL < MinTTL || p.DefaultTTL > MaxTTL || p.DefaultTTL%time.Second != 0 {
			t.Fatalf("accepted default_ttl %s", p.DefaultTTL)
		}
		for id, ttl := range p.Tenants {
			if ttl < MinTTL || ttl > MaxTTL || ttl%time.Millisecond != 0 || id == "" || strings.ContainsRune(id, '#') {
				t.Fatalf("accepted tenant %q TTL %s", id, ttl)
			}
		}
	})
}

// max_write_rate is the rows per second each worker may send: absent or 0,
// no cap.
func TestWriteRate(t *testing.T) {
	for file, want := range map[string]float64{
		"default_ttl: 2d\n":                        0,
		"default_ttl: 2d\nmax_write_rate: 0\n":     0,
		"default_ttl: 2d\nmax_write_rate: 20000\n": 20000,
	} {
		cfg, err := Parse([]byte(file))
		if err != nil || cfg.WriteRate != want {
			t.Errorf("%q: write rate %v, %v; want %v", file, cfg.WriteRate, err, want)
		}
	}
}
