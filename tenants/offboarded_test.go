package tenants

import (
	"strings"
	"testing"
	"time"
)

// An edit listing again a tenant that has left is refused, and judged
// again at the next reload, which takes it once the tenant has rejoined;
// a tenant listed before the edit, and one listed as offboarded, pass.
func TestReloaderRefusesATenantThatLeft(t *testing.T) {
	r, path, logs := newReloader(t, "strategy: default-expiration\ndefault_ttl: 2d\ntenants:\n  acme: 1h\n  globex: offboarded\n")
	leftAt := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	gone := map[string]bool{"globex": true, "acme": true}
	r.SetGate(RefuseReturning(func(id string) (time.Time, bool) { return leftAt, gone[id] }))
	if !r.Current().Offboarded["globex"] {
		t.Fatalf("globex: offboarded not read: %v", r.Current().Offboarded)
	}
	write(t, path, "strategy: default-expiration\ndefault_ttl: 2d\ntenants:\n  acme: 2h\n  globex: 3d\n")
	if r.Reload() {
		t.Fatal("an edit listing globex again, which left, was taken")
	}
	st := r.Status()
	if st.LastOK || !strings.Contains(st.LastError, "tenants.globex: the tenant left at 2026-12-01T00:00:00Z") || strings.Contains(st.LastError, "tenants.acme") {
		t.Errorf("refusal: %+v", st)
	}
	if !strings.Contains(logs.String(), "edit refused") {
		t.Errorf("no log line of the refusal:\n%s", logs.String())
	}
	gone["globex"] = false // the rejoin reached the ledger
	if !r.Poll() && !r.Reload() {
		t.Fatalf("the same edit is still refused after the rejoin: %+v", r.Status())
	}
	if r.Current().Policy.Tenants["globex"] != 3*24*time.Hour {
		t.Errorf("globex's TTL after the rejoin: %v", r.Current().Policy.Tenants["globex"])
	}
}

// worker check --against says what an edit does to a tenant removed,
// offboarded, or listed again.
func TestLeavingNotes(t *testing.T) {
	parse := func(s string) *Config {
		t.Helper()
		c, err := Parse([]byte("strategy: default-expiration\ndefault_ttl: 2d\ntenants:\n" + s))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	old := parse("  acme: 1h\n  globex: 3d\n  initech: offboarded\n")
	next := parse("  globex: offboarded\n  initech: 2d\n")
	plan := CompareConfigs(old, next)
	kinds := map[string]string{}
	for _, c := range plan.Tenants {
		kinds[c.Tenant] = c.Kind()
	}
	if kinds["acme"] != "removed" || kinds["globex"] != "offboarded" || kinds["initech"] != "added" {
		t.Errorf("kinds %v", kinds)
	}
	notes := strings.Join(Leaving(old, next), "\n")
	for _, want := range []string{"a tenant removed (acme) is only unlisted", "offboarded (globex)", "listed again after they were offboarded (initech)"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	b, err := plan.Tenants[1].MarshalJSON()
	var back TenantChange
	if err != nil || back.UnmarshalJSON(b) != nil || !back.Offboarded || back.NewListed {
		t.Errorf("the offboarded change through JSON: %s -> %+v (%v)", b, back, err)
	}
}
