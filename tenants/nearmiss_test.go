package tenants

import "testing"

// An unlisted id within two edits of a listed tenant is a misspelt tenant,
// named; anything further is a producer's own string, not named. A tie
// goes to the first tenant in order, whatever the map's.
func TestNearMiss(t *testing.T) {
	cfg, err := Parse([]byte("default_ttl: 2d\ntenants:\n  acme: 1h\n  acne: 1h\n  globex: 3d\n  initech: 2d\n"))
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"acme-": "acme", "Acme": "acme", "acm": "acme", "gl0bex": "globex", "globexxx": "globex", "globexxxx": "", "inittech": "initech",
		"acnf": "acne", "acxe": "acme", // acme and acne one edit each: the first in order
		"alice@example.com": "", "": "", "u-42": "", "globe": "globex",
	} {
		for range 20 {
			if got := cfg.NearMiss(id); got != want {
				t.Fatalf("%q: near %q, want %q", id, got, want)
			}
		}
	}
}
