// Package erasure is the erasure ledger: which users were forgotten, and up
// to which event time. `worker forget` records an erasure before it deletes
// a user's rows; every worker holds the ledger in memory and never writes
// an event it covers, so a user forgotten stays forgotten through a
// backlog, a replay or a redrive. The ledger only ever suppresses a row:
// it never changes a cell, so cells stay a function of the record.
package erasure

import (
	"context"
	"maps"
	"math"
	"strings"
	"time"

	"github.com/cellttl/cellttl/rowkey"
)

// Erasure is one erasure, as its ledger record holds it: no event of User
// of Tenant whose time is at or before UpTo is written again, nor any
// whose record lies below Below.
type Erasure struct {
	Tenant string `json:"tenant"`
	User   string `json:"user"`
	// UpTo is erased_up_to, in milliseconds as row keys hold event times.
	UpTo time.Time `json:"erased_up_to"`
	// Below, when set, is the input topic's end offsets read after the
	// record was first written: the records appended before the erasure.
	Below *Mark `json:"erased_below,omitempty"`
	// RecordedAt is when forget wrote the record.
	RecordedAt time.Time `json:"recorded_at"`
	// Expires is when the record expires by itself: no copy it must
	// suppress is left by then. Zero means never (a copy may be kept
	// forever, as by a topic with retention.ms=-1).
	Expires     time.Time `json:"expires,omitzero"`
	RequestedBy string    `json:"requested_by"`
	// AtLeastUntil, on a record kept forever for its mark, is the
	// earliest it may expire once retired (Store.Retire), whatever the
	// settings of the forget that retires it: what the copies that keep
	// their life whatever is set later gave it when it was recorded, the
	// backups' keep from RecordedAt and the tenant's longest TTL from UpTo.
	// A topic's keep is not among them: Kafka holds every record of a topic
	// to the topic's retention as it is now, and the retiring forget
	// reads it. Zero says nothing (a record of an earlier release).
	AtLeastUntil time.Time `json:"expires_at_least_at,omitzero"`
	// Offboard marks the record of a tenant that left (worker offboard):
	// User is empty, and the record erases every event of the tenant,
	// of any time and any user, for as long as it is in force. Its row
	// key is the tenant and the separator alone, which no user's record
	// can have (a user id is never empty), and which an earlier
	// release's reader skips as naming no user.
	Offboard bool `json:"offboard,omitempty"`
}

// Whole is erased_up_to of an offboarding's record: every event time a
// row key can hold.
var Whole = time.UnixMilli(rowkey.MaxMillis).UTC()

// Ledger is the set of erasures in force, as loaded at one moment. It is
// never changed once built: a refresh builds another.
type Ledger struct {
	// users maps tenant, then user, to the user's erasure: two lookups by
	// the event's own strings, so checking an event allocates nothing.
	users map[string]map[string]erased
	n     int
	// tenants holds the tenants' offboardings (Erasure.Offboard), nil
	// when there is none: a ledger without one asks no more per event.
	tenants map[string]left
	// gen grows whenever a load erases something the previous did not;
	// rows decided under an older generation are checked again before
	// they are written (see Watch.Admits).
	gen uint64
	// ids are the incarnations of the topics the worker reads (Kafka's
	// topic ids, by topic), which marks are held to (see Mark).
	ids map[string]string
	// compact, when set, holds the records that never expire past the
	// first CompactAbove (see compact).
	compact *compact
}

// entry is one record of a user (user "": a tenant's offboarding), as a
// load of the ledger reads it (a journal row) and Ledger.with takes it.
type entry struct {
	tenant, user string
	erased
	// recorded orders a tenant's records (see left): when it was
	// recorded, or its journal row written, Unix milliseconds.
	recorded int64
}

// erased is what the ledger holds of one user: the union of the user's
// records in force, held until the last of them expires.
type erased struct {
	upTo  int64 // erased_up_to, Unix milliseconds
	below *Mark // nil: no record of the user has a mark
	// expires is when the last of the records expires, Unix milliseconds
	// (forever: never). The union is held that long: a record that
	// expires earlier erases as long as the last, which errs on the side
	// of the erasure (it covers the user's events up to its erased_up_to,
	// or appended before it, nothing after).
	expires int64
}

// forever is the expiry of a record that never expires.
const forever = math.MaxInt64

// expiresAt is a record's Expires as erased holds it.
func expiresAt(t time.Time) int64 {
	if t.IsZero() {
		return forever
	}
	return t.UnixMilli()
}

// covers reports whether e erases the event at millis read at p, of the
// topic incarnation current.
func (e erased) covers(millis int64, p Position, current string) bool {
	// An offboarding's erased_up_to is the last time a row key can hold:
	// it covers a time read past that too.
	return millis <= e.upTo || e.upTo >= rowkey.MaxMillis || e.below.covers(p, current)
}

// merge is e and o together: the later erased_up_to, the union of marks,
// the later expiry.
func (e erased) merge(o erased) erased {
	return erased{upTo: max(e.upTo, o.upTo), below: union(e.below, o.below), expires: max(e.expires, o.expires)}
}

// erasesAll reports whether e erases every event o does (for as long as
// either is held: see contains).
func (e erased) erasesAll(o erased) bool {
	return e.upTo >= o.upTo && e.below.contains(o.below)
}

// contains reports whether e erases everything o does, for as long.
func (e erased) contains(o erased) bool {
	return e.erasesAll(o) && e.expires >= o.expires
}

// NewLedger builds a ledger from records, the latest erased_up_to of a
// user winning and the marks joined; records expired at now are left out.
func NewLedger(records []Erasure, now time.Time) *Ledger {
	l := &Ledger{users: map[string]map[string]erased{}}
	for _, r := range records {
		if !r.Expires.IsZero() && !r.Expires.After(now) {
			continue
		}
		e := erased{upTo: r.UpTo.UnixMilli(), below: r.Below, expires: expiresAt(r.Expires)}
		if r.Offboard {
			l.addTenant(r.Tenant, left{e, r.RecordedAt.UnixMilli()})
			continue
		}
		l.add(r.Tenant, r.User, e)
	}
	return l
}

func (l *Ledger) add(tenant, user string, e erased) {
	if l.users == nil {
		l.users = map[string]map[string]erased{}
	}
	u := l.users[tenant]
	if u == nil {
		u = map[string]erased{}
		l.users[tenant] = u
	}
	if old, ok := u[user]; !ok {
		l.n++
		u[user] = e
	} else if !old.contains(e) {
		u[user] = old.merge(e)
	}
}

// Len is the number of users erased: those held exactly, and the records
// held compact (a user may count in both).
func (l *Ledger) Len() int {
	if l == nil {
		return 0
	}
	return l.n + l.compact.len() + len(l.tenants)
}

// Generation is the ledger's generation (see Ledger.gen).
func (l *Ledger) Generation() uint64 {
	if l == nil {
		return 0
	}
	return l.gen
}

// Erased reports whether the event of user of tenant at millis (its
// time, as its row key holds it), read at p, is erased: by its time, or by
// its place in the input topic (see Mark). An event without a user is
// never erased by a user's erasure, only by its tenant's offboarding.
//
// A user the compact part may hold is erased by it only once Resolve has
// looked the user up: Decide asks Known first, and sets the record aside
// until then. The check made again before a write (Watch.Admits) looks up
// too: an answer is kept only until the second reread after it, and a
// reread may hold compact a record the journal reads missed.
func (l *Ledger) Erased(tenant, user string, millis int64, p Position) bool {
	if l == nil {
		return false
	}
	if l.tenants != nil {
		if o, ok := l.tenants[tenant]; ok && o.covers(millis, p, p.incarnation(l.ids)) {
			return true
		}
	}
	if user == "" {
		return false
	}
	if l.n > 0 {
		if e, ok := l.users[tenant][user]; ok && e.covers(millis, p, p.incarnation(l.ids)) {
			return true
		}
	}
	if l.compact == nil {
		return false
	}
	a, _ := l.compact.known(tenant, user)
	return a.ok && a.e.covers(millis, p, p.incarnation(l.ids))
}

// Known reports whether the ledger can say at once whether user's events
// are erased: false while the compact part may hold the user and has not
// looked the user up (Resolve).
func (l *Ledger) Known(tenant, user string) bool {
	if l == nil || l.compact == nil || user == "" {
		return true
	}
	if o, ok := l.tenants[tenant]; ok && o.whole() {
		return true // the tenant has left: erased, whoever the user
	}
	_, ok := l.compact.known(tenant, user)
	return ok
}

// Resolve looks up a user Known says is not known, in the user's record
// row, trying again while the ledger table cannot answer, until ctx ends.
func (l *Ledger) Resolve(ctx context.Context, tenant, user string) error {
	if l.Known(tenant, user) {
		return nil
	}
	return l.compact.resolve(ctx, tenant, user)
}

// KnownKeys reports whether Known holds for the user of every row key.
func (l *Ledger) KnownKeys(keys []string) bool {
	if l == nil || l.compact == nil {
		return true
	}
	for _, key := range keys {
		if k, err := rowkey.Parse(key); err == nil && !l.Known(k.Tenant, k.User) {
			return false
		}
	}
	return true
}

// ResolveKey is Resolve for the user of a row key.
func (l *Ledger) ResolveKey(ctx context.Context, key string) error {
	if l == nil || l.compact == nil {
		return nil
	}
	k, err := rowkey.Parse(key)
	if err != nil {
		return nil // ErasedKey does not erase it either
	}
	return l.Resolve(ctx, k.Tenant, k.User)
}

// askKey looks up, once, the user of a row key that Known says is not
// known.
func (l *Ledger) askKey(ctx context.Context, key string) error {
	if l == nil || l.compact == nil {
		return nil
	}
	k, err := rowkey.Parse(key)
	if err != nil || l.Known(k.Tenant, k.User) {
		return nil // ErasedKey does not erase an unparsable key either
	}
	return l.compact.ask(ctx, k.Tenant, k.User)
}

// ErasedKey is Erased for a row key, of a record read at p (the zero
// Position for a row whose record is not known: by time alone).
func (l *Ledger) ErasedKey(key string, p Position) bool {
	if l.Len() == 0 {
		return false
	}
	k, err := rowkey.Parse(key)
	return err == nil && l.Erased(k.Tenant, k.User, k.Millis, p)
}

// Covers reports whether an erasure in force could cover an event of
// tenant whose user cannot be read ("" when its tenant cannot be read
// either): whether the tenant, or for "" any tenant, has an erased user.
// Its time may be any, as may its user: nothing narrows it further.
func (l *Ledger) Covers(tenant string) bool {
	if l.Len() == 0 {
		return false
	}
	if tenant == "" {
		return true
	}
	if l.compact != nil {
		if _, ok := l.compact.tenants[tenant]; ok {
			return true
		}
	}
	if _, ok := l.tenants[tenant]; ok {
		return true
	}
	return len(l.users[tenant]) > 0
}

// UpTo returns a user's erased_up_to, if the user is erased. It reads the
// records held exactly, as a ledger of LoadUsers holds them all.
func (l *Ledger) UpTo(tenant, user string) (time.Time, bool) {
	if l.Len() == 0 {
		return time.Time{}, false
	}
	e, ok := l.users[tenant][user]
	return time.UnixMilli(e.upTo).UTC(), ok
}

// Users calls f for every erased user of tenant held exactly.
func (l *Ledger) Users(tenant string, f func(user string, upTo time.Time)) {
	if l.Len() == 0 {
		return
	}
	for u, e := range l.users[tenant] {
		f(u, time.UnixMilli(e.upTo).UTC())
	}
}

// Tenants returns the tenants with erased users.
func (l *Ledger) Tenants() []string {
	if l.Len() == 0 {
		return nil
	}
	out := make([]string, 0, len(l.users))
	for t := range l.users {
		out = append(out, t)
	}
	return out
}

// with returns l and the entries in force at now: l itself when they add
// nothing (no erasure, no longer life), else a new ledger that shares l's
// maps of the tenants they do not touch (l is never changed: workers read
// it concurrently). grew reports whether they erase something l does not
// (Ledger.gen).
func (l *Ledger) with(entries []entry, now time.Time) (_ *Ledger, grew bool) {
	nowMs := now.UnixMilli()
	var touched map[string]bool
	tenantsChange := false
	for _, e := range entries {
		if e.expires <= nowMs {
			continue
		}
		if e.user == "" {
			had, ok := l.tenants[e.tenant]
			if changes, erasesMore := had.takes(ok, e); changes {
				tenantsChange, grew = true, grew || erasesMore
			}
			continue
		}
		had, ok := l.users[e.tenant][e.user]
		if !ok || !had.contains(e.erased) {
			if touched == nil {
				touched = map[string]bool{}
			}
			touched[e.tenant] = true
			grew = grew || !ok || !had.erasesAll(e.erased)
		}
	}
	if touched == nil && !tenantsChange {
		return l, false
	}
	next := &Ledger{users: l.users, n: l.n, tenants: l.tenants, gen: l.gen, ids: l.ids, compact: l.compact}
	if tenantsChange {
		next.tenants = maps.Clone(l.tenants)
	}
	if touched != nil {
		next.users = make(map[string]map[string]erased, len(l.users)+len(touched))
		for t, u := range l.users {
			next.users[t] = u
		}
		for t := range touched {
			next.users[t] = maps.Clone(l.users[t])
		}
	}
	for _, e := range entries {
		switch {
		case e.expires <= nowMs:
		case e.user == "":
			if tenantsChange {
				next.addTenant(e.tenant, left{e.erased, e.recorded})
			}
		case touched[e.tenant]:
			next.add(e.tenant, e.user, e.erased)
		}
	}
	return next, grew
}

// withHeld adds to l, a ledger just read and not yet in force, what prev
// (nil: nothing) holds that has not expired at now: the watch's reread of
// the records in force keeps what its recent journal reads put in force,
// whose index cells it may have read too early.
func (l *Ledger) withHeld(prev *Ledger, now time.Time) {
	nowMs := now.UnixMilli()
	if prev == nil {
		return
	}
	for t, users := range prev.users {
		for u, e := range users {
			if e.expires > nowMs {
				l.add(t, u, e)
			}
		}
	}
	for t, o := range prev.tenants {
		if o.expires > nowMs {
			l.addTenant(t, o)
		}
	}
}

// newer reports whether l erases something prev does not: a user prev
// does not have, a later erased_up_to, or a mark prev's does not contain.
// Records that expired do not count: l then erases less, never more; nor
// does a longer life.
func (l *Ledger) newer(prev *Ledger) bool {
	if l.Len() == 0 {
		return false
	}
	// The compact part is known by its count alone: more records there
	// than before may erase something new.
	if l.compact != nil && (prev == nil || l.compact.n > prev.compact.len()) {
		return true
	}
	for t, o := range l.tenants {
		var before left
		ok := false
		if prev != nil {
			before, ok = prev.tenants[t]
		}
		if !ok || !before.erasesAll(o.erased) {
			return true
		}
	}
	for t, users := range l.users {
		var had map[string]erased
		if prev != nil {
			had = prev.users[t]
		}
		for u, e := range users {
			if before, ok := had[u]; !ok || !before.erasesAll(e) {
				return true
			}
		}
	}
	return false
}

// recordKey is the ledger row of a user: tenant ids and user ids never hold
// the separator (rowkey.ValidateID, rowkey.IDProblem). A tenant's
// offboarding is its user "": tenant#.
func recordKey(tenant, user string) string {
	return tenant + string(rowkey.Sep) + user
}

// parseRecordKey splits a ledger row key; user is "" for a tenant's
// offboarding.
func parseRecordKey(key string) (tenant, user string, ok bool) {
	tenant, user, ok = strings.Cut(key, string(rowkey.Sep))
	return tenant, user, ok && tenant != "" && !strings.ContainsRune(user, rowkey.Sep)
}
