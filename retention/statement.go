package retention

import (
	"fmt"
	"slices"
	"time"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/expiry"
	"github.com/cellttl/cellttl/internal/duration"
)

// GCLag is how long after a cell's expiry Bigtable's garbage collection
// may leave it stored: "typically within a week", per Google's
// documentation of garbage collection. Reads never see such a cell.
const GCLag = 7 * duration.Day

// Forever is a store's Longest when nothing deletes its copies.
const Forever time.Duration = -1

// Facts are what a retention statement is computed from, each read from
// the live system: the tenants file, the family's GC rule, and the
// topics' settings from the broker.
type Facts struct {
	Policy *expiry.Policy
	// UnlistedDeadLettered: unlisted_tenants: dead-letter.
	UnlistedDeadLettered bool
	// UnlistedBound is how long a dead letter without a listed tenant
	// keeps its payload.
	UnlistedBound time.Duration
	// FamilyRule describes the family's GC rule; FamilyMaxAge is its
	// max-age, FamilyHasMaxAge false when it has none (no rule, or another
	// kind).
	Table           string
	FamilyRule      string
	FamilyMaxAge    time.Duration
	FamilyHasMaxAge bool
	// Input is the input topic; DeadLetters the dead-letter topics, the
	// base first.
	Input       TopicKeep
	DeadLetters []TopicKeep
	// RecordTimesBounded says whether producers are held within the skew
	// the worker allows; RecordTimes says it in words.
	RecordTimesBounded bool
	RecordTimes        string
	// Checkpoints are the retime and migrate checkpoint files to look at.
	Checkpoints []CheckpointFact
	// OwnTTLs: events may give their own TTL (--ttl-from), as short as
	// their tenant's min_ttl. OwnTTLsRecorded, when not "", says that the
	// table's record of the workers' setting decided it (the setting as
	// flags say it), not the command's own flag.
	OwnTTLs         bool
	OwnTTLsRecorded string
	// Ledger names the erasure ledger table; "" leaves the ledger out of
	// the statement.
	Ledger string
}

// CheckpointFact is what a checkpoint file holds.
type CheckpointFact struct {
	Path string
	// HoldsIDs: row keys, not positions; Unreadable: why it could not be
	// read.
	HoldsIDs   bool
	Unreadable string
}

// TopicKeep is how long a topic keeps a record produced now.
type TopicKeep struct {
	Topic string
	// Keeps is retention.ms + segment.ms + the broker's retention check,
	// or Forever; Settings says them.
	Keeps    time.Duration
	Settings string
	// Unknown is why the settings could not be read, "" when they were;
	// Missing, that the topic does not exist (yet: the worker creates its
	// dead-letter topics at start).
	Unknown string
	Missing bool
}

// StoreLife is one store's answer to "how long can a copy live here".
type StoreLife struct {
	Store     string `json:"store"`
	Longest   string `json:"longest"`
	DecidedBy string `json:"decided_by"`
	// Breach says how the store breaks the tenant's TTL, "" when it does
	// not.
	Breach string `json:"breach,omitempty"`
}

// TenantStatement is one tenant's stores.
type TenantStatement struct {
	Tenant string      `json:"tenant"`
	TTL    string      `json:"ttl"`
	Stores []StoreLife `json:"stores"`
}

// Statement is the retention statement of every tenant, and of the
// tenants the file does not list (Tenant "*").
type Statement struct {
	Tenants  []TenantStatement `json:"tenants"`
	Breaches int               `json:"breaches"`
}

// Clean reports whether no store breaks any tenant's TTL.
func (s *Statement) Clean() bool { return s.Breaches == 0 }

// Unlisted names the tenants the file does not list in a statement.
const Unlisted = "*"

// StatementOf computes the statement for tenants (every listed tenant and
// the unlisted when empty).
func StatementOf(f Facts, tenants []string) *Statement {
	if len(tenants) == 0 {
		tenants = append(listed(f.Policy), Unlisted)
	}
	s := &Statement{}
	for _, id := range tenants {
		ts := tenantStatement(f, id)
		for _, st := range ts.Stores {
			if st.Breach != "" {
				s.Breaches++
			}
		}
		s.Tenants = append(s.Tenants, ts)
	}
	return s
}

func tenantStatement(f Facts, id string) TenantStatement {
	p := f.Policy
	ttl, isListed := p.Tenants[id]
	name := id + "'s" // for "acme's TTL", "acme's data"
	if !isListed {
		ttl, name = p.DefaultTTL, "the unlisted tenants'"
	}
	// The longest an event of the tenant lives: its TTL, or the max_ttl
	// its events may ask for; the shortest, with --ttl-from, the min_ttl.
	longest := p.LongestTTL(id)
	shortest, shortestText := shortestLife(f, id, name, ttl)
	ts := TenantStatement{Tenant: id, TTL: duration.Format(ttl)}
	add := func(store string, longest time.Duration, decidedBy, breach string) {
		ts.Stores = append(ts.Stores, StoreLife{Store: store, Longest: lifeText(longest), DecidedBy: decidedBy, Breach: breach})
	}
	if !isListed && f.UnlistedDeadLettered {
		ts.TTL = "dead-lettered"
		add("table, live cells", 0, "tenants.yaml unlisted_tenants: dead-letter (never written)", "")
	} else {
		decided := fmt.Sprintf("tenants.yaml %s: %s", id, duration.Format(ttl))
		if !isListed {
			decided = "tenants.yaml default_ttl: " + duration.Format(ttl)
		}
		if longest > ttl {
			decided += fmt.Sprintf(", an event's own TTL (--ttl-from) up to max_ttl %s", duration.Format(longest))
		}
		if shortest < ttl {
			decided += fmt.Sprintf(", down to min_ttl %s (--ttl-from)", duration.Format(shortest))
		}
		add("table, live cells", longest, decided+"; every read filters expired cells", "")
		add("table, expired cells not yet collected", tableStored(f, longest), gcDecided(f), gcBreach(f, name, ttl))
	}
	bound, from := longest, "its event expires"
	if !isListed {
		bound, from = f.UnlistedBound, "--dlq-unlisted-retention "+duration.Format(f.UnlistedBound)
	}
	add("dead-letter topics, letters with payload", bound,
		fmt.Sprintf("placement: a letter keeps its payload only in a topic whose keep ends 10 s before %s (%s)", from, keepsText(f.DeadLetters)), "")
	for _, dl := range f.DeadLetters {
		ts.Stores = append(ts.Stores, deadLetterLife(dl))
	}
	in := f.Input
	breach := ""
	switch {
	case in.Missing:
		breach = fmt.Sprintf("input topic %s does not exist: its retention cannot be read", in.Topic)
	case in.Unknown != "":
		breach = fmt.Sprintf("input topic %s: settings unknown (%s)", in.Topic, in.Unknown)
	case in.Keeps == Forever || in.Keeps > shortest:
		breach = fmt.Sprintf("input topic %s keeps records %s; %s", in.Topic, lifeText(in.Keeps), shortestText)
	}
	add("input topic "+in.Topic, in.Keeps, in.Settings, breach)
	breach = ""
	if !f.RecordTimesBounded {
		breach = fmt.Sprintf("%s: a producer can make %s data live past %s", f.RecordTimes, name, duration.Format(ttl))
	}
	add("record timestamps of "+in.Topic, ttl, f.RecordTimes, breach)
	for _, cp := range f.Checkpoints {
		ts.Stores = append(ts.Stores, checkpointLife(cp))
	}
	if f.Ledger != "" {
		ts.Stores = append(ts.Stores, ledgerLife(f, name, longest))
	}
	return ts
}

// shortestLife is the shortest an event of tenant id may live, and says
// it: its TTL, or with --ttl-from as little as its tenant's min_ttl.
func shortestLife(f Facts, id, name string, ttl time.Duration) (time.Duration, string) {
	text := fmt.Sprintf("%s TTL is %s", name, duration.Format(ttl))
	if b, _ := f.Policy.TenantBounds(id); f.OwnTTLs && b.Min < ttl {
		from := "--ttl-from"
		if f.OwnTTLsRecorded != "" {
			from = f.OwnTTLsRecorded + ", the table's recorded setting"
		}
		return b.Min, fmt.Sprintf("%s events may ask for as little as min_ttl %s (%s; the TTL is %s)", name, duration.Format(b.Min), from, duration.Format(ttl))
	}
	return ttl, text
}

// ledgerLife is the erasure ledger's line: how long a record of an erased
// user of the tenant keeps the user's id, by forget's rule, then until
// Bigtable collects it.
func ledgerLife(f Facts, name string, longest time.Duration) StoreLife {
	keep := LedgerRecordLife(f, 0, longest) // the statement knows no backups
	line := StoreLife{Store: fmt.Sprintf("erasure ledger %s, ids of erased users", f.Ledger), Longest: lifeText(Forever)}
	rule := fmt.Sprintf("worker forget sets each record's expiry: the longest of %s longest TTL %s, the input topic's keep and each dead-letter topic's "+
		"(and forget's --backup-retention when longer)", name, duration.Format(longest))
	if past := LedgerRecordLifePastInput(f, 0, longest); keep == Forever && past != Forever && f.Input.Unknown == "" && !f.Input.Missing {
		line.DecidedBy = fmt.Sprintf("%s: forever while the input topic may hold a record an erasure's mark covers (%s); "+
			"each worker forget retires such a record once every partition's log start offset has passed its mark, which then lives %s from when it was recorded",
			rule, f.Input.Settings, duration.Format(past))
		line.Breach = fmt.Sprintf("erasure ledger %s: a record of %s erased users keeps their ids as long as the input topic may hold their records, forever on this topic", f.Ledger, name)
		return line
	}
	if keep == Forever {
		line.DecidedBy = rule + ": forever, as a topic keeps records forever or its settings cannot be read"
		line.Breach = fmt.Sprintf("erasure ledger %s: a record of %s erased users would keep their ids forever (a topic keeps records forever or its settings cannot be read)", f.Ledger, name)
		return line
	}
	line.Longest = lifeText(keep + GCLag)
	line.DecidedBy = fmt.Sprintf("%s, %s now; then Bigtable collects the record within about a week (GC rule max-age %s)", rule, duration.Format(keep), duration.Format(erasure.GCMaxAge))
	return line
}

// deadLetterLife is a dead-letter topic's line: how long its letters
// without payload live.
func deadLetterLife(dl TopicKeep) StoreLife {
	if dl.Missing {
		return StoreLife{Store: "dead-letter topic " + dl.Topic, Longest: lifeText(0), DecidedBy: "not created yet: the worker creates it at start, with cleanup.policy=delete"}
	}
	breach := ""
	switch {
	case dl.Unknown != "":
		breach = fmt.Sprintf("dead-letter topic %s: settings unknown (%s)", dl.Topic, dl.Unknown)
	case dl.Keeps == Forever:
		breach = fmt.Sprintf("dead-letter topic %s keeps records forever (%s): its letters without payload (tenant, offsets, SHA-256) never leave", dl.Topic, dl.Settings)
	}
	return StoreLife{Store: "dead-letter topic " + dl.Topic + ", letters without payload", Longest: lifeText(dl.Keeps), DecidedBy: dl.Settings, Breach: breach}
}

// checkpointLife is a checkpoint file's line: positions live nothing of an
// event; row keys, forever.
func checkpointLife(cp CheckpointFact) StoreLife {
	breach, decided := "", "positions only (tenant and hash bucket reached): no event data"
	switch {
	case cp.Unreadable != "":
		breach = fmt.Sprintf("checkpoint %s could not be read: %s", cp.Path, cp.Unreadable)
	case cp.HoldsIDs:
		decided = "row keys, with the user and event ids in them"
		breach = fmt.Sprintf("checkpoint %s holds row keys (written before checkpoints held positions), which live no TTL: finish or resume its run, or delete it", cp.Path)
	}
	longest := time.Duration(0)
	if cp.HoldsIDs {
		longest = Forever
	}
	return StoreLife{Store: "checkpoint " + cp.Path, Longest: lifeText(longest), DecidedBy: decided, Breach: breach}
}

// tableStored is the longest an expired cell stays stored: until the
// family's GC rule takes it, then Bigtable's GC lag.
func tableStored(f Facts, ttl time.Duration) time.Duration {
	if !f.FamilyHasMaxAge {
		return Forever
	}
	// A cell's timestamp lies GCMaxAge before its expiry under the
	// strategy's rule; under another max-age, the difference moves the
	// moment GC may take it.
	return ttl + max(f.FamilyMaxAge-f.Policy.GCMaxAge(), 0) + GCLag
}

func gcDecided(f Facts) string {
	return fmt.Sprintf("table %s GC rule %s; Bigtable collects within about a week; reads never see an expired cell", f.Table, f.FamilyRule)
}

// gcBreach says how the family's rule breaks the tenants file's, "" when
// it is the rule the file needs.
func gcBreach(f Facts, name string, ttl time.Duration) string {
	want := f.Policy.GCMaxAge()
	switch {
	case !f.FamilyHasMaxAge:
		return fmt.Sprintf("table %s has GC rule %s, not max-age %s: %s expired cells are never collected", f.Table, f.FamilyRule, duration.Format(want), name)
	case f.FamilyMaxAge > want:
		return fmt.Sprintf("table %s has GC rule max-age %s, the tenants file needs %s: %s expired cells stay %s longer", f.Table,
			duration.Format(f.FamilyMaxAge), duration.Format(want), name, duration.Format(f.FamilyMaxAge-want))
	case f.FamilyMaxAge < want:
		return fmt.Sprintf("table %s has GC rule max-age %s, the tenants file needs %s: %s cells may be collected before they expire", f.Table,
			duration.Format(f.FamilyMaxAge), duration.Format(want), name)
	}
	return ""
}

func keepsText(ts []TopicKeep) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, t.Topic+" keeps "+lifeText(t.Keeps))
	}
	slices.Sort(parts)
	return fmt.Sprint(parts)
}

func lifeText(d time.Duration) string {
	switch {
	case d == Forever:
		return "forever"
	case d == 0:
		return "0s"
	}
	return duration.Format(d)
}

// LedgerRecordLife is how long a ledger record of a tenant whose longest TTL is
// longestTTL must live, from when it is recorded: as long as any copy it
// must suppress can remain (the input topic's keep, each dead-letter
// topic's, the backups' when positive), and as long as the tenant's
// longest TTL (past it, every event the record covers has expired, and is
// never written whatever its source). Forever (-1) when a topic keeps
// copies forever or its settings cannot be read. worker forget sets each
// record's expiry by it, and the statement reports the ledger by it.
func LedgerRecordLife(f Facts, backups, longestTTL time.Duration) time.Duration {
	return recordLife(append([]TopicKeep{f.Input}, f.DeadLetters...), backups, longestTTL)
}

// LedgerRecordLifePastInput is LedgerRecordLife once the input topic holds
// nothing a record's mark covers (erasure.Store.Retire): the dead-letter
// topics', the backups' and the tenant's longest TTL.
func LedgerRecordLifePastInput(f Facts, backups, longestTTL time.Duration) time.Duration {
	return recordLife(f.DeadLetters, backups, longestTTL)
}

func recordLife(topics []TopicKeep, backups, longestTTL time.Duration) time.Duration {
	keep := max(longestTTL, backups)
	for _, k := range topics {
		switch {
		case k.Missing:
		case k.Unknown != "" || k.Keeps == Forever:
			return Forever
		default:
			keep = max(keep, k.Keeps)
		}
	}
	return keep
}
