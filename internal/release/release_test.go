package release

import "testing"

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"0.1.0", "0.1.0", 0}, {"0.1.0", "0.2.0", -1}, {"0.10.0", "0.9.9", 1}, {"v1.0.0", "0.99.99", 1}, {"1.2.3", "1.2.4", -1},
	} {
		if got, err := Compare(c.a, c.b); err != nil || got != c.want {
			t.Errorf("Compare(%s, %s) = %d, %v; want %d", c.a, c.b, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "1.2", "1.2.3.4", "1.x.3", "1.02.3", "1.-1.3", "1.2.3-rc1"} {
		if _, err := Compare(bad, "1.0.0"); err == nil {
			t.Errorf("Compare(%q) read it as a version", bad)
		}
	}
	if _, err := Compare(Version, OldestWriter); err != nil {
		t.Errorf("this release's versions: %v", err)
	}
}
