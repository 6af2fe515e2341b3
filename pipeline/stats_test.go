package pipeline

import (
	"testing"
	"unsafe"
)

// Regression: tenant ids alias message values, and the
// stats kept them as map keys for the life of the process, pinning each
// whole value (100 events of 1 MiB with distinct tenants held 99 MiB). The
// key must own its bytes: changing the value afterwards must not change it.
func TestTenantStatsOwnTheirKeys(t *testing.T) {
	var s Stats
	value := []byte(`{"tenant_id":"acme","pad":"` + string(make([]byte, 1<<20)) + `"}`)
	id := unsafe.String(&value[14], 4) // "acme", as the decoder returns it
	s.Tenant(id).Consumed.Add(1)
	copy(value[14:], "XXXX") // the message is gone and its buffer reused
	var ids []string
	s.Each(func(tenant string, _ *TenantStats) { ids = append(ids, tenant) })
	if len(ids) != 1 || ids[0] != "acme" {
		t.Fatalf("tenants %q after the value changed, want [acme]: the key aliases the value", ids)
	}
	if unsafe.StringData(ids[0]) == &value[14] {
		t.Error("the key shares the value's memory")
	}
}
