package pipeline

import (
	"testing"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/ingest"
	"github.com/cellttl/cellttl/tenants"
)

// A tenant that has left writes nothing and letters nothing, whether the
// tenants file lists it as offboarded or drops it while the ledger holds
// its offboarding: not the unlisted policy's default_ttl, not a dead
// letter for an event it cannot read, nor for unlisted_tenants:
// dead-letter. A tenant still listed beside it is written as before.
func TestOffboardedTenantWritesNothing(t *testing.T) {
	base := time.Date(2026, 11, 21, 9, 0, 0, 123_000_000, time.UTC)
	listed, _ := ownTTLSetup(t, "strategy: default-expiration\ndefault_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  acme: offboarded\n  globex: 3d\n")
	dropped, pc := ownTTLSetup(t, "strategy: default-expiration\ndefault_ttl: 2d\nunlisted_tenants: dead-letter\ntenants:\n  globex: 3d\n")
	if !listed.Offboarded["acme"] || listed.Policy.Tenants["acme"] != 0 {
		t.Fatalf("acme: offboarded parsed as %v, TTL %v", listed.Offboarded, listed.Policy.Tenants["acme"])
	}
	ledger := erasure.NewLedger([]erasure.Erasure{{Tenant: "acme", Offboard: true, UpTo: erasure.Whole, RecordedAt: base}}, base)
	d := &pc.Decoder
	for _, c := range []struct {
		name   string
		cfg    *tenants.Config
		ledger *erasure.Ledger
	}{{"listed as offboarded", listed, nil}, {"dropped from the file, offboarded in the ledger", dropped, ledger}} {
		for _, value := range []string{
			`{"event_id":"e-1","tenant_id":"acme","user_id":"u1","occurred_at":"2026-11-21T09:00:00.123Z"}`,
			`{"event_id":"e-2","tenant_id":"acme","occurred_at":"2099-01-01T00:00:00Z"}`,
			`{"event_id":"e-3","tenant_id":"acme","occurred_at":"yesterday"}`,
			`{"event_id":"e-4","tenant_id":"acme","user_id":"u1","occurred_at":"2026-11-21T09:00:00.123Z","ttl":"forever"}`,
		} {
			msg := ingest.Message{Value: []byte(value), Time: base}
			if dec := Decide(d, c.cfg, c.ledger, &msg, base.Add(time.Minute), time.Time{}); dec.Fate != Erased {
				t.Errorf("%s: %s: fate %d, want Erased", c.name, value, dec.Fate)
			}
		}
		msg := ingest.Message{Value: []byte(`{"event_id":"e-5","tenant_id":"globex","user_id":"u1","occurred_at":"2026-11-21T09:00:00.123Z"}`), Time: base}
		if dec := Decide(d, c.cfg, c.ledger, &msg, base.Add(time.Minute), time.Time{}); dec.Fate != Write {
			t.Errorf("%s: globex: fate %d, want Write", c.name, dec.Fate)
		}
	}
}
