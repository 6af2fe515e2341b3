package erasure

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/cellttl/cellttl/internal/retry"
)

// DefaultCompactAbove is how many records that never expire a worker holds
// exactly, at about 90 bytes each (9 MiB at this many): past it, it holds
// the rest as a filter of 12 bits each, and reads a user's record row when
// the filter says the user may be erased (see compact).
const DefaultCompactAbove = 100_000

// compact holds erasures that never expire, past the first CompactAbove, as
// a blocked Bloom filter of their users: a topic kept forever, or a
// partition frozen by a record stamped far ahead, keeps every erasure
// recorded against it in force, and held exactly they would cost every
// worker 90 bytes each (900 MB at ten million). The filter costs 1.5
// bytes each. A user it does not name is not erased by these records; one
// it names (every user they erase, and about 1 in 150 of the others) is
// looked up in the user's record row, once per reread of the records in
// force, and the answer kept (answers). Until the answer is known, the
// user is not Known: the pipeline sets the record aside while the lookup
// runs, holding its partition alone (see pipeline's parking).
type compact struct {
	filters []bloom // each twice the one before, when one fills
	n       int
	tenants map[string]struct{} // the tenants with a user here (Covers)
	seed    maphash.Seed
	lookup  func(ctx context.Context, tenant, user string) (erased, bool, error)

	mu        sync.Mutex
	cur, prev map[userKey]answer // two generations of answers (see remember)
}

type userKey struct{ tenant, user string }

// answer is what a lookup found of a user: erased by e when ok.
type answer struct {
	e  erased
	ok bool
}

// maxAnswers bounds each generation of answers: a lookup's answer is read
// by the decision that asked for it within the same pass of the decision
// loop, long before maxAnswers other lookups could end (at most a few run
// at a time), so it is never dropped before it is read.
const maxAnswers = 1 << 15

func newCompact(expect int, lookup func(ctx context.Context, tenant, user string) (erased, bool, error)) *compact {
	return &compact{filters: []bloom{newBloom(max(expect, 1<<16))}, tenants: map[string]struct{}{}, seed: maphash.MakeSeed(),
		lookup: lookup, cur: map[userKey]answer{}}
}

// hash is the filter's hash of a user, under a seed of the process's own:
// no producer can choose users that all hit the filter.
func (c *compact) hash(tenant, user string) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(tenant)
	h.WriteByte(0)
	h.WriteString(user)
	return h.Sum64()
}

func (c *compact) add(tenant, user string) {
	h := c.hash(tenant, user)
	last := &c.filters[len(c.filters)-1]
	if last.n >= last.capacity {
		c.filters = append(c.filters, newBloom(2*last.capacity))
		last = &c.filters[len(c.filters)-1]
	}
	last.add(h)
	c.n++
	if _, ok := c.tenants[tenant]; !ok {
		c.tenants[tenant] = struct{}{}
	}
}

func (c *compact) len() int {
	if c == nil {
		return 0
	}
	return c.n
}

// may reports whether the filter names the user.
func (c *compact) may(tenant, user string) bool {
	h := c.hash(tenant, user)
	for i := range c.filters {
		if c.filters[i].has(h) {
			return true
		}
	}
	return false
}

// known returns what is known of the user: ok is false while a user the
// filter names has not been looked up.
func (c *compact) known(tenant, user string) (_ answer, ok bool) {
	if !c.may(tenant, user) {
		return answer{}, true
	}
	k := userKey{tenant, user}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.cur[k]
	if !ok {
		if a, ok = c.prev[k]; ok {
			c.remember(k, a)
		}
	}
	return a, ok
}

// remember keeps a, the older generation going once the newer is full.
// Called with mu held.
func (c *compact) remember(k userKey, a answer) {
	if len(c.cur) >= maxAnswers {
		c.prev, c.cur = c.cur, make(map[userKey]answer, maxAnswers)
	}
	c.cur[k] = a
}

// resolve looks the user up, trying again while the ledger cannot answer
// (the partition waits: nothing else could be decided), until ctx ends.
func (c *compact) resolve(ctx context.Context, tenant, user string) error {
	b := retry.New(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second})
	for {
		err := c.ask(ctx, tenant, user)
		if err == nil {
			return nil
		}
		if !b.Wait() {
			return err
		}
	}
}

// ask looks the user up once and keeps the answer.
func (c *compact) ask(ctx context.Context, tenant, user string) error {
	e, ok, err := c.lookup(ctx, tenant, user)
	if err != nil {
		return fmt.Errorf("look up the erasure of a user of %s: %w", tenant, err)
	}
	c.mu.Lock()
	c.remember(userKey{tenant, user}, answer{e: e, ok: ok})
	c.mu.Unlock()
	return nil
}

// lookupUser reads the records in force of one user: the compact part's
// lookup. Each attempt has its own deadline (Store.LookupAttempt): the Bigtable client retries an
// unavailable table in silence until its context ends, and a lookup
// without a deadline of its own would hold its partition with nothing
// logged, counted or reported to /readyz.
func (s *Store) lookupUser(ctx context.Context, tenant, user string) (erased, bool, error) {
	attempt := s.LookupAttempt
	if attempt <= 0 {
		attempt = DefaultLookupAttempt
	}
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	l, err := s.LoadUsers(actx, tenant, []string{user}, s.clock())
	if ctx.Err() == nil { // a stop is not the table failing
		s.lookups.done(err)
	}
	if err != nil {
		return erased{}, false, err
	}
	e, ok := l.users[tenant][user]
	return e, ok, nil
}

// A bloom is a blocked Bloom filter: the bits of a key lie in one block of
// 512 bits (a cache line), so that a question costs one memory read.
type bloom struct {
	words       []uint64
	blocks      uint64
	n, capacity int
}

const (
	bloomBitsPerKey = 12
	bloomProbes     = 7 // 9 bits each, of one 64-bit mix
)

func newBloom(capacity int) bloom {
	blocks := (capacity*bloomBitsPerKey + 511) / 512
	return bloom{words: make([]uint64, blocks*8), blocks: uint64(blocks), capacity: capacity}
}

// probe returns h's block's first word and the mix whose 9-bit pieces are
// its bits in the block.
func (b *bloom) probe(h uint64) (base uint64, bits uint64) {
	base = (uint64(uint32(h)) * b.blocks) >> 32 * 8
	bits = (h ^ h>>33) * 0xff51afd7ed558ccd
	return base, bits ^ bits>>29
}

func (b *bloom) add(h uint64) {
	base, bits := b.probe(h)
	for i := range bloomProbes {
		bit := bits >> (9 * i) & 511
		b.words[base+bit>>6] |= 1 << (bit & 63)
	}
	b.n++
}

func (b *bloom) has(h uint64) bool {
	base, bits := b.probe(h)
	for i := range bloomProbes {
		bit := bits >> (9 * i) & 511
		if b.words[base+bit>>6]&(1<<(bit&63)) == 0 {
			return false
		}
	}
	return true
}
