package tenants

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// LeftAt says when a tenant left (worker offboard), while the erasure
// ledger holds its offboarding: none of its events is written then,
// whatever the tenants file says.
type LeftAt func(tenant string) (time.Time, bool)

// RefuseReturning is a Reloader gate: it refuses an edit that lists with
// a TTL a tenant the running config does not, while that tenant has left.
// Listed so, none of its events would be written (the offboarding is in
// force), and the edit would say otherwise: a tenant comes back only by
// `worker offboard --rejoin`, after which the edit is taken. A tenant
// listed before the edit is left alone: the file not yet edited after an
// offboarding.
func RefuseReturning(left LeftAt) func(cur, next *Config) error {
	return func(cur, next *Config) error {
		var errs []error
		for _, id := range sortedIDs(next.Policy.Tenants) {
			if _, was := cur.Policy.Tenants[id]; was {
				continue
			}
			if at, ok := left(id); ok {
				errs = append(errs, fmt.Errorf("tenants.%s: the tenant left at %s (worker offboard), and listed again none of its events would be written: "+
					"run `worker offboard --rejoin --tenant %s` first, or list it as `%s: %s`", id, at.Format(time.RFC3339), id, id, Offboarded))
			}
		}
		return errors.Join(errs...)
	}
}

// ListedButLeft are the tenants cfg lists with a TTL that have left: a
// worker starting says so, as none of their events is written.
func ListedButLeft(cfg *Config, left LeftAt) []string {
	var out []string
	for _, id := range sortedIDs(cfg.Policy.Tenants) {
		if _, ok := left(id); ok {
			out = append(out, id)
		}
	}
	return out
}

func sortedIDs(m map[string]time.Duration) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
