package release

import (
	"testing"
)

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"0.1.0", "0.1.0", 0}, {"0.1.0", "0.2.0", -1}, {"0.10.0", "0.9.9", 1}, {"v1.0.0", "0.99.99", 1}, {"1.2.3", "1.2.4", -1},
		// Pre-releases come before their release, after the one before.
		{"0.2.3-dev", "0.2.3", -1}, {"0.2.3-dev", "0.2.2", 1}, {"0.2.3-dev", "0.2.3-dev", 0},
		// Semantic versioning's own example order.
		{"1.0.0-alpha", "1.0.0-alpha.1", -1}, {"1.0.0-alpha.1", "1.0.0-alpha.beta", -1}, {"1.0.0-alpha.beta", "1.0.0-beta", -1},
		{"1.0.0-beta", "1.0.0-beta.2", -1}, {"1.0.0-beta.2", "1.0.0-beta.11", -1}, {"1.0.0-beta.11", "1.0.0-rc.1", -1}, {"1.0.0-rc.1", "1.0.0", -1},
	} {
		if got, err := Compare(c.a, c.b); err != nil || got != c.want {
			t.Errorf("Compare(%s, %s) = %d, %v; want %d", c.a, c.b, got, err, c.want)
		}
		if got, err := Compare(c.b, c.a); err != nil || got != -c.want {
			t.Errorf("Compare(%s, %s) = %d, %v; want %d", c.b, c.a, got, err, -c.want)
		}
	}
	for _, bad := range []string{"", "1.2", "1.2.3.4", "1.x.3", "1.02.3", "1.-1.3", "1.2.3-", "1.2.3-a..b", "1.2.3-a_b", "1.2.3+build"} {
		if _, err := Compare(bad, "1.0.0"); err == nil {
			t.Errorf("Compare(%q) read it as a version", bad)
		}
	}
}

// What a table records is a release: Parse refuses a pre-release, and
// this build's oldest writer is one.
func TestParseTakesReleasesOnly(t *testing.T) {
	if _, err := Parse("0.2.3-dev"); err == nil {
		t.Error("Parse took a pre-release")
	}
	if p, err := Parse("v1.2.3"); err != nil || p != [3]int{1, 2, 3} {
		t.Errorf("Parse(v1.2.3) = %v, %v", p, err)
	}
	if _, err := Parse(OldestWriter); err != nil {
		t.Errorf("OldestWriter: %v", err)
	}
	if c, err := Compare(Core(Version), OldestWriter); err != nil || c < 0 {
		t.Errorf("this build (%s) is older than its oldest writer %s (%v)", Version, OldestWriter, err)
	}
}

// released reports whether v names a release: no pre-release part.
func released(v string) bool {
	_, pre, err := split(v)
	return err == nil && pre == ""
}

func TestCore(t *testing.T) {
	for v, want := range map[string]string{"0.2.3-dev": "0.2.3", "v1.0.0-rc.1": "1.0.0", "0.2.2": "0.2.2"} {
		if got := Core(v); got != want {
			t.Errorf("Core(%s) = %s, want %s", v, got, want)
		}
	}
	if released("0.2.3-dev") || !released("0.2.3") || released("bad") {
		t.Error("released takes a pre-release for a release, or the reverse")
	}
}
